"""The block-sparse flash-attention forward, evaluated with torch tensor operations.

Per query block row, per chunk of key blocks from the plan: scores = q @ k^T * scale in the
working precision (fp32, fp64 for fp64 inputs: the precision PyTorch's own reference uses),
score_mod applied to the whole tile through the compiled graph, mask_mod only on chunks that
hold partial blocks, empty blocks never visited, and an online softmax whose state (row max m,
row sum l, accumulator) is fp32. A row that sees no key gets out 0 and lse -inf, never NaN.
Memory is O(B * H * QB * KEYS_PER_CHUNK) besides the inputs.
"""
import math

import torch

NEG_INF = -math.inf


class Problem:
    """Everything one attention call needs, in the [B, Hkv, G, L, D] head layout."""

    def __init__(self, q, k, v, scale, plan, score_fn, score_inputs, mask_fn, mask_inputs):
        self.dtype = q.dtype
        self.wd = torch.float64 if q.dtype == torch.float64 else torch.float32
        B, Hq, L, E = q.shape
        Bk, Hkv, S, Ev = v.shape
        self.B, self.Hq, self.Hkv, self.G, self.L, self.S, self.E, self.Ev = \
            B, Hq, Hkv, Hq // Hkv, L, S, E, Ev
        self.Bk = Bk
        self.scale = scale
        self.plan = plan
        self.score_fn, self.score_inputs = score_fn, score_inputs
        self.score_fn_inplace = None  # the forward's variant that overwrites its score tile
        self.mask_fn, self.mask_inputs = mask_fn, mask_inputs
        KB, nK = plan.KB, plan.nK
        self.qw = q.to(self.wd).reshape(B, Hkv, self.G, L, E)
        self.kb = _blocks(k.to(self.wd), nK, KB)            # [Bk, Hkv, nK, KB, E]
        self.vb = _blocks(v.to(self.wd), nK, KB)
        self.bsel = torch.arange(Bk).view(Bk, 1, 1, 1)
        self.hsel = torch.arange(Hkv).view(1, Hkv, 1, 1)
        self.b_idx = torch.arange(B).view(B, 1, 1, 1, 1)
        self.h_idx = torch.arange(Hq).view(1, Hkv, self.G, 1, 1)
        self.ar_kb = torch.arange(KB)

    def kv_chunk(self, ch, which):
        """K or V rows of a chunk: [Bk|Bm, Hkv, 1|Gm, C*KB, D] (a view for contiguous runs)."""
        src = self.kb if which == "k" else self.vb
        C, KB = ch.count, self.plan.KB
        if ch.idx is None:
            t = src[:, :, ch.start:ch.start + C]
            return t.reshape(t.shape[0], t.shape[1], 1, C * KB, t.shape[-1])
        t = src[self.bsel, self.hsel, ch.idx]                 # [., Hkv, Gm, C, KB, D]
        return t.reshape(*t.shape[:3], C * KB, t.shape[-1])

    def kv_index(self, ch):
        """kv_idx of the chunk's keys, broadcastable to [B, Hkv, G, qr, C*KB]."""
        KB = self.plan.KB
        if ch.idx is None:
            return (ch.start * KB + torch.arange(ch.count * KB)).view(1, 1, 1, 1, -1)
        kv = ch.idx.unsqueeze(-1) * KB + self.ar_kb               # [Bm, Hi, Gm, C, KB]
        return kv.reshape(*ch.idx.shape[:3], 1, -1)

    def slot_expand(self, t, ch):
        """[Bm, Hi, Gm, C] per-block flags -> [Bm, Hi, Gm, 1, C*KB]."""
        KB = self.plan.KB
        return t.unsqueeze(-1).expand(*t.shape, KB).reshape(*t.shape[:3], 1, -1)

    def scores(self, qi, q0, ch, kc, score_inputs=None, raw=None, fn=None):
        """(s_raw, s_mod, keep): raw scaled scores, after score_mod, and the attend mask
        (None: all) of one chunk. `raw` reuses precomputed raw scores (the backward passes a
        leaf that requires grad); score_inputs overrides the captured tensors."""
        s_raw = bmm(qi, kc, transpose=True).mul_(self.scale) if raw is None else raw
        q_idx, kv, kv_eval = self.indices(q0, qi.shape[-2], ch)
        s = s_raw
        if self.score_fn is not None:
            ins = self.score_inputs if score_inputs is None else score_inputs
            s = (fn or self.score_fn)(s_raw, self.b_idx, self.h_idx, q_idx, kv_eval, *ins)
            s = torch.as_tensor(s)
            if s.dtype != self.wd:
                s = s.to(self.wd)
            if s.shape != s_raw.shape:  # a mod that ignores some index: broadcast
                s = s.expand(torch.broadcast_shapes(s.shape, s_raw.shape))
        keep = None
        if ch.valid is not None:
            keep = self.slot_expand(ch.valid, ch)
        if ch.tail:
            inb = kv < self.S
            keep = inb if keep is None else keep & inb
        if ch.partial:
            m = torch.as_tensor(self.mask_fn(self.b_idx, self.h_idx, q_idx, kv_eval,
                                             *self.mask_inputs)).to(torch.bool)
            if ch.full is not None:
                m = m | self.slot_expand(ch.full, ch)
            keep = m if keep is None else keep & m
        return s_raw, s, keep

    def indices(self, q0, qr, ch):
        """q_idx [.., qr, 1] of a chunk's rows from q0, its key positions kv, and kv_eval: the
        positions the mods see (padding keys of the last block clamped to S - 1)."""
        q_idx = (q0 + torch.arange(qr)).view(1, 1, 1, qr, 1)
        kv = self.kv_index(ch)
        return q_idx, kv, kv.clamp(max=self.S - 1) if ch.tail else kv

    def kept_scores(self, raw, q0, ch, keep, score_inputs):
        """score_mod at the kept positions of a chunk only, as one flat tensor (the backward's
        gradients of captured tensors: a mod singular at a masked or padding position, say
        sqrt(|s|) on a zero padding key, must not put 0 * inf = NaN into them)."""
        q_idx, _, kv_eval = self.indices(q0, raw.shape[-2], ch)
        shape = torch.broadcast_shapes(raw.shape, keep.shape)
        keep = keep.expand(shape)
        args = [t.expand(shape)[keep] for t in (raw, self.b_idx, self.h_idx, q_idx, kv_eval)]
        s = torch.as_tensor(self.score_fn(*args, *score_inputs))
        return s.expand(args[0].shape), keep


def bmm(a, b, transpose=False):
    """a [B, Hkv, G, M, K] @ b [B', Hkv, G', N, K]^T (transpose) or b [B', Hkv, G', K, N].
    When b is shared by the G query heads of a kv head (G' = 1), they are stacked into one
    [G * M, K] operand: one plain batched GEMM, no broadcast copy of b."""
    B, H, G, M, K = a.shape
    if b.shape[2] == 1 and b.shape[0] == B:
        # torch.bmm on 3-D operands: 3x faster here than torch.matmul on the 5-D views.
        b3 = b.reshape(B * H, b.shape[-2], b.shape[-1])
        r = torch.bmm(a.reshape(B * H, G * M, K), b3.transpose(1, 2) if transpose else b3)
        return r.view(B, H, G, M, r.shape[-1])
    return torch.matmul(a, b.transpose(-1, -2) if transpose else b)


def _blocks(x, nK, KB):
    """[Bk, H, S, D] -> [Bk, H, nK, KB, D], zero-padded to whole blocks."""
    Bk, H, S, D = x.shape
    pad = nK * KB - S
    if pad:
        x = torch.nn.functional.pad(x, (0, 0, 0, pad))
    return x.reshape(Bk, H, nK, KB, D)


def masked(s, keep):
    if keep is None:
        return s
    return torch.where(keep, s, torch.tensor(NEG_INF, dtype=s.dtype))


# exp(x) below the smallest normal number is taken as 0, not a subnormal: on Intel CPUs an exp
# or a matmul that meets subnormals runs 25-100x slower (measured: exp_ 0.24 -> 6.1 ns per
# element with 13% subnormal results; bmm with subnormal-heavy p 0.2 -> 21 ms), and ALiBi-style
# score mods push far keys there. The weights dropped are below 2^-126 against a row maximum of
# 1. Checked per chunk from the tile's minimum, so chunks that cannot get there pay one min.
SUBNORMAL_EXP = {torch.float32: math.log(torch.finfo(torch.float32).tiny),
                  torch.float64: math.log(torch.finfo(torch.float64).tiny)}


def drop_subnormal_weights(x, lowest):
    """x (exp's argument, updated in place): entries whose exp would be subnormal become -inf.
    lowest: a lower bound of x; when it is above the range, nothing is scanned."""
    limit = SUBNORMAL_EXP[x.dtype]
    if lowest < limit:
        x.masked_fill_(x < limit, NEG_INF)
    return x


def forward(prob):
    """Returns (out [B, Hq, L, Ev], lse [B, Hq, L], max [B, Hq, L]) in the working precision
    (the caller rounds out to q's dtype, and keeps the unrounded one for the backward's
    rowsum(dout * out))."""
    p_ = prob.plan
    B, Hkv, G, L, Ev = prob.B, prob.Hkv, prob.G, prob.L, prob.Ev
    out = torch.zeros(B, Hkv, G, L, Ev, dtype=prob.wd)
    lse = torch.full((B, Hkv, G, L), NEG_INF, dtype=prob.wd)
    mx = torch.full((B, Hkv, G, L), NEG_INF, dtype=prob.wd)
    with torch.no_grad():
        for i, chunks in enumerate(p_.rows):
            if not chunks:
                continue
            q0 = i * p_.QB
            qr = min(p_.QB, L - q0)
            if qr <= 0:
                break
            qi = prob.qw[..., q0:q0 + qr, :]
            m = torch.full((B, Hkv, G, qr), NEG_INF, dtype=prob.wd)
            l = torch.zeros(B, Hkv, G, qr, dtype=prob.wd)
            acc = torch.zeros(B, Hkv, G, qr, Ev, dtype=prob.wd)
            for ch in chunks:
                kc = prob.kv_chunk(ch, "k")
                raw, s, keep = prob.scores(qi, q0, ch, kc, fn=prob.score_fn_inplace)
                if s is not raw and (s._base is not None or s.shape != raw.shape):
                    s = s.expand(raw.shape).clone()  # a view or a captured tensor: copy
                # s is a fresh tensor from here on: update it in place (one pass per step).
                lowest = s.amin()  # before masking: can s - max reach exp's subnormals?
                if keep is not None:
                    if prob.score_fn is None and keep.numel() * 4 <= s.numel():
                        # Scores are finite here: adding a small broadcast 0/-inf bias is one
                        # fast pass, where masked_fill_ with a broadcast mask is slow.
                        s.add_(torch.where(keep, 0.0, NEG_INF).to(s.dtype))
                    else:
                        s.masked_fill_(~keep, NEG_INF)
                m_new = torch.maximum(m, s.amax(-1))
                m_use = torch.where(torch.isneginf(m_new), 0.0, m_new)
                p = drop_subnormal_weights(s.sub_(m_use.unsqueeze(-1)),
                                           lowest - m_use.max()).exp_()
                alpha = torch.exp(m - m_use)
                l = l.mul_(alpha).add_(p.sum(-1))
                acc = acc.mul_(alpha.unsqueeze(-1)).add_(bmm(p, prob.kv_chunk(ch, "v")))
                m = m_new
            seen = l != 0  # (a NaN score makes l NaN: the row is NaN, as in PyTorch, not empty)
            out[..., q0:q0 + qr, :] = torch.where(seen.unsqueeze(-1),
                                                  acc / torch.where(seen, l, 1.0).unsqueeze(-1),
                                                  0.0)
            lse[..., q0:q0 + qr] = torch.where(seen, m + torch.log(torch.where(seen, l, 1.0)),
                                               NEG_INF)
            mx[..., q0:q0 + qr] = m
    Hq = prob.Hq
    return out.reshape(B, Hq, L, Ev), lse.reshape(B, Hq, L), mx.reshape(B, Hq, L)
