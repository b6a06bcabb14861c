"""neuronxcc.nki.language (legacy NKI, import as nl): the current neuron.language functions
with the legacy keywords (mask=, dtype=), index grids (nl.arange, nl.mgrid), nl.par_dim block
tiles, and loops that unroll at trace time (affine_range/sequential_range/static_range yield
ints, so masks and grids see concrete indices; docs/nki-compat.md)."""
import builtins
import math

import ml_dtypes
import numpy as np

from .. import _C
from .._span import user_span
from .. import dma_rmw as _rmw
from .. import isa as _isa
from .. import language as _nl
from . import compiler as _compiler
from ..access import IndirectView as _IndirectView
from .dynamic import register_of as _register_of, _tile as _tile_key
from .loop_reduce import LoopReduce as _LoopReduce
from . import constants as _constants
from .deferred import Deferred as _Deferred, flush as _flush, resolve as _resolve
from .deferred import wrap_module as _wrap_module
from . import keywords as _keywords
from .split import SplitView as _SplitView
from .blocks import Blocks as _Blocks, allocate as _allocate, split_shape as _split_shape
from . import spill as _spill
from .blocks import par_dim  # noqa: F401 (re-exported)
from .grid import arange, mgrid  # noqa: F401 (re-exported)
from .grid import Cmp as _Cmp, Grid as _Grid, Mask as _Mask, error as _error
from .mask import rectangle as _rectangle
from .ops import intersect as _intersect, is_full as _is_full, masked as _masked
from .ops import pad_trailing as _pad_trailing
from .ops import matmul_parts as _matmul_parts, new_like as _new_like
from .ops import operand as _operand, promote as _promote, reduced as _reduced
from .ops import write_rect as _write_rect
from .methods import store_view as _store_view
from .views import GridView as _GridView, _State, concrete as _concrete
from .views import index_rect as _index_rect, is_view as _is_view
from .views import mark_partial as _mark_partial, partial_rect as _partial_rect
from .views import mask_rect as _mask_rect, restrict as _restrict

# ---- dtypes, buffers, constants --------------------------------------------------------------
float32, bfloat16, float16, tfloat32 = _nl.float32, _nl.bfloat16, _nl.float16, _nl.tfloat32
float8_e4m3, float8_e5m2, float8_e4m3fn = _nl.float8_e4m3, _nl.float8_e5m2, _nl.float8_e4m3fn
int8, int16, int32, uint8, uint16, uint32, bool_ = (_nl.int8, _nl.int16, _nl.int32, _nl.uint8,
                                                    _nl.uint16, _nl.uint32, _nl.bool_)
sbuf, psum, hbm, shared_hbm = _nl.sbuf, _nl.psum, _nl.hbm, _nl.shared_hbm
private_hbm = hbm
tensor = _C.Tensor
ds = _nl.ds


tile_size = _nl.tile_size


class fp32:
    min = float(np.finfo(np.float32).min)
    max = float(np.finfo(np.float32).max)


class bfp16:
    """bf16 limits: min is the bit pattern 0xff80, which IEEE bf16 (and so neuron) reads as -inf
    (NKI_API.md §3.1); max the largest finite bf16."""
    min = float("-inf")
    max = float(ml_dtypes.finfo(ml_dtypes.bfloat16).max)


def finfo(dtype):
    """The limits of a float dtype (max, min, eps, tiny, bits, ...) as NumPy's finfo gives them,
    bf16 and the fp8 formats included (ml_dtypes.finfo)."""
    from ..dtypes import numpy_dtype
    return ml_dtypes.finfo(numpy_dtype(_nl.to_dtype(dtype)))


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
        _flush()  # a pending result belongs to the code before the iteration (deferred.py)
        _, loop_id, _ = _C.open_loop(0, 1, 1, False, span)
        try:
            yield i
        finally:
            if serial == _nl._State.serial:  # not a stale generator of an aborted trace
                _flush()
                _C.close_loop(loop_id)


def affine_range(*args, directives=None, multi_buffer=None, precise_schedule=None, **kwargs):
    """Unrolled at trace time (yields ints) so masks and index grids see concrete indices.
    Scheduling hints (directives=ncc.no_reorder(), multi_buffer=..., precise_schedule=True as
    the published pipelined attention passes) are accepted and ignored: neuron schedules by
    dependencies."""
    return _unrolled(args)


def dynamic_range(*args):
    """A runtime loop, traced once (not unrolled): range(*args) whose bounds may be one-element
    tiles (read when the loop starts) as well as ints; the index is symbolic, so use it in
    subscripts and index grids (t[i * 128 + i_p, i_f]), not in masks."""
    vals = [_register_of(_tile_key(a)) if _tile_key(a) is not None else a for a in args]
    return _nl.dynamic_range(*vals)


sequential_range = affine_range


def static_range(*args):
    """Unrolled at trace time like Python's range, and like it no block: a tile made in an
    iteration may be used after the loop (NKI scopes tiles to affine_range / sequential_range
    bodies only; NxD's top-k keeps its last stage's tiles so)."""
    return _nl.static_range(*args)


program_id = _nl.program_id


class nc(int):
    """nl.nc(n): n NeuronCores along a launch-grid dim (nl.spmd_dim(a, nl.nc(2))). neuron runs
    every program of the grid on its one simulated core, so it only multiplies the dim."""

    def __repr__(self):
        return f"nl.nc({int(self)})"


def spmd_dim(*sizes):
    """A launch-grid dim of prod(sizes) programs (sizes are ints and nl.nc(n))."""
    for s in sizes:
        if isinstance(s, bool) or not isinstance(s, int) or s <= 0:
            _error("unsupported", f"nl.spmd_dim takes positive ints and nl.nc(n), got {s!r}")
    return int(np.prod([int(s) for s in sizes]))


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
    memory = _memory(buffer)
    alloc = buffer if isinstance(buffer, _compiler.Allocation) else None
    if memory in (hbm, shared_hbm):  # HBM has no partitions: a par_dim there is its size
        shape = [d.size if isinstance(d, par_dim) else d for d in shape]
    bshape, tshape = _split_shape(shape)
    if bshape and memory == psum:  # too big for PSUM, on a retrace: SBUF (spill.py)
        tiles = int(np.prod([alloc.tiles_along(d, n, len(bshape)) if alloc else n
                             for d, n in enumerate(bshape)]))
        memory = _spill.place(memory, tiles, tshape, dtype, name, user_span())

    def tile(tshape, suffix):
        n = name + suffix if name else ""
        if fill is None:
            t = _nl.ndarray(tshape, dtype, buffer=memory, name=n)
        else:
            t = _nl.full(tshape, fill, dtype, buffer=memory, name=n)
        return t
    made = _allocate(shape, tile, alloc)
    if bshape and memory == hbm and _memory(buffer) == psum:
        made.staged = True  # spilled to HBM (spill.py): read through SBUF copies
        made.name = name or _spill._assigned_name(user_span()) or "t"
    return made


def ndarray(shape, dtype, *, buffer=None, name="", **kwargs):
    return _make(shape, dtype, sbuf if buffer is None else buffer, name)


def _memory(buffer):
    # buffer= may be a direct-allocation request (ncc.sbuf.mod_alloc(...)): neuron places the
    # tile itself; mod_alloc's reuse of tiles across blocks is kept (compiler.py, blocks.py).
    return _compiler.memory_of(buffer)


# lazy_initialization: neuronx-cc may defer the fill to the tile's first use (vLLM's paged
# attention passes it to zeros, nki-samples' flash attention to full); the values read are the
# fill either way, so it changes nothing here.
def zeros(shape, dtype, *, buffer=None, name="", lazy_initialization=False, **kwargs):
    return _make(shape, dtype, sbuf if buffer is None else buffer, name, 0.0)


def ones(shape, dtype, *, buffer=None, name="", lazy_initialization=False, **kwargs):
    return _make(shape, dtype, sbuf if buffer is None else buffer, name, 1.0)


def full(shape, fill_value, dtype, *, buffer=None, name="", lazy_initialization=False,
         **kwargs):
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

def _no_mask(mask, what):
    if mask is not None and mask is not True:
        _error("mask", f"{what} takes no mask= here (restrict the operands with subscripts "
               "instead)")


def load(src, *, mask=None, dtype=None, mode=None, **kwargs):
    """HBM -> a new SBUF tile; masked elements are not loaded. t[idx_tile[i_p, 0], i_f] loads
    the rows the index tile names (at run time). mode=nisa.oob_mode.skip skips rows (or a
    runtime-offset view) outside the tensor, leaving the destination as it was: written as
    `buf[...] = nl.load(..., mode=oob_mode.skip)` it loads straight into buf, as NxDI's paged
    cache does."""
    if mode is not None and int(mode) not in (0, 1):
        _error("unknown-arg", f"nl.load: mode={mode!r} is not a nisa.oob_mode (error or skip)")
    if mode is not None and int(mode) == 1:
        if mask is not None:
            _error("unsupported", "nl.load(mode=oob_mode.skip) with mask= is not supported; "
                   "load the whole view and select the part you need")
        view = src if isinstance(src, _IndirectView) else _concrete(_operand(src, "nl.load"))
        dt = src.dtype if dtype is None else _nl.to_dtype(dtype)
        return _Deferred(list(view.shape), dt, _nl.sbuf,
                         lambda dst: _isa.dma_copy(dst, view, oob_mode=_C.oob_mode.skip))
    if isinstance(src, _IndirectView):
        return _load_rows(src, mask, dtype)
    src = _operand(src, "nl.load")
    if len(src.shape) == 1:  # A[a:b, i] on HBM: tiles have 2 dims, so this loads [n, 1]
        src = _GridView(_concrete(src), None, (src.shape[0], 1))
    shape = list(src.shape)
    rect = _mask_rect(mask, shape, src)
    dt = src.dtype if dtype is None else _nl.to_dtype(dtype)
    if rect is None:
        return _mark_partial(_new_like(shape, dt), None)
    if isinstance(src, _SplitView):  # dims walked by several grid axes: one DMA per piece
        dst = _new_like(shape, dt)
        src.copy_into(dst, rect)
        return _mark_partial(dst, rect)
    view = src.resolve(rect) if isinstance(src, _GridView) else _index_rect(src, rect)
    if _is_full(rect, shape) and list(view.shape) == shape:
        return _nl.load(view, dt)
    dst = _new_like(shape, dt)
    _isa.dma_copy(_index_rect(dst, rect), view)
    return _mark_partial(dst, rect)


def store(dst, value, *, mask=None, **kwargs):
    """Tile (SBUF or PSUM) or scalar -> HBM; only the masked (and valid) elements.
    t[idx_tile[i_p, 0], i_f] as dst stores row p of value to the row idx_tile[p, 0]."""
    if isinstance(dst, _IndirectView):
        _no_mask(mask, "nl.store to rows chosen at run time")
        if not _is_view(value):
            value = _nl.full(list(dst.shape), float(value), dst.dtype)
        value = _concrete(_operand(value, "nl.store"))
        if value.buffer == psum:
            value = _nl.copy(value)
        _nl.store(dst, value)
        return
    dst = _operand(dst, "nl.store")
    if isinstance(dst, _SplitView):  # dims walked by several grid axes: one DMA per piece
        _no_mask(mask, "nl.store to a subscript that combines grid axes in one dim")
        if _is_view(value):
            value = _concrete(_operand(value, "nl.store"))
            value = _nl.copy(value) if value.buffer == psum else value
        dst.assign(value, lambda view, v: _store_view(view, v) if _is_view(v) else
                   _nl._fill_hbm(view, float(v), user_span()))
        return
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
        value = _operand(value, "nl.store")
        if len(value.shape) != len(shape) and _is_full(rect, shape) and \
                math.prod(value.shape) == math.prod(shape):
            # The same elements in another rank (a [1, 1] partition reduction into one element
            # of a [B, H] tensor, as nki-samples' flash attention backward stores its sink
            # gradients): a copy in element order.
            value = _concrete(value)
        else:
            value = _concrete(_restrict(value, rect, shape))
    _store_view(view, value)


def atomic_rmw(dst, value, op, *, mask=None, **kwargs):
    """dst = op(dst, value) with op np.add / nl.add (the only one NKI allows), in fp32. dst may
    be rows chosen at run time, t[idx_tile[i_p, 0], i_f]: every partition's row is added, rows
    named twice included, one partition after another (4 instructions per partition:
    neuron/dma_rmw.py); dst an HBM view: a load, an add and a store."""
    name = op if isinstance(op, str) else getattr(op, "name", None)
    name = name if isinstance(name, str) else getattr(op, "__name__", repr(op))
    if name not in ("add", "sum"):
        _error("reduce-op", f"nl.atomic_rmw: op={name} is not supported; NKI's atomic "
               "read-modify-write only adds (op=np.add)")
    if isinstance(dst, _IndirectView):
        _no_mask(mask, "nl.atomic_rmw to rows chosen at run time")
        if not _is_view(value):
            value = _nl.full(list(dst.shape), float(value), float32)
        _rmw.accumulate(dst, _concrete(_operand(value, "nl.atomic_rmw")))
        return
    store(dst, value=add(load(dst, mask=mask, dtype=float32), value, dtype=float32), mask=mask)


def _load_rows(src, mask, dtype):
    """nl.load of rows chosen at run time (src[idx_tile[i_p, 0], i_f]); mask= restricts the
    partitions and columns loaded (nki-samples' nearest-neighbour resize masks the partitions
    past the image's last pixel), the other elements are left unwritten."""
    dt = src.dtype if dtype is None else _nl.to_dtype(dtype)
    shape = list(src.shape)
    rect = _rectangle(mask, shape)
    if rect is None:
        return _mark_partial(_new_like(shape, dt), None)
    if _is_full(rect, shape):
        return _nl.load(src, dt)
    rows = _IndirectView(_index_rect(src.view, [(0, src.view.shape[0])] + rect[1:]),
                         _index_rect(src.rows, [rect[0], (0, 1)]))
    dst = _new_like(shape, dt)
    part = _index_rect(dst, rect)
    if dt == src.dtype:
        _isa.dma_copy(part, rows)
    else:
        _isa.tensor_copy(part, _nl.load(rows))
    return _mark_partial(dst, rect)


def load_transpose2d(src, *, mask=None, dtype=None, **kwargs):
    """HBM [a, b] -> SBUF [b, a] by DMA transpose (b <= 128; a is any free size), as the
    current API's."""
    src = _operand(src, "nl.load_transpose2d")
    a, b = src.shape
    rect = _rectangle(mask, [b, a])
    dt = src.dtype if dtype is None else _nl.to_dtype(dtype)
    if rect is None:
        return _mark_partial(_new_like([b, a], dt), None)
    view = _restrict(src, [rect[1], rect[0]], [a, b])
    t = _nl.load_transpose2d(_concrete(view), dtype=dt)
    if _is_full(rect, [b, a]):
        return t
    dst = _new_like([b, a], dt)
    _write_rect(dst, rect, t)
    return _mark_partial(dst, rect)


def gather_flattened(data, indices, *, mask=None, dtype=None, **kwargs):
    """Per partition, data's flattened free dims gathered at indices: a new SBUF tile of
    indices' shape (nisa.nc_n_gather)."""
    _no_mask(mask, "nl.gather_flattened")
    return _nl.gather_flattened(_concrete(_operand(data, "nl.gather_flattened")),
                                _concrete(_operand(indices, "nl.gather_flattened")), 0,
                                None if dtype is None else _nl.to_dtype(dtype))


def shared_constant(constant, dtype=None, **kwargs):
    """A constant HBM tensor holding the NumPy array `constant` (cast to dtype): a hidden
    kernel input (constants.py)."""
    return _constants.request(constant, dtype)


def loop_reduce(x, op, loop_indices, *, dtype=None, mask=None, **kwargs):
    """The value to assign to the accumulating view (LoopReduce)."""
    _no_mask(mask, "nl.loop_reduce")
    return _LoopReduce(x, op, dtype)


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

def _grid_values(g):
    """An index grid used as a value (`nl.equal(t, nl.arange(E)[None, None, :])`): an int32
    tile of its shape holding its values (nisa.iota)."""
    if not _is_int(g.const):
        _error("index", f"an index grid with a runtime or loop term ({g.const}) cannot be used "
               "as a value; nisa.iota takes a grid of constants")
    shape = list(g.shape) if len(g.shape) >= 2 else [1] + list(g.shape)
    coef = list(g.coef) if len(g.shape) >= 2 else [0] + list(g.coef)
    t = _nl.ndarray(shape, int32)
    _isa.iota(t, [[c, n] for c, n in zip(coef[1:], shape[1:])], int(g.const), coef[0])
    return t


def _is_int(v):
    return isinstance(v, (int, np.integer)) or (isinstance(v, _C.Affine) and v.is_constant())


def _aligned(x, y):
    """The operands of a binary nl function: index grids as values, and a tile of lower rank
    than the other partition aligned (trailing size-1 dims: NKI_API.md 4.8 treats a reduced
    `(P,)` tile as `[P, 1]`; NxD's router multiplies a [P, H] tile into a [P, H, T] one so)."""
    x, y = (_grid_values(v) if isinstance(v, _Grid) else v for v in (x, y))
    if not (_is_view(x) and _is_view(y)) or len(x.shape) == len(y.shape):
        return x, y
    low, high = (x, y) if len(x.shape) < len(y.shape) else (y, x)
    low = _pad_trailing(_concrete(_operand(low)), len(high.shape))
    return (low, y) if len(x.shape) < len(y.shape) else (x, low)


class _Fn:
    """A legacy nl function: the current one with mask= (and legacy dtype defaults). Usable as
    an ISA operator argument like the current nl functions (its __name__ is the op name)."""

    _KEYWORDS = {"unary": {"x"}, "binary": {"x", "y"}, "reduce": {"x", "axis", "keepdims"}}

    def __init__(self, name, kind, default_dtype=None):
        self.name = self.__name__ = name
        self.kind, self.default_dtype = kind, default_dtype
        self.fn = getattr(_nl, name)
        # the keywords __call__'s **kwargs may hold (dtype=, mask= are its own; keywords.py)
        self._ok = frozenset(self._KEYWORDS[kind] | {"dtype", "mask"} | _keywords.NL)

    def __repr__(self):
        return f"nl.{self.name}"

    def _dtype(self, dtype, *ops):
        if dtype is not None:
            return _nl.to_dtype(dtype)
        return self.default_dtype

    def __call__(self, x, *args, dtype=None, mask=None, **kwargs):
        if kwargs:
            if not kwargs.keys() <= self._ok:
                _keywords.refuse(f"nl.{self.name}", kwargs, self._ok, _keywords.NL)
            kwargs = {k: _resolve(v) for k, v in kwargs.items() if k not in _keywords.NL}
        _flush()
        x, args = _resolve(x), tuple(_resolve(a) for a in args)
        if self.kind == "unary":
            dt = self._dtype(dtype)
            return _masked(lambda a: self.fn(a, dt), [x], mask,
                           lambda: dt or _operand(x).dtype)
        if self.kind == "binary":
            y = args[0] if args else kwargs.pop("y")
            x, y = _aligned(x, y)
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


_UNARY = _C.unary_function_names()  # every element-wise function of the C++ tables (ops.hpp)
_BOOL = ("equal not_equal greater greater_equal less less_equal logical_and logical_or "
         "logical_xor").split()
_ARITH = [n for n in _C.binary_function_names() if n not in _BOOL]
for _n in _UNARY:
    globals()[_n] = _Fn(_n, "unary")
for _n in _ARITH:
    globals()[_n] = _Fn(_n, "binary")
for _n in _BOOL:  # comparisons and logical ops return bool tiles by default (legacy rule)
    globals()[_n] = _Fn(_n, "binary", bool_)
sum, max, min, mean = (_Fn(n, "reduce") for n in ("sum", "max", "min", "mean"))
copy = _Fn("copy", "unary")
bypass = _nl.bypass


def invert(x, *, dtype=None, mask=None, **kwargs):
    """Bitwise NOT of an integer tile (neuron.language.invert)."""
    dt = None if dtype is None else _nl.to_dtype(dtype)
    return _masked(lambda a: _nl.invert(a, dt), [x], mask, lambda: dt or _operand(x).dtype)


def _tile_or_number(v):
    if isinstance(v, (bool, int, float)):
        return float(v)
    t = _operand(v)
    return _concrete(t) if _is_view(t) else t


def rand(shape, dtype=float32, *, mask=None, **kwargs):
    """A new tile of uniform values in [0, 1) (neuron.language.rand; docs/random.md)."""
    if mask is not None:
        _error("unsupported", "nl.rand(mask=...) is not supported: draw the whole tile and "
               "select the part you need")
    return _nl.rand(list(shape), dtype)


def random_seed(seed, *, mask=None, **kwargs):
    """Seeds the kernel's generator (a number or a [1, 1] integer tile)."""
    if mask is not None:
        _error("unsupported", "nl.random_seed(mask=...) is not supported")
    _nl.random_seed(_tile_or_number(seed))


def dropout(x, rate, *, dtype=None, mask=None, **kwargs):
    """x with each element zeroed with probability rate (a number or a one-element / [P, 1]
    tile), not rescaled (neuron.language.dropout)."""
    dt = None if dtype is None else _nl.to_dtype(dtype)
    r = _tile_or_number(rate)
    return _masked(lambda a: _nl.dropout(a, r, dt), [x], mask, lambda: dt or _operand(x).dtype)


def logical_not(x, *, dtype=None, mask=None, **kwargs):
    return equal(x, 0.0, dtype=bool_ if dtype is None else dtype, mask=mask)  # noqa: F821


def where(condition, x, y, *, dtype=None, mask=None, **kwargs):
    """x where condition, else y. condition may be a tile or, as NKI's simulator evaluates
    index grids as arrays, a comparison of index grids (`i_q >= i_k`; `&`-joined too): its
    0 / 1 tile is made by affine_select (nki-llama's causal flash attention writes it so)."""
    dt = None if dtype is None else _nl.to_dtype(dtype)
    if isinstance(condition, (_Cmp, _Mask)):
        condition = _predicate_tile(condition, x, y)
    return _masked(lambda c, a, b: _nl.where(c, a, b, dt), [condition, x, y], mask,
                   lambda: dt or next(o.dtype for o in (x, y, condition) if _is_view(o)))


def _predicate_tile(pred, x, y):
    """A uint8 tile of x's (else y's) shape: 1 where the index-grid comparison pred holds."""
    from . import isa as _legacy_isa
    like = next((o for o in (x, y) if _is_view(o)), None)
    if like is None:
        _error("operand", "nl.where with a comparison of index grids as its condition needs a "
               "tile as x or y (the shape the comparison is evaluated over)")
    t = full(tuple(_operand(like).shape), 1, dtype=uint8)
    for term in pred.terms if isinstance(pred, _Mask) else [pred]:
        if isinstance(term, bool):
            if not term:
                t = full(tuple(t.shape), 0, dtype=uint8)
            continue
        t = _legacy_isa.affine_select(term, t, 0)
    return t


def softmax(x, axis, *, dtype=None, compute_dtype=None, mask=None, **kwargs):
    """exp(x - max) / sum over the free axes `axis` (neuron.language.softmax)."""
    dt = None if dtype is None else _nl.to_dtype(dtype)
    cdt = None if compute_dtype is None else _nl.to_dtype(compute_dtype)
    return _masked(lambda t: _nl.softmax(t, axis, dt, cdt), [x], mask,
                   lambda: dt or _operand(x).dtype)


def rms_norm(x, w, axis, n, epsilon=1e-6, *, dtype=None, compute_dtype=None, mask=None,
             **kwargs):
    """x / sqrt(sum(x^2 over axis) / n + epsilon) * w (neuron.language.rms_norm)."""
    dt = None if dtype is None else _nl.to_dtype(dtype)
    return _masked(lambda t, wt: _nl.rms_norm(t, wt, axis, n, epsilon, dt), [x, w], mask,
                   lambda: dt or _operand(x).dtype)


prod = _Fn("prod", "reduce")


def _reduce_kept(fn, name, x, axis, dtype, mask, keepdims, default_dtype=None):
    x = _operand(x, f"nl.{name}")
    axes, dims, out_shape = _reduced(list(x.shape), axis, keepdims)
    dt = default_dtype if dtype is None else _nl.to_dtype(dtype)
    return _masked(lambda a: fn(a, axes, dt), [x], mask, lambda: dt or x.dtype, out_shape,
                   lambda r: [(0, 1) if d in axes else r[d] for d in dims])


def var(x, axis, *, dtype=None, mask=None, **kwargs):
    """The variance (divisor N) over the free axes `axis`; reduced dims are removed, as NKI's
    docs say (not below [P, 1], like nl.sum)."""
    r = _reduce_kept(_nl.var, "var", x, axis, dtype, mask, True)
    shape = _reduced(list(_operand(x, "nl.var").shape), axis, False)[2]
    if isinstance(r, _C.Tensor) and list(r.shape) != list(shape):
        r = r.reshape(tuple(shape))  # a view: only size-1 dims go
    return r


def all(x, axis, *, dtype=None, mask=None, **kwargs):  # noqa: A001 (NKI's name)
    """True where every element over the free axes `axis` is non-zero (dtype bool)."""
    return _reduce_kept(_nl.all, "all", x, axis, dtype, mask, False, bool_)


def expand_dims(data, axis, **kwargs):
    """A new tile of data's values with a size-1 dim at `axis` (not 0)."""
    return _nl.expand_dims(_concrete(_operand(data, "nl.expand_dims")), axis)


def shared_identity_matrix(n, dtype=uint8, **kwargs):
    """The n x n identity as a constant HBM tensor (like shared_constant; load it to use it)."""
    return _constants.request(np.eye(int(n)), uint8 if dtype is None else dtype)


def all_reduce(x, op, program_axes, *, dtype=None, mask=None, parallel_reduce=True,
               asynchronous=False, **kwargs):
    """op over x of the SPMD programs that differ only along program_axes; each of them gets
    the result (neuron.collectives.all_reduce: the same bits in every program)."""
    _no_mask(mask, "nl.all_reduce")
    from .. import collectives
    return collectives.all_reduce(_concrete(_operand(x, "nl.all_reduce")), op, program_axes,
                                  dtype, user_span())


_wrap_module(globals(), "nl", _keywords.NL,
             skip={"arange", "mgrid", "ds", "program_id", "num_programs", "program_ndim",
                   "spmd_dim", "loop_reduce", "affine_range", "sequential_range",
                   "static_range", "dynamic_range", "static_cast", "finfo"})
