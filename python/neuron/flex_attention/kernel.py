"""The FlexAttention forward as a neuron kernel (`@neuron.kernel`), for the native backend and
the simulator: a block-sparse flash attention that reads the BlockMask at run time, with the
traced score_mod / mask_mod emitted as nl tile operations (emit.py).

Tiling (the kernel library's flash attention, kernels/attention.hpp): one SPMD program per
(batch, kv head, query head of the group); per query tile of up to 128 queries, Q^T once; then
two runtime loops (`nl.dynamic_range`) whose trip counts are read from the block mask's
`full_kv_num_blocks` / `kv_num_blocks` into a register: per iteration the key block's index is
read from `full_kv_indices` / `kv_indices` into a register and K / V rows are loaded at that
register offset. K^T is transposed once per program for all keys when it fits KT_BYTES per
partition (else per visited key tile). Per key tile of up to 128 keys: its K^T columns, scores =
nc_matmul in PSUM, scale, score_mod, mask_mod only in the partial-block loop, online softmax in
fp32, p^T @ V accumulated. Empty blocks are never visited; rows that see no key give 0 and lse
-inf. Because the block lists are data, one compile serves every mask of the same shape.

Captured tensors (of both mods) are one kernel input, `caps` [1, N] fp32, loaded once per
program and broadcast over the partitions; a captured-tensor read `t[i, j]` becomes a flat index
tile and one `gather_flattened` (nisa.nc_n_gather), so new values never recompile. b and h come
from a small per-program table input `bh`.

The backward is kernel_bwd.py. Limits (`why_not` says which one applies; the caller then takes
the host path): E, Ev <= 512 (a head dim over 128 contracts in chunks of 128 partitions,
chunked_T / chunked_matmul); BLOCK_SIZE entries <= 128 or multiples of 128; captured tensors
of at most MAX_CAPTURED elements in all, integer ones with values below 2**24 in magnitude;
the operations emit.py lists.
"""
import math

import torch

from .. import lru
from . import emit

MAX_CAPTURED = 16384  # fp32 elements per SBUF partition for all captured tensors (64 KiB)
MAX_HEAD_DIM = 512  # a [128, Ev] accumulator in one PSUM bank of fp32 (kernels/attention.hpp)
KT_BYTES = 64 * 1024  # SBUF bytes per partition for a program's whole K^T (as the library's)

# How many times a flex kernel was traced (one trace = one compile): tests read it.
TRACES = [0]


def why_not(q, k, v, score_graph, mask_graph, block_mask):
    """None when the kernel can run this call, else the reason."""
    if q.size(-1) > MAX_HEAD_DIM or v.size(-1) > MAX_HEAD_DIM:
        return f"head dims {q.size(-1)}, {v.size(-1)} above {MAX_HEAD_DIM}"
    if block_mask is not None:
        for n in block_mask.BLOCK_SIZE:
            if n > 128 and n % 128:
                return f"BLOCK_SIZE {tuple(block_mask.BLOCK_SIZE)} (entries <= 128 or " \
                       "multiples of 128)"
    for g in (score_graph, mask_graph):
        why = emit.lowerable(g)
        if why:
            return why
    ins = _inputs(score_graph) + _inputs(mask_graph)
    total = sum(t.numel() for t in ins)
    if total > MAX_CAPTURED:
        return f"captured tensors of {total} elements (the kernel holds at most {MAX_CAPTURED})"
    for t in ins:
        if not t.is_floating_point() and t.numel() and int(t.abs().max()) >= 1 << 24:
            return "a captured integer tensor with values of 2**24 or more"
    return None


def operand_dtype(nl, q):
    """The Tensor engine's operand dtype: bf16 for bf16 inputs (fp32 accumulation in PSUM, the
    AMX / AVX512-BF16 path natively, as the kernel library's attention and PyTorch's bf16
    matmuls), else fp32. The forward and the backward kernels use it alike."""
    return q.dtype if q.dtype == nl.bfloat16 else nl.float32


def chunked_T(nl, x):
    """x [rows, D] (rows <= 128) transposed on the Tensor engine into SBUF tiles [cw, rows],
    one per chunk of at most 128 of its D columns (the partitions a matmul contracts over)."""
    D = x.shape[1]
    return [nl.copy(nl.transpose(x[:, c0:min(c0 + 128, D)])) for c0 in range(0, D, 128)]


def whole_T(nl, t, row, n, step, width, dtype, budget=None):
    """Rows 0..n of t[row] ([n, width], n a multiple of step <= 128) transposed once into SBUF
    tiles [cw, n], one per chunk of at most 128 of the width columns (chunked_T's layout for
    every row at once), when they fit `budget` bytes per partition (KT_BYTES); else None, and
    the caller transposes each tile it visits. A tile's columns are then read at the visit's
    (register) offset."""
    if n * (2 if dtype == nl.bfloat16 else 4) > (KT_BYTES if budget is None else budget):
        return None
    tiles = [nl.ndarray((min(128, width - c0), n), dtype, buffer=nl.sbuf)
             for c0 in range(0, width, 128)]
    for i in nl.affine_range(n // step):
        rows = nl.load(t[row, nl.ds(i * step, step), :], dtype=dtype)
        for c, dst in enumerate(tiles):
            dst[:, nl.ds(i * step, step)] = nl.transpose(rows[:, c * 128:c * 128 + dst.shape[0]])
    return tiles


def columns(nl, tiles, c0, n):
    """Columns c0..c0+n of whole_T's tiles: the chunked_T tiles of those rows."""
    return [t[:, nl.ds(c0, n)] for t in tiles]


def chunked_matmul(nl, nisa, xs, ys):
    """sum_c xs[c].T @ ys[c] (chunked contraction, chunked_T's tiles) in PSUM fp32: one
    matmul per chunk, the later ones adding into the first."""
    if len(xs) == 1:
        return nl.matmul(xs[0], ys[0], transpose_x=True)
    out = nl.ndarray((xs[0].shape[1], ys[0].shape[1]), nl.float32, buffer=nl.psum)
    for c, (x, y) in enumerate(zip(xs, ys)):
        nisa.nc_matmul(out, x, y, accumulate=c > 0)
    return out


def _inputs(graph):
    return list(graph.inputs) if graph is not None else []


def block_lists(block_mask, B, Hq, L, S):
    """(QB, KB, counts, indices, full_counts, full_indices) as int32 tensors shaped
    [Bm * Hm, 1, nQ] / [Bm * Hm, nQ, W], and (Bm, Hm); full_* None when the mask has no full
    lists. No block mask: every block full, except a last partial one when S % 128 != 0 (its
    padding keys are masked in the partial loop)."""
    if block_mask is None:
        QB = KB = 128
        nQ, nK = -(-L // QB), -(-S // KB)
        tail = S % KB != 0
        nf = nK - 1 if tail else nK
        fn = torch.full((1, 1, nQ), nf, dtype=torch.int32)
        fi = torch.arange(max(nf, 1), dtype=torch.int32).expand(1, nQ, max(nf, 1))
        kn = torch.full((1, 1, nQ), 1 if tail else 0, dtype=torch.int32)
        ki = torch.full((1, nQ, 1), nK - 1, dtype=torch.int32)
        return QB, KB, kn, ki.contiguous(), fn, fi.contiguous(), 1, 1
    QB, KB = (int(x) for x in block_mask.BLOCK_SIZE)
    nQ = -(-L // QB)
    kn, ki = block_mask.kv_num_blocks, block_mask.kv_indices
    Bm, Hm = kn.shape[0], kn.shape[1]
    if Bm not in (1, B):
        raise ValueError(f"block_mask batch size {Bm} does not broadcast to the batch size {B}")
    if Hm not in (1, Hq):
        raise ValueError(f"block_mask has {Hm} heads; the query has {Hq} (expected 1 or {Hq})")

    def flat(n, i):
        n = n[:, :, :nQ].to(torch.int32).reshape(Bm * Hm, 1, nQ).contiguous()
        i = i[:, :, :nQ].to(torch.int32).reshape(Bm * Hm, nQ, i.shape[-1]).contiguous()
        return n, i
    kn, ki = flat(kn, ki)
    fn = fi = None
    if block_mask.full_kv_num_blocks is not None:
        fn, fi = flat(block_mask.full_kv_num_blocks, block_mask.full_kv_indices)
    return QB, KB, kn, ki, fn, fi, Bm, Hm


class Shape:
    """Everything static about one kernel: the cache key besides the mods' graphs."""

    def __init__(self, q, v, QB, KB, kn, ki, fi, Bm, Hm, scale, caps_layout, out_fp32=False):
        self.B, self.Hq, self.L, self.E = q.shape
        self.out_fp32 = out_fp32  # out stored in fp32 (for a backward) whatever q's dtype
        self.Bk, self.Hkv, self.S, self.Ev = v.shape
        self.G = self.Hq // self.Hkv
        self.QB, self.KB = QB, KB
        self.TQ, self.TK = min(QB, 128), min(KB, 128)
        self.nQ, self.nK = kn.shape[2], -(-self.S // KB)
        self.Wp = ki.shape[2]
        self.Wf = None if fi is None else fi.shape[2]
        self.Bm, self.Hm = Bm, Hm
        self.scale = float(scale)
        self.caps_layout = caps_layout  # ((offset, shape), ...) per graph input

    def key(self):
        return tuple(sorted(vars(self).items()))


_KERNELS = lru.Lru()  # bounded: a service may try mods without end (neuron/lru.py)


def get_kernel(sh, score_graph, mask_graph):
    key = (sh.key(), score_graph.key() if score_graph else None,
           mask_graph.key() if mask_graph else None, KT_BYTES)
    kern = _KERNELS.get(key)
    if kern is None:
        kern = _KERNELS[key] = _build(sh, score_graph, mask_graph)
    return kern


def _build(sh, score_graph, mask_graph):
    import neuron
    import neuron.isa as nisa
    import neuron.language as nl
    ninf = -math.inf
    f32 = nl.float32
    graphs = [g for g in (score_graph, mask_graph) if g is not None]

    def uses(name):
        return any(g.uses(name) for g in graphs)
    need_kv = uses("kv_idx") or sh.S % sh.KB != 0
    need_bh = uses("b") or uses("h")
    need_caps = any(g.inputs for g in graphs)
    n_score = len(score_graph.inputs) if score_graph is not None else 0
    # Whether any captured read is not a plain load (the loads key_tile passes emit), so the
    # caps row must be broadcast over the partitions.
    need_caps_tile = need_caps and emit.reads_caps_row(
        score_graph, mask_graph, sh.caps_layout, (sh.B, sh.Hq, sh.L, sh.S), True,
        sh.S % sh.KB == 0)

    def T(x, dtype=None):  # Tensor-engine transpose (PSUM) back to SBUF, where matmul
        return nl.copy(nl.transpose(x), dtype=dtype)  # operands live

    # A power-of-two scale is exact in any float format, so Q^T can carry it even in bf16.
    exact_scale = math.frexp(sh.scale)[0] == 0.5

    @neuron.kernel
    def flex_forward(q, k, v, kn, ki, fn, fi, bh, caps, capsT, qpos):
        TRACES[0] += 1
        mm = operand_dtype(nl, q)  # bf16 operands for bf16 inputs; everything else is fp32
        prescale = mm == f32 or exact_scale
        out = nl.ndarray((sh.B * sh.Hq, sh.L, sh.Ev), f32 if sh.out_fp32 else q.dtype,
                         buffer=nl.shared_hbm, name="out")
        lse = nl.ndarray((sh.B * sh.Hq, sh.L, 1), f32, buffer=nl.shared_hbm, name="lse")
        mx = nl.ndarray((sh.B * sh.Hq, sh.L, 1), f32, buffer=nl.shared_hbm, name="max_scores")
        b = nl.program_id(0)
        hk = nl.program_id(1)
        g = nl.program_id(2)
        hq = (b * sh.Hkv + hk) * sh.G + g
        kvrow = (b if sh.Bk == sh.B else 0) * sh.Hkv + hk
        mrow = (b if sh.Bm > 1 else 0) * sh.Hm + ((hk * sh.G + g) if sh.Hm > 1 else 0)
        TQ, TK = sh.TQ, sh.TK
        zeros = nl.zeros((TQ, TK), f32, buffer=nl.sbuf)
        per_prog = {}  # index tiles fixed for the whole program
        if need_bh:
            bh_t = nl.broadcast_to(nl.load(bh[hq, :, :]), (TQ, 2))
            for j, name in enumerate(("b", "h")):
                if uses(name):
                    per_prog[name] = bh_t[:, j:j + 1]  # a column: ops broadcast it
        kv_base = None
        if need_kv:
            kv_base = nl.ndarray((TQ, TK), f32, buffer=nl.sbuf)
            nisa.iota(kv_base, [[1, TK]], offset=0, channel_multiplier=0)
        # The caps row on every partition, for the captured reads that are not plain loads
        # (gathers, per-program constants); a document mask's doc[q_idx] and doc[kv_idx] need
        # none (1 MB of broadcast per program at L = 2048).
        caps_t = nl.broadcast_to(nl.load(caps[0:1, :]), (TQ, caps.shape[1])) \
            if need_caps_tile else None
        consts = emit.program_constants(
            score_graph, mask_graph, sh.caps_layout, b, hk * sh.G + g,
            (sh.B, sh.Hq, sh.L, sh.S),
            lambda off: nl.broadcast_to(nl.load(caps[0:1, nl.ds(off, 1)]), (TQ, 1))) \
            if need_caps else {}
        # K^T for all keys, transposed once per program (the library's attention does the
        # same) when it fits; else per visited key tile.
        kT_all = whole_T(nl, k, kvrow, sh.nK * sh.KB, TK, sh.E, mm)
        counts = {"partial": nl.load(kn[mrow, :, :])}
        if sh.Wf is not None:
            counts["full"] = nl.load(fn[mrow, :, :])

        def query_tile(q0, qr, r):
            """One tile of qr queries from q0 (an int or a loop index) in block row r."""
            # Q^T pre-scaled once per tile: the scores come out of the matmul scaled.
            qT = chunked_T(nl, nl.load(q[hq, nl.ds(q0, qr), :], dtype=mm))
            if prescale:
                qT = [nl.multiply(c, sh.scale) for c in qT]
            m = nl.full((qr, 1), ninf, f32, buffer=nl.sbuf)
            l = nl.zeros((qr, 1), f32, buffer=nl.sbuf)
            acc = nl.zeros((qr, sh.Ev), f32, buffer=nl.sbuf)
            fixed = {n: t[0:qr, :] for n, t in per_prog.items()}
            if uses("q_idx"):
                fixed["q_idx"] = nl.load(qpos[nl.ds(q0, qr), :])  # a column, as b and h
            data = caps_t[0:qr, :] if need_caps_tile else None
            for kind in ("full", "partial"):
                if kind not in counts:
                    continue
                n = nisa.register_alloc()
                nisa.register_load(n, counts[kind][0:1, nl.ds(r, 1)])
                lists = ki if kind == "partial" else fi
                row = nl.load(lists[mrow, nl.ds(r, 1), :])  # [1, W] block indices
                kcol = None
                if need_kv:  # the first key of each listed block, on every partition
                    kcol = nl.broadcast_to(nl.multiply(nl.copy(row, dtype=f32), float(sh.KB)),
                                           (qr, lists.shape[2]))
                for jj in nl.dynamic_range(n):
                    blk = nisa.register_alloc()
                    nisa.register_load(blk, row[0:1, nl.ds(jj, 1)])
                    for sb in range(sh.KB // TK):
                        key_tile(kind, qT, m, l, acc, fixed, data, kv_base, kcol, jj,
                                 blk * sh.KB + sb * TK, sb, q0, qr)
            m_use = nl.where(nl.equal(m, ninf), 0.0, m)
            nl.store(out[hq, nl.ds(q0, qr), :],
                     nl.multiply(acc, nl.reciprocal(nl.maximum(l, 1e-30)), dtype=out.dtype))
            nl.store(lse[hq, nl.ds(q0, qr), :], nl.add(m_use, nl.log(l)))
            nl.store(mx[hq, nl.ds(q0, qr), :], m)

        def key_tile(kind, qT, m, l, acc, fixed, data, kv_base, kcol, jj, k0, sb, q0, qr):
            """Scores, mods and the online-softmax update for TK keys from row k0."""
            direct = None
            if need_caps:  # captured reads indexed by q_idx / kv_idx: plain loads (emit.py)
                direct = emit.direct_loads(
                    b, hk * sh.G + g, (sh.B, sh.Hq, sh.L, sh.S),
                    lambda off: nl.load(capsT[nl.ds(q0 + off, qr), :]),
                    None if sh.S % sh.KB else lambda off: nl.broadcast_to(
                        nl.load(caps[0:1, nl.ds(k0 + off, TK)]), (qr, TK)), consts)
            if kT_all is not None:
                kT = columns(nl, kT_all, k0, TK)
            else:
                kT = chunked_T(nl, nl.load(k[kvrow, nl.ds(k0, TK), :], dtype=mm))
            s = chunked_matmul(nl, nisa, qT, kT)
            if not prescale:  # scaled in fp32 (a bf16 Q^T * scale would round)
                s = nl.multiply(s, sh.scale)
            env = dict(fixed)
            kv = None
            # Key positions where a mod that runs on this tile reads them (a full block runs
            # no mask_mod) or the padding check needs them.
            if sh.S % sh.KB != 0 or (score_graph is not None and score_graph.uses("kv_idx")) or \
                    (kind == "partial" and mask_graph is not None and mask_graph.uses("kv_idx")):
                kv = nl.add(kv_base[0:qr, :], kcol[:, nl.ds(jj, 1)])
                if sb:
                    kv = nl.add(kv, float(sb * TK))
                # Padding keys of the last block: the mods see S - 1 (as on the host
                # path), the softmax sees -inf.
                env["kv_idx"] = kv if sh.S % sh.KB == 0 else nl.minimum(kv, float(sh.S - 1))
            if score_graph is not None:
                env["score"] = s
                res = emit.emit(score_graph, env, s, data, sh.caps_layout[:n_score], nl,
                                direct, zeros=zeros[0:qr, :])
                s = res if not isinstance(res, float) else nl.add(nl.multiply(s, 0.0), res)
            if kind == "partial" and mask_graph is not None:
                keep = emit.emit(mask_graph, env, s, data, sh.caps_layout[n_score:], nl,
                                 direct)  # a column stays one: the where below broadcasts it
                if isinstance(keep, float):
                    if not keep:
                        s = nl.add(nl.multiply(s, 0.0), ninf)
                else:
                    s = nl.where(keep, s, ninf)
            if sh.S % sh.KB != 0:
                s = nl.where(nl.less(kv, float(sh.S)), s, ninf)
            m_new = nl.maximum(m, nl.max(s, axis=1, keepdims=True))
            m_use = nl.where(nl.equal(m_new, ninf), 0.0, m_new)
            # exp(s - m) and its row sum (of the fp32 values) in one pass, p in the matmul
            # operand dtype: its transpose and the product then run natively as one product
            # reading p's rows (docs/native.md "Transposed matmuls"), bf16 included; a p in
            # fp32 converted on the transpose's copy was three passes.
            p = nl.ndarray((qr, TK), mm, buffer=nl.sbuf)
            rowsum = nl.ndarray((qr, 1), f32, buffer=nl.sbuf)
            nisa.activation(p, nl.exp, s, bias=nl.negative(m_use), reduce_op=nl.add,
                            reduce_res=rowsum)
            alpha = nl.exp(nl.subtract(m, m_use))
            l[...] = nl.add(nl.multiply(l, alpha), rowsum)
            vt = nl.load(v[kvrow, nl.ds(k0, TK), :], dtype=mm)
            pv = nl.matmul(T(p), vt, transpose_x=True)
            acc[...] = nl.add(nl.multiply(acc, alpha), pv)
            m[...] = m_new

        # Whole block rows in one rolled loop (its body traced once), then the last
        # partial row's tiles one by one (their sizes differ).
        sub = sh.QB // TQ  # query tiles per block row
        full_rows = sh.L // sh.QB
        if full_rows:
            for r in nl.affine_range(full_rows):
                for t in range(sub):
                    query_tile(r * sh.QB + t * TQ, TQ, r)
        q0 = full_rows * sh.QB
        while q0 < sh.L:
            query_tile(q0, min(TQ, sh.L - q0), full_rows)
            q0 += TQ
        return out, lse, mx

    return flex_forward


def _captured(graphs):
    """The captured tensors of the graphs as one [1, N] fp32 row, and ((offset, shape), ...)."""
    parts, layout, off = [], [], 0
    for t in (t for g in graphs if g is not None for t in g.inputs):
        t = t.detach()
        parts.append(t.reshape(-1).to(torch.float32))
        layout.append((off, tuple(t.shape)))
        off += t.numel()
    if not parts:
        return torch.zeros(1, 1), ()
    return torch.cat(parts).reshape(1, -1), tuple(layout)


def forward(q, k, v, block_mask, score_graph, mask_graph, scale, simulate=False,
            out_fp32=False):
    """out [B, Hq, L, Ev] (q's dtype; fp32 with out_fp32), lse and max_scores [B, Hq, L]
    fp32 through the neuron kernel."""
    import neuron
    q, k, v = q.detach(), k.detach(), v.detach()
    B, Hq, L, E = q.shape
    Bk, Hkv, S, Ev = v.shape
    QB, KB, kn, ki, fn, fi, Bm, Hm = block_lists(block_mask, B, Hq, L, S)
    caps, layout = _captured((score_graph, mask_graph))
    sh = Shape(q, v, QB, KB, kn, ki, fi, Bm, Hm, scale, layout,
               out_fp32 and q.dtype != torch.float32)
    kern = get_kernel(sh, score_graph, mask_graph)
    grid = kern[B, Hkv, sh.G]
    if simulate:
        grid = neuron.simulate(grid)
    pad = sh.nK * KB - S  # key rows up to whole blocks: a block is loaded whole

    def kv_rows(t):
        t = t.contiguous().reshape(-1, S, t.shape[3])
        return torch.nn.functional.pad(t, (0, 0, 0, pad)) if pad else t
    bh = torch.stack(torch.meshgrid(torch.arange(B), torch.arange(Hq), indexing="ij"), -1)
    bh = bh.reshape(B * Hq, 1, 2).to(torch.float32)
    if fn is None:
        fn, fi = torch.zeros(1, 1, 1, dtype=torch.int32), torch.zeros(1, 1, 1, dtype=torch.int32)
    qpos = torch.arange(L, dtype=torch.float32).reshape(L, 1)
    out, lse, mx = grid(q.contiguous().reshape(-1, L, E), kv_rows(k), kv_rows(v), kn, ki, fn,
                        fi, bh, caps, caps.reshape(-1, 1), qpos)
    out, lse, mx = (torch.as_tensor(t) for t in (out, lse, mx))
    return out.reshape(B, Hq, L, Ev), lse.reshape(B, Hq, L), mx.reshape(B, Hq, L)
