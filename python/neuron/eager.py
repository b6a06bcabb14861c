"""Eager mode: a kernel runs as plain Python, one program of the grid after another, and every
nl/nisa call executes at once as a one-op kernel on the simulator, so print(), nl.device_print
and pdb work inside the kernel (docs/python.md, "Eager mode").

The semantics of every operation stay in one place. An eager call traces a small kernel whose
inputs are the NumPy arrays behind its eager operands, loads each on-chip array into a tile of
the same shape, dtype and memory, re-applies the operand's recorded subscripts (so indexing and
placement rules are checked as in a compiled kernel), calls the very same tracing function on
those views, stores the tiles it wrote, runs it on the simulator and copies the results back.
"""
import enum
import functools
import inspect
import re
import threading

import numpy as np

from . import _C, indirection as _indirection, runtime
from .indirection import TensorIndirection as _TensorIndirection
from ._span import user_span
from .access import BitcastView, IndirectView, OutOfRange
from .eager_values import _HBM, ApKey, BroadcastKey, EagerIndex, _Base, _numpy_key, \
    _symbolic_slice_check, _view_of, frozen, traced_bound
from .errors import user_error
from .reshaped import Reshaped


class _State(threading.local):
    launch = None  # the running _Launch; None outside eager kernels and inside one-op kernels
    one_op = False  # tracing an eager call's one-op kernel


_state = _State()


def one_op():
    """Is an eager call's one-op kernel tracing (so nothing outlives this instruction)?"""
    return _state.one_op


def launching():
    """Is an eager kernel running (its Python executing) on this thread?"""
    return _state.launch is not None


class paused:
    """Eager mode off while a kernel traces (a one-op kernel, or a compiled kernel called from
    an eager one): nl/nisa calls record IR as usual."""

    def __enter__(self):
        self.saved, _state.launch = _state.launch, None

    def __exit__(self, *exc):
        _state.launch = self.saved


class _Spec:
    """How an nl/nisa function touches its arguments: `writes` names the parameters whose
    views it writes."""

    def __init__(self, fn, writes=(), returns_self=False):
        self.signature = None if fn is None else inspect.signature(fn)
        self.writes, self.returns_self = tuple(writes), returns_self


# ---- eager tensors ---------------------------------------------------------------------------

class EagerTensor:
    """An nl tensor in eager mode: a view (a chain of subscripts) of one allocation held as a
    NumPy array. print(t) shows its values; t.numpy() returns a copy of them. Operators and
    nl/nisa calls run as one-op kernels on the simulator."""
    __array_ufunc__ = None  # `ndarray + t` defers to t.__radd__ (an nl add), never NumPy

    def __init__(self, base, chain=(), shape=None):
        self._base, self._chain = base, tuple(chain)
        self._shape = list(base.array.shape) if shape is None else list(shape)

    shape = property(lambda self: tuple(self._shape))  # a tuple, as a traced tensor's
    ndim = property(lambda self: len(self._shape))
    buffer = property(lambda self: self._base.buffer)

    @property
    def dtype(self):  # the base's, unless a t.view(dtype) in the chain reads its bytes as another
        for key, _ in reversed(self._chain):
            if getattr(key, "as_dtype", None) is not None:
                return key.as_dtype
        return self._base.dtype
    name = property(lambda self: self._base.name)

    def _view(self):
        return _view_of(self._base.array, self._chain)

    def numpy(self):
        """A copy of the current values (bfloat16 as ml_dtypes.bfloat16)."""
        return np.array(self._view(), copy=True)

    def __array__(self, dtype=None, copy=None):
        v = np.array(self._view(), copy=True)
        return v if dtype is None else v.astype(dtype)

    def _header(self):
        return (f"<nl tensor {self.name} [{', '.join(map(str, self._shape))}] "
                f"{self.dtype.name_} in {self.buffer.name}>")

    def __repr__(self):
        return f"{self._header()}\n{np.array2string(self._view())}"

    __str__ = __repr__

    def _apply(self, root):
        view = root
        for key, _ in self._chain:
            if isinstance(key, ApKey):
                view = key.apply(root)
            elif isinstance(key, BroadcastKey):
                view = key.apply(view)
            else:
                view = view[key]
        return view

    def _broadcast_view(self, dim, size):
        """t.broadcast(dim, size) (views.py): the chain grows a step-0 dim."""
        shape = list(self._shape)
        shape[dim] = size
        return EagerTensor(self._base, self._chain + ((BroadcastKey(dim, size), tuple(shape)),),
                           shape)

    def __getitem__(self, key):
        key = frozen(key)  # registers: their current values
        span = user_span()
        _symbolic_slice_check(key, span)
        shape = _check_index(self, key, span)
        try:
            _numpy_key(key, self._shape)
        except TypeError as e:
            user_error("eager", f"{e}: eager mode takes ints, slices, loop indices and nl.ds",
                       span)
        return EagerTensor(self._base, self._chain + ((key, tuple(shape)),), shape)

    def __setitem__(self, key, value):
        # t[key] = v stores, copies or memsets into the view t[key], which the op writes.
        view = self[key]
        _run(_SETITEM, (view, (slice(None),) * view.ndim, value), {}, _eager_setitem)


def _tensor_method(name):
    spec = _Spec(None, writes=(), returns_self=False)
    return lambda self, *args: _run(spec, (self,) + args, {}, getattr(_C.Tensor, name))


def _inplace_method(name):
    spec = _Spec(None, writes=("self",), returns_self=True)
    return lambda self, other: _run(spec, (self, other), {}, getattr(_C.Tensor, name))


# Every Python operator of a traced tensor (python/neuron/language.py) runs the traced one.
for _name in ("add sub mul truediv pow mod and or xor lshift rshift".split()):
    setattr(EagerTensor, f"__{_name}__", _tensor_method(f"__{_name}__"))
    setattr(EagerTensor, f"__r{_name}__", _tensor_method(f"__r{_name}__"))
for _name in ("add sub mul truediv".split()):
    setattr(EagerTensor, f"__i{_name}__", _inplace_method(f"__i{_name}__"))
for _name in ("lt le gt ge neg abs invert bool matmul rmatmul floordiv iter".split()):
    setattr(EagerTensor, f"__{_name}__", _tensor_method(f"__{_name}__"))
_tile_bool = EagerTensor.__bool__
# An HBM tensor or an nl.ndarray tile is true (`if bias:` tests an optional argument), a
# computed tile refuses, as traced (language._no_bool).
EagerTensor.__bool__ = lambda self: (True if not self._base.on_chip or self._base.allocated
                                     else _tile_bool(self))


def _eager_setitem(self, key, value):
    _C.Tensor.__setitem__(self, key, value)


_SETITEM = _Spec(_eager_setitem, writes=("self",))


# ---- the launch: programs of the grid, run one after another ---------------------------------

class _Launch:
    def __init__(self, name, target):
        self.name, self.target = name, target
        self.pid, self.grid = (0,), (1,)
        self.shared = []          # shared_hbm bases in allocation order, shared by all programs
        self.program_shared = []  # the ones allocated by the running program
        self.names = {}           # next number of unnamed tiles (t) and outputs (out)
        self.loops = 0            # rolled loops opened: one symbol each
        self.registers = 0        # registers allocated: one symbol each
        self.rng = None           # the running program's random state (rng_state)


def run_kernel(fn, name, span, specs, arrays, grid, target):
    """Runs fn (the kernel with its parameters bound; `span` its def line) eagerly once per
    program of grid (row-major, the last dim fastest, as the simulator does); returns the
    output arrays."""
    launch = _Launch(name, target)
    launch.grid = tuple(grid)
    inputs = [EagerTensor(_Base(a, _C.Memory.shared_hbm, s.dtype, s.name, span, True))
              for a, s in zip(arrays, specs)]
    outputs = []
    for flat in range(int(np.prod(grid))):
        launch.pid = tuple(int(p) for p in np.unravel_index(flat, grid))
        launch.program_shared, launch.names = [], {"t": 0, "out": 0}
        launch.rng = None
        saved, _state.launch = _state.launch, launch
        try:
            r = fn(*inputs)
        finally:
            _state.launch = saved
        outputs = _kernel_outputs(launch, inputs, r, span)
    return [b.array if shape is None else b.array.reshape(shape) for b, shape in outputs]


def _kernel_outputs(launch, inputs, r, span):
    """(base, reshaped shape or None) for each tensor a program returns (r) or, when it
    returns None, for the shared_hbm ones it allocated, after the tracer's own checks of a
    kernel's outputs (dsl TraceScope::finish): a kernel over the same inputs allocates the
    program's shared_hbm tensors and returns the traced counterparts of r's tensors (with their
    subscripts), so any rule r breaks is reported by the C++ tracer, with its message."""
    traced = {}

    def as_traced(v):
        if isinstance(v, Reshaped):
            return Reshaped(as_traced(v.base), v.shape)
        if not isinstance(v, EagerTensor):
            return v  # the tracer names what was returned instead of a tensor
        b = v._base
        if id(b) not in traced:  # an on-chip tile or HBM scratch
            traced[id(b)] = _C.ndarray(list(b.array.shape), b.dtype, b.buffer, b.name, span)
        return v._apply(traced[id(b)])

    def check(*roots):
        for t, root in zip(inputs, roots):
            traced[id(t._base)] = root
        for b in launch.program_shared:
            traced[id(b)] = _C.ndarray(list(b.array.shape), b.dtype, _C.Memory.shared_hbm,
                                       b.name, b.span)
        for t, root in zip(inputs, roots):
            if getattr(t._base, "written", False):  # as the kernel did: it has a result
                _C.memset(root, 0.0, span)
        value = type(r)(as_traced(x) for x in r) if isinstance(r, (tuple, list)) \
            else as_traced(r)
        how = returns_of(value, roots)
        if how.returns_input:
            _C.note_returned_input()
        return how.outputs(value)

    from .kernel import _Returns as returns_of
    specs = [_C.TensorSpec(list(t._base.array.shape), t.dtype, t.name) for t in inputs]
    with paused():
        _C.trace(launch.name, check, specs, span)
    if r is None:
        return [(b, None) for b in launch.program_shared]
    from .kernel import whole_of_reshape
    return [(t._base, shape) for t, shape in
            map(whole_of_reshape, r if isinstance(r, (tuple, list)) else [r])]


def rng_state(seed):
    """The running eager program's random state, or None outside eager mode (a traced kernel
    uses its own). Like a compiled kernel's, it is a [128, 4] uint32 SBUF tile per program,
    seeded with 0 before the first draw; `seed(state)` seeds it (isa.set_rng_seed, so the
    seeding rule stays the C++ one)."""
    launch = _state.launch
    if launch is None:
        return None
    if launch.rng is None:
        base = _Base(np.zeros((128, 4), np.uint32), _C.Memory.sbuf, _C.DType.uint32,
                     "rng_state", user_span())
        launch.rng = EagerTensor(base)
        seed(launch.rng)
    return launch.rng


# ---- one-op kernels --------------------------------------------------------------------------

def op(writes=()):
    """Decorator for the public nl/nisa functions: in eager mode a call runs as a one-op
    kernel on the simulator; otherwise (tracing) it is the function itself."""
    def wrap(fn):
        spec = _Spec(fn, writes)

        @functools.wraps(fn)
        def call(*args, **kwargs):
            for a in (*args, *kwargs.values()):
                if type(a) is OutOfRange:  # an .ap() view that cannot exist, now used
                    raise a.error
                if type(a) is _TensorIndirection:  # t.indirect(...): gather, run, scatter
                    return _indirection.run(spec, fn, call, args, kwargs)
            if _state.launch is None:
                try:
                    result = fn(*args, **kwargs)
                except TypeError as e:
                    if "incompatible function arguments" not in str(e):
                        raise
                    _operand_error(spec, fn, args, kwargs, e)
                if write_hooks and spec.writes:
                    _written(spec, args, kwargs)
                return result
            result = _run(spec, args, kwargs, fn)
            if fn.__name__ == "ndarray" and isinstance(result, EagerTensor):
                result._base.allocated = True
            return result
        return call
    return wrap


def _operand_error(spec, fn, args, kwargs, e):
    """A NeuronError (rule `operand`) at the user's line for an argument the instruction cannot
    take (pybind's "incompatible function arguments" names C++ types, not the user's values)."""
    bound = spec.signature.bind_partial(*args, **kwargs)
    bad = []
    for name, v in bound.arguments.items():
        p = spec.signature.parameters[name]
        if v is None and p.default is inspect.Parameter.empty:
            bad.append(f"'{name}' is None")
        elif v is not None and not isinstance(v, (_C.Tensor, int, float, str, list, tuple,
                                                  np.number, enum.Enum)) and \
                type(v).__module__.startswith("neuron") and hasattr(v, "shape"):
            bad.append(f"'{name}' is a {type(v).__name__} of shape {list(v.shape)} (a reshaped, "
                       "access-pattern or indirect view, which DMA copies take); copy it into a "
                       "tile first (nisa.dma_copy) and pass the tile")
    what = "; ".join(bad) if bad else str(e).splitlines()[0]
    user_error("operand", f"{fn.__name__}: {what}", user_span())


# Called as hook(view) with every view a traced nl/nisa call wrote; empty unless a legacy kernel
# with a PSUM block tensor spilled to HBM is traced (legacy/spill.py stores the SBUF copies of
# its blocks back to HBM when something writes them).
write_hooks = []


def _written(spec, args, kwargs):
    bound = spec.signature.bind(*args, **kwargs)
    for name in spec.writes:
        view = bound.arguments.get(name)
        if view is not None:
            for hook in list(write_hooks):
                hook(view)


def index(fn):
    """Decorator for program_id / num_programs: a Python int (EagerIndex) in eager mode."""
    signature = inspect.signature(fn)

    @functools.wraps(fn)
    def call(*args, **kwargs):
        launch = _state.launch
        if launch is None:
            return fn(*args, **kwargs)
        _check(lambda: fn(*args, **kwargs), user_span())
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        axis = int(bound.args[0])
        if fn.__name__ == "program_id":
            return EagerIndex(launch.pid[axis] if axis < len(launch.pid) else 0,
                              _C.Affine.var(f"pid{axis}"))
        return EagerIndex(launch.grid[axis] if axis < len(launch.grid) else 1,
                          _C.Affine.var(f"npid{axis}"))
    return call


def loop(fn):
    """Decorator for affine_range / sequential_range: in eager mode the loop iterates, yielding
    EagerIndex values."""
    @functools.wraps(fn)
    def call(*args):
        launch = _state.launch
        if launch is None:
            return fn(*args)

        def first():
            g = fn(*(traced_bound(a) for a in args))
            next(g, None)
            g.close()
        _check(first, user_span())
        r = range(*(int(a) for a in args))  # the arguments the traced loop just accepted
        launch.loops += 1
        var = _C.Affine.var(f"i{launch.loops}", r.step) + r.start
        return (EagerIndex(v, var) for v in r)
    return call


def _check(body, span):
    """Traces body alone (nothing runs), so argument errors are the tracer's own."""
    def k():
        body()
        return [_C.ndarray([1], _C.DType.float32, _C.Memory.shared_hbm, "eager_unused", span)]
    with paused():
        _C.trace(_launch_name(), k, [], span)


def _check_index(t, key, span):
    """Checks t[key] as the tracer does (the user's line) and returns the view's shape."""
    base, shape = t._base, []

    def k(root):
        view = _root(base, root, span)
        shape.extend(t._apply(view)[key].shape)
        return [_C.ndarray([1], _C.DType.float32, _C.Memory.shared_hbm, "eager_unused", span)]
    with paused():
        _C.trace(_launch_name(), k, [_spec(base, 0)], span)
    return shape


def _launch_name():
    return _state.launch.name if _state.launch else "eager"


def _spec(base, i):
    name = base.name if not base.on_chip else f"{base.name}_eager_in{i}"
    return _C.TensorSpec(list(base.array.shape), base.dtype, name)


def _root(base, inp, span, load=False, flags=None):
    """The traced whole view of base in a one-op kernel: the input itself for HBM, else a tile
    of the same shape, dtype and memory (holding the input's values when load, and for PSUM
    the flags of the `flags` input)."""
    if not base.on_chip:
        return inp
    shape = list(base.array.shape)
    tile = _C.ndarray(shape, base.dtype, base.buffer, base.name, span)
    if load and base.buffer == _C.Memory.psum:  # DMA cannot reach PSUM: through SBUF
        stage = _C.ndarray(shape, base.dtype, _C.Memory.sbuf, f"{base.name}_eager_stage", span)
        _C.dma_copy(stage, inp, span)
        _C.tensor_copy(tile, stage, span)
        marks = _C.ndarray(shape, _C.DType.uint8, _C.Memory.sbuf, f"{base.name}_eager_flags",
                           span)
        _C.dma_copy(marks, flags, span)
        _C._psum_flags_set(tile, marks, span)
    elif load:
        _C.dma_copy(tile, inp, span)
    return tile


def _bases_of(values):
    bases = []

    def visit(v):
        if isinstance(v, EagerTensor):
            if not any(b is v._base for b in bases):
                bases.append(v._base)
        elif isinstance(v, IndirectView):
            visit(v.view)
            visit(v.rows)
        elif isinstance(v, Reshaped):
            visit(v.base)
        elif isinstance(v, BitcastView):
            visit(v.view)
        elif isinstance(v, (list, tuple)):
            for x in v:
                visit(x)
    for v in values:
        visit(v)
    return bases


def _no_index_values(values):
    # A traced loop index or program id is a symbol, not a number: only subscripts take it.
    for v in values:
        if isinstance(v, (list, tuple)):
            _no_index_values(v)
        elif isinstance(v, EagerIndex):
            raise TypeError(f"expected an nl tensor or a number, got a loop index or program "
                            f"id (here {int(v)}): it is not a number when a kernel is compiled, so "
                            "eager mode refuses it too; use it in subscripts (t[i * 128]), or "
                            "nisa.iota for index values on device")


def _run(spec, args, kwargs, fn):
    """Runs fn(*args, **kwargs) as a one-op kernel on the simulator (see the module doc)."""
    launch = _state.launch
    span = user_span()
    if spec.signature is None:  # a tensor operator: positional only
        arguments = {"self": args[0]}
        positional = list(args)
    else:
        bound = spec.signature.bind(*args, **kwargs)
        bound.apply_defaults()
        arguments = bound.arguments
        positional = None
    values = positional if positional is not None else list(arguments.values())
    _no_index_values(values)
    bases = _bases_of(values)
    written = [(n, arguments[n]) for n in spec.writes if isinstance(arguments.get(n), EagerTensor)]
    written += [(n, arguments[n].base) for n in spec.writes  # a reshaped HBM tensor (reshaped.py)
                if isinstance(arguments.get(n), Reshaped)]
    written += [(n, arguments[n].view) for n in spec.writes  # t.ap(dtype=...) (access.py)
                if isinstance(arguments.get(n), BitcastView)]
    # Rows stored at run time (t.ap(..., vector_offset=rows) as dst): the other rows of the HBM
    # view keep their values, so the one-op kernel's output starts as a copy of the input.
    indirect = [arguments[n].view for n in spec.writes
                if isinstance(arguments.get(n), IndirectView)]
    written += [(None, v) for v in indirect]
    written_bases = []
    for _, t in written:
        if not any(b is t._base for b in written_bases):
            written_bases.append(t._base)
    result_info = {}
    # The PSUM flags of the bases (psum_flags_set/get in ops.hpp): extra inputs, and extra
    # outputs for the PSUM tiles the kernel writes or returns, so the executor alone decides
    # what nc_matmul(accumulate=None) does and which writes set or clear the flags.
    psum = [b for b in bases if b.flags is not None]
    flags_out = [b for b in written_bases if b.flags is not None]

    def kernel(*inputs):
        reads, writes = [], []
        flags_in = dict(zip(map(id, psum), inputs[len(bases):]))
        for i, (b, inp) in enumerate(zip(bases, inputs)):
            r = _root(b, inp, span, load=True, flags=flags_in.get(id(b)))
            reads.append(r)
            if not b.on_chip and any(w is b for w in written_bases):
                r = _C.ndarray(list(b.array.shape), b.dtype, _C.Memory.shared_hbm,
                               f"{b.name}_eager_out", span)
                if any(v._base is b for v in indirect):
                    _C.dma_copy(r, inp, span)
            writes.append(r)

        def sub(v, write):
            if isinstance(v, EagerTensor):
                i = next(k for k, b in enumerate(bases) if b is v._base)
                return v._apply((writes if write else reads)[i])
            if isinstance(v, IndirectView):
                return IndirectView(sub(v.view, write), sub(v.rows, False))
            if isinstance(v, Reshaped):
                return Reshaped(sub(v.base, write), v.shape)
            if isinstance(v, BitcastView):
                return BitcastView(sub(v.view, write), v.dtype, v.shape)
            if isinstance(v, list):
                return [sub(x, write) for x in v]
            if isinstance(v, tuple):
                return tuple(sub(x, write) for x in v)
            return v

        _state.one_op = True
        try:
            if positional is not None:
                new_args = [sub(v, i == 0 and "self" in spec.writes)
                            for i, v in enumerate(values)]
                result = fn(*new_args)
            else:
                for n in list(arguments):
                    arguments[n] = sub(arguments[n], n in spec.writes)
                result = fn(*bound.args, **bound.kwargs)
        finally:
            _state.one_op = False
        outs = []
        for b in written_bases:
            i = next(k for k, x in enumerate(bases) if x is b)
            if b.on_chip:
                o = _C.ndarray(list(b.array.shape), b.dtype, _C.Memory.shared_hbm,
                               f"{b.name}_eager_out", span)
                _C.store(o, writes[i], span)
                outs.append(o)
            else:
                outs.append(writes[i])
        if isinstance(result, _C.Tensor) and not spec.returns_self:
            result_info.update(buffer=result.buffer, dtype=result.dtype, name=result.name)
            if result.buffer == _C.Memory.shared_hbm:
                outs.append(result)
            else:
                o = _C.ndarray(list(result.shape), result.dtype, _C.Memory.shared_hbm,
                               "eager_result", span)
                (_C.store if result.buffer not in _HBM else _C.dma_copy)(o, result, span)
                outs.append(o)
        for b in flags_out:
            outs.append(_flags_of(writes[bases.index(b)], b.name, span))
        if result_info.get("buffer") == _C.Memory.psum:
            outs.append(_flags_of(result, "eager_result", span))
        if not outs:
            outs.append(_C.ndarray([1], _C.DType.float32, _C.Memory.shared_hbm,
                                   "eager_unused", span))
        return outs

    arrays = _execute(kernel, bases, span, [b.flags for b in psum])

    # Copy back what the kernel wrote, with the PSUM flags the executor left.
    n_results = len(written_bases) + bool(result_info)
    for b, flags in zip(flags_out, arrays[n_results:]):
        b.flags[...] = flags
    for b, out in zip(written_bases, arrays):
        b.written = True
        if b.on_chip:
            b.array[...] = out
        else:
            for _, t in written:
                if t._base is b:
                    t._view()[...] = _view_of(out, t._chain)
    if spec.returns_self:
        return args[0]
    if not result_info:
        return None
    out = arrays[len(written_bases)]
    buffer, name = result_info["buffer"], result_info["name"]
    if buffer == _C.Memory.shared_hbm:
        return _shared(launch, out, result_info["dtype"], name, span)
    base = _Base(out, buffer, result_info["dtype"], _tile_name(launch, name), span)
    if base.flags is not None:
        base.flags[...] = arrays[-1]
    return EagerTensor(base)


def _tile_name(launch, name):
    # Unnamed tiles (t0, t1, ...) and outputs (out0, ...) are numbered per one-op kernel;
    # number them per program instead, as a traced kernel does.
    m = re.fullmatch(r"(t|out)\d+(_\d+)*", name)
    if m:
        name = f"{m.group(1)}{launch.names[m.group(1)]}"
        launch.names[m.group(1)] += 1
    return name


def _shared(launch, array, dtype, name, span):
    """A shared_hbm (output) allocation: the k-th one of every program is the same tensor, as
    in a compiled grid where all programs write one output."""
    k = len(launch.program_shared)
    if k < len(launch.shared):
        base = launch.shared[k]
        if base.array.shape != array.shape or base.dtype != dtype:
            user_error("eager", f"program {launch.pid} allocates shared_hbm tensor #{k} as "
                       f"{dtype.name_}{list(array.shape)} but the first program allocated "
                       f"{base.dtype.name_}{list(base.array.shape)}; the programs of a grid "
                       "share their outputs, so they must allocate the same ones", span)
    else:
        base = _Base(array, _C.Memory.shared_hbm, dtype, _tile_name(launch, name), span)
        launch.shared.append(base)
    launch.program_shared.append(base)
    return EagerTensor(base)


def _execute(kernel, bases, span, flags):
    """Traces, compiles (the compile cache keys on the IR) and simulates a one-op kernel over
    the bases' arrays, then the `flags` arrays (uint8); returns its outputs as NumPy arrays
    (device_print output goes to sys.stdout at once)."""
    launch = _state.launch
    specs = [_spec(b, i) for i, b in enumerate(bases)]
    specs += [_C.TensorSpec(list(f.shape), _C.DType.uint8, f"psum_flags{i}")
              for i, f in enumerate(flags)]
    with paused():
        ir = _C.trace(launch.name, kernel, specs, span)
        compiled = _C.compile(ir, launch.target)
        outs, _ = runtime.run(compiled, [b.array for b in bases] + list(flags), (1,),
                              "simulate", dtypes=[b.dtype for b in bases] +
                              [_C.DType.uint8] * len(flags))
    return outs


def _flags_of(tile, name, span):
    """The PSUM flags of `tile` (1 where the executor marks an element as last written by a
    matmul) in a new uint8 HBM output."""
    shape = list(tile.shape)
    stage = _C.ndarray(shape, _C.DType.uint8, _C.Memory.sbuf, f"{name}_flags_stage", span)
    _C._psum_flags_get(stage, tile, span)
    out = _C.ndarray(shape, _C.DType.uint8, _C.Memory.shared_hbm, f"{name}_flags", span)
    _C.dma_copy(out, stage, span)
    return out
