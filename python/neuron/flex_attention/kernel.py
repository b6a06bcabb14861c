"""The FlexAttention forward as a neuron kernel (`@neuron.kernel`), for the native backend and
the simulator: the traced score_mod / mask_mod are emitted as nl tile operations inside a
flash-attention loop.

Tiling (the kernel library's flash attention, kernels/attention.hpp): one SPMD program per
(batch, kv head, query head of the group); per tile of up to 128 queries, Q^T [E, 128] once;
per key block of up to 128 keys: K^T by a Tensor-engine transpose, scores [128, 128] =
nc_matmul(Q^T, K^T) in PSUM, scale, score_mod on the tile (index tiles from iota), mask_mod
only on partial blocks, online softmax in fp32 (row max, exp with the running max, row sum,
rescale), p^T by transpose, acc += p @ V. Rows that see no key give 0 and lse -inf.

Limits of this version (the caller checks `lowerable` and otherwise runs the torch path):
- the block structure is static: the visited blocks of each query tile are unrolled at trace
  time from the BlockMask (one that is the same for every batch and head), so a different
  mask pattern is a different kernel (the compile cache keys on the IR);
- mods may use score, q_idx, kv_idx, Python scalars, arithmetic, comparisons, where, &, |, ~
  and unary math; not b or h, captured tensors, // or % (torch path);
- forward only; the backward of a call that needs gradients uses the torch path.
"""
import math

import numpy as np
import torch

_BIN = {"add": "add", "sub": "subtract", "mul": "multiply", "truediv": "divide",
        "minimum": "minimum", "maximum": "maximum", "eq": "equal", "ne": "not_equal",
        "lt": "less", "le": "less_equal", "gt": "greater", "ge": "greater_equal"}
_UN = {"neg": "negative", "abs": "abs", "exp": "exp", "log": "log", "tanh": "tanh",
       "sin": "sin", "cos": "cos", "sigmoid": "sigmoid", "sqrt": "sqrt", "rsqrt": "rsqrt",
       "relu": "relu", "square": "square"}
_OK = set(_BIN) | set(_UN) | {"arg", "const", "where", "and", "or", "not", "cast"}


def lowerable(graph):
    """None when the graph can be emitted as nl operations, else the reason."""
    if graph is None:
        return None
    for n in graph.nodes:
        if n.op == "arg" and n.args[0] in ("b", "h") and graph.uses(n.args[0]):
            return f"the mod uses {n.args[0]}"
        if n.op not in _OK:
            return f"operation {n.op}"
        if n.op == "cast" and n.args[1] not in ("torch.float32", "torch.float64", "torch.bool"):
            return f"a cast to {n.args[1]}"
    return None


def _emit(graph, env, nl):
    """Emits the graph with env: arg name -> tile or number; returns a tile or number.
    Booleans are 0.0 / 1.0 tiles."""
    vals = {}
    for n in graph.nodes:
        if n.op == "arg":
            vals[n.id] = env.get(n.args[0])
            continue
        if n.op == "const":
            vals[n.id] = float(n.args[0])
            continue
        a = [vals[x.id] for x in n.args if hasattr(x, "op")]
        nums = all(isinstance(x, float) for x in a)
        if n.op == "cast":
            x = a[0]
            vals[n.id] = (float(x != 0) if nums else nl.not_equal(x, 0.0)) \
                if n.args[1] == "torch.bool" else x
        elif n.op == "where":
            c, x, y = a
            if isinstance(c, float):
                vals[n.id] = x if c else y
            else:
                if isinstance(x, float) and isinstance(y, float):
                    x = nl.add(nl.multiply(c, 0.0), x)
                vals[n.id] = nl.where(c, x, y)
        elif n.op == "and":
            vals[n.id] = float(bool(a[0]) and bool(a[1])) if nums else nl.multiply(a[0], a[1])
        elif n.op == "or":
            vals[n.id] = float(bool(a[0]) or bool(a[1])) if nums else nl.maximum(a[0], a[1])
        elif n.op == "not":
            vals[n.id] = float(not a[0]) if nums else nl.subtract(1.0, a[0])
        elif n.op in _BIN:
            if nums:
                vals[n.id] = float(_py_bin(n.op, a[0], a[1]))
            else:
                vals[n.id] = getattr(nl, _BIN[n.op])(a[0], a[1])
        elif n.op in _UN:
            if nums:
                vals[n.id] = float(getattr(torch, n.op if n.op != "neg" else "neg")(
                    torch.tensor(a[0], dtype=torch.float64)))
            else:
                vals[n.id] = getattr(nl, _UN[n.op])(a[0])
        else:  # pragma: no cover - lowerable() refused it
            raise AssertionError(n.op)
    return vals[graph.output.id]


def _py_bin(op, x, y):
    import operator as o
    f = {"add": o.add, "sub": o.sub, "mul": o.mul, "truediv": o.truediv, "minimum": min,
         "maximum": max, "eq": o.eq, "ne": o.ne, "lt": o.lt, "le": o.le, "gt": o.gt,
         "ge": o.ge}[op]
    return f(x, y)


def static_rows(block_mask, L, S):
    """Per query tile of 128: [(k0, kr, full)] from a BlockMask broadcast over batch and
    heads, with 128 x 128 blocks; None when the mask does not fit that form."""
    if block_mask is None:
        nQ, nK = -(-L // 128), -(-S // 128)
        return [[(j * 128, min(128, S - j * 128), True) for j in range(nK)] for _ in range(nQ)]
    if tuple(block_mask.BLOCK_SIZE) != (128, 128):
        return None
    kn, ki = block_mask.kv_num_blocks, block_mask.kv_indices
    if kn.shape[0] != 1 or kn.shape[1] != 1:
        return None
    fn, fi = block_mask.full_kv_num_blocks, block_mask.full_kv_indices
    rows = []
    for i in range(kn.shape[2]):
        blocks = []
        if fn is not None:
            blocks += [(int(j), True) for j in fi[0, 0, i, :int(fn[0, 0, i])]]
        blocks += [(int(j), False) for j in ki[0, 0, i, :int(kn[0, 0, i])]]
        rows.append([(j * 128, min(128, S - j * 128), full) for j, full in sorted(blocks)])
    return rows


_KERNELS = {}


def get_kernel(rows, score_graph, mask_graph, B, Bk, Hkv, G, L, S, E, Ev, scale):
    import neuron
    import neuron.isa as nisa
    import neuron.language as nl
    key = (repr(rows), score_graph.key() if score_graph else None,
           mask_graph.key() if mask_graph else None, B, Bk, Hkv, G, L, S, E, Ev, repr(scale))
    if key in _KERNELS:
        return _KERNELS[key]
    ninf = -math.inf

    def index_tiles(q0, qr, k0, kr, want_q, want_kv):
        env = {}
        if want_q:
            t = nl.ndarray((qr, kr), nl.float32, buffer=nl.sbuf)
            nisa.iota(t, [[0, kr]], offset=q0, channel_multiplier=1)
            env["q_idx"] = t
        if want_kv:
            t = nl.ndarray((qr, kr), nl.float32, buffer=nl.sbuf)
            nisa.iota(t, [[1, kr]], offset=k0, channel_multiplier=0)
            env["kv_idx"] = t
        return env

    s_q = score_graph is not None and score_graph.uses("q_idx")
    s_kv = score_graph is not None and score_graph.uses("kv_idx")
    m_q = mask_graph is not None and mask_graph.uses("q_idx")
    m_kv = mask_graph is not None and mask_graph.uses("kv_idx")

    def T(x):  # Tensor-engine transpose (PSUM) back to SBUF, where matmul operands live
        return nl.copy(nl.transpose(x))

    @neuron.kernel
    def flex_forward(q, k, v):
        out = nl.ndarray((B * Hkv * G, L, Ev), q.dtype, buffer=nl.shared_hbm, name="out")
        lse = nl.ndarray((B * Hkv * G, L, 1), nl.float32, buffer=nl.shared_hbm, name="lse")
        b = nl.program_id(0)
        hk = nl.program_id(1)
        hq = (b * Hkv + hk) * G + nl.program_id(2)
        kvrow = (b if Bk == B else 0) * Hkv + hk
        for i, blocks in enumerate(rows):
            q0 = i * 128
            qr = min(128, L - q0)
            qT = T(nl.load(q[hq, q0:q0 + qr, :], dtype=nl.float32))
            m = nl.full((qr, 1), ninf, nl.float32, buffer=nl.sbuf)
            l = nl.zeros((qr, 1), nl.float32, buffer=nl.sbuf)
            acc = nl.zeros((qr, Ev), nl.float32, buffer=nl.sbuf)
            for (k0, kr, full) in blocks:
                kT = T(nl.load(k[kvrow, k0:k0 + kr, :], dtype=nl.float32))
                s = nl.multiply(nl.matmul(qT, kT, transpose_x=True), scale)
                if score_graph is not None:
                    env = index_tiles(q0, qr, k0, kr, s_q, s_kv)
                    env["score"] = s
                    r = _emit(score_graph, env, nl)
                    s = r if not isinstance(r, float) else nl.add(nl.multiply(s, 0.0), r)
                if not full and mask_graph is not None:
                    keep = _emit(mask_graph, index_tiles(q0, qr, k0, kr, m_q, m_kv), nl)
                    if isinstance(keep, float):
                        if not keep:
                            s = nl.add(nl.multiply(s, 0.0), ninf)
                    else:
                        s = nl.where(keep, s, ninf)
                m_new = nl.maximum(m, nl.max(s, axis=1, keepdims=True))
                m_use = nl.where(nl.equal(m_new, ninf), 0.0, m_new)
                p = nl.exp(nl.subtract(s, m_use))
                alpha = nl.exp(nl.subtract(m, m_use))
                l = nl.add(nl.multiply(l, alpha), nl.sum(p, axis=1, keepdims=True))
                vt = nl.load(v[kvrow, k0:k0 + kr, :], dtype=nl.float32)
                pv = nl.matmul(T(p), vt, transpose_x=True)
                acc = nl.add(nl.multiply(acc, alpha), pv)
                m = m_new
            m_use = nl.where(nl.equal(m, ninf), 0.0, m)
            nl.store(out[hq, q0:q0 + qr, :],
                     nl.divide(acc, nl.maximum(l, 1e-30), dtype=q.dtype))
            nl.store(lse[hq, q0:q0 + qr, :], nl.add(m_use, nl.log(l)))
        return out, lse

    _KERNELS[key] = flex_forward
    return flex_forward


def forward(q, k, v, rows, score_graph, mask_graph, scale, simulate=False):
    """out [B, Hq, L, Ev] (q's dtype), lse [B, Hq, L] fp32 through the neuron kernel."""
    import neuron
    B, Hq, L, E = q.shape
    Bk, Hkv, S, Ev = v.shape
    G = Hq // Hkv
    kern = get_kernel(rows, score_graph, mask_graph, B, Bk, Hkv, G, L, S, E, Ev, float(scale))
    grid = kern[B, Hkv, G]
    if simulate:
        grid = neuron.simulate(grid)
    args = [t.contiguous().reshape(-1, t.shape[2], t.shape[3]) for t in (q, k, v)]
    out, lse = grid(*args)
    out = torch.as_tensor(np.asarray(out)) if not isinstance(out, torch.Tensor) else out
    lse = torch.as_tensor(np.asarray(lse)) if not isinstance(lse, torch.Tensor) else lse
    return out.reshape(B, Hq, L, Ev), lse.reshape(B, Hq, L)
