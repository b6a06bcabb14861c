"""DMA read-modify-write, composed of the DMA and Vector instructions neuron has (NKI_API.md
4.3 `nl.atomic_rmw`, 4.9 `nisa.dma_copy(dst_rmw_op=np.add)`, 6.5 `nisa.dma_compute`).

NKI's DMA engines add in fp32 on the way to the destination; here the sum is spelled out:
the destination rows are read into an fp32 SBUF tile, the addend is added by a `tensor_tensor`,
and the sum is written back (cast to the destination's dtype). The values are NKI's; the timing
model sees a gather, an add and a scatter where NKI issues one DMA.

Duplicate rows. `t[idx_tile[i_p, 0], i_f] += v` must apply every partition's row even when
two partitions name the same row (NKI: "the compiler adds synchronization"). One gather and
one scatter would lose all but one of them (both partitions read the old row), so the atomic
form works one partition at a time, in partition order: per partition p, a DMA moves v's row p
to partition 0 (Vector instructions on one partition must start at partition 0, 32, 64 or 96),
a one-row indirect DMA reads the destination row idx[p], an add, and a one-row indirect DMA
writes it back. That is 4 instructions per partition (512 for a 128-row tile), each DMA
waiting on the previous write to the tensor: correct for any indices, slow. The result is
exactly sequential application (np.add.at's), bit for bit. `dma_compute(unique_indices=True)`
(its default: the caller promises distinct rows) takes the fast form, one gather, one add and
one scatter; given duplicate rows anyway, only one of each duplicate set is applied."""
from . import _C
from . import eager as _eager
from ._span import user_span
from .access import IndirectView
from .errors import user_error
from .reshaped import dma_operand

_F32 = _C.DType.float32
_SBUF = _C.Memory.sbuf


def fp32_tile(shape, span):
    return _C.ndarray(list(shape), _F32, _SBUF, "", span)


def on_chip(x, oob, span):
    """x as an operand of a Vector instruction: a PSUM or SBUF tile in place; an HBM view
    loaded into an fp32 tile (the DMA casts); indirect rows gathered into one (rows that
    oob_mode.skip drops read as 0, adding nothing)."""
    if is_indirect(x):
        t = fp32_tile(x.shape, span)
        if oob == _C.oob_mode.skip:
            _C.memset(t, 0.0, span)
        _C.dma_copy_rows(t, x.view, x.rows, True, oob, span)
        return t
    if x.buffer in (_SBUF, _C.Memory.psum):
        return x
    t = fp32_tile(x.shape, span)
    _C.dma_copy(t, dma_operand(x, t, "dma_compute", span), span)  # a Reshaped: its base view
    return t


def add_rows(dst, addend, oob, atomic, span):
    """dst (an IndirectView: HBM rows chosen by an index tile) += addend (a tile of dst's
    shape), in fp32; atomic: every partition applied, in partition order (see the module doc);
    rows out of range follow oob (oob_mode.skip leaves them alone)."""
    view, rows = dst.view, dst.rows
    if not atomic:
        g = fp32_tile(dst.shape, span)
        _C.dma_copy_rows(g, view, rows, True, oob, span)
        _C.tensor_tensor(g, g, addend, "add", span)
        _C.dma_copy_rows(view, g, rows, False, oob, span)
        return
    addend = _sbuf(addend, span)
    one = [1] + list(dst.shape[1:])
    for p in range(dst.shape[0]):
        v = fp32_tile(one, span)
        _C.dma_copy(v, addend[p:p + 1], span)
        g = fp32_tile(one, span)
        row = rows[p:p + 1]
        _C.dma_copy_rows(g, view, row, True, oob, span)
        _C.tensor_tensor(g, g, v, "add", span)
        _C.dma_copy_rows(view, g, row, False, oob, span)


def add_into(dst, addend, span):
    """dst (an HBM view or a tile; not indirect) += addend, in fp32 (no duplicates possible)."""
    if dst.buffer in (_SBUF, _C.Memory.psum):
        _C.tensor_tensor(dst, dst, addend, "add", span)
        return
    g = fp32_tile(dst.shape, span)
    _C.dma_copy(g, dst, span)
    _C.tensor_tensor(g, g, addend, "add", span)
    _C.dma_copy(dst, g, span)


def is_indirect(x):
    return isinstance(x, IndirectView)


def check_shape(x, dst, what, span):
    if list(x.shape) != list(dst.shape):
        user_error("shape", f"{what}: the value has shape {list(x.shape)} but the destination "
                   f"'{dst.name}' has shape {list(dst.shape)}", span)


@_eager.op(writes=("dst",))
def accumulate(dst, value, oob_mode=_C.oob_mode.error, atomic=True):
    """dst += value (a tile or HBM view of dst's shape), in fp32: the legacy API's
    nl.atomic_rmw(op=np.add) and nisa.dma_copy(dst_rmw_op=np.add). dst may be indirect rows
    (an IndirectView); atomic: duplicate rows all applied (the module doc)."""
    span = user_span()
    check_shape(value, dst, "accumulate", span)
    if is_indirect(dst):
        add_rows(dst, on_chip(value, oob_mode, span), oob_mode, atomic, span)
    else:
        add_into(dst, on_chip(value, oob_mode, span), span)


# ---- nisa.dma_compute (current API) ----------------------------------------------------------

MAX_SRCS = 16  # NKI: at most 16 source tensors


def _same_rows(a, b):
    """Whether indirect views a and b are the same rows of the same tensor (by name: in eager
    mode they are distinct objects around the same arrays)."""
    return (a.name == b.name and a.rows.name == b.rows.name and
            list(a.shape) == list(b.shape))


def dma_compute(dst, srcs, reduce_op, scales=None, unique_indices=True,
                oob_mode=_C.oob_mode.error, name=None):
    """dst = srcs[0] + srcs[1] + ... in fp32, cast to dst's dtype (NKI: dst = reduce_op over
    srcs[i] * scales[i], with reduce_op nl.add and every scale 1.0 the only values allowed).
    dst is written, not read: read-modify-write passes dst among the srcs. With indirect rows
    (t.ap(..., vector_offset=idx)): scatter RMW, dst = t.ap(..., vector_offset=idx) and srcs =
    [that same view, an SBUF tile]; gather RMW, dst an SBUF tile and srcs = [dst,
    t.ap(..., vector_offset=idx)]. unique_indices=True (the default) promises distinct rows in
    a scatter RMW; False applies duplicate rows one after another (slow: module doc).
    oob_mode.skip leaves out-of-range rows of dst alone and reads them as 0 in a gather."""
    from .isa import _op
    span = user_span()
    if isinstance(oob_mode, int) and not isinstance(oob_mode, _C.oob_mode):
        oob_mode = _C.oob_mode(int(oob_mode))
    if not isinstance(srcs, (list, tuple)):
        srcs = [srcs]
    srcs = list(srcs)
    if not 1 <= len(srcs) <= MAX_SRCS:
        user_error("dma-compute", f"dma_compute: {len(srcs)} sources given; it takes 1 to "
                   f"{MAX_SRCS}", span)
    op = _op(reduce_op)
    if op != "add":
        user_error("reduce-op", f"dma_compute: reduce_op={op!r} is not supported; the DMA "
                   "engines only add (reduce_op=nl.add)", span)
    if scales is not None:
        scales = list(scales) if isinstance(scales, (list, tuple)) else [scales]
        if len(scales) != len(srcs):
            user_error("dma-compute", f"dma_compute: {len(scales)} scales for {len(srcs)} "
                       "sources", span)
        bad = [(i, s) for i, s in enumerate(scales) if float(s) != 1.0]
        if bad:
            user_error("dma-compute", f"dma_compute: scales[{bad[0][0]}] = {bad[0][1]}; every "
                       "scale must be 1.0 (or scales=None)", span)
    for i, s in enumerate(srcs):
        if is_indirect(dst) and is_indirect(s) and not _same_rows(s, dst):
            user_error("indirect-dma", f"dma_compute: srcs[{i}] selects rows of '{s.name}' by "
                       f"'{s.rows.name}' but dst selects rows of '{dst.name}' by "
                       f"'{dst.rows.name}'; a scatter read-modify-write reads dst's own rows "
                       "(pass the same view as dst and as one source)", span)
        if list(s.shape) != list(dst.shape):
            user_error("shape", f"dma_compute: srcs[{i}] has shape {list(s.shape)} but dst "
                       f"has shape {list(dst.shape)}", span)
    if dst.shape[0] > 128:
        user_error("shape", f"dma_compute: dst has {dst.shape[0]} rows; the sum is formed in "
                   "SBUF, at most 128 partitions (split the call)", span)
    _compute(dst, srcs, oob_mode, not unique_indices)


@_eager.op(writes=("dst",))
def _compute(dst, srcs, oob_mode, atomic):
    span = user_span()
    if is_indirect(dst):  # dst's own rows among srcs: read them once, at the scatter
        reads_dst = any(is_indirect(s) for s in srcs)
        others = [s for s in srcs if not is_indirect(s)]
        if not others:  # dst[idx] = dst[idx]: nothing changes
            return
        addend = _total([on_chip(s, oob_mode, span) for s in others], dst.shape, span)
        if reads_dst:
            add_rows(dst, addend, oob_mode, atomic, span)
        else:
            _C.dma_copy_rows(dst.view, _sbuf(addend, span), dst.rows, False, oob_mode, span)
        return
    terms = [on_chip(s, oob_mode, span) for s in srcs]
    if dst.buffer == _SBUF or dst.buffer == _C.Memory.psum:
        if len(terms) == 1:
            _C.tensor_copy(dst, terms[0], span)
            return
        acc = _total(terms[:-1], dst.shape, span)
        _C.tensor_tensor(dst, acc, terms[-1], "add", span)
        return
    total = _sbuf(_total(terms, dst.shape, span), span)
    _C.dma_copy(dma_operand(dst, total, "dma_compute", span), total, span)


def _sbuf(t, span):
    """t, or an SBUF copy of a PSUM t (a DMA does not read PSUM)."""
    if t.buffer == _SBUF:
        return t
    a = fp32_tile(t.shape, span)
    _C.tensor_copy(a, t, span)
    return a


def _total(terms, shape, span):
    """The fp32 sum of the on-chip terms, left to right (the one term itself when alone)."""
    if len(terms) == 1:
        return terms[0]
    acc = fp32_tile(shape, span)
    _C.tensor_tensor(acc, terms[0], terms[1], "add", span)
    for t in terms[2:]:
        _C.tensor_tensor(acc, acc, t, "add", span)
    return acc
