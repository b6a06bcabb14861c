"""neuronxcc.nki.isa (legacy NKI, import as nisa): value-returning ISA calls. Each allocates its
result tile (shape, dtype and buffer of the legacy form) with nl.ndarray and calls the current
destination-first neuron.isa instruction on it; mask= shrinks the instruction to the mask's
rectangle (docs/nki-compat.md). engine= and name= are accepted and ignored; other unknown
keywords are errors (keywords.py)."""
import enum
import math
import types

from .. import _C
from .. import dma_rmw as _rmw
from .. import isa as _isa
from .. import language as _nl
from ..access import IndirectView as _IndirectView
from . import language as _lnl
from .grid import Cmp as _Cmp, Grid as _Grid, Mask as _Mask
from .grid import broadcast_shapes as _broadcast_shapes, const_int as _const_int
from .grid import error as _error, is_scalar_index as _is_scalar_index
from .mask import rectangle as _rectangle
from .deferred import Deferred as _Deferred, wrap_module as _wrap_module
from .keywords import NISA as _NISA
from .ops import is_full as _is_full, pad_trailing as _pad_trailing
from .ops import matmul_parts as _matmul_parts, new_like as _new_like
from .ops import operand as _operand, promote as _promote, reduced as _reduced
from .views import concrete as _concrete, index_rect as _index_rect, is_view as _is_view
from .views import mark_partial as _mark_partial, mask_rect as _mask_rect
from .views import restrict as _restrict


class engine(enum.IntEnum):
    unknown = 0
    tensor = 1
    scalar = 2
    gpsimd = 3
    vector = 5
    sync = 6


unknown_engine, tensor_engine, scalar_engine, gpsimd_engine, vector_engine, sync_engine = (
    engine.unknown, engine.tensor, engine.scalar, engine.gpsimd, engine.vector, engine.sync)
# load_reduce: the current API's, which recent neuronxcc releases also take (the NKI docs'
# legacy examples of tensor_scalar_cumulative use it)
reduce_cmd = enum.IntEnum("reduce_cmd", {"idle": 0, "reset": 1, "reduce": 2, "reset_reduce": 3,
                                         "load_reduce": 4})
dge_mode = enum.IntEnum("dge_mode", {"none": 0, "swdge": 1, "hwdge": 2, "unknown": 3})
oob_mode = enum.IntEnum("oob_mode", {"error": 0, "skip": 1})
nc_version = enum.IntEnum("nc_version", {"gen2": 2, "gen3": 3})
# neuronxcc.nki.isa.constants (`from neuronxcc.nki.isa.constants import dge_mode`)
constants = types.ModuleType(__name__ + ".constants", "nki.isa.constants: the ISA's enums")
for _enum in (engine, reduce_cmd, dge_mode, oob_mode, nc_version):
    setattr(constants, _enum.__name__, _enum)


def get_nc_version():
    return nc_version.gen3  # neuron compiles for trn2 (NeuronCore-v3)


# ---- operators: nl functions, numpy ufuncs, or names -------------------------------------------

_NUMPY = {"absolute": "abs", "fabs": "abs", "amax": "max", "amin": "min", "true_divide": "divide",
          "sum": "add"}
_ACT = set(_lnl._UNARY) | {"copy"}


def _name(f, what="op"):
    n = f if isinstance(f, str) else getattr(f, "name", None)
    if not isinstance(n, str):
        n = getattr(f, "__name__", None)
    if not isinstance(n, str):
        _error("unknown-arg", f"{what} must be an nl function or a NumPy ufunc, got {f!r}")
    return _NUMPY.get(n, n)


def _act(op):
    n = _name(op)
    if n not in _ACT:
        _error("unsupported", f"activation function '{n}' is not supported (supported: "
               f"{', '.join(sorted(_ACT))})")
    return n


def _tile(x, what):
    return _concrete(_operand(x, what))


def _column(v, rect, what):
    """A [P, 1] operand (tile or number) restricted to the rows of rect."""
    if v is None or not _is_view(v):
        return v
    return _index_rect(_tile(v, what), [rect[0], (0, 1)])


def _begin(x, mask, dtype, buffer=_nl.sbuf, shape=None):
    """(result tile, rect) for an op over x's index space; rect None: dropped."""
    shape = list(x.shape) if shape is None else shape
    dst = _new_like(shape, x.dtype if dtype is None else _nl.to_dtype(dtype), buffer)
    return dst, _rectangle(mask, shape)


def _done(dst, rect):
    return _mark_partial(dst, rect)


def _direct(x, mask, dtype, emit):
    """An unmasked element-wise call's result, not emitted yet: `dst[...] = nisa.f(...)` writes
    it straight into dst when dst is an SBUF view of its shape and dtype (deferred.py), with no
    fresh tile and no copy; used any other way it is a fresh tile as before. None when masked."""
    if mask is not None:
        return None
    return _Deferred(list(x.shape), x.dtype if dtype is None else _nl.to_dtype(dtype), _nl.sbuf,
                     emit)


# ---- matrix instructions -----------------------------------------------------------------------

def nc_matmul(stationary, moving, *, is_stationary_onezero=False, is_moving_onezero=False,
              is_transpose=False, tile_position=(), tile_size=(), mask=None, perf_mode=None,
              **kwargs):
    """stationary[K, M].T @ moving[K, N] -> a new PSUM fp32 [M, N] tile. is_transpose=True
    (moving an identity): stationary.T exactly, in stationary's dtype (nc_transpose here)."""
    if is_transpose:  # mask= over the [F, P] result, as nc_transpose's
        return nc_transpose(stationary, mask=mask)
    if perf_mode in ("double_row", "double_row_gen3"):
        return _double_row(stationary, moving, mask)
    if perf_mode not in (None, "", "none"):
        _error("unsupported", f"nc_matmul(perf_mode={perf_mode!r}) is not supported")
    st, mv, sr, mr, mn, out = _matmul_parts(stationary, moving, True, mask)
    if out is not None and _is_full(out, mn):  # written straight into its destination
        s, m = _index_rect(st, sr), _index_rect(mv, mr)
        return _Deferred(mn, _nl.float32, _nl.psum,
                         lambda d: _isa.nc_matmul(d, s, m, accumulate=False),
                         lambda d: _isa.nc_matmul(d, s, m))  # += : first overwrites, then adds
    dst = _new_like(mn, _nl.float32, _nl.psum)
    if out is not None:
        _isa.nc_matmul(_index_rect(dst, out), _index_rect(st, sr), _index_rect(mv, mr),
                       accumulate=False)
    return _done(dst, out)


def _double_row(stationary, moving, mask):
    """perf_mode="double_row": stationary [K, 2, M] and moving [K, 2, N] (two rows of the
    contraction per partition, as nki-samples' fp8 double-row matmul packs them) contract over
    both: stationary[:, 0].T @ moving[:, 0] + stationary[:, 1].T @ moving[:, 1], two matmuls
    into one PSUM tile."""
    if mask is not None:
        _error("unsupported", "nc_matmul(perf_mode='double_row', mask=...) is not supported")
    st, mv = _tile(stationary, "nisa.nc_matmul"), _tile(moving, "nisa.nc_matmul")
    if len(st.shape) != 3 or len(mv.shape) != 3 or st.shape[1] != 2 or mv.shape[1] != 2 or \
            st.shape[0] != mv.shape[0]:
        _error("shape", f"nc_matmul(perf_mode='double_row') takes stationary [K, 2, M] and "
               f"moving [K, 2, N], got {list(st.shape)} and {list(mv.shape)}")
    rows = [(st[:, r, :], mv[:, r, :]) for r in (0, 1)]

    def emit(d, first_accumulates):
        for r, (s, m) in enumerate(rows):
            _isa.nc_matmul(d, s, m, accumulate=first_accumulates or r > 0)
    return _Deferred([st.shape[2], mv.shape[2]], _nl.float32, _nl.psum,
                     lambda d: emit(d, False), lambda d: emit(d, True))


def nc_transpose(data, *, mask=None, dtype=None, engine=None, **kwargs):
    """[P, F] -> [F, P] (PSUM), the free dims of a tile of more flattened first; dtype= adds a
    cast into SBUF."""
    x = _tile(data, "nisa.nc_transpose")
    if len(x.shape) < 2:
        _error("unsupported", f"nc_transpose takes a tile of 2 or more dims, got {list(x.shape)}")
    if len(x.shape) > 2:  # a view of the same elements when they are one run per partition
        x = x.reshape((x.shape[0], math.prod(x.shape[1:])))
    if x.buffer == _nl.psum:
        x = _nl.copy(x)
    p, f = x.shape
    if mask is None and (dtype is None or _nl.to_dtype(dtype) == x.dtype):
        return _Deferred([f, p], x.dtype, _nl.psum, lambda d: _isa.nc_transpose(d, x))
    dst, rect = _begin(x, mask, None, _nl.psum, [f, p])
    if rect is not None:
        _isa.nc_transpose(_index_rect(dst, rect), _index_rect(x, [rect[1], rect[0]]))
    if dtype is None or _nl.to_dtype(dtype) == x.dtype:
        return _done(dst, rect)
    cast = _new_like([f, p], _nl.to_dtype(dtype))
    if rect is not None:
        _isa.tensor_copy(_index_rect(cast, rect), _index_rect(dst, rect))
    return _done(cast, rect)


# ---- element-wise instructions -----------------------------------------------------------------

def activation(op, data, *, bias=None, scale=1.0, reduce_op=None, reduce_res=None,
               reduce_cmd=None, mask=None, dtype=None, **kwargs):
    """op(data * scale + bias); with reduce_res, its [P, 1] sum over the free axes.
    reduce_cmd reset (1), reduce (2) and reset_reduce (3) chain the Scalar engine's
    accumulator registers as the current API's activation does."""
    chained = reduce_cmd not in (None, 0)
    x = _tile(data, "nisa.activation")
    if reduce_res is None and not chained and (bias is None or _is_view(bias)):
        full = [(0, n) for n in x.shape]
        f, sc, b = _act(op), _column(scale, full, "scale"), _column(bias, full, "bias")
        d = _direct(x, mask, dtype, lambda dst: _isa.activation(dst, f, x, bias=b, scale=sc))
        if d is not None:
            return d
    dst, rect = _begin(x, mask, dtype)
    if rect is None:
        return _done(dst, None)
    if bias is not None and not _is_view(bias):
        bias = _nl.full([x.shape[0], 1], float(bias), _nl.float32) if float(bias) else None
    _isa.activation(_index_rect(dst, rect), _act(op), _index_rect(x, rect),
                    bias=_column(bias, rect, "bias"), scale=_column(scale, rect, "scale"),
                    reduce_op=None if reduce_op is None else _name(reduce_op),
                    reduce_res=_column(reduce_res, rect, "reduce_res"),
                    reduce_cmd=reduce_cmd if chained else None)
    return _done(dst, rect)


def activation_reduce(op, data, *, reduce_op, reduce_res, bias=None, scale=1.0, mask=None,
                      dtype=None, **kwargs):
    return activation(op, data, bias=bias, scale=scale, reduce_op=reduce_op,
                      reduce_res=reduce_res, mask=mask, dtype=dtype)


def tensor_tensor(data1, data2, op, *, dtype=None, mask=None, engine=None, **kwargs):
    a, b = _tile(data1, "nisa.tensor_tensor"), _tile(data2, "nisa.tensor_tensor")
    a, b = _trailing_broadcast(a, b), _trailing_broadcast(b, a)
    if _is_column_of(b, a) or _is_column_of(a, b):
        # A [P, 1] operand against [P, F] (nki-samples' double-row matmul scales its result
        # rows so): the per-partition scalar of tensor_scalar, the same single operation.
        x, col = (a, b) if _is_column_of(b, a) else (b, a)
        return tensor_scalar(x, op, col, reverse0=col is a, dtype=dtype or
                             _promote(a.dtype, b.dtype), mask=mask)
    if list(a.shape) == list(b.shape):
        n = _name(op)
        d = _direct(a, mask, dtype or _promote(a.dtype, b.dtype),
                    lambda dst: _isa.tensor_tensor(dst, a, b, n))
        if d is not None:
            return d
    dst, rect = _begin(a, mask, dtype or _promote(a.dtype, b.dtype))
    if rect is not None:
        _isa.tensor_tensor(_index_rect(dst, rect), _index_rect(a, rect), _index_rect(b, rect),
                           _name(op))
    return _done(dst, rect)


def _trailing_broadcast(t, other):
    """t as a view of other's shape where it broadcasts along free dims (stride 0): a shape
    that is a prefix of other's is partition aligned ([P, H] against [P, H, T]), then size-1
    free dims stretch ([P, 1, T] against [P, H, T]), as NxD's router multiplies its RMSNorm
    weight and scale into a [P, H, T] tile. Anything else is left for the shape check."""
    n, shape = len(t.shape), list(other.shape)
    if n > len(shape) or list(t.shape) == shape or t.shape[0] != shape[0]:
        return t
    if n < len(shape) and list(t.shape) != shape[:n]:
        return t
    t = _pad_trailing(t, len(shape))
    if any(a != b and a != 1 for a, b in zip(t.shape[1:], shape[1:])):
        return t
    for d in range(1, len(shape)):
        if t.shape[d] == 1 and shape[d] != 1:
            t = _C.Tensor.broadcast(t, d, shape[d])
    return t


def _is_column_of(c, x):
    """Whether c is a [P, 1] column of the 2-D [P, F] tile x (F > 1)."""
    return len(c.shape) == 2 and len(x.shape) == 2 and c.shape[1] == 1 and x.shape[1] > 1 and \
        c.shape[0] == x.shape[0]


def tensor_tensor_scan(data0, data1, initial, op0, op1, reverse0=False, reverse1=False, *,
                       dtype=None, mask=None, **kwargs):
    """Per partition, r = op1(op0(data0[i], r), data1[i]) from r = initial (a number or a
    [P, 1] tile): a new tile of data0's shape."""
    a, b = _tile(data0, "nisa.tensor_tensor_scan"), _tile(data1, "nisa.tensor_tensor_scan")
    dst, rect = _begin(a, mask, dtype or _promote(a.dtype, b.dtype))
    if rect is not None:
        _isa.tensor_tensor_scan(_index_rect(dst, rect), _index_rect(a, rect),
                                _index_rect(b, rect), _column(initial, rect, "initial"),
                                _name(op0), _name(op1), reverse0, reverse1)
    return _done(dst, rect)


def tensor_scalar(data, op0, operand0, reverse0=False, op1=None, operand1=None, reverse1=False,
                  *, dtype=None, mask=None, engine=None, **kwargs):
    """(data op0 operand0) op1 operand1; operands are numbers or [P, 1] tiles."""
    x = _tile(data, "nisa.tensor_scalar")
    n0, n1 = _name(op0), None if op1 is None else _name(op1)
    full = [(0, n) for n in x.shape]
    c0, c1 = _column(operand0, full, "operand0"), _column(operand1, full, "operand1")
    d = _direct(x, mask, dtype, lambda dst: _isa.tensor_scalar(dst, x, n0, c0, reverse0, n1, c1,
                                                               reverse1))
    if d is not None:
        return d
    dst, rect = _begin(x, mask, dtype)
    if rect is not None:
        _isa.tensor_scalar(_index_rect(dst, rect), _index_rect(x, rect), _name(op0),
                           _column(operand0, rect, "operand0"), reverse0,
                           None if op1 is None else _name(op1),
                           _column(operand1, rect, "operand1"), reverse1)
    return _done(dst, rect)


def scalar_tensor_tensor(*, data, op0, operand0, op1, operand1, reverse0=False, reverse1=False,
                         dtype=None, mask=None, **kwargs):
    """(data op0 operand0) op1 operand1, operand1 a full tile (neuron.isa's composition)."""
    x, t1 = _tile(data, "nisa.scalar_tensor_tensor"), _tile(operand1, "operand1")
    dst, rect = _begin(x, mask, dtype or _promote(x.dtype, t1.dtype))
    if rect is not None:
        _isa.scalar_tensor_tensor(_index_rect(dst, rect), _index_rect(x, rect), _name(op0),
                                  _column(operand0, rect, "operand0"), _name(op1),
                                  _index_rect(t1, rect), reverse0, reverse1)
    return _done(dst, rect)


def tensor_scalar_reduce(*, data, op0, operand0, reduce_op, reduce_res, reverse0=False,
                         dtype=None, mask=None, **kwargs):
    """Returns data op0 operand0 and writes its reduction over the free axes to reduce_res."""
    x = _tile(data, "nisa.tensor_scalar_reduce")
    dst, rect = _begin(x, mask, dtype)
    if rect is not None:
        _isa.tensor_scalar_reduce(_index_rect(dst, rect), _index_rect(x, rect), _name(op0),
                                  _column(operand0, rect, "operand0"), _name(reduce_op),
                                  _column(reduce_res, rect, "reduce_res"), reverse0)
    return _done(dst, rect)


def tensor_reduce(op, data, axis, *, mask=None, dtype=None, negate=False, keepdims=False,
                  **kwargs):
    x = _tile(data, "nisa.tensor_reduce")
    axes, dims, out_shape = _reduced(list(x.shape), axis, keepdims)
    if mask is None:  # written straight into `dst[...] = ` when it fits (_direct)
        n = _name(op)
        return _Deferred(out_shape, x.dtype if dtype is None else _nl.to_dtype(dtype), _nl.sbuf,
                         lambda d: _isa.tensor_reduce(d, n, x, axes, negate=bool(negate)))
    dst = _new_like(out_shape, x.dtype if dtype is None else _nl.to_dtype(dtype))
    rect = _rectangle(mask, list(x.shape))
    if rect is None:
        return _done(dst, None)
    out = [(0, 1) if d in axes else rect[d] for d in dims]
    _isa.tensor_reduce(_index_rect(dst, out), _name(op), _index_rect(x, rect), axes,
                       negate=bool(negate))
    return _done(dst, out)


def tensor_copy(src, *, mask=None, dtype=None, engine=None, **kwargs):
    x = _tile(src, "nisa.tensor_copy")
    d = _direct(x, mask, dtype, lambda dst: _isa.tensor_copy(dst, x, engine=engine))
    if d is not None:
        return d
    dst, rect = _begin(x, mask, dtype)
    if rect is not None:
        _isa.tensor_copy(_index_rect(dst, rect), _index_rect(x, rect), engine=engine)
    return _done(dst, rect)


def reciprocal(data, *, dtype=None, mask=None, **kwargs):
    return _lnl.reciprocal(data, dtype=dtype, mask=mask)


def tensor_copy_predicated(*, src, dst, predicate, reverse_pred=False, mask=None, dtype=None,
                           **kwargs):
    """dst = src where predicate != 0 (inverted with reverse_pred); other elements kept."""
    d = _tile(dst, "nisa.tensor_copy_predicated")
    rect = _rectangle(mask, list(d.shape))
    if rect is None:
        return
    pred = _tile(predicate, "predicate")
    if reverse_pred:
        pred = _nl.equal(pred, 0.0)
    s = _tile(src, "src") if _is_view(src) else _nl.full(list(d.shape), float(src), d.dtype)
    _isa.tensor_copy_predicated(_index_rect(d, rect), _index_rect(s, rect), _index_rect(pred, rect))


def memset(shape, value, dtype, *, mask=None, engine=None, **kwargs):
    dst = _new_like([int(n) for n in shape], _nl.to_dtype(dtype))
    rect = _rectangle(mask, list(dst.shape))
    if rect is not None:
        _isa.memset(_index_rect(dst, rect), value)
    return _done(dst, rect)


def _pattern(expr, shape, what):
    """(channel multiplier, [[stride, count], ...], offset) of a grid expression over shape."""
    if _is_scalar_index(expr):
        return 0, [[0, n] for n in shape[1:]], _const_int(expr, what)
    if not isinstance(expr, _Grid):
        _error("unknown-arg", f"{what} takes an index-grid expression, got {expr!r}")
    if _broadcast_shapes([expr.shape, shape]) != tuple(shape):
        _error("shape", f"{what}: the grid of shape {list(expr.shape)} does not match the "
               f"tile shape {list(shape)}")
    coef = expr.coefs_in(shape)
    if len(shape) > 5:
        _error("unsupported", f"{what}: at most 4 free dims")
    return coef[0], [[c, n] for c, n in zip(coef[1:], shape[1:])], _const_int(expr.const, what)


def _shifted(cm, pattern, offset, rect):
    """The pattern of the rect-restricted view (its first element moves the offset)."""
    offset += cm * rect[0][0] + sum(s * lo for (s, _), (lo, _) in zip(pattern, rect[1:]))
    return [[s, hi - lo] for (s, _), (lo, hi) in zip(pattern, rect[1:])], offset


def iota(expr, dtype, *, mask=None, **kwargs):
    """The values of an index-grid expression (a loop index -> [1, 1]) as a new SBUF tile."""
    if _is_scalar_index(expr):
        shape = [1, 1]
    elif isinstance(expr, _Grid) and expr.ndim >= 2:
        shape = list(expr.shape)
    else:
        _error("unknown-arg", "nisa.iota takes a 2-D (or higher) index grid expression such as "
               "nl.arange(n)[None, :], or a loop index")
    cm, pattern, offset = _pattern(expr, shape, "nisa.iota")
    dst = _new_like(shape, _nl.to_dtype(dtype))
    rect = _rectangle(mask, shape)
    if rect is not None:
        pat, off = _shifted(cm, pattern, offset, rect)
        _isa.iota(_index_rect(dst, rect), pat or [[0, 1]], off, cm)
    return _done(dst, rect)


_CMP = {"<": "less", "<=": "less_equal", ">": "greater", ">=": "greater_equal", "==": "equal",
        "!=": "not_equal"}


def affine_select(pred, on_true_tile, on_false_value, *, mask=None, dtype=None, **kwargs):
    """on_true_tile where the grid comparison pred holds, else on_false_value."""
    if isinstance(pred, _Mask):
        if len(pred.terms) != 1:
            _error("mask", "affine_select takes one comparison of index grids (no &)")
        pred = pred.terms[0]
    if not isinstance(pred, _Cmp):
        _error("unknown-arg", f"affine_select's pred is a comparison of index grids, got "
               f"{pred!r}")
    x = _tile(on_true_tile, "nisa.affine_select")
    if x.buffer == _nl.psum:
        x = _nl.copy(x)
    cm, pattern, offset = _pattern(pred.expr, list(x.shape), "nisa.affine_select")
    dst, rect = _begin(x, mask, dtype)
    if rect is not None:
        pat, off = _shifted(cm, pattern, offset, rect)
        _isa.affine_select(_index_rect(dst, rect), pat or [[0, 1]], cm, _index_rect(x, rect),
                           float(on_false_value), cmp_op=_CMP[pred.op], offset=off)
    return _done(dst, rect)


def dma_copy(*, dst, src, mask=None, dst_rmw_op=None, oob_mode=None, dge_mode=None, **kwargs):
    """DMA copy (with cast) between HBM and SBUF views of equal element counts; one side may be
    t[idx_tile[i_p, 0], i_f] (rows chosen at run time; oob_mode.skip leaves bad rows alone).
    dst_rmw_op=np.add: dst = dst + src in fp32 (operands of one shape); rows of an indirect dst
    named twice are all added, one partition after another (neuron/dma_rmw.py)."""
    if dst_rmw_op is not None:
        if _name(dst_rmw_op, "dst_rmw_op") != "add":
            _error("reduce-op", f"nisa.dma_copy: dst_rmw_op={_name(dst_rmw_op)} is not "
                   "supported; the DMA engines only add (dst_rmw_op=np.add)")
        if _nl_oob(oob_mode) != _isa.oob_mode.error:
            _error("unknown-arg", "nisa.dma_copy: with dst_rmw_op, only oob_mode=oob_mode.error "
                   "is allowed (as in NKI)")
    if isinstance(dst, _IndirectView) or isinstance(src, _IndirectView):
        _lnl._no_mask(mask, "nisa.dma_copy of rows chosen at run time")
        d = dst if isinstance(dst, _IndirectView) else _tile(dst, "nisa.dma_copy")
        s = src if isinstance(src, _IndirectView) else _tile(src, "nisa.dma_copy")
        if dst_rmw_op is not None:
            _rmw.accumulate(d, s)
            return
        _isa.dma_copy(d, s, oob_mode=_nl_oob(oob_mode))
        return
    d, s = _operand(dst, "nisa.dma_copy"), _operand(src, "nisa.dma_copy")
    shape = list(d.shape)
    rect = _mask_rect(mask, shape, d, s)
    if rect is None:
        return
    dv = _concrete(_restrict(d, rect, shape))
    sv = _concrete(_restrict(s, rect, shape) if len(s.shape) == len(shape) else s)
    if dst_rmw_op is not None:
        _rmw.accumulate(dv, sv)
        return
    if sv.buffer == _nl.psum:
        sv = _nl.copy(sv)
    _isa.dma_copy(dv, sv)


def _nl_oob(mode):
    return _isa.oob_mode.error if mode is None else _isa.oob_mode(int(mode))


# ---- the dynamic half: runtime offsets and gathers ----------------------------------------------

def tensor_copy_dynamic_src(src, *, mask=None, dtype=None, engine=None, **kwargs):
    """A copy of src, whose subscript holds a runtime offset (src[i_p, off_tile[0, k] + i_f]:
    the one-element tile is read into a register when the copy runs)."""
    return tensor_copy(src, mask=mask, dtype=dtype)


def tensor_copy_dynamic_dst(*, dst, src, mask=None, dtype=None, engine=None, **kwargs):
    """Copies src into dst, whose subscript holds a runtime offset (dst[i_p, off_tile[0, k] +
    i_f])."""
    d = _tile(dst, "nisa.tensor_copy_dynamic_dst")
    rect = _rectangle(mask, list(d.shape))
    if rect is None:
        return
    s = _tile(src, "src") if _is_view(src) else _nl.full(list(d.shape), float(src), d.dtype)
    _isa.tensor_copy(_index_rect(d, rect), _index_rect(s, rect))


def gather_flattened(data, indices, *, mask=None, dtype=None, **kwargs):
    """nl.gather_flattened (nisa.nc_n_gather into a new tile of indices' shape)."""
    return _lnl.gather_flattened(data, indices, mask=mask, dtype=dtype)


def local_gather(src_buffer, index, num_elem_per_idx=1, num_valid_indices=None, *, mask=None,
                 **kwargs):
    """Per group of 16 partitions, num_elem_per_idx elements of each partition's row of
    src_buffer at each of the group's indices (index's 16 rows read partition-first, the
    first num_valid_indices of them): a new [P, num_valid_indices * num_elem_per_idx] tile of
    src_buffer's dtype."""
    _lnl._no_mask(mask, "nisa.local_gather")
    src = _tile(src_buffer, "nisa.local_gather")
    idx = _tile(index, "nisa.local_gather")
    per = int(num_elem_per_idx)
    valid = 16 * (idx.shape[1] if len(idx.shape) > 1 else 1) if num_valid_indices is None \
        else int(num_valid_indices)
    dst = _new_like([src.shape[0], valid * per], src.dtype)
    _isa.local_gather(dst, src, idx, per, num_valid_indices)
    return dst


# ---- partition reduction, selection and statistics ---------------------------------------------

def _whole(x, mask, what):
    _lnl._no_mask(mask, what)
    return _tile(x, what)


def tensor_partition_reduce(op, data, *, mask=None, dtype=None, **kwargs):
    """op over the partitions of data: a new [1, F...] tile."""
    x = _whole(data, mask, "nisa.tensor_partition_reduce")
    dst = _new_like([1] + list(x.shape[1:]), x.dtype if dtype is None else _nl.to_dtype(dtype))
    _isa.tensor_partition_reduce(dst, _name(op), x)
    return dst


def max8(*, src, mask=None, dtype=None, **kwargs):
    """The 8 largest values of each partition, descending: a new [P, 8] tile."""
    x = _whole(src, mask, "nisa.max8")
    dst = _new_like([x.shape[0], 8], x.dtype if dtype is None else _nl.to_dtype(dtype))
    _isa.max8(dst, x)
    return dst


def nc_find_index8(*, data, vals, mask=None, dtype=None, **kwargs):
    """The index of each of the 8 values of vals in its partition of data: a new [P, 8] uint32
    tile (0xFFFFFFFF where absent)."""
    x = _whole(data, mask, "nisa.nc_find_index8")
    dst = _new_like([x.shape[0], 8], _nl.uint32 if dtype is None else _nl.to_dtype(dtype))
    _isa.nc_find_index8(dst, x, _tile(vals, "vals"))
    return dst


def nc_match_replace8(*, data, vals, imm, dst_idx=None, mask=None, dtype=None, **kwargs):
    """data with the first occurrence of each of the 8 values of vals replaced by imm (a new
    tile); dst_idx, when given, receives the indices."""
    x = _whole(data, mask, "nisa.nc_match_replace8")
    v = _tile(vals, "vals")
    dst = _new_like(list(x.shape), x.dtype if dtype is None else _nl.to_dtype(dtype))
    _isa.nc_match_replace8(dst, x, v, imm,
                           dst_idx=None if dst_idx is None else _tile(dst_idx, "dst_idx"))
    return dst


def bn_stats(data, *, mask=None, dtype=None, **kwargs):
    """[P, 6]: count, mean, count * variance of the even-indexed elements, then the odd ones."""
    x = _whole(data, mask, "nisa.bn_stats")
    dst = _new_like([x.shape[0], 6], x.dtype if dtype is None else _nl.to_dtype(dtype))
    _isa.bn_stats(dst, x)
    return dst


def bn_aggr(data, *, mask=None, dtype=None, **kwargs):
    """[P, 2]: mean and variance of the bn_stats triples side by side in data."""
    x = _whole(data, mask, "nisa.bn_aggr")
    dst = _new_like([x.shape[0], 2], x.dtype if dtype is None else _nl.to_dtype(dtype))
    _isa.bn_aggr(dst, x)
    return dst


def nc_stream_shuffle(src, dst, shuffle_mask, *, dtype=None, mask=None, **kwargs):
    """In every group of 32 partitions, dst partition i = src partition shuffle_mask[i] (255:
    unchanged); writes dst."""
    x = _whole(src, mask, "nisa.nc_stream_shuffle")
    _isa.nc_stream_shuffle(_tile(dst, "dst"), x, list(shuffle_mask))


def select_reduce(*, dst, predicate, on_true, on_false, reduce_res=None, reduce_cmd=None,
                  reduce_op=None, reverse_pred=False, mask=None, dtype=None, **kwargs):
    """dst = on_true where predicate != 0 (== 0 with reverse_pred), else on_false (a number
    or [P, 1] tile); reduce_res ([P, 1]) = the max (reduce_op) over the free dims of dst."""
    d = _tile(dst, "nisa.select_reduce")
    rect = _rectangle(mask, list(d.shape))
    if rect is None:
        return
    _isa.select_reduce(_index_rect(d, rect), _index_rect(_tile(predicate, "predicate"), rect),
                       _index_rect(_tile(on_true, "on_true"), rect),
                       _column(on_false, rect, "on_false"),
                       reduce_res=_column(reduce_res, rect, "reduce_res"),
                       reduce_cmd=0 if reduce_cmd is None else reduce_cmd,
                       reduce_op=None if reduce_op is None else _name(reduce_op),
                       reverse_pred=bool(reverse_pred))


def tensor_scalar_cumulative(*, src, dst, op0, op1, imm0, imm1=None, reduce_cmd=None,
                             mask=None, dtype=None, **kwargs):
    """Destination style, as in the current API: per partition along the free dims, reg =
    op1(src[i] op0 imm0, reg) and dst[i] = reg, from op1's identity (reset_reduce), imm1
    (load_reduce) or where the previous Vector instruction left the registers (reduce)."""
    x = _whole(src, mask, "nisa.tensor_scalar_cumulative")
    imm0, imm1 = (_tile(v, what) if _is_view(v) else v for v, what in ((imm0, "imm0"),
                                                                       (imm1, "imm1")))
    _isa.tensor_scalar_cumulative(_tile(dst, "dst"), x, _name(op0), _name(op1), imm0, imm1,
                                  reduce_cmd=3 if reduce_cmd is None else reduce_cmd)


def range_select(*, on_true_tile, comp_op0, comp_op1, bound0, bound1, reduce_cmd=None,
                 reduce_res=None, reduce_op=None, range_start=0, on_false_value=_lnl.fp32.min,
                 mask=None, dtype=None, **kwargs):
    """A new tile: on_true_tile where comp_op0(i, bound0) and comp_op1(i, bound1) for i =
    range_start + the free index, else fp32 min; reduce_res = its max over the free dims.
    on_false_value is accepted and overridden by fp32 min, as the hardware does and NKI did
    before 0.3 (the current API refuses another value)."""
    x = _tile(on_true_tile, "nisa.range_select")
    dst, rect = _begin(x, mask, dtype)
    if rect is None:
        return _done(dst, None)
    shape = list(x.shape)
    if len(shape) > 2 and any(r != (0, n) for r, n in zip(rect[1:], shape[1:])):
        _error("mask", "nisa.range_select: a mask= of a tile with more than one free dim may "
               "restrict the partitions only")
    _isa.range_select(_index_rect(dst, rect), _index_rect(x, rect), _name(comp_op0),
                      _name(comp_op1), _column(bound0, rect, "bound0"),
                      _column(bound1, rect, "bound1"),
                      reduce_cmd=0 if reduce_cmd is None else reduce_cmd,
                      reduce_res=_column(reduce_res, rect, "reduce_res"),
                      reduce_op=None if reduce_op is None else _name(reduce_op),
                      range_start=range_start + (rect[1][0] if len(shape) == 2 else 0),
                      on_false_value=_lnl.fp32.min)  # NKI overrides on_false_value: below
    return _done(dst, rect)


def dma_transpose(src, *, axes=None, mask=None, dtype=None, dge_mode=None, **kwargs):
    """A new SBUF tile: src (HBM or SBUF) with its dims permuted by axes ((1, 0), (2, 1, 0) or
    (3, 1, 2, 0), the default for src's rank), cast to dtype. dge_mode (which DMA descriptor
    engine) changes no value: accepted, ignored, as dma_copy's."""
    _lnl._no_mask(mask, "nisa.dma_transpose")
    x = _tile(src, "nisa.dma_transpose")
    rank = len(x.shape)
    order = {2: (1, 0), 3: (2, 1, 0), 4: (3, 1, 2, 0)}.get(rank, tuple(range(rank))[::-1]) \
        if axes is None else tuple(axes)
    shape = [x.shape[a] for a in order] if len(order) == rank else list(x.shape)
    t = _new_like(shape, x.dtype)
    _isa.dma_transpose(t, x, axes=order)
    if dtype is None or _nl.to_dtype(dtype) == x.dtype:
        return t
    out = _new_like(shape, _nl.to_dtype(dtype))
    _isa.tensor_copy(out, t)
    return out


def sequence_bounds(*, segment_ids, mask=None, dtype=None, **kwargs):
    """A new [P, 2, N] tile: the start and exclusive end of each element's run of equal ids in
    segment_ids ([P, N] float32 or int32; id 0 is padding: start N, end -1), in dtype (default
    the ids' dtype)."""
    ids = _whole(segment_ids, mask, "nisa.sequence_bounds")
    p, n = (list(ids.shape) + [1])[:2]
    dst = _new_like([p, 2, n], ids.dtype if dtype is None else _nl.to_dtype(dtype))
    _isa.sequence_bounds(dst, ids)
    return dst


def dropout(data, prob, *, mask=None, dtype=None, **kwargs):
    """data with each element zeroed with probability prob, not rescaled (nl.dropout)."""
    return _lnl.dropout(data, prob, dtype=dtype, mask=mask)
_wrap_module(globals(), "nisa", _NISA)
