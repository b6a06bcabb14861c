"""Values in eager mode (python/neuron/eager.py): loop indices and program ids, which keep
their affine form so eager mode refuses what compiling refuses, and the NumPy arrays behind
eager tensors with the views that subscripts select."""
import numpy as np

from . import _C
from ._span import user_span
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
        if _is_int(other) and (self._sym - _sym_of(other)).is_constant():
            return f(int(self), int(other))
        user_error("control-flow", f"loop index or program id (here {int(self)}) cannot be "
                   "compared or branched on: a compiled kernel traces it once as a symbol, so "
                   "eager mode refuses it too; unroll with range / nl.static_range, or select "
                   "on data with nl.where / nisa.affine_select (int(i) gives its value for "
                   "debugging)", user_span())
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
        if k.start is None or k.stop is None or not (k.step is None or
                                                     (_is_int(k.step) and int(k.step) == 1)):
            user_error("index", "a slice with loop indices needs a start and a stop and no step "
                       "(t[i*128:(i+1)*128]); use nl.ds(start, size)", span)
        if not (_sym_of(k.stop) - _sym_of(k.start)).is_constant():
            user_error("index", f"slice {k.start}:{k.stop} does not have a constant size (stop "
                       "- start must not depend on loop indices)", span)


# ---- allocations and their views ---------------------------------------------------------------------------

class _Base:
    """One allocation: a kernel argument (the caller's array), an nl allocation or an op
    result. `matmul` (PSUM only) marks the elements last written by a matmul, which is what
    nc_matmul(accumulate=None) reads."""

    def __init__(self, array, buffer, dtype, name, span, is_input=False):
        self.array, self.buffer, self.dtype, self.name = array, buffer, dtype, name
        self.span, self.is_input = span, is_input
        self.matmul = np.zeros(array.shape, bool) if buffer == _C.Memory.psum else None

    @property
    def on_chip(self):
        return self.buffer not in _HBM


def _numpy_key(key, shape):
    """The NumPy subscript of an nl subscript (already checked by the tracer), keeping every
    dim: a scalar index k becomes k:k+1, so the view reshapes to the traced shape."""
    keys = key if isinstance(key, tuple) else (key,)
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
        v = v[_numpy_key(key, v.shape)].reshape(shape)
        if v.size and not np.may_share_memory(v, array):
            raise AssertionError("eager view is a copy")  # pragma: no cover (our bug)
    return v
