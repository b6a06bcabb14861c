"""neuron.language (import as nl): the NKI `nki.language` surface. Every call records Kernel IR
through the C++ DSL, so a Python kernel traces to the same IR as the same C++ kernel."""
import builtins
import collections
import math
import threading
import typing

import numpy as np

from . import _C
from . import eager as _eager
from . import eager_dynamic as _eager_dynamic
from . import eager_views as _eager_views  # noqa: F401 (t.slice, t.strides, ... on eager tensors)
from . import unroll as _unroll
from . import views as _views  # noqa: F401 (t.slice, t.strides, ... on traced tensors)
from ._span import user_span
from .access import BitcastView as _BitcastView, IndirectView, SplitView as _SplitView, \
    ap as _ap, as_index as _as_index
from .dtypes import to_dtype  # noqa: F401 (nl.to_dtype)
from .errors import user_error
from .reshaped import Reshaped as _Reshaped, dma_operand as _dma_operand

tensor = _C.Tensor

# ---- dtypes and buffers ----------------------------------------------------------------------
float32, bfloat16, float16 = _C.DType.float32, _C.DType.bfloat16, _C.DType.float16
tfloat32 = _C.DType.tfloat32  # the Tensor engine's 1-8-10 operand format, in 32 bits (numerics.md)
float8_e4m3, float8_e5m2 = _C.DType.float8_e4m3, _C.DType.float8_e5m2
float8_e4m3fn = _C.DType.float8_e4m3fn  # OCP: no infinities, largest 448 (docs/numerics.md)
float8_e8m0fnu = _C.DType.float8_e8m0fnu  # OCP MX scale: 2^(code - 127), 0xFF NaN (mx.md)
# MX data (NeuronCore-v4): four fp8 / fp4 values packed per element, for quantize_mx and
# nc_matmul_mx only (docs/mx.md)
float8_e5m2_x4, float8_e4m3fn_x4 = _C.DType.float8_e5m2_x4, _C.DType.float8_e4m3fn_x4
float4_e2m1fn_x4 = _C.DType.float4_e2m1fn_x4
int8, int16, int32 = _C.DType.int8, _C.DType.int16, _C.DType.int32
uint8, uint16, uint32 = _C.DType.uint8, _C.DType.uint16, _C.DType.uint32
bool_ = _C.DType.bool_

sbuf, psum, hbm, shared_hbm = _C.Memory.sbuf, _C.Memory.psum, _C.Memory.hbm, _C.Memory.shared_hbm


private_hbm = hbm  # NKI: `nl.hbm` is an alias of `nl.private_hbm`


class tile_size:
    """NKI's tile limits (NKI_API.md 2.3) for trn2; the numbers come from the C++ target table
    (neuron/base/target.hpp)."""
    pmax = _C.tile_limits["pmax"]
    psum_fmax = psum_bank_fmax = _C.tile_limits["psum_fmax"]  # fp32 elements in a PSUM bank
    psum_bank_fmax_bytes = psum_fmax * 4
    psum_num_banks = 8
    gemm_stationary_fmax = _C.tile_limits["gemm_stationary_fmax"]
    gemm_moving_fmax = _C.tile_limits["gemm_moving_fmax"]
    bn_stats_fmax = _C.tile_limits["bn_stats_fmax"]
    # Usable SBUF bytes per partition; the total over the partitions; in fp32 elements.
    total_available_sbuf_size = sbuf_fmax_bytes = _C.sbuf_bytes_per_partition("trn2")
    sbuf_size_bytes = pmax * sbuf_fmax_bytes
    sbuf_fmax = sbuf_fmax_bytes // 4
    # Byte alignment of free offsets in direct allocation, as NKI's KLR gives them (NKI_API.md
    # 2.3; another public re-implementation says 16 and 16). neuron places tiles itself, at
    # 64-byte offsets, which honour either.
    psum_min_align = 4
    sbuf_min_align = 1


class fp32:
    """fp32 limits (nl.fp32.min is the most negative finite float32, NKI's reduction start)."""
    min = float(np.finfo(np.float32).min)
    max = float(np.finfo(np.float32).max)


class NKIObject:
    """The base class of NKI configuration classes. As in NKI, a subclass needs no __init__:
    `class Cfg(nl.NKIObject): tile: int = 128` takes `Cfg(tile=64)` (keywords, or positions in
    the order the annotations are declared, base classes first); a field not given keeps its
    class default, or None. A `@dataclass` subclass has the dataclass's own __init__. An
    instance passed to a kernel is a compile-time parameter keyed by its type and fields.

    A plain class attribute (`section_idx = None`, no annotation) is a field too, as NKI treats
    it: nki-library's `@dataclass class SectionParams(nl.NKIObject)` declares its fields that
    way and is built with keywords. Such attributes get an annotation when the subclass is
    created, before a @dataclass decorator reads them (values that cannot be dataclass defaults,
    lists and dicts, stay plain attributes).

    A field without a default defaults to None, in a @dataclass subclass too: NKI does not
    require every field at construction (nki-library's MLP TKG constants declare a field,
    `remainderIFused`, that their constructor call never passes), so neither does neuron."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("__annotations__")
        if own is None:
            own = {}
            cls.__annotations__ = own
        for name, value in list(cls.__dict__.items()):
            # (methods, properties and other descriptors are not fields)
            if name.startswith("__") or name in own or hasattr(type(value), "__get__") or \
                    type(value).__hash__ is None:
                continue
            own[name] = typing.Any
        for name in own:
            if not name.startswith("__") and not hasattr(cls, name):
                setattr(cls, name, None)

    def __init__(self, *args, **kwargs):
        names = [n for c in reversed(type(self).__mro__) for n in getattr(c, "__annotations__", {})
                 if not n.startswith("__")]
        names = list(dict.fromkeys(names))
        if len(args) > len(names):
            raise TypeError(f"{type(self).__name__}() takes at most {len(names)} positional "
                            f"arguments ({', '.join(names)}), got {len(args)}")
        for n, v in zip(names, args):
            setattr(self, n, v)
        for n, v in kwargs.items():
            if n not in names and not hasattr(type(self), n):
                raise TypeError(f"{type(self).__name__}() got an unexpected keyword argument "
                                f"{n!r}; its fields are {', '.join(names) or 'none'}")
            setattr(self, n, v)

    def __repr__(self):
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in vars(self).items())})"

    def __eq__(self, other):
        return type(self) is type(other) and vars(self) == vars(other)

    __hash__ = None


# ---- allocation ------------------------------------------------------------------------------

@_eager.op()
def ndarray(shape, dtype, buffer=sbuf, name="", address=None):
    """An uninitialised tensor. address=(partition, byte offset) asks for a fixed on-chip place
    (NKI's direct allocation): accepted, and the tile is placed by neuron's allocator, which never
    lets two tensors share storage (docs/nki-compat.md, "Direct allocation")."""
    if address is not None and (not isinstance(address, (tuple, list)) or len(address) != 2):
        raise TypeError(f"nl.ndarray: address is a (partition, byte offset) pair, got "
                        f"{address!r:.60}")
    name = name or ""  # NKI kernels pass name=None
    # Shared HBM is one tensor for every program; private HBM (nl.hbm) is each program's own
    # scratch, allocated in its body.
    if _State.program is not None and buffer == shared_hbm:
        return _program_shared(list(shape), to_dtype(dtype), buffer, name, user_span())
    t = _C.ndarray(list(shape), to_dtype(dtype), buffer, name, user_span())
    serial = _C.trace_serial()
    if _State.allocated[0] != serial:
        _State.allocated = (serial, set())
    _State.allocated[1].add(t.name)
    return t


def _program_shared(shape, dtype, buffer, name, span):
    """A shared HBM allocation while each program is traced on its own: the k-th one of every
    program is the first program's k-th (the grid's programs share their outputs)."""
    k, _State.shared_next = _State.shared_next, _State.shared_next + 1
    if k == len(_State.shared):
        if any(_State.program):
            user_error("kernel-output", f"program {_State.program} allocates shared HBM tensor "
                       f"#{k} but the first program allocated only {k}; the programs of a grid "
                       "share their outputs, so they must allocate the same ones", span)
        _State.shared.append(_C.ndarray(shape, dtype, buffer, name, span))
    t = _State.shared[k]
    if list(t.shape) != shape or t.dtype != dtype:
        user_error("kernel-output", f"program {_State.program} allocates shared HBM tensor #{k} "
                   f"as {dtype}{shape} but the first program allocated {t.dtype}"
                   f"{list(t.shape)}; the programs of a grid share their outputs, so they must "
                   "allocate the same ones", span)
    return t


@_eager.op()
def zeros(shape, dtype, buffer=sbuf, name=""):
    return full(shape, 0.0, dtype, buffer, name)


@_eager.op()
def ones(shape, dtype, buffer=sbuf, name=""):
    return full(shape, 1.0, dtype, buffer, name)


@_eager.op()
def full(shape, fill_value, dtype, buffer=sbuf, name=""):
    """A new tensor of fill_value. In HBM (which engines do not write) it is an nl.ndarray with
    a filled SBUF tile stored into it, 128 rows at a time."""
    span = user_span()
    if buffer in (hbm, shared_hbm):
        t = ndarray(shape, dtype, buffer, name)
        if len(t.shape) >= 2:
            _fill_hbm(t, float(fill_value), span)
            return t
        from .isa import dma_copy  # 1-D: a [1, n] tile's elements copied in order by DMA
        n, step = builtins.max(1, math.prod(t.shape)), 16384
        row = _C.full([1, builtins.min(n, step)], float(fill_value), to_dtype(dtype), sbuf, "",
                      span)
        for at in builtins.range(0, n, step):
            k = builtins.min(step, n - at)
            dma_copy(t[at:at + k] if k != n else t, row if k == row.shape[1] else row[:, 0:k])
        return t
    return _C.full(list(shape), float(fill_value), to_dtype(dtype), buffer, name or "", span)


def _tensor_arg(x, fn):
    if not isinstance(x, _C.Tensor):
        raise TypeError(f"nl.{fn} takes an nl tensor, got {type(x).__name__}")


@_eager.op()
def zeros_like(x, dtype=None, buffer=None, name=""):
    _tensor_arg(x, "zeros_like")
    if (x.buffer if buffer is None else buffer) in (hbm, shared_hbm):
        return full(x.shape, 0.0, x.dtype if dtype is None else dtype,
                    x.buffer if buffer is None else buffer, name)
    return _C.zeros_like(x, to_dtype(dtype), buffer, name or "", user_span())


@_eager.op()
def empty_like(x, dtype=None, buffer=None, name=""):
    """An uninitialised tensor of x's shape (dtype and buffer default to x's)."""
    _tensor_arg(x, "empty_like")
    return ndarray(x.shape, x.dtype if dtype is None else dtype,
                   x.buffer if buffer is None else buffer, name)


# ---- data movement ---------------------------------------------------------------------------

@_eager.op()
def load(src, dtype=None):
    if isinstance(src, IndirectView):  # t.ap(..., vector_offset=rows): rows read at run time
        return _C.load_rows(src.view, src.rows, _C.oob_mode.error, to_dtype(dtype), user_span())
    if isinstance(src, (_BitcastView, _SplitView)):  # .ap(dtype=) / a transposing pattern
        span = user_span()
        if dtype is not None and to_dtype(dtype) != src.dtype:
            user_error("dtype", f"nl.load of a reinterpreting or transposing view moves its "
                       f"{src.dtype.name_} elements unchanged; dtype={to_dtype(dtype).name_} "
                       "is not applied (convert the tile afterwards)", span)
        dst = _C.ndarray(list(src.shape), src.dtype, sbuf, "", span)
        from .isa import dma_copy
        dma_copy.__wrapped__(dst, src)  # the traced body (this call is already an op)
        return dst
    if isinstance(src, _Reshaped):  # a tile of the reshaped shape, filled from the base view
        span = user_span()
        dst = _C.ndarray(list(src.shape), src.dtype if dtype is None else to_dtype(dtype), sbuf,
                         "", span)
        _C.dma_copy(dst, _dma_operand(src, dst, "nl.load", span), span)
        return dst
    return _C.load(src, to_dtype(dtype), user_span())


@_eager.op(writes=("dst",))
def store(dst, value):
    if isinstance(dst, IndirectView):
        _C.store_rows(dst.view, dst.rows, value, _C.oob_mode.error, user_span())
        return
    if isinstance(dst, (_BitcastView, _SplitView)):  # .ap(dtype=) / a transposing pattern
        span = user_span()
        if not isinstance(value, _C.Tensor) or value.buffer == psum:
            value = _C.copy(value, None, span) if isinstance(value, _C.Tensor) else value
        if not isinstance(value, _C.Tensor):
            user_error("unsupported", f"nl.store of {value!r} into a reinterpreting or "
                       "transposing view: store a tile", span)
        from .isa import dma_copy
        dma_copy.__wrapped__(dst, value)  # the traced body (this call is already an op)
        return
    if isinstance(dst, _Reshaped):  # the tile's elements, in order, into the base view
        span = user_span()
        if not isinstance(value, _C.Tensor):
            user_error("unsupported", f"nl.store of {value!r} into the reshaped tensor "
                       f"'{dst.name}': store a tile of its shape {list(dst.shape)}", span)
        if value.buffer == psum:  # DMA does not reach PSUM: through SBUF, as nl.store does
            value = _C.copy(value, None, span)
        _C.dma_copy(_dma_operand(dst, value, "nl.store", span), value, span)
        return
    _C.store(dst, value, user_span())


@_eager.op()
def gather_flattened(data, indices, axis=0, dtype=None):
    """result[p, j...] = data[p, indices[p, j...]] over data's flattened free dims: a new SBUF
    tile of indices' shape (nisa.nc_n_gather)."""
    span = user_span()
    if _int(axis, "gather_flattened axis") != 0:
        user_error("unsupported", f"gather_flattened(axis={axis}): only axis=0 (gather within "
                   "each partition) is supported", span)
    _tensor_arg(data, "gather_flattened")
    _tensor_arg(indices, "gather_flattened")
    dst = _C.ndarray(list(indices.shape), data.dtype if dtype is None else to_dtype(dtype), sbuf,
                     "", span)
    _C.nc_n_gather(dst, data, indices, span)
    return dst


@_eager.op()
def broadcast_to(x, shape):
    return _C.broadcast_to(x, list(shape), user_span())


@_eager.op()
def device_print(prefix, x):
    _C.device_print(prefix, x, user_span())


# ---- matrix operations -----------------------------------------------------------------------

@_eager.op()
def matmul(x, y, transpose_x=False):
    return _C.matmul(x, y, transpose_x, user_span())


@_eager.op()
def transpose(x, dtype=None):
    return _C.transpose(x, to_dtype(dtype), user_span())


# ---- element-wise functions: objects usable as calls and as ISA operator arguments ------------

def _operand(v):
    if isinstance(v, _C.Tensor):
        return v
    if isinstance(v, (bool, int, float, np.number)):
        return float(v)
    if isinstance(v, _C.Affine):  # a program id or loop index as a number: its value
        return float(_affine_value(v, "a scalar operand"))
    tile = getattr(type(v), "_neuron_tile", None)  # a value not emitted yet (legacy/lincomb.py)
    if tile is not None:
        return tile(v)
    raise TypeError(f"expected an nl tensor or a number, got {type(v).__name__}")


class _Fn:
    def __init__(self, name):
        self.name = name
        self.__name__ = name

    def __repr__(self):
        return f"nl.{self.name}"


class _Copy(_Fn):
    @_eager.op()
    def __call__(self, x, dtype=None):
        return _C.copy(x, to_dtype(dtype), user_span())


_INTEGER = {int8, int16, int32, uint8, uint16, uint32}


class _Unary(_Fn):
    @_eager.op()
    def __call__(self, x, dtype=None):
        # (an integer tile goes through fp32 and back: the C++ DSL's nl::unary)
        return _C.unary(self.name, x, to_dtype(dtype), user_span())


class _Binary(_Fn):
    @_eager.op()
    def __call__(self, x, y, dtype=None):
        return _C.binary(self.name, _operand(x), _operand(y), to_dtype(dtype), user_span())


class _Reduce(_Fn):
    def __init__(self, name, public):
        super().__init__(name)
        self.__name__ = public

    @_eager.op()
    def __call__(self, x, axis, dtype=None, keepdims=False):
        if not isinstance(axis, (int, tuple, list)):
            raise TypeError(f"nl.{self.__name__}: axis must be an int or a tuple of ints, got "
                            f"{axis!r:.40}")
        axes = [axis] if isinstance(axis, int) else list(axis)
        return _C.reduce(self.name, x, axes, to_dtype(dtype), keepdims, user_span())


copy = _Copy("copy")
# One object per element-wise function of the C++ tables (ops.hpp): every activation function
# but copy (exp, log, tanh, ..., floor, arctan, gelu_dx, mish, ...) and every two-operand ALU
# operator (add, ..., mod, fmod, comparisons, logical and bitwise ops).
for _n in _C.unary_function_names():
    globals()[_n] = _Unary(_n)
for _n in _C.binary_function_names():
    globals()[_n] = _Binary(_n)
sum, max, min, mean = _Reduce("sum", "sum"), _Reduce("max", "max"), _Reduce("min", "min"), \
    _Reduce("mean", "mean")
bypass = _Fn("bypass")
average = _Fn("average")  # an operator of nisa.tensor_partition_reduce only
prelu = _Fn("prelu")  # an op of nisa.activate2 only (slope relu_param; isa_composed.py)


class MemoryRegion:
    """NKI's memory regions (nl.sbuf is nl.MemoryRegion.sbuf)."""
    sbuf, psum, private_hbm, shared_hbm = sbuf, psum, hbm, shared_hbm


def is_hbm(buffer):
    return buffer in (hbm, shared_hbm)


def is_sbuf(buffer):
    return buffer == sbuf


def is_psum(buffer):
    return buffer == psum


def is_on_chip(buffer):
    """SBUF or PSUM."""
    return buffer in (sbuf, psum)


class no_reorder:
    """`with nl.no_reorder():` keeps program order in NKI. neuron schedules by data
    dependencies, which gives the same values, so the block runs as written."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@_eager.op()
def where(condition, x, y, dtype=None):
    return _C.where(condition, _operand(x), _operand(y), to_dtype(dtype), user_span())


# ---- SPMD programs ---------------------------------------------------------------------------

@_eager.index
def program_id(axis=0):
    """This program's index along `axis` of the launch grid: symbolic (one trace serves every
    program) until the kernel's Python needs its value (`if pid == 0`, `tiles[pid]`); then each
    program is traced with its ids as ints (unroll.py, "per program")."""
    pid = _State.program
    if pid is not None and isinstance(axis, int) and 0 <= axis < len(pid):
        return pid[axis]
    return _C.program_id(axis, user_span())


@_eager.index
def num_programs(axes=0):
    """The launch grid's size along `axes`: symbolic until the kernel's Python needs its value,
    then the int (the kernel then compiles per grid)."""
    grid = _State.grid
    if grid is not None and isinstance(axes, int) and 0 <= axes < len(grid):
        return grid[axes]
    return _C.num_programs(axes, user_span())


def program_ndim():
    """The number of dimensions of the launch grid (kernel[g0, g1] has 2; a kernel launched
    without a grid has 1 here: NKI's 0 means no grid, and a neuron kernel always has one). Part
    of the compile key, so one kernel traced for grids of different ranks compiles per rank."""
    launch = _eager._state.launch
    if launch is not None:
        return len(launch.grid)
    if _State.grid_ndim is None:
        user_error("no-trace", "nl.program_ndim() called outside a kernel; call it inside a "
                   "@neuron.kernel function", user_span())
    return _State.grid_ndim


# ---- loops -----------------------------------------------------------------------------------

class _TraceState(threading.local):
    # Per thread (threads trace concurrently). serial: bumped per trace, so a loop generator of
    # an aborted trace never closes another trace's loop. views / last_inplace: the latest
    # (tensor, key, view) subscripts and in-place update, to recognise `t[k] += x`.
    serial = 0
    views = None  # a deque of the last kRecentViews subscripts, newest last
    last_inplace = None
    grid_ndim = None  # the launch grid's rank while a Kernel traces (program_ndim)
    grid = None       # the launch grid when the trace reads its size (num_programs as ints)
    program = None    # this program's ids when each program is traced on its own
    shared = None     # then: the first program's shared HBM tensors, in allocation order
    shared_next = 0   # and how many of them this program has allocated
    allocated = (-2, set())  # (_C.trace_serial(), the tiles nl.ndarray allocated in that trace)


_State = _TraceState()


def _range_args(args):
    if len(args) == 1:
        return 0, args[0], 1
    if len(args) == 2:
        return args[0], args[1], 1
    if len(args) == 3:
        return args
    raise TypeError(f"expected 1 to 3 range arguments, got {len(args)}")


def _rolled(args, sequential):
    span = user_span()
    for a in args:  # a rolled loop's index as a bound: unroll that loop (unroll.py)
        if isinstance(a, _C.Affine):
            _unroll.need_value(a)
    if builtins.any(isinstance(a, _C.Affine) and not a.is_constant() for a in args):
        user_error("range", f"a range bound of nl.affine_range / nl.sequential_range must be "
                   f"known when tracing, got {builtins.list(map(str, args))}; loop to a value read "
                   "at run time with nl.fori_loop or nl.dynamic_range", span)
    start, stop, step = (_int(a, "a range bound") for a in _range_args(args))
    if _unroll.unrolled(span):  # the kernel's Python needs this loop's index values
        yield from builtins.range(start, stop, step)
        return
    var, loop_id, extent = _C.open_loop(start, stop, step, sequential, span)
    _unroll.opened(var, span)
    if extent == 0:
        return
    serial = _State.serial
    try:
        # One trip: the index is the constant `start` (the loop stays, a block for its tiles),
        # so an .ap() offset or subscript built from it is constant (nki-library's output
        # projection offsets an SBUF .ap() by head * row length in a loop over one head: as a
        # variable that term would look like a partition offset).
        yield _C.Affine(start) + (_C.Affine.var(var, step) if extent > 1 else _C.Affine(0))
    finally:
        if serial == _State.serial:
            _C.close_loop(loop_id)
            _unroll.closed(span)


@_eager.loop
def affine_range(*args):
    """A rolled loop traced once: iterations are independent (may run in parallel)."""
    return _rolled(args, False)


@_eager.loop
def sequential_range(*args):
    """A rolled loop traced once whose iterations depend on each other."""
    return _rolled(args, True)


def static_range(*args):
    """Unrolled at trace time, like Python's range."""
    if not all(isinstance(a, int) or hasattr(a, "__index__") for a in args):
        raise TypeError(f"nl.static_range takes ints (start, stop, step), got "
                        f"{', '.join(repr(a) for a in args)}"[:120])
    return builtins.range(*args)


# ---- runtime loops: trip counts read when the loop starts (registers) ------------------------

@_eager_dynamic.runtime_loop
def fori_loop(lower, upper, body_fun, step=1):
    """body_fun(i) for i in range(lower, upper, step) at run time: the bounds are ints or
    registers (nisa.register_alloc), step a positive int; body_fun is traced once and returns
    nothing. i is an index usable in subscripts and .ap offsets."""
    span = user_span()
    step = _int(step, "fori_loop step")
    if step <= 0:  # (the runtime loop below would name dynamic_range)
        user_error("range", f"fori_loop step must be a positive integer, got {step}", span)
    _C.fori_loop(_as_index(lower, "fori_loop lower"), _as_index(upper, "fori_loop upper"),
                 body_fun, step, span)


@_eager_dynamic.runtime_loop
def while_loop(init, body_fun):
    """r = init; while r != 0: r = body_fun(r), at run time: init is an int or a register;
    body_fun is traced once and returns the register's next value (a register or an int)."""
    _C.while_loop(_as_index(init, "while_loop init"), body_fun, user_span())


@_eager_dynamic.runtime_range
def dynamic_range(start, stop=None, step=1):
    """A runtime loop (deprecated in NKI 0.6: use fori_loop): range(start, stop, step) whose
    bounds may be registers, its trip count read when the loop starts; traced once."""
    if stop is None:
        start, stop = 0, start
    loop = _C.open_dynamic_range(_as_index(start, "dynamic_range start"),
                                 _as_index(stop, "dynamic_range stop"),
                                 _int(step, "dynamic_range step"), user_span())
    serial = _State.serial
    try:
        yield loop.index
    finally:
        if serial == _State.serial:
            loop.close()
        else:
            loop.abandon()  # a stale generator of an aborted trace


class ds:
    """nl.ds(start, size): `size` elements from `start` (which may use loop indices)."""

    def __init__(self, start, size):
        self.start, self.size = start, size


# ---- tensor methods: indexing and operators --------------------------------------------------

def _int(v, what):
    """v as an int (an index expression whose loop terms cancelled, Affine(127), is its
    value); a float (even 2.0), bool, inf or anything else is a TypeError, never silently
    truncated."""
    if isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)):
        return int(v)
    if isinstance(v, _C.Affine):  # a program id or loop index: its value
        return _affine_value(v, what)
    raise TypeError(f"{what} must be an int, got {v!r} ({type(v).__name__})")


def _is_index(v):
    return isinstance(v, (int, np.integer, _C.Affine)) and not isinstance(v, bool)


def _affine(v):
    return v if isinstance(v, _C.Affine) else _C.Affine(_int(v, "an index"))


def _subscript(key, size, span):
    if isinstance(key, ds):
        return _C.subscript("ds", _affine(key.start), _int(key.size, "nl.ds size"), 0, span)
    if _is_index(key):
        a = _affine(key)
        if a.is_constant() and a.constant < 0:
            a = _C.Affine(a.constant + size)
        return _C.subscript("scalar", a, 0, 0, span)
    if isinstance(key, slice):
        start, stop, step = key.start, key.stop, key.step
        if start is None and stop is None and step in (None, 1):
            return _C.subscript("all", _C.Affine(0), 0, 0, span)
        symbolic = any(isinstance(v, _C.Affine) and not v.is_constant() for v in (start, stop))
        if symbolic:
            if start is None or stop is None:
                user_error("index", "a slice with loop indices needs a start and a stop "
                           "(t[i*128:(i+1)*128]); or use nl.ds(start, size)", span)
            width = _affine(stop) - _affine(start)
            if not width.is_constant():
                user_error("index", f"slice {start}:{stop} does not have a constant size "
                           "(stop - start must not depend on loop indices)", span)
            step = 1 if step is None else _int(step, "a slice step")
            if step <= 0:
                user_error("index", f"slice step must be positive, got {step}", span)
            count = builtins.max(-(-width.constant // step), 0)  # elements start, start+step, ...
            return _C.subscript("ds", _affine(start), count, step, span)
        start = 0 if start is None else _affine(start).constant
        stop = size if stop is None else _affine(stop).constant
        start = start + size if start < 0 else start
        stop = stop + size if stop < 0 else stop
        return _C.subscript("slice", _C.Affine(start), stop,
                            1 if step is None else _int(step, "a slice step"),
                            span)
    user_error("index", f"unsupported subscript {key!r} of type {type(key).__name__} (use ints, "
               "loop indices, slices or nl.ds)", span)


def _expand_ellipsis(keys, ndim, span):
    if not builtins.any(k is Ellipsis for k in keys):
        return keys
    if builtins.sum(k is Ellipsis for k in keys) > 1:
        user_error("index", "at most one `...` per subscript", span)
    i = keys.index(Ellipsis)
    return keys[:i] + (slice(None),) * builtins.max(ndim - len(keys) + 1, 0) + keys[i + 1:]


def _getitem(self, key):
    span = user_span()
    keys = _expand_ellipsis(key if isinstance(key, tuple) else (key,), self.ndim, span)
    shape = self.shape
    subs = [_subscript(k, shape[i] if i < len(shape) else 1, span) for i, k in enumerate(keys)]
    return remember_view(self, key, _C.index(self, subs))


def remember_view(t, key, view):
    """view, noted as what t[key] gave (updated_in_place)."""
    if _State.views is None:
        _State.views = collections.deque(maxlen=kRecentViews)
    _State.views.append((t, key, view))
    return view


# Subscripts remembered to recognise `t[k] += x`: Python evaluates t[k], then x (whose own
# subscripts come in between: `psum[...] += nisa.nc_matmul(w[i], x)`), then +=, then stores
# t[k] = the updated view.
kRecentViews = 64


def updated_in_place(t, key, value):
    """Whether `t[key] = value` ends Python's `t[key] op= x`: value is the view t[key] gave
    (one of the recent subscripts) and the latest view updated in place. Storing it again would
    copy the view onto itself, and a copy clears a PSUM tile's "written by a matmul" marks, so
    the next accumulate=auto matmul would overwrite the sum."""
    if _State.last_inplace is not value or not _State.views:
        return False
    return any(v is value and s is t and k is key for s, k, v in reversed(_State.views))


def _setitem(self, key, value):
    # t[key] = value stores (or copies, or fills) into the view, as in NKI.
    if updated_in_place(self, key, value):
        return  # `t[key] += x`: Python's augmented assignment; the view was updated in place
    view = _getitem(self, key)
    span = user_span()
    if isinstance(value, _C.Tensor):
        if view.buffer in (hbm, shared_hbm):
            _C.store(view, value, span)
        else:
            _C.tensor_copy(view, value, span)
    elif view.buffer in (hbm, shared_hbm):
        _fill_hbm(view, value, span)
    else:
        _C.memset(view, float(value), span)


def _fill_hbm(view, value, span):
    """hbm_view[...] = number: an SBUF tile of the value stored 128 rows at a time (engines do
    not write HBM, so there is no memset of HBM)."""
    shape = list(view.shape)
    if len(shape) < 2:
        user_error("index", "assigning a number to a 1-D HBM view is not supported; store a "
                   "[1, n] tile into a 2-D view", span)
    tile = _C.full([builtins.min(shape[0], 128)] + shape[1:], float(value), view.dtype, sbuf,
                   "", span)
    for row in builtins.range(0, shape[0], 128):
        rows = builtins.min(128, shape[0] - row)
        part = _C.index(view, [_C.subscript("slice", _C.Affine(row), row + rows, 1, span)])
        src = tile if rows == tile.shape[0] else \
            _C.index(tile, [_C.subscript("slice", _C.Affine(0), rows, 1, span)])
        _C.store(part, src, span)


def _binop(name, swap=False):
    def op(self, other):
        a, b = (_operand(other), self) if swap else (self, _operand(other))
        return _C.binary(name, a, b, None, user_span())
    return op


def _inplace(name):
    def op(self, other):
        _C.update(self, name, _operand(other), user_span())
        _State.last_inplace = self  # so `t[k] += x` does not copy the view onto itself
        return self
    return op


def _no_bool(self):
    # An HBM tensor (a kernel argument, an nl.ndarray in HBM) or a tile the kernel allocated
    # with nl.ndarray is an object that exists: NKI kernels test optional arguments with
    # `if bias:`, on chip too (nki-library's `if params.expert_index:`). The truth of a computed
    # tile (`if a > b:`) would be its data.
    if self.buffer not in (sbuf, psum) or (_State.allocated[0] == _C.trace_serial() and
                                           self.name in _State.allocated[1]):
        return True
    user_error("control-flow", "a traced tile has no truth value at trace time: `if`/`while` "
               "on device data is not supported; use nl.where(cond, x, y) or "
               "nisa.affine_select (to test for an optional tensor, write `if t is not None`)",
               user_span())


tensor.__getitem__ = _getitem
tensor.__setitem__ = _setitem
tensor.ap = _ap
for _name, _op in (("add", "add"), ("sub", "subtract"), ("mul", "multiply"),
                   ("truediv", "divide"), ("pow", "power")):
    setattr(tensor, f"__{_name}__", _binop(_op))
    setattr(tensor, f"__r{_name}__", _binop(_op, swap=True))
for _name, _op in (("add", "add"), ("sub", "subtract"), ("mul", "multiply"),
                   ("truediv", "divide")):
    setattr(tensor, f"__i{_name}__", _inplace(_op))
for _name, _op in (("lt", "less"), ("le", "less_equal"), ("gt", "greater"),
                   ("ge", "greater_equal")):
    setattr(tensor, f"__{_name}__", _binop(_op))
tensor.__neg__ = lambda self: negative(self)  # nl.negative: integer tiles keep their dtype
tensor.__bool__ = _no_bool


def _bitop(name, symbol, swap=False):
    # `a & b`, `a | b`, `a ^ b`, `a << n`, `a >> n`: the bitwise functions, on integer tiles
    # and integral numbers (a float tile's bits are no integer's; NKI_API.md 5.1).
    def op(self, other):
        b = _operand(other)
        floats = [str(t.dtype) for t in (self, b) if isinstance(t, _C.Tensor) and
                  t.dtype not in _INTEGER and t.dtype != bool_]
        if floats or (isinstance(b, float) and not b.is_integer()):
            what = f"a {floats[0]} tile" if floats else f"the number {other!r}"
            user_error("unsupported-operator", f"`{symbol}` is bitwise and takes integer tiles "
                       f"and integers, not {what}; use the logical functions for 1.0/0.0 "
                       "masks (nl.logical_and, nl.logical_or, nl.logical_xor) or convert with "
                       "dtype=nl.int32", user_span())
        if swap and not isinstance(b, _C.Tensor) and name.endswith("shift"):
            user_error("unsupported-operator", f"`{other!r} {symbol} tile`: a number shifted by "
                       f"a tile; use nisa.tensor_scalar(dst, tile, nl.{name}, {other!r}, "
                       "reverse0=True)", user_span())
        # &, |, ^ commute: a number on the left is the tile's operand
        a, b = (b, self) if swap and isinstance(b, _C.Tensor) else (self, b)
        return _C.binary(name, a, b, None, user_span())
    return op


def _invert(self):
    # `~t`: bitwise NOT of an integer tile, logical NOT of a bool tile (NumPy's meaning).
    from . import language_composed as composed
    if self.dtype == bool_:
        return composed.logical_not(self)
    if self.dtype not in _INTEGER:
        user_error("unsupported-operator", f"`~` takes integer or bool tiles, not {self.dtype}; "
                   "use nl.logical_not for a 1.0/0.0 mask", user_span())
    return composed.invert(self)


for _name, _op, _sym in (("and", "bitwise_and", "&"), ("or", "bitwise_or", "|"),
                         ("xor", "bitwise_xor", "^"), ("lshift", "left_shift", "<<"),
                         ("rshift", "right_shift", ">>")):
    setattr(tensor, f"__{_name}__", _bitop(_op, _sym))
    setattr(tensor, f"__r{_name}__", _bitop(_op, _sym, swap=True))
tensor.__invert__ = _invert


def _unsupported(what, instead):
    def op(self, *args):
        user_error("unsupported-operator", f"{what} is not supported on traced tensors; use "
                   f"{instead}", user_span())
    return op


tensor.__abs__ = lambda self: abs(self)  # nl.abs (this module's): integer tiles keep their dtype
tensor.__matmul__ = _unsupported("`@`", "nl.matmul(x, y, transpose_x=...) or nisa.nc_matmul")
tensor.__rmatmul__ = tensor.__matmul__
tensor.__mod__, tensor.__rmod__ = _binop("mod"), _binop("mod", swap=True)  # floored, as `%`
tensor.__floordiv__ = _unsupported("`//`", "nl.floor(nl.divide(x, y)) or nl.divide with an "
                                   "integer dtype= (which rounds to nearest)")
tensor.__iter__ = _unsupported("iterating over a tensor", "slices in a loop: "
                               "for i in nl.affine_range(n): t[i]")


# ---- loop indices and program ids: comparisons only when the value is known -----------------

def _affine_cmp(op):
    import operator
    fn = getattr(operator, op)

    def cmp(self, other):
        other_const = not isinstance(other, _C.Affine) or other.is_constant()
        if self.is_constant() and other_const:
            return fn(self.constant, other.constant if isinstance(other, _C.Affine) else other)
        for v in (self, other):  # a rolled loop's index: unroll that loop (unroll.py)
            if isinstance(v, _C.Affine):
                _unroll.need_value(v)
        user_error("control-flow", f"'{self}' (a program id, register or runtime loop index) "
                   "has no value at trace time, so it cannot be compared or branched on; select "
                   "on data with nl.where / nisa.affine_select, or loop at run time with "
                   "nl.while_loop", user_span())
    return cmp


for _op in ("eq", "ne", "lt", "le", "gt", "ge"):
    setattr(_C.Affine, f"__{_op}__", _affine_cmp(_op))


def _affine_value(v, op):
    """The int value of Affine v for Python arithmetic that is not affine (`op`): a constant's
    own; else unroll.py restarts the trace with the loop unrolled, or per program, where v is
    an int (NKI: program ids and loop indices are Python ints at trace time)."""
    if v.is_constant():
        return v.constant
    _unroll.need_value(v)
    user_error("control-flow", f"'{v}' (a program id, register or runtime loop index) has no "
               f"value at trace time, so `{op}` cannot compute with it; write the index "
               "arithmetic as a multiple plus an offset, or loop over the quotient and "
               "remainder", user_span())


def _affine_div(op, reflected):
    # `i // 2`, `i / 2`, `n % i`, `divmod(n, i)`: not affine, so the value is needed; a
    # constant Affine divides as its int.
    import operator
    fn = divmod if op == "divmod" else getattr(operator, op)

    def div(self, other):
        if not isinstance(other, (int, float, _C.Affine)):
            return NotImplemented
        a, b = (other, self) if reflected else (self, other)
        return fn(*(_affine_value(v, op) if isinstance(v, _C.Affine) else v for v in (a, b)))
    return div


def _affine_arith(op, reflected):
    # `i + 0.5`, `i * 1.0`, `i ** 2`: with a float operand, or a power, the result is no index
    # expression, so it is computed on the value (as _affine_div); int and Affine operands of
    # +, -, * keep the C++ affine arithmetic.
    import operator
    fn = getattr(operator, op)
    affine = getattr(_C.Affine, f"__{'r' if reflected else ''}{op}__", None)

    def arith(self, other):
        if affine is not None and not isinstance(other, (float, np.floating)):
            return affine(self, other)
        if not isinstance(other, (int, float, np.number, _C.Affine)):
            return NotImplemented
        a, b = (other, self) if reflected else (self, other)
        return fn(*(_affine_value(v, op) if isinstance(v, _C.Affine) else v for v in (a, b)))
    return arith


for _op in ("add", "sub", "mul", "pow"):
    setattr(_C.Affine, f"__{_op}__", _affine_arith(_op, False))
    setattr(_C.Affine, f"__r{_op}__", _affine_arith(_op, True))
_C.Affine.__floordiv__ = _affine_div("floordiv", False)
_C.Affine.__rfloordiv__ = _affine_div("floordiv", True)
_C.Affine.__truediv__ = _affine_div("truediv", False)
_C.Affine.__rtruediv__ = _affine_div("truediv", True)
_C.Affine.__mod__ = _affine_div("mod", False)
_C.Affine.__rmod__ = _affine_div("mod", True)
_C.Affine.__divmod__ = _affine_div("divmod", False)
_C.Affine.__rdivmod__ = _affine_div("divmod", True)
_C.Affine.__hash__ = lambda self: hash(str(self))
_C.Affine.__bool__ = lambda self: bool(_affine_cmp("ne")(self, 0))


# ---- composed from the functions above (language_composed.py) ---------------------------------

_COMPOSED = ("abs_max", "abs_min", "all", "dropout", "expand_dims", "invert",
             "load_transpose2d", "logical_not", "prod", "rand", "random_seed", "rms_norm",
             "shared_constant", "shared_identity_matrix", "softmax", "var")


_BUILTIN_NAMED = {"bool": lambda: bool_, "range": lambda: static_range}


def __getattr__(name):
    # The composed functions live in language_composed.py, which imports this module: reached
    # on first use (PEP 562), so the modules do not import each other.
    if name in _COMPOSED:
        from . import language_composed
        return getattr(language_composed, name)  # not cached in globals(): `all` would shadow the builtin
    if name in _BUILTIN_NAMED:  # nl.bool, nl.range: kept out of globals() for the same reason
        return _BUILTIN_NAMED[name]()
    raise AttributeError(f"module 'neuron.language' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_COMPOSED) | set(_BUILTIN_NAMED))
