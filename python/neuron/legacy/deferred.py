"""Legacy `dst[...] = nisa.nc_matmul(...)` (and nc_transpose) writes dst directly.

A value-returning PSUM instruction returns a Deferred: the instruction, not yet emitted. Assigned
to a view of the same memory, dtype and shape, it is emitted into that view (no fresh tile, no
copy: the kernel's own PSUM layout fits where it fits on hardware). Used any other way it is
emitted into a fresh tile first, as before. Order is kept: the pending instruction is emitted
before the next legacy call, tensor subscript or loop iteration runs (flush), so nothing the
kernel does later can change its operands first; one instruction is pending at a time."""
import functools
import inspect

from .. import _C
from .. import language as _nl
from . import keywords, lincomb


class _Pending:
    current = None  # the Deferred not yet emitted (per trace; traces are per thread in
    # practice, and a trace never interleaves with another on one thread)


class Deferred:
    def __init__(self, shape, dtype, buffer, emit, emit_add=None):
        flush()
        self.shape, self.dtype, self.buffer, self._emit = tuple(shape), dtype, buffer, emit
        self._emit_add = emit_add  # emits `view += result` as one instruction, when it can
        self._tile = None
        _Pending.current = self

    ndim = property(lambda self: len(self.shape))

    def tile(self):
        """The result in a fresh tile (emitted now if still pending)."""
        if self._tile is None:
            if _Pending.current is self:
                _Pending.current = None
            self._tile = _nl.ndarray(list(self.shape), self.dtype, buffer=self.buffer)
            self._emit(self._tile)
        return self._tile

    # A pending result as an operand of the current API's tile operators (`t * nisa.nc_transpose(
    # s)`, as nki-samples' Stable Diffusion attention scales its output): its tile.
    _neuron_tile = tile

    def _fits(self, view):
        return _Pending.current is self and isinstance(view, _C.Tensor) and \
            view.buffer == self.buffer and view.dtype == self.dtype and \
            list(view.shape) == list(self.shape)

    def into(self, view):
        """Emits straight into view when it can hold the result; True when done."""
        if not self._fits(view):
            return False
        _Pending.current = None
        self._emit(view)
        return True

    def add_into(self, view):
        """`view += result` as one accumulating instruction (a matmul accumulating into its
        PSUM tile, as NKI's `psum[...] += nisa.nc_matmul(...)` is); True when done."""
        if self._emit_add is None or not self._fits(view):
            return False
        _Pending.current = None
        self._emit_add(view)
        return True

    def __getattr__(self, name):  # tile attributes and methods (name, reshape, ...)
        return getattr(self.tile(), name)

    def __repr__(self):
        return f"<pending {list(self.shape)} {self.dtype} result>"


def _binary(name):
    return lambda self, *args: getattr(self.tile(), name)(*map(resolve, args))


for _name in ("getitem setitem add radd sub rsub mul rmul truediv rtruediv neg pow iadd isub "
              "imul itruediv lt le gt ge").split():
    setattr(Deferred, f"__{_name}__", _binary(f"__{_name}__"))


def flush():
    """Emits the pending instruction (into its own fresh tile) and pending sums (lincomb.py)."""
    if _Pending.current is not None:
        _Pending.current.tile()
    lincomb.flush()


def reset():
    _Pending.current = None  # a new trace: an aborted trace's pending result is dropped
    lincomb.reset()


def resolve(v):
    """v with Deferred results and pending sums (also inside lists and tuples) as tiles."""
    if isinstance(v, (Deferred, lincomb.LinComb)):
        return v.tile()
    if isinstance(v, (list, tuple)) and any(isinstance(x, (Deferred, lincomb.LinComb))
                                            for x in v):
        return type(v)(resolve(x) for x in v)
    return v


def flushing(fn, what, ignored):
    """fn with its keywords checked (keywords.py), the pending instruction emitted first and
    Deferred arguments resolved. what: the user's name of fn (nisa.activation)."""
    ok = keywords.allowed(fn, ignored)  # once per function: a call tests one set inclusion

    @functools.wraps(fn)
    def call(*args, **kwargs):
        if kwargs and ok is not None and not kwargs.keys() <= ok:
            keywords.refuse(what, kwargs, ok, ignored)
        flush()
        return fn(*map(resolve, args), **{k: resolve(v) for k, v in kwargs.items()})
    return call


def checking(fn, what, ignored):
    """fn with its keywords checked only (for the functions that must not flush)."""
    ok = keywords.allowed(fn, ignored)

    @functools.wraps(fn)
    def call(*args, **kwargs):
        if kwargs and not kwargs.keys() <= ok:
            keywords.refuse(what, kwargs, ok, ignored)
        return fn(*args, **kwargs)
    return call


def wrap_module(namespace, prefix, ignored, skip=()):
    """Applies flushing() to the public functions of a module namespace (prefix: the name
    users import it as, nl or nisa; ignored: its allowlist of keywords, keywords.py); the
    skipped ones that take **kwargs get checking()."""
    for name, fn in list(namespace.items()):
        if name.startswith("_") or not inspect.isfunction(fn) or \
                not getattr(fn, "__module__", "").startswith("neuron.legacy"):
            continue
        if name not in skip:
            namespace[name] = flushing(fn, f"{prefix}.{name}", ignored)
        elif any(p.kind is inspect.Parameter.VAR_KEYWORD
                 for p in inspect.signature(fn).parameters.values()):
            namespace[name] = checking(fn, f"{prefix}.{name}", ignored)
