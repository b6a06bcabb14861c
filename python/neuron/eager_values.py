"""Values in eager mode (python/neuron/eager.py): loop indices and program ids, which keep
their affine form so eager mode refuses what compiling refuses, and the NumPy arrays behind
eager tensors with the views that subscripts select."""
import math
import re

import numpy as np

from . import _C
from ._span import user_span
from .dtypes import numpy_dtype
from .errors import user_error

_HBM = (_C.Memory.hbm, _C.Memory.shared_hbm)


# ---- loop indices and program ids ------------------------------------------------------------

def _sym_of(v):
    return v._sym if isinstance(v, EagerIndex) else _C.Affine(int(v))


def _is_int(v):
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def _index_op(name, symbolic):
    # An index keeps its value and, as a traced index does, its affine form over the loop
    # variables and program ids, so eager mode refuses what a compiled kernel refuses.
    f = getattr(int, name)

    def op(self, *args):
        if args and not _is_int(args[0]):
            return f(int(self), *args)  # floats and the like: a plain Python result
        r = f(int(self), *(int(a) for a in args))
        sym = symbolic(self._sym, *args)
        return NotImplemented if sym is NotImplemented else EagerIndex(r, sym)
    return op


def _index_cmp(name):
    f = getattr(int, name)

    def cmp(self, other=0):
        # A rolled loop's index ("i<n>") or a program id compares: compiled kernels unroll
        # that loop or trace per program (unroll.py). Registers and runtime loop indices have
        # no value there.
        diff = self._sym - _sym_of(other) if _is_int(other) else None
        if diff is not None and has_value(diff):
            return f(int(self), int(other))
        user_error("control-flow", f"'{diff if diff is not None else self._sym}' (a register "
                   f"or runtime loop index; here {int(self)}) has no value when "
                   "the kernel is compiled, so eager mode refuses to compare or branch on it "
                   "too; select on data with nl.where / nisa.affine_select, or loop at run time "
                   "with nl.while_loop (int(i) gives its value for debugging)", user_span())
    return cmp


def _times(a, k):
    return NotImplemented if isinstance(k, EagerIndex) else a * int(k)


class EagerIndex(int):
    """A loop index (nl.affine_range, nl.sequential_range) or program id in eager mode: an int
    that prints and indexes as its value but, as in a compiled kernel, cannot be compared or
    branched on (rule control-flow), multiplied by another index, or used as a data value."""

    def __new__(cls, value, sym=None):
        self = super().__new__(cls, value)
        self._sym = _C.Affine(int(value)) if sym is None else sym
        return self

    __add__ = _index_op("__add__", lambda a, b: a + _sym_of(b))
    __radd__ = _index_op("__radd__", lambda a, b: _sym_of(b) + a)
    __sub__ = _index_op("__sub__", lambda a, b: a - _sym_of(b))
    __rsub__ = _index_op("__rsub__", lambda a, b: _sym_of(b) - a)
    __mul__ = _index_op("__mul__", _times)
    __rmul__ = _index_op("__rmul__", _times)
    __neg__ = _index_op("__neg__", lambda a: -a)
    __pos__ = _index_op("__pos__", lambda a: a)
    __eq__, __ne__ = _index_cmp("__eq__"), _index_cmp("__ne__")
    __lt__, __le__ = _index_cmp("__lt__"), _index_cmp("__le__")
    __gt__, __ge__ = _index_cmp("__gt__"), _index_cmp("__ge__")
    __hash__ = int.__hash__

    def __bool__(self):
        return self.__ne__(0)

    def __repr__(self):
        return str(int(self))


def _symbolic_slice_check(key, span):
    # The tracer's rule for slices over loop indices (language._subscript), on the affine forms.
    for k in key if isinstance(key, tuple) else (key,):
        if not isinstance(k, slice):
            continue
        if not any(isinstance(v, EagerIndex) and not v._sym.is_constant()
                   for v in (k.start, k.stop)):
            continue
        if k.start is None or k.stop is None:
            user_error("index", "a slice with loop indices needs a start and a stop "
                       "(t[i*128:(i+1)*128]); or use nl.ds(start, size)", span)
        if not (k.step is None or (_is_int(k.step) and int(k.step) > 0)):
            user_error("index", f"slice step must be a positive integer, got {k.step!r}", span)
        if not (_sym_of(k.stop) - _sym_of(k.start)).is_constant():
            user_error("index", f"slice {k.start}:{k.stop} does not have a constant size (stop "
                       "- start must not depend on loop indices)", span)


# ---- allocations and their views ---------------------------------------------------------------------------

class _Base:
    """One allocation: a kernel argument (the caller's array), an nl allocation or an op
    result. `flags` (PSUM only) holds the executor's per-element "last written by a matmul"
    flags (what nc_matmul(accumulate=None) reads), handed to and taken back from every one-op
    kernel that touches the tile (eager.py)."""

    def __init__(self, array, buffer, dtype, name, span, is_input=False):
        self.array, self.buffer, self.dtype, self.name = array, buffer, dtype, name
        self.span, self.is_input = span, is_input
        self.allocated = False  # made by nl.ndarray (true in `if t:`, as traced)
        self.flags = np.zeros(array.shape, np.uint8) if buffer == _C.Memory.psum else None

    @property
    def on_chip(self):
        return self.buffer not in _HBM


def _numpy_key(key, shape):
    """The NumPy subscript of an nl subscript (already checked by the tracer), keeping every
    dim: a scalar index k becomes k:k+1, so the view reshapes to the traced shape."""
    keys = key if isinstance(key, tuple) else (key,)
    if any(k is Ellipsis for k in keys):  # `...`: whole dims for the ones not named
        i = next(j for j, k in enumerate(keys) if k is Ellipsis)
        keys = keys[:i] + (slice(None),) * (len(shape) - len(keys) + 1) + keys[i + 1:]
    out = []
    for i, k in enumerate(keys):
        n = shape[i] if i < len(shape) else 1
        if isinstance(k, slice):
            start = 0 if k.start is None else int(k.start)
            stop = n if k.stop is None else int(k.stop)
            start = start + n if start < 0 else start
            stop = stop + n if stop < 0 else stop
            out.append(slice(start, stop, 1 if k.step is None else int(k.step)))
        elif hasattr(k, "start") and hasattr(k, "size") and not isinstance(k, (int, np.integer)):
            start = int(k.start)  # nl.ds
            out.append(slice(start, start + int(k.size)))
        elif isinstance(k, (int, np.integer)) and not isinstance(k, bool):
            k = int(k)
            k = k + n if k < 0 else k
            out.append(slice(k, k + 1))
        else:
            raise TypeError(f"unsupported subscript {k!r} of type {type(k).__name__}")
    return tuple(out)


def _view_of(array, chain):
    v = array
    for key, shape in chain:
        if isinstance(key, ApKey):  # t.ap(...): a view of the whole storage
            storage = key.storage_of(array)
            v = storage[key.numpy_key()]
            v = (v.transpose(key.axes()) if key.order else v).reshape(shape)
        elif isinstance(key, BroadcastKey):
            v = np.broadcast_to(v, shape)
        else:
            v = v[_numpy_key(key, v.shape)].reshape(shape)
        if v.size and not np.may_share_memory(v, array):
            raise AssertionError("eager view is a copy")  # pragma: no cover (our bug)
    return v


# ---- registers and access patterns -------------------------------------------------------------

class EagerRegister:
    """A register (nisa.register_alloc) in eager mode: a mutable Python int. Reading it in an
    index expression gives an EagerIndex of its current value (its affine form is the register,
    so comparing or branching on it is refused, as when compiled)."""

    def __init__(self, value, sym):
        self.value, self.sym = int(value), sym

    def index(self):
        return EagerIndex(self.value, self.sym)

    def __int__(self):
        return self.value

    __index__ = __int__

    def __repr__(self):
        return f"<register {self.sym} = {self.value}>"

    def __bool__(self):
        return bool(self.index())


def _register_op(name):
    return lambda self, *args: getattr(self.index(), name)(*args)


for _name in ("add radd sub rsub mul rmul neg pos eq ne lt le gt ge".split()):
    setattr(EagerRegister, f"__{_name}__", _register_op(f"__{_name}__"))
EagerRegister.__hash__ = None


def has_value(sym):
    """Does an index's affine form have a value when compiled? Rolled loop indices ("i<n>":
    the loop is unrolled), program ids and grid sizes ("pid<n>", "npid<n>": traced per program
    or per grid) do (unroll.py); registers and runtime loop indices do not."""
    return all(re.fullmatch(r"(i|pid|npid)\d+", n) for n in re.findall(r"[A-Za-z_]\w*", str(sym)))


def traced_bound(v):
    """A loop bound as the traced loop sees it: a value without one at compile time (a
    register, a program id) as its symbol, so the tracer refuses it as a compiled kernel does."""
    if isinstance(v, EagerRegister):
        return v.sym
    if isinstance(v, EagerIndex) and not has_value(v._sym):
        return v._sym
    return v


def frozen(v):
    """v with every register replaced by its current value (an EagerIndex): subscripts, nl.ds
    starts and slices read registers when they are evaluated, as instructions do."""
    if isinstance(v, EagerRegister):
        return v.index()
    if isinstance(v, tuple):
        return tuple(frozen(x) for x in v)
    if isinstance(v, slice):
        return slice(frozen(v.start), frozen(v.stop), frozen(v.step))
    if hasattr(v, "start") and hasattr(v, "size") and isinstance(v.start, EagerRegister):
        return type(v)(frozen(v.start), v.size)  # nl.ds
    return v


class BroadcastKey:
    """t.broadcast(dim, size) in an eager view chain: size-1 dim `dim` of the view before it
    repeated `size` times (step 0; NumPy: a read-only broadcast view of the same memory)."""

    def __init__(self, dim, size):
        self.dim, self.size = dim, size

    def apply(self, view):
        return _C.broadcast_view(view, self.dim, self.size, user_span())


class ApKey:
    """t.ap(...) in an eager view chain: the view's slice of each storage dim (start, size, step,
    kept), as the C++ DSL chose it. It applies to the whole storage, not to the view before it."""

    def __init__(self, dims, storage=(), order=(), origin=0, on_chip=False, as_dtype=None):
        self.dims, self.storage = [tuple(d) for d in dims], tuple(storage)
        self.order = tuple(order)  # storage dims in view order (a transposing walk); () in order
        self.origin = origin       # the storage's first element (per partition on chip)
        self.on_chip = on_chip
        self.as_dtype = as_dtype   # a tile's bytes read as this dtype (t.view(dtype)); None: its own

    def apply(self, root):
        span = user_span()
        if self.storage:  # a walk of the storage seen with another shape (ir.hpp Access)
            root = _C.storage_view(root, list(self.storage), self.origin, self.as_dtype)
        if self.order:
            return _C.ordered_view(self._index(root, span), list(self.order))
        return self._index(root, span)

    def storage_of(self, array):
        """The NumPy view of `array` (the allocation) that this walk's storage is."""
        if not self.storage:
            return array
        # A strided view of the allocation's elements from the origin on (on chip, of each
        # partition), in the storage's row-major shape; its outermost dim may run past their
        # end, where the walk (checked by the verifier) never reads.
        rows = array.reshape(array.shape[0], -1) if self.on_chip else array.reshape(1, -1)
        if self.as_dtype is not None:  # the same bytes as as_dtype elements
            rows = rows.view(numpy_dtype(self.as_dtype))
        inner = self.storage[1:] if self.on_chip else self.storage
        item = rows.itemsize
        strides = [item * math.prod(inner[k + 1:]) for k in range(len(inner))]
        view = np.lib.stride_tricks.as_strided(
            rows[:, self.origin:], (rows.shape[0],) + tuple(inner),
            (rows.strides[0],) + tuple(strides), writeable=True)
        return view if self.on_chip else view[0]

    def axes(self):
        """The NumPy transpose of numpy_key's view that puts its dims in view order."""
        kept = sorted(self.order)
        return [kept.index(d) for d in self.order]

    def _index(self, root, span):
        subs = []
        for start, size, step, keep in self.dims:
            if not keep:
                subs.append(_C.subscript("scalar", _C.Affine(start), 0, 0, span))
            elif step == 1:
                subs.append(_C.subscript("ds", _C.Affine(start), size, 0, span))
            else:
                subs.append(_C.subscript("slice", _C.Affine(start), start + step * (size - 1) + 1,
                                         step, span))
        return _C.index(root, subs)

    def numpy_key(self):
        return tuple(slice(s, s + st * (n - 1) + 1, st) if keep else s
                     for s, n, st, keep in self.dims)
