"""neuronxcc.nki.language (legacy NKI, import as nl): the current neuron.language functions
with the legacy keywords (mask=, dtype=), index grids (nl.arange, nl.mgrid), nl.par_dim block
tiles, and loops that unroll at trace time (affine_range/sequential_range/static_range yield
ints, so masks and grids see concrete indices; docs/nki-compat.md)."""
import builtins

import numpy as np

from .. import _C
from .._span import user_span
from .. import isa as _isa
from .. import language as _nl
from .blocks import Blocks as _Blocks, allocate as _allocate
from .blocks import par_dim  # noqa: F401 (re-exported)
from .grid import arange, mgrid  # noqa: F401 (re-exported)
from .grid import error as _error
from .mask import rectangle as _rectangle
from .ops import intersect as _intersect, is_full as _is_full, masked as _masked
from .ops import define_unsupported as _define_unsupported
from .ops import matmul_parts as _matmul_parts, new_like as _new_like
from .ops import operand as _operand, promote as _promote, reduced as _reduced
from .ops import write_rect as _write_rect
from .methods import store_view as _store_view
from .views import GridView as _GridView, _State, concrete as _concrete
from .views import index_rect as _index_rect, is_view as _is_view
from .views import mark_partial as _mark_partial, partial_rect as _partial_rect
from .views import mask_rect as _mask_rect, restrict as _restrict

# ---- dtypes, buffers, constants --------------------------------------------------------------
float32, bfloat16, float16 = _nl.float32, _nl.bfloat16, _nl.float16
float8_e4m3, float8_e5m2 = _nl.float8_e4m3, _nl.float8_e5m2
int8, int16, int32, uint8, uint16, uint32, bool_ = (_nl.int8, _nl.int16, _nl.int32, _nl.uint8,
                                                    _nl.uint16, _nl.uint32, _nl.bool_)
sbuf, psum, hbm, shared_hbm = _nl.sbuf, _nl.psum, _nl.hbm, _nl.shared_hbm
private_hbm = hbm
tensor = _C.Tensor
ds = _nl.ds


class tile_size(_nl.tile_size):
    bn_stats_fmax = _C.tile_limits["bn_stats_fmax"]
    total_available_sbuf_size = _C.sbuf_bytes_per_partition("trn2")  # usable bytes per partition


class fp32:
    min = float(np.finfo(np.float32).min)
    max = float(np.finfo(np.float32).max)


def static_cast(value, dtype):
    """Host-side cast of a NumPy array (as used by legacy test scripts)."""
    from ..dtypes import numpy_dtype
    return np.asarray(value).astype(numpy_dtype(_nl.to_dtype(dtype)))


# ---- loops: unrolled (ints), and SPMD ----------------------------------------------------------

def _unrolled(args):
    # Each iteration is traced inside a one-trip loop: a block, so the tiles it allocates are
    # freed when the iteration ends (as NKI scopes them) and long loops fit SBUF/PSUM.
    if not _C.tracing():
        yield from builtins.range(*args)
        return
    span, serial = user_span(), _nl._State.serial
    for i in builtins.range(*args):
        _, loop_id, _ = _C.open_loop(0, 1, 1, False, span)
        try:
            yield i
        finally:
            if serial == _nl._State.serial:  # not a stale generator of an aborted trace
                _C.close_loop(loop_id)


def affine_range(*args):
    """Unrolled at trace time (yields ints) so masks and index grids see concrete indices."""
    return _unrolled(args)


sequential_range = static_range = affine_range
program_id = _nl.program_id


def num_programs(axes=None):
    """The launch grid's size along axes (all of them when None), known at trace time."""
    g = _State.grid
    if axes is None:
        return int(np.prod(g))
    if isinstance(axes, int):
        return g[axes] if axes < len(g) else 1
    return int(np.prod([g[a] if a < len(g) else 1 for a in axes]))


def program_ndim():
    return len(_State.grid)


# ---- creation ----------------------------------------------------------------------------------

def _make(shape, dtype, buffer, name, fill=None):
    def tile(tshape, suffix):
        n = name + suffix if name else ""
        if fill is None:
            return _nl.ndarray(tshape, dtype, buffer=buffer, name=n)
        return _nl.full(tshape, fill, dtype, buffer=buffer, name=n)
    return _allocate(shape, tile)


def ndarray(shape, dtype, *, buffer=None, name="", **kwargs):
    return _make(shape, dtype, sbuf if buffer is None else buffer, name)


def zeros(shape, dtype, *, buffer=None, name="", **kwargs):
    return _make(shape, dtype, sbuf if buffer is None else buffer, name, 0.0)


def ones(shape, dtype, *, buffer=None, name="", **kwargs):
    return _make(shape, dtype, sbuf if buffer is None else buffer, name, 1.0)


def full(shape, fill_value, dtype, *, buffer=None, name="", **kwargs):
    return _make(shape, dtype, sbuf if buffer is None else buffer, name, fill_value)


def _shape_of(a):
    if isinstance(a, _Blocks):  # block dims, then the tile's partition dim
        return a.bshape + [par_dim(a.tile_shape[0])] + a.tile_shape[1:]
    return list(a.shape)


def zeros_like(a, dtype=None, *, buffer=None, name="", **kwargs):
    return zeros(_shape_of(a), a.dtype if dtype is None else dtype,
                 buffer=a.buffer if buffer is None else buffer, name=name)


def empty_like(a, dtype=None, *, buffer=None, name="", **kwargs):
    return ndarray(_shape_of(a), a.dtype if dtype is None else dtype,
                   buffer=a.buffer if buffer is None else buffer, name=name)


# ---- data movement -----------------------------------------------------------------------------

def load(src, *, mask=None, dtype=None, **kwargs):
    """HBM -> a new SBUF tile; masked elements are not loaded."""
    src = _operand(src, "nl.load")
    if len(src.shape) == 1:  # A[a:b, i] on HBM: tiles have 2 dims, so this loads [n, 1]
        src = _GridView(_concrete(src), None, (src.shape[0], 1))
    shape = list(src.shape)
    rect = _mask_rect(mask, shape, src)
    dt = src.dtype if dtype is None else _nl.to_dtype(dtype)
    if rect is None:
        return _mark_partial(_new_like(shape, dt), None)
    view = src.resolve(rect) if isinstance(src, _GridView) else _index_rect(src, rect)
    if _is_full(rect, shape) and list(view.shape) == shape:
        return _nl.load(view, dt)
    dst = _new_like(shape, dt)
    _isa.dma_copy(_index_rect(dst, rect), view)
    return _mark_partial(dst, rect)


def store(dst, value, *, mask=None, **kwargs):
    """Tile (SBUF or PSUM) or scalar -> HBM; only the masked (and valid) elements."""
    dst = _operand(dst, "nl.store")
    shape = list(dst.shape)
    rect = _mask_rect(mask, shape, dst, value)
    known, valid = _partial_rect(value)
    if known:
        rect = _intersect(rect, valid)
    if rect is None:
        return
    view = dst.resolve(rect) if isinstance(dst, _GridView) else _index_rect(dst, rect)
    if not _is_view(value):
        size = [hi - lo for lo, hi in rect]
        value = _nl.full(size if len(size) >= 2 else [1] + size, float(value), dst.dtype)
    else:
        value = _concrete(_restrict(_operand(value, "nl.store"), rect, shape))
    _store_view(view, value)


def load_transpose2d(src, *, mask=None, dtype=None, **kwargs):
    """HBM [a, b] -> SBUF [b, a] (a load and a Tensor-engine transpose; a, b <= 128)."""
    src = _operand(src, "nl.load_transpose2d")
    a, b = src.shape
    rect = _rectangle(mask, [b, a])
    dt = src.dtype if dtype is None else _nl.to_dtype(dtype)
    if rect is None:
        return _mark_partial(_new_like([b, a], dt), None)
    view = _restrict(src, [rect[1], rect[0]], [a, b])
    t = _nl.transpose(_nl.load(_concrete(view)))
    if _is_full(rect, [b, a]):
        return _nl.copy(t, dt)
    dst = _new_like([b, a], dt)
    _write_rect(dst, rect, t)
    return _mark_partial(dst, rect)


def broadcast_to(src, *, shape, **kwargs):
    return _nl.broadcast_to(_concrete(_operand(src)), list(shape))


def device_print(prefix, x, *, mask=None, **kwargs):
    x = _operand(x, "nl.device_print")
    rect = _rectangle(mask, list(x.shape))
    if rect is not None:
        _nl.device_print(prefix, _concrete(_restrict(x, rect, list(x.shape))))


# ---- matrix ops --------------------------------------------------------------------------------

def matmul(x, y, *, transpose_x=False, mask=None, **kwargs):
    """x @ y (x.T @ y with transpose_x) into a PSUM fp32 tile; operand masks x[i < n] and
    mask= (over the [M, N] result) select the computed rectangle."""
    xt, yt, xr, yr, mn, out = _matmul_parts(x, y, bool(transpose_x), mask)
    if out is None:
        return _mark_partial(_new_like(mn, float32, psum), None)
    if _is_full(out, mn) and xr == [(0, n) for n in xt.shape] and \
            yr == [(0, n) for n in yt.shape]:
        return _nl.matmul(xt, yt, bool(transpose_x))
    r = _nl.matmul(_index_rect(xt, xr), _index_rect(yt, yr), bool(transpose_x))
    dst = _new_like(mn, float32, psum)
    _write_rect(dst, out, r)
    return _mark_partial(dst, out)


def transpose(x, *, dtype=None, mask=None, **kwargs):
    """[P, F] -> [F, P] in PSUM; mask= is over the [F, P] result."""
    x = _concrete(_operand(x, "nl.transpose"))
    p, f = x.shape
    dt = None if dtype is None else _nl.to_dtype(dtype)
    rect = _rectangle(mask, [f, p])
    if rect is None:
        return _mark_partial(_new_like([f, p], dt or x.dtype, psum), None)
    if _is_full(rect, [f, p]):
        return _nl.transpose(x, dt)
    r = _nl.transpose(_index_rect(x, [rect[1], rect[0]]), dt)
    dst = _new_like([f, p], r.dtype, psum)
    _write_rect(dst, rect, r)
    return _mark_partial(dst, rect)


# ---- element-wise and reductions ---------------------------------------------------------------

class _Fn:
    """A legacy nl function: the current one with mask= (and legacy dtype defaults). Usable as
    an ISA operator argument like the current nl functions (its __name__ is the op name)."""

    def __init__(self, name, kind, default_dtype=None):
        self.name = self.__name__ = name
        self.kind, self.default_dtype = kind, default_dtype
        self.fn = getattr(_nl, name)

    def __repr__(self):
        return f"nl.{self.name}"

    def _dtype(self, dtype, *ops):
        if dtype is not None:
            return _nl.to_dtype(dtype)
        return self.default_dtype

    def __call__(self, x, *args, dtype=None, mask=None, **kwargs):
        if self.kind == "unary":
            dt = self._dtype(dtype)
            return _masked(lambda a: self.fn(a, dt), [x], mask,
                           lambda: dt or _operand(x).dtype)
        if self.kind == "binary":
            y = args[0] if args else kwargs.pop("y")
            dt = self._dtype(dtype)

            def guess():
                tiles = [o.dtype for o in (x, y) if _is_view(o)]
                return dt or (_promote(*tiles) if len(tiles) == 2 else tiles[0])
            return _masked(lambda a, b: self.fn(a, b, dt), [x, y], mask, guess)
        return self._reduce(x, *args, dtype=dtype, mask=mask, **kwargs)

    def _reduce(self, x, axis, dtype=None, mask=None, keepdims=False):
        x = _operand(x, f"nl.{self.name}")
        axes, dims, out_shape = _reduced(list(x.shape), axis, keepdims)
        dt = None if dtype is None else _nl.to_dtype(dtype)
        return _masked(lambda a: self.fn(a, axes, dt, keepdims), [x], mask,
                       lambda: dt or x.dtype, out_shape,
                       lambda r: [(0, 1) if d in axes else r[d] for d in dims])


_UNARY = ("exp log tanh sqrt rsqrt sigmoid silu gelu gelu_apprx_tanh relu abs negative "
          "reciprocal square sin cos erf softplus sign").split()
_ARITH = ("add subtract multiply divide maximum minimum power bitwise_and bitwise_or "
          "bitwise_xor left_shift right_shift").split()
_BOOL = ("equal not_equal greater greater_equal less less_equal logical_and logical_or "
         "logical_xor").split()
for _n in _UNARY:
    globals()[_n] = _Fn(_n, "unary")
for _n in _ARITH:
    globals()[_n] = _Fn(_n, "binary")
for _n in _BOOL:  # comparisons and logical ops return bool tiles by default (legacy rule)
    globals()[_n] = _Fn(_n, "binary", bool_)
sum, max, min, mean = (_Fn(n, "reduce") for n in ("sum", "max", "min", "mean"))
copy = _Fn("copy", "unary")
bypass = _nl.bypass


def logical_not(x, *, dtype=None, mask=None, **kwargs):
    return equal(x, 0.0, dtype=bool_ if dtype is None else dtype, mask=mask)  # noqa: F821


def where(condition, x, y, *, dtype=None, mask=None, **kwargs):
    dt = None if dtype is None else _nl.to_dtype(dtype)
    return _masked(lambda c, a, b: _nl.where(c, a, b, dt), [condition, x, y], mask,
                   lambda: dt or next(o.dtype for o in (x, y, condition) if _is_view(o)))


def softmax(x, axis, *, dtype=None, compute_dtype=None, mask=None, **kwargs):
    """exp(x - max) / sum over the free axes `axis` (composed of nl reductions)."""
    dt = None if dtype is None else _nl.to_dtype(dtype)

    def run(t):
        m = _nl.max(t, axis, None, True)
        e = _nl.exp(_nl.subtract(t, m), compute_dtype and _nl.to_dtype(compute_dtype))
        return _nl.multiply(e, _nl.reciprocal(_nl.sum(e, axis, None, True)), dt or t.dtype)
    return _masked(run, [x], mask, lambda: dt or _operand(x).dtype)


def rms_norm(x, w, axis, n, epsilon=1e-6, *, dtype=None, compute_dtype=None, mask=None,
             **kwargs):
    """x / sqrt(sum(x^2 over axis) / n + epsilon) * w."""
    dt = None if dtype is None else _nl.to_dtype(dtype)

    def run(t, wt):
        ms = _nl.multiply(_nl.sum(_nl.square(t, _nl.float32), axis, None, True), 1.0 / n)
        r = _nl.rsqrt(_nl.add(ms, float(epsilon)))
        return _nl.multiply(_nl.multiply(t, r), wt, dt or t.dtype)
    return _masked(run, [x, w], mask, lambda: dt or _operand(x).dtype)


# ---- not provided: a clear error instead of an AttributeError ----------------------------------

UNSUPPORTED = ("floor ceil trunc tan arctan gelu_dx gelu_apprx_sigmoid silu_dx mish erf_dx "
               "invert mod fmod prod var all dropout loop_reduce all_reduce rand random_seed "
               "shared_constant shared_identity_matrix expand_dims atomic_rmw gather_flattened "
               "nc spmd_dim finfo").split()
_define_unsupported(globals(), "nl", UNSUPPORTED)
