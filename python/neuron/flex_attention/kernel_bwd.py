"""The FlexAttention backward as one neuron kernel (the forward is kernel.py): dq, dk and dv,
recomputing p from the saved lse (flash-attention style) with the block lists read at run time.

Per key block, over the q block lists (the BlockMask's q_num_blocks / q_indices and full_q_*),
each (query tile, key tile) recomputes s = score_mod(q k^T * scale) with its derivative with
respect to the score (emit.emit_with_grad: forward mode over the traced graph), mask_mod on
partial blocks, p = exp(s - lse), dp = dout v^T, ds = p * (dp - delta) * d score_mod / d score
with delta = rowsum(dout * out) - dlse (host). Then dv += p^T @ dout and dk += ds^T @ q for the
key block, and the query tile's rows of dq += ds @ k (read, add, write: its terms come from
every key block that sees it). One program per (batch, query head): dq's rows are that head's
alone, and each program writes its own partial dk / dv; the host sums the G query heads of a
kv head (and the batch when K/V broadcast over it), so no two programs write one row. The host
scales dq once. (Until session 51 a second kernel per query tile, over the kv block lists,
recomputed s, p and ds to sum dq: bf16 causal [1, 8, 2048, 64] backward 53 -> 37-39 ms, fp32
85 -> 64-66 ms, 2 threads, Intel Xeon.)
Rows that see no key have lse -inf: they get lse +inf here, so p = 0 and every gradient is 0.
Padding query rows (L not a multiple of the q block) are zero with lse +inf; the mods see
q_idx clamped to L - 1 there (and kv_idx to S - 1 on padding keys), as on the host path.
Q^T and dout^T are transposed once per program when both fit KT_BYTES / 2 per partition
(kernel.whole_T), else per visited tile.
Captured tensors of score_mod that require grad (learnable biases) get their gradients here
too: each read t[idx] of such a tensor is a forward-mode seed of emit_with_grad, so the kernel
forms g = ds * d score_mod / d read per tile, and reduces it by what the read's indices depend
on (grad_reads): along the keys when they depend on b, h and q_idx only (bias[h, q_idx],
slopes[h]: each tile's row sums added to a [L] column per (batch, head)), along the queries (a
ones-vector matmul) when on b, h and kv_idx only, and when on both (a relative-position table
t[q_idx - kv_idx], a full [h, q, kv] bias) the kernel writes the tile itself (a dense
[B * Hq, L, S] fp32 output, up to DENSE_GRAD_BYTES; tiles no block visits stay 0). The host then
scatters each reduced gradient onto t through torch autograd of the read alone
(codegen.compile_node), so indices wrap and repeat exactly as torch's indexing does. A read
indexed by an expression of the score takes the host path. bf16 inputs give the Tensor engine
bf16 operands (q, k, v, dout, and p / ds rounded to bf16), with fp32 accumulation, as the
forward does; everything else is fp32.
"""
import math

import torch

from .. import lru
from . import emit
from . import kernel as _fwd
from .kernel import (TRACES, _captured, block_lists, chunked_T, chunked_matmul, columns,
                     operand_dtype, whole_T)

_KERNELS = lru.Lru()  # bounded: a service may try mods without end (neuron/lru.py)


def q_lists(block_mask, B, Hq, L, S, QB, KB):
    """The q-side block lists [Bm * Hm, 1, nK] / [Bm * Hm, nK, W] (full ones None when absent);
    for no block mask, every q block of every key block, the last one partial when L % QB."""
    nQ, nK = -(-L // QB), -(-S // KB)
    if block_mask is None:
        tail = L % QB != 0
        nf = nQ - 1 if tail else nQ
        fn = torch.full((1, 1, nK), nf, dtype=torch.int32)
        fi = torch.arange(max(nf, 1), dtype=torch.int32).expand(1, nK, max(nf, 1)).contiguous()
        kn = torch.full((1, 1, nK), 1 if tail else 0, dtype=torch.int32)
        ki = torch.full((1, nK, 1), nQ - 1, dtype=torch.int32)
        return kn, ki, fn, fi
    Bm, Hm = block_mask.kv_num_blocks.shape[:2]

    def flat(n, i):
        n = n[:, :, :nK].to(torch.int32).reshape(Bm * Hm, 1, nK).contiguous()
        i = i[:, :, :nK].to(torch.int32).reshape(Bm * Hm, nK, i.shape[-1]).contiguous()
        return n, i
    kn, ki = flat(block_mask.q_num_blocks, block_mask.q_indices)
    fn = fi = None
    if block_mask.full_q_num_blocks is not None:
        fn, fi = flat(block_mask.full_q_num_blocks, block_mask.full_q_indices)
    return kn, ki, fn, fi


# The gradient of a learnable read of both q_idx and kv_idx is written whole by the kernel
# ([B * Hq, L, S] fp32): past this many bytes such a call takes the host path (chunked).
DENSE_GRAD_BYTES = 1 << 30


def grad_reads(score_graph):
    """The reads t[idx] of score_mod's captured tensors that require grad, as [(gather node,
    input index, side)]; side names what the indices depend on: "q" (b, h, q_idx, constants),
    "kv" (b, h, kv_idx: not q_idx), "qkv" (q_idx and kv_idx), "score" (the score)."""
    reads = []
    for n in score_graph.nodes if score_graph is not None else ():
        if n.op != "gather":
            continue
        i = n.args[0].args[0]
        t = score_graph.inputs[i]
        if not (t.requires_grad and t.is_floating_point()):
            continue
        deps = _index_args(n)
        side = ("score" if "score" in deps else "qkv" if {"q_idx", "kv_idx"} <= deps
                else "kv" if "kv_idx" in deps else "q")
        reads.append((n, i, side))
    return reads


def _index_args(gather):
    """The argument names a gather's indices depend on (through other reads too)."""
    names, seen, stack = set(), set(), list(gather.args[1:])
    while stack:
        x = stack.pop()
        if not hasattr(x, "op") or x.op == "input" or x.id in seen:
            continue
        seen.add(x.id)
        if x.op == "arg":
            names.add(x.args[0])
        stack.extend(x.args)
    return names


def why_not(block_mask, score_graph, B, Hq, L, S):
    if block_mask is not None and block_mask.q_num_blocks is None:
        return "the block mask has no q_num_blocks / q_indices (the backward's transposes)"
    for _, i, side in grad_reads(score_graph):
        what = (f"a captured tensor of score_mod (shape {tuple(score_graph.inputs[i].shape)}) "
                "requires grad and is")
        if side == "score":
            return f"{what} indexed by an expression of the score"
        if side == "qkv" and B * Hq * L * S * 4 > DENSE_GRAD_BYTES:
            return (f"{what} read at indices of both q_idx and kv_idx: its dense gradient, "
                    f"{B * Hq * L * S * 4 >> 20} MiB, exceeds kernel_bwd.DENSE_GRAD_BYTES "
                    f"({DENSE_GRAD_BYTES >> 20} MiB)")
    return None


def _build(sh, score_graph, mask_graph):
    import neuron
    import neuron.isa as nisa
    import neuron.language as nl
    ninf = -math.inf
    f32 = nl.float32
    graphs = [g for g in (score_graph, mask_graph) if g is not None]

    def uses(name):
        return any(g.uses(name) for g in graphs)
    need_bh = uses("b") or uses("h")
    need_caps = any(g.inputs for g in graphs)
    n_score = len(score_graph.inputs) if score_graph is not None else 0
    TQ, TK = sh.TQ, sh.TK
    reads = grad_reads(score_graph)
    wrt = ("score",) + tuple(n.id for n, _, _ in reads)
    # Captured reads indexed by q_idx / kv_idx as plain loads, as in the forward (emit.py
    # _direct_gather): a tile's rows or keys past L or S (padding) would read past the tensor,
    # so each index takes the load only when its length is whole tiles.
    direct_q, direct_kv = sh.Lp == sh.L, sh.Sp == sh.S
    need_caps_tile = need_caps and emit.reads_caps_row(
        score_graph, mask_graph, sh.caps_layout, (sh.B, sh.Hq, sh.L, sh.S), direct_q, direct_kv)

    def direct_loads(ids, caps, capsT, q0, k0, consts):
        """emit's `direct` for the tile of TQ queries from q0 and TK keys from k0."""
        if not need_caps:
            return None
        b, hk, g = ids
        return emit.direct_loads(
            b, hk * sh.G + g, (sh.B, sh.Hq, sh.L, sh.S),
            (lambda off: nl.load(capsT[nl.ds(q0 + off, TQ), :])) if direct_q else None,
            (lambda off: nl.broadcast_to(nl.load(caps[0:1, nl.ds(k0 + off, TK)]), (TQ, TK)))
            if direct_kv else None, consts)

    def T(x, dtype=None):  # Tensor-engine transpose (PSUM) back to SBUF, as an operand
        return nl.copy(nl.transpose(x), dtype=dtype)

    def probs(kind, s_raw, dp, lse_t, delta_t, env, data, direct, zeros):
        """(p, ds, [g per learnable read]) of one [TQ, TK] tile from the raw scaled scores
        s_raw; g = d loss / d (the value read), None where the read does not reach the score."""
        s, ders = s_raw, [1.0]
        if score_graph is not None:
            env["score"] = s_raw
            s, ders = emit.emit_with_grad(score_graph, env, s_raw, data,
                                          sh.caps_layout[:n_score], nl, direct, zeros, wrt)
            if isinstance(s, float):
                s = nl.add(nl.multiply(s_raw, 0.0), s)
        if kind == "partial" and mask_graph is not None:
            keep = emit.emit(mask_graph, env, s_raw, data, sh.caps_layout[n_score:], nl,
                             direct)
            if isinstance(keep, float):
                if not keep:
                    s = nl.add(nl.multiply(s, 0.0), ninf)
            else:
                s = nl.where(keep, s, ninf)
        if sh.S % sh.KB != 0:
            s = nl.where(nl.less(env["_kv_raw"], float(sh.S)), s, ninf)
        p = nl.exp(nl.subtract(s, lse_t))
        ds = nl.multiply(p, nl.subtract(dp, delta_t))  # d loss / d s

        def chain(d):
            if d is None:
                return None
            if isinstance(d, float):
                return ds if d == 1.0 else nl.multiply(ds, d)
            # Where p is 0 (masked, padding keys, padding rows) the derivative may be inf or
            # NaN (sqrt(|s|) at s = 0 on a zero padding key): those entries are 0, not NaN.
            return nl.where(nl.greater(p, 0.0), nl.multiply(ds, d), 0.0)
        ds_raw = chain(ders[0])
        return p, (nl.multiply(ds, 0.0) if ds_raw is None else ds_raw), \
            [chain(d) for d in ders[1:]]

    def program(b, hk, g, bh, caps):
        hq = (b * sh.Hkv + hk) * sh.G + g
        kvrow = (b if sh.Bk == sh.B else 0) * sh.Hkv + hk
        mrow = (b if sh.Bm > 1 else 0) * sh.Hm + ((hk * sh.G + g) if sh.Hm > 1 else 0)
        zeros = nl.zeros((TQ, TK), f32, buffer=nl.sbuf)
        fixed = {}
        if need_bh:
            bh_t = nl.broadcast_to(nl.load(bh[hq, :, :]), (TQ, 2))
            for j, name in enumerate(("b", "h")):
                if uses(name):
                    fixed[name] = bh_t[:, j:j + 1]  # a column: the operations broadcast it
        data = nl.broadcast_to(nl.load(caps[0:1, :]), (TQ, caps.shape[1])) \
            if need_caps_tile else None
        consts = emit.program_constants(
            score_graph, mask_graph, sh.caps_layout, b, hk * sh.G + g,
            (sh.B, sh.Hq, sh.L, sh.S),
            lambda off: nl.broadcast_to(nl.load(caps[0:1, nl.ds(off, 1)]), (TQ, 1))) \
            if need_caps else {}
        return hq, kvrow, mrow, zeros, fixed, data, consts

    def read_outputs(sides, rows, cols):
        """{read j: its gradient output [B * Hq, rows, cols]} for the reads of these sides."""
        return {j: nl.ndarray((sh.B * sh.Hq, rows, cols(side)), f32, buffer=nl.shared_hbm,
                              name=f"dread{j}")
                for j, (_, _, side) in enumerate(reads) if side in sides}

    def index_env(fixed, zeros, qpos_t, kvpos_t):
        # q_idx, b and h are [TQ, 1] columns, as in the forward (emit's docstring).
        env = dict(fixed)
        env["q_idx"] = qpos_t                          # qpos: clamped to L - 1
        kv = kvpos_t                                   # [TQ, TK] raw key positions
        env["_kv_raw"] = kv
        env["kv_idx"] = kv if sh.S % sh.KB == 0 else nl.minimum(kv, float(sh.S - 1))
        return env

    @neuron.kernel
    def flex_backward(q, k, v, dout, lse, delta, qn, qi, qfn, qfi, bh, caps, capsT, qpos, kpos):
        TRACES[0] += 1
        mm = operand_dtype(nl, q)
        dq = nl.ndarray((sh.B * sh.Hq, sh.Lp, sh.E), f32, buffer=nl.shared_hbm, name="dq")
        dk = nl.ndarray((sh.B * sh.Hq, sh.Sp, sh.E), f32, buffer=nl.shared_hbm, name="dk")
        dv = nl.ndarray((sh.B * sh.Hq, sh.Sp, sh.Ev), f32, buffer=nl.shared_hbm, name="dv")
        # Learnable reads: of kv-side indices summed along the queries (a ones-vector matmul),
        # of q-side ones along the keys, of both whole tiles.
        gk = read_outputs(("kv",), sh.Sp, lambda side: 1)
        gq = read_outputs(("q", "qkv"), sh.Lp, lambda side: 1 if side == "q" else sh.Sp)
        ones = nl.ones((TQ, 1), f32, buffer=nl.sbuf) if gk else None
        ids = (nl.program_id(0), nl.program_id(1), nl.program_id(2))
        hq, kvrow, mrow, zeros, fixed, data, consts = program(*ids, bh, caps)
        # dq and the q-side read gradients are sums over the key tiles that see a query: zero
        # first. Only this program writes rows hq (it is the query head's only program).
        zero_rows = nl.zeros((TQ, sh.E), f32, buffer=nl.sbuf)
        for r in nl.affine_range(sh.nQ):
            for t in range(sh.QB // TQ):
                q0 = r * sh.QB + t * TQ
                nl.store(dq[hq, nl.ds(q0, TQ), :], zero_rows)
                for j, out in gq.items():
                    if reads[j][2] == "q":
                        nl.store(out[hq, nl.ds(q0, TQ), :], zeros[:, 0:1])
                    else:  # visited tiles overwrite theirs
                        for c in nl.affine_range(sh.Sp // TK):
                            nl.store(out[hq, nl.ds(q0, TQ), nl.ds(c * TK, TK)], zeros)
        counts = {"partial": nl.load(qn[mrow, :, :])}
        if sh.Wqf is not None:
            counts["full"] = nl.load(qfn[mrow, :, :])
        # Q^T and dout^T for all queries once per program when both fit (else per visit).
        half = _fwd.KT_BYTES // 2
        qT_all = whole_T(nl, q, hq, sh.Lp, TQ, sh.E, mm, half)
        doT_all = whole_T(nl, dout, hq, sh.Lp, TQ, sh.Ev, mm, half)
        for c in nl.affine_range(sh.nK):
            for sb in range(sh.KB // TK):
                k0 = c * sh.KB + sb * TK
                krows = nl.load(k[kvrow, nl.ds(k0, TK), :], dtype=mm)  # dq's moving operand
                kT = chunked_T(nl, krows)
                vT = chunked_T(nl, nl.load(v[kvrow, nl.ds(k0, TK), :], dtype=mm))
                kv = nl.add(zeros, nl.broadcast_to(nl.load(kpos[0:1, nl.ds(k0, TK)]), (TQ, TK)))
                dk_acc = nl.zeros((TK, sh.E), f32, buffer=nl.sbuf)
                dv_acc = nl.zeros((TK, sh.Ev), f32, buffer=nl.sbuf)
                kacc = {j: nl.zeros((TK, 1), f32, buffer=nl.sbuf) for j in gk}
                for kind in ("full", "partial"):
                    if kind not in counts:
                        continue
                    n = nisa.register_alloc()
                    nisa.register_load(n, counts[kind][0:1, nl.ds(c, 1)])
                    lists = qi if kind == "partial" else qfi
                    row = nl.load(lists[mrow, nl.ds(c, 1), :])
                    for jj in nl.dynamic_range(n):
                        blk = nisa.register_alloc()
                        nisa.register_load(blk, row[0:1, nl.ds(jj, 1)])
                        for t in range(sh.QB // TQ):
                            q0 = blk * sh.QB + t * TQ
                            qrows = nl.load(q[hq, nl.ds(q0, TQ), :], dtype=mm)
                            dorows = nl.load(dout[hq, nl.ds(q0, TQ), :], dtype=mm)
                            lse_t = nl.load(lse[hq, nl.ds(q0, TQ), :])
                            delta_t = nl.load(delta[hq, nl.ds(q0, TQ), :])
                            qpos_t = nl.load(qpos[nl.ds(q0, TQ), :])
                            qT = columns(nl, qT_all, q0, TQ) if qT_all else \
                                chunked_T(nl, qrows)
                            doT = columns(nl, doT_all, q0, TQ) if doT_all else \
                                chunked_T(nl, dorows)
                            s_raw = nl.multiply(chunked_matmul(nl, nisa, qT, kT), sh.scale)
                            dp = chunked_matmul(nl, nisa, doT, vT)
                            env = index_env(fixed, zeros, qpos_t, kv)
                            p, ds, gs = probs(kind, s_raw, dp, lse_t, delta_t, env, data,
                                              direct_loads(ids, caps, capsT, q0, k0, consts), zeros)
                            if mm != f32:  # the probabilities and ds as bf16 operands; ds's
                                # copy right after ds, so the native backend fuses the two
                                ds = nl.copy(ds, dtype=mm)
                                p = nl.copy(p, dtype=mm)
                            for j, k_acc in kacc.items():
                                if gs[j] is not None:
                                    k_acc[...] = nl.add(k_acc, nl.matmul(gs[j], ones,
                                                                         transpose_x=True))
                            for j, out in gq.items():
                                if gs[j] is None:
                                    continue
                                if reads[j][2] == "q":
                                    cur = out[hq, nl.ds(q0, TQ), :]
                                    nl.store(cur, nl.add(nl.load(cur),
                                                         nl.sum(gs[j], axis=1, keepdims=True)))
                                else:
                                    nl.store(out[hq, nl.ds(q0, TQ), nl.ds(k0, TK)], gs[j])
                            dv_acc[...] = nl.add(dv_acc, nl.matmul(p, dorows, transpose_x=True))
                            dk_acc[...] = nl.add(dk_acc, nl.matmul(ds, qrows, transpose_x=True))
                            # dq's rows += ds k (read, add, write: the pairs of one query tile
                            # come from different key tiles of this loop).
                            rows = dq[hq, nl.ds(q0, TQ), :]
                            nl.store(rows, nl.add(nl.load(rows),
                                                  nl.matmul(T(ds, mm), krows, transpose_x=True)))
                nl.store(dk[hq, nl.ds(k0, TK), :], nl.multiply(dk_acc, sh.scale))
                nl.store(dv[hq, nl.ds(k0, TK), :], dv_acc)
                for j, k_acc in kacc.items():
                    nl.store(gk[j][hq, nl.ds(k0, TK), :], k_acc)
        return (dq, dk, dv, *gk.values(), *gq.values())
    return flex_backward


class _Shape:
    def __init__(self, q, v, QB, KB, qfi, Bm, Hm, scale, layout, L, S):
        self.B, self.Hq, _, self.E = q.shape
        self.Bk, self.Hkv, _, self.Ev = v.shape
        self.G = self.Hq // self.Hkv
        self.L, self.S, self.QB, self.KB = L, S, QB, KB
        self.TQ, self.TK = min(QB, 128), min(KB, 128)
        self.nQ, self.nK = -(-L // QB), -(-S // KB)
        self.Lp, self.Sp = self.nQ * QB, self.nK * KB
        self.Wqf = None if qfi is None else qfi.shape[2]
        self.Bm, self.Hm = Bm, Hm
        self.scale = float(scale)
        self.caps_layout = layout

    def key(self):
        return tuple(sorted(vars(self).items()))


def backward(q, k, v, out, lse, dout, dlse, block_mask, score_graph, mask_graph, scale,
             simulate=False):
    """(dq, dk, dv, [gradient of each learnable captured tensor of score_mod, in input order])
    in fp32 through the kernel."""
    import neuron
    q, k, v, out, lse = (t.detach() for t in (q, k, v, out, lse))
    B, Hq, L, E = q.shape
    Bk, Hkv, S, Ev = v.shape
    QB, KB, *_, Bm, Hm = block_lists(block_mask, B, Hq, L, S)
    qn, qi, qfn, qfi = q_lists(block_mask, B, Hq, L, S, QB, KB)
    caps, layout = _captured((score_graph, mask_graph))
    sh = _Shape(q, v, QB, KB, qfi, Bm, Hm, scale, layout, L, S)
    reads = grad_reads(score_graph)
    key = (sh.key(), score_graph.key() if score_graph else None,
           mask_graph.key() if mask_graph else None, _fwd.KT_BYTES,
           tuple((n.id, side) for n, _, side in reads))
    kernel = _KERNELS.get(key)
    if kernel is None:
        kernel = _KERNELS[key] = _build(sh, score_graph, mask_graph)
    G = Hq // Hkv
    grid = kernel[B, Hkv, G]
    if simulate:
        grid = neuron.simulate(grid)

    def rows(t, n, pad_value=0.0):  # [B, H, N, D] -> [B*H, n, D], padded with pad_value
        t = t.contiguous().reshape(-1, t.shape[2], t.shape[3])
        pad = n - t.shape[1]
        return torch.nn.functional.pad(t, (0, 0, 0, pad), value=pad_value) if pad else t
    f32 = torch.float32
    do = torch.zeros_like(out, dtype=f32) if dout is None else dout.to(f32)
    delta = (do * out.to(f32)).sum(-1)
    if dlse is not None:
        delta = delta - torch.where(torch.isneginf(lse), 0.0, dlse.to(f32))
    lse_u = torch.where(torch.isneginf(lse), math.inf, lse.to(f32))
    args = [rows(q, sh.Lp), rows(k, sh.Sp), rows(v, sh.Sp), rows(do, sh.Lp),
            rows(lse_u.unsqueeze(-1), sh.Lp, math.inf), rows(delta.unsqueeze(-1), sh.Lp)]
    bh = torch.stack(torch.meshgrid(torch.arange(B), torch.arange(Hq), indexing="ij"), -1)
    bh = bh.reshape(B * Hq, 1, 2).to(f32)
    qpos = torch.arange(sh.Lp, dtype=f32).clamp(max=L - 1).reshape(sh.Lp, 1)
    kpos = torch.arange(sh.Sp, dtype=f32).reshape(1, sh.Sp)
    dummy = torch.zeros(1, 1, 1, dtype=torch.int32)
    qfn, qfi = (qfn, qfi) if qfn is not None else (dummy, dummy)
    capsT = caps.reshape(-1, 1)  # the captured values as a column (q_idx-indexed loads)
    dq, dk, dv, *grads = (torch.as_tensor(t) for t in grid(*args, qn, qi, qfn, qfi, bh, caps,
                                                            capsT, qpos, kpos))
    n_kv = sum(side == "kv" for _, _, side in reads)
    gk, gq = grads[:n_kv], grads[n_kv:]
    dq = dq[:, :L].reshape(B, Hq, L, E) * scale  # the kernel sums ds k; scaled once here
    dk = dk[:, :S].reshape(B, Hkv, G, S, E).sum(2)
    dv = dv[:, :S].reshape(B, Hkv, G, S, Ev).sum(2)
    if Bk != B:
        dk, dv = dk.sum(0, keepdim=True), dv.sum(0, keepdim=True)
    return dq, dk, dv, _captured_grads(score_graph, reads, gq, gk, B, Hq, L, S)


def _outputs(res):
    return res if isinstance(res, (tuple, list)) else (res,)


def _captured_grads(score_graph, reads, gq, gk, B, Hq, L, S):
    """Scatters the kernels' per-read gradients onto the captured tensors: torch autograd of
    each read alone (codegen.compile_node), evaluated at the index values the kernels used."""
    if not reads:
        return []
    from . import codegen
    ins = [t.detach() for t in score_graph.inputs]
    leaves = {i: ins[i].to(torch.float32).requires_grad_() for _, i, _ in reads}
    ins = [leaves.get(i, t) for i, t in enumerate(ins)]
    grads = {i: torch.zeros_like(leaf) for i, leaf in leaves.items()}
    gq, gk = iter(gq), iter(gk)

    def ar(n, dim, start=0):  # an index argument along dim of [B, Hq, L, S]
        return torch.arange(start, start + n).view([n if d == dim else 1 for d in range(4)])
    for n, i, side in reads:
        fn = codegen.compile_node(score_graph, n)
        b, h = ar(B, 0), ar(Hq, 1)
        if side == "q":
            parts = [(ar(L, 2), 0, next(gq)[:, :L].reshape(B, Hq, L, 1))]
        elif side == "kv":
            parts = [(0, ar(S, 3), next(gk)[:, :S].reshape(B, Hq, 1, S))]
        else:  # whole tiles, a bounded number of rows at a time
            dense, rows = next(gq), max(1, (1 << 24) // max(1, B * Hq * S))
            parts = ((ar(min(rows, L - q0), 2, q0), ar(S, 3),
                      dense[:, q0:min(q0 + rows, L), :S].reshape(B, Hq, -1, S))
                     for q0 in range(0, L, rows))
        for q_idx, kv_idx, w in parts:
            with torch.enable_grad():  # (autograd's backward runs without it)
                val = fn(0.0, b, h, q_idx, kv_idx, *ins)
            (g,) = torch.autograd.grad(val, leaves[i], w.sum_to_size(val.shape))
            grads[i] += g
    return [grads[i] for i in sorted(grads)]
