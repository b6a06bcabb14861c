"""@neuron.kernel: traces a Python function into Kernel IR, compiles it once per signature (the
shapes and dtypes of its tensors and the values of its compile-time parameters) and runs it
natively (LLVM JIT, the default) or on the simulator; or runs it eagerly, one operation at a
time (mode="eager", or NEURON_EAGER=1: python/neuron/eager.py).

A call's arguments are bound to the function's parameters as Python binds them (positional or
keyword, defaults applied). A NumPy array or torch tensor is a tensor of the kernel; any other
value is a compile-time parameter, passed to the function as is while it traces: an int,
float, bool, str, None (an optional tensor left out), enum member, dtype, buffer (nl.sbuf, ...),
nl function, function, or a tuple or list of those."""
import dataclasses
import enum
import functools
import inspect
import itertools
import math
import threading
import types

import numpy as np

from . import _C
from . import eager
from . import lru
from . import runtime
from . import shared_constants
from . import collectives, unroll
from ._span import function_span
from .dtypes import to_dtype
from .errors import NeuronError, strip_toolkit_frames
from .language import NKIObject, _Fn, _State


MODES = ("native", "simulate", "eager")
_FAST_MAX = 64  # fast-path signatures kept per kernel (the least recently used dropped)
_GRIDS_MAX = 64  # launch grids kept per kernel (the least recently used dropped)

_PARAM_KINDS = ("int, float, bool, str, None, an enum member, a dtype, a buffer (nl.sbuf, ...), "
                "an nl function, a function, a tuple, list or dict of those, or an NKIObject or "
                "dataclass instance of them")


def default_mode():
    """The mode of a kernel made without one: eager when NEURON_EAGER is set (to anything but
    0, false, off or no: runtime/config.hpp), else native."""
    return "eager" if _C.config().eager else "native"


def _is_tensor(v):
    return isinstance(v, np.ndarray) or runtime.is_torch(v)


def _is_spec(v):
    """A tensor described without data, as trace() and compile() take it: a TensorSpec or a
    (shape, dtype) pair (a tuple of ints, then a dtype)."""
    if isinstance(v, _C.TensorSpec):
        return True
    return (isinstance(v, tuple) and len(v) == 2 and isinstance(v[0], (tuple, list)) and
            v[1] is not None and not isinstance(v[1], (tuple, list)))


def param_key(name, v):
    """A hashable key of a compile-time parameter value that two values share only when they
    trace alike: the type is part of it (1, 1.0 and True differ), floats are keyed by their
    bits (-0.0 is not 0.0; NaN equals NaN), functions by identity."""
    if isinstance(v, (bool, np.bool_)):
        return ("bool", bool(v))
    if isinstance(v, (int, np.integer)):
        return ("int", int(v))
    if isinstance(v, (float, np.floating)):
        return ("float", float(v).hex())
    if v is None or isinstance(v, str):
        return (type(v).__name__, v)
    if isinstance(v, enum.Enum):
        return ("enum", type(v).__module__, type(v).__qualname__, v.name)
    if isinstance(v, _C.DType):
        return ("dtype", v.name_)
    if isinstance(v, _C.Memory):  # a buffer (nl.sbuf, nl.hbm, ...): where the kernel allocates
        return ("buffer", v.name)
    if isinstance(v, _Fn):
        return ("nl", v.name)
    if isinstance(v, (tuple, list)):
        return (type(v).__name__,) + tuple(param_key(name, x) for x in v)
    if isinstance(v, dict):  # entries in insertion order, as the kernel's Python sees them
        return ("dict",) + tuple((param_key(f"{name} key", k), param_key(f"{name}[{k!r}]", x))
                                 for k, x in v.items())
    if isinstance(v, _C.Tensor):
        raise TypeError(f"argument '{name}' is a traced nl tensor, which lives only inside the "
                        "kernel being traced; pass it to the other kernel's Python function")
    if isinstance(v, (types.FunctionType, types.BuiltinFunctionType, functools.partial)):
        return ("function", v)  # the object itself: kept alive, equal only to itself
    if isinstance(v, NKIObject) or dataclasses.is_dataclass(v) and not isinstance(v, type):
        fields = {f.name: getattr(v, f.name) for f in dataclasses.fields(v)} \
            if dataclasses.is_dataclass(v) else vars(v)
        return ("object", type(v).__module__, type(v).__qualname__,
                tuple((k, param_key(f"{name}.{k}", x)) for k, x in sorted(fields.items())))
    try:
        return ("dtype", type(v).__name__, to_dtype(v).name_)  # NumPy / torch dtypes
    except TypeError:
        pass
    raise TypeError(f"argument '{name}' is a {type(v).__name__}: kernel arguments are NumPy "
                    f"arrays or torch tensors (the kernel's tensors), or compile-time parameters: "
                    f"{_PARAM_KINDS}")


class _Call:
    """One call's arguments split into tensors (name -> value) and parameters (name -> value),
    with how to call the function with traced tensors in place of the arrays."""

    def __init__(self, kernel, args, kwargs, specs_ok):
        names = kernel._params
        if not kwargs and len(args) == len(names) and kernel._positional:
            self.bound = None  # the common case, without inspect's binding (a call's cost)
            arguments = dict(zip(names, args))
        else:
            try:
                self.bound = kernel._signature.bind(*args, **kwargs)
            except TypeError as e:
                raise TypeError(f"kernel {kernel.__name__}{kernel._signature}: {e}") from None
            self.bound.apply_defaults()
            arguments = self.bound.arguments
        self.arguments = arguments
        self.tensors, self.params = {}, {}
        for name, v in arguments.items():
            if _is_tensor(v) or (specs_ok and _is_spec(v)):
                self.tensors[name] = v
            else:
                self.params[name] = v
        self.param_key = tuple((n, param_key(n, v)) for n, v in self.params.items())

    def key(self):
        """The signature: each tensor's name, shape and dtype, and the parameter keys."""
        out = []
        for name, a in self.tensors.items():
            if isinstance(a, _C.TensorSpec):
                out.append((a.name or name, tuple(a.shape), a.dtype))
            elif _is_spec(a):
                out.append((name, tuple(a[0]), to_dtype(a[1])))
            else:
                out.append((name, tuple(a.shape), to_dtype(a.dtype)))
        return tuple(out), self.param_key

    def specs(self):
        specs = []
        for name, a in self.tensors.items():
            if isinstance(a, _C.TensorSpec):
                specs.append(_C.TensorSpec(list(a.shape), a.dtype, a.name or name))
            elif _is_spec(a):
                specs.append(_C.TensorSpec(list(a[0]), to_dtype(a[1]), name))
            else:
                specs.append(runtime.spec_of(runtime.to_numpy(a), name))
        return specs

    def function(self, fn):
        """fn with the parameters bound: called with the kernel's tensors, in order."""
        names = list(self.tensors)
        arguments, bound = dict(self.arguments), self.bound

        def call(*tensors):
            if bound is None:
                arguments.update(zip(names, tensors))
                return fn(*arguments.values())
            for n, t in zip(names, tensors):
                bound.arguments[n] = t
            return fn(*bound.args, **bound.kwargs)
        return call


class _Returns:
    """What a kernel's Python returned, as the compiled kernel's outputs: NKI kernels may
    return an input they wrote (an output argument) or nothing. Those inputs are left out of
    the traced outputs, and a call returns the caller's own array (written back) in their place.
    A returned reshape of a whole tensor (t.reshape(...), reshaped.py) is that tensor, and the
    caller gets its array with the reshaped shape."""

    def __init__(self, out, inputs):
        from .reshaped import _covers_storage as covers_storage
        self.single = not isinstance(out, (tuple, list))
        items = [] if out is None else [out] if self.single else list(out)
        self.none = out is None
        self.items = []  # ("in", input position) or ("out", output position) per result
        self.shapes = []  # per result: the reshaped shape the caller gets, or None
        n_out = 0
        for t in items:
            t, shape = whole_of_reshape(t)
            self.shapes.append(shape)
            at = next((i for i, x in enumerate(inputs) if x is t), None)
            if at is None and isinstance(t, _C.Tensor) and shape is None and covers_storage(t):
                # the whole input seen again through views (a reshape and its inverse, as
                # nki-library's cache updates return their caches): that input
                at = next((i for i, x in enumerate(inputs)
                           if isinstance(x, _C.Tensor) and _C.same_buffer(x, t)), None)
            if at is None:
                self.items.append(("out", n_out))
                n_out += 1
            else:
                self.items.append(("in", at))
        self.returns_input = any(kind == "in" for kind, _ in self.items)
        self.plain = all(kind == "out" for kind, _ in self.items) and \
            not any(s is not None for s in self.shapes)

    def outputs(self, out):
        """The returned value less the inputs, for the tracer."""
        if self.plain:
            return out
        kept = [whole_of_reshape(out if self.single else out[i])[0]
                for i, (kind, _) in enumerate(self.items) if kind == "out"]
        return tuple(kept) if kept else None

    def results(self, outs, inputs):
        """A call's result: the kernel's outputs, and the inputs it returned."""
        if self.none and not outs:
            return None
        if not self.plain:
            outs = [outs[i] if kind == "out" else inputs[i] for kind, i in self.items]
            outs = [o if s is None else o.reshape(s) for o, s in zip(outs, self.shapes)]
        return outs[0] if len(outs) == 1 else tuple(outs)


def whole_of_reshape(t):
    """(the tensor, the reshaped shape) for a reshape of a whole tensor (one that splits or
    merges dims, or only drops size-1 dims: `q.reshape(...)` of a [G, 1, B, S, d] output),
    else (t, None)."""
    from .reshaped import Reshaped, _covers_storage, _whole_buffer
    if isinstance(t, Reshaped) and _covers_storage(t.base):
        return t.base, tuple(t.shape)
    if not _covers_storage(t):  # traced or eager
        whole = _whole_buffer(t)
        if whole is not None and whole is not t:
            return whole, tuple(t.shape)
    return t, None


def _per_program(fn, grid, span, cores=False):
    """fn traced once per program of the grid, in order, with the program ids as ints (the
    kernel's Python needed their values): each body in a block of its own (its tiles freed at
    its end), the k-th shared HBM tensor every program allocates being one tensor (the grid's
    shared outputs, as in eager mode). cores: the programs are cores running concurrently
    (kernel._cores), so their bodies stay at the top level, take turns statement by statement
    and meet at their collectives (collectives.py), each program's tiles its core's. The result
    is the first program's."""
    def run(*tensors):
        result = None
        _State.shared = []
        programs = list(itertools.product(*(range(g) for g in grid)))
        if cores:
            collectives._rounds.begin(len(programs))
        for rank, pid in enumerate(programs):
            _State.program, _State.shared_next = pid, 0
            if cores:
                with collectives.core_scope(rank):  # its tiles are its core's
                    out = fn(*tensors)
                collectives._rounds.end_program(rank)
            else:
                _, loop_id, _ = _C.open_loop(0, 1, 1, False, span)
                try:
                    out = fn(*tensors)
                finally:
                    _C.close_loop(loop_id)
            if result is None:
                result = (out,)
        if cores:
            collectives._rounds.finish(span)
        _State.program = None
        return result[0]
    return run


class Kernel:
    """A traced-on-call kernel. kernel[g0, g1](...) launches a grid of programs."""
    __test__ = False  # a kernel named test_* is not a pytest test (NKI's docs name kernels so)

    def __init__(self, fn, grid=(1,), target="trn2", profile=False, _cache=None, mode=None,
                 _by_ir=None, _consts=None):
        mode = default_mode() if mode is None else mode
        if mode not in MODES:
            raise ValueError(f"mode is 'native', 'simulate' or 'eager', got {mode!r}")
        if not callable(fn):
            raise TypeError(f"neuron.kernel takes a function, got {type(fn).__name__}")
        self.fn = fn
        self._mode = mode
        self.grid = tuple(grid)
        self.target = target
        self.profile = profile
        self._last = threading.local()  # per thread: threads may call one kernel at once
        # signature (tensor specs, parameter keys) -> Compiled; and IR text -> Compiled, so
        # parameter values that trace to the same IR share one compile. Bounded (lru.py): a
        # process may meet new shapes without end.
        self._cache = lru.Lru() if _cache is None else _cache
        self._by_ir = lru.Lru() if _by_ir is None else _by_ir
        # signature -> shared_constant arrays: only the signatures of kernels that have them,
        # kept while the kernel lives (a launch of a cached signature needs them).
        self._consts = {} if _consts is None else _consts
        # _fast_key -> (compiled, constants, tensor positions, tensor dtypes, torch out?): the
        # calls that skip binding and keying (a cached call's cost, docs/performance.md). Per
        # grid (kernel[g] is its own Kernel).
        self._fast = lru.Lru(_FAST_MAX)
        # grid -> kernel[grid], so a launch written inline keeps its fast path
        self._grids = lru.Lru(_GRIDS_MAX)
        functools.update_wrapper(self, fn, updated=())  # never copy fn.__dict__ over ours
        self._signature = inspect.signature(fn)
        for p in self._signature.parameters.values():
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                raise TypeError(f"kernel {fn.__name__}: *args and **kwargs parameters are not "
                                "supported; name each tensor and parameter")
        self._params = list(self._signature.parameters)
        self._positional = all(p.kind == p.POSITIONAL_OR_KEYWORD
                               for p in self._signature.parameters.values())
        self._registered = getattr(fn, "_neuron_registered", None)  # a C++ kernel (registry.py)

    @property
    def mode(self):
        """"native", "simulate" or "eager"."""
        return self._mode

    @mode.setter
    def mode(self, mode):
        self._mode = mode

    @property
    def func(self):
        """The function the kernel was made from (NKI's jit objects call it `func`: code that
        wraps a kernel in another reads it)."""
        return self.fn

    @property
    def last_report(self):
        """The native compile report of this thread's last call ("" before one)."""
        return getattr(self._last, "report", "")

    @property
    def last_profile(self):
        """The profile of this thread's last call: the simulator's summary text (neuron.simulate),
        or a runtime.NativeProfile (neuron.native_profile)."""
        return getattr(self._last, "profile", "")

    def __getitem__(self, grid):
        grid = grid if isinstance(grid, tuple) else (grid,)
        if not 1 <= len(grid) <= 4 or not all(isinstance(g, int) and g > 0 for g in grid):
            raise ValueError(f"a launch grid is 1 to 4 positive ints, got {grid!r}")
        launch = self._grids.get(grid)
        if launch is not None:  # the same launch object: its cached calls stay fast
            return launch
        launch = type(self)(self.fn, grid, self.target, self.profile, self._cache, self._mode,
                            self._by_ir, self._consts)
        self._grids[grid] = launch
        return launch

    def trace(self, *args, **kwargs):
        """The Kernel IR for these arguments: arrays, or (shape, dtype) pairs / TensorSpecs,
        for the tensors, and the compile-time parameters."""
        __tracebackhide__ = True
        try:
            call = _Call(self, args, kwargs, specs_ok=True)
            return self._trace(call, call.specs())
        except NeuronError as e:
            raise e.with_traceback(strip_toolkit_frames(e.__traceback__)) from None

    def _constants(self, call):
        """The nl.shared_constant arrays of this signature found so far: hidden inputs after
        the kernel's own tensors (shared_constants.py). Only signatures that have constants
        are kept, so a call of a kernel without any costs one empty-dict test."""
        if not self._consts:
            return []
        return self._consts.get(call.key(), [])

    def _trace(self, call, specs, unroll_all=False, returns=None):
        """The IR; returns (a list) receives how the kernel's results map onto it (_Returns)."""
        if self._registered is not None:
            return self._registered.trace(specs, call.params)
        fn = call.function(self.fn)
        consts, n = self._constants(call), len(specs)

        def with_constants(*tensors):
            shared_constants.begin(consts, tensors[n:])
            try:
                out = fn(*tensors[:n])
            finally:
                shared_constants.end()
            how = _Returns(out, tensors[:n])
            if how.returns_input:
                _C.note_returned_input()
            if returns is not None:
                returns[:] = [how]
            return how.outputs(out)

        def once():
            _State.serial += 1  # a new trace: generators of an aborted one close nothing
            mode = unroll.grid_mode()
            _State.grid, _State.program = (self.grid if mode else None), None
            body = with_constants if not unroll.per_program() else \
                _per_program(with_constants, self.grid, function_span(self.fn), self._cores(mode))
            hidden = [runtime.spec_of(a, f"shared_constant{i}") for i, a in enumerate(consts)]
            ir = _C.trace(self.fn.__name__, body, specs + hidden, function_span(self.fn))
            if self._cores("programs") and not unroll.per_program() and \
                    _C.writes_shared_and_sharded(ir):
                # The cores of kernel[2] run concurrently: one body for both would run them
                # one after another, and the second core's write of the whole tensor would
                # erase the first's shard. Per program, they take turns (collectives.py).
                raise unroll.NeedsGrid("programs")
            return ir
        outer = (_State.grid_ndim, _State.grid, _State.program, _State.shared)
        _State.grid_ndim = len(self.grid)
        try:
            with eager.paused():
                while True:
                    try:
                        return unroll.trace(once, unroll_all)
                    except shared_constants.Retrace:  # one more constant input: trace again
                        self._consts[call.key()] = consts
                        continue
        except (TypeError, AttributeError, IndexError, KeyError, NeuronError) as e:
            self._param_note(call, e)
            raise
        finally:
            _State.grid_ndim, _State.grid, _State.program, _State.shared = outer

    def _param_note(self, call, e):
        # A value meant as a tensor but given as something else is a parameter; say so.
        given = [n for n in call.params
                 if self._signature.parameters[n].default is inspect.Parameter.empty]
        if given:
            v = repr(call.params[given[0]])
            e.add_note(f"note: argument '{given[0]}' = {v[:60]}{'...' if len(v) > 60 else ''} "
                       f"is not an array, so kernel {self.__name__} received it as a compile-time "
                       "parameter; pass a NumPy array or torch tensor for a tensor")

    def compile(self, *args, **kwargs):
        """The compiled kernel for these arguments (as trace() takes them)."""
        return self._compiled(_Call(self, args, kwargs, specs_ok=True))

    def _compiled(self, call):
        return self._launch(call)[0]

    def _launch(self, call):
        """(compiled kernel, the grid to launch it on) for this call. A kernel whose Python read
        the grid's size or a program id compiles per grid (unroll.py); traced per program, its
        one IR holds every program's body, launched once."""
        key = call.key() + (len(self.grid),)  # nl.program_ndim() reads the grid's rank
        entry = self._cache.get(key) or self._cache.get(key + (self.grid,))
        if entry is None:
            returns = [None]
            ir = self._trace(call, call.specs(), returns=returns)
            mode = unroll.grid_mode()
            try:
                compiled = self._compile_ir(ir, self._target_for(mode))
            except NeuronError as e:
                # Partly unrolled (unroll.py) and out of SBUF/PSUM: the loops left rolled
                # rotate their tiles over several slots; fully unrolled, each has one. A tile
                # used after the rolled loop that allocated it (kept in a Python list: in NKI a
                # loop is a Python range and its tiles outlive it): unrolled, it is in scope.
                capacity = e.rule in ("sbuf-capacity", "psum-capacity") and \
                    unroll.partly_unrolled()
                if not capacity and not (e.rule == "buffer-scope" and unroll.kept_rolled_loops()):
                    raise
                ir = self._trace(call, call.specs(), unroll_all=True, returns=returns)
                mode = unroll.grid_mode()
                compiled = self._compile_ir(ir, self._target_for(mode))
            launch = (1,) * len(self.grid) if mode in ("programs", "cores") else self.grid
            entry = self._cache.setdefault(key + (self.grid,) if mode else key,
                                           (compiled, launch, returns[0] or _Returns(None, [])))
        return entry

    def _cores(self, mode):
        """Are the programs of this trace cores that run concurrently, in lock step
        (collectives.py)? Those that meet at collectives ("cores"), and `kernel[2]` traced per
        program: the two cores of an LNC-2 NeuronCore (NKI_API.md, "Launch"), which NKI's own
        simulator runs as two threads."""
        return mode == "cores" or (mode == "programs" and self.grid == (2,))

    def _target_for(self, mode):
        """The target to compile for: the kernel's, or for the cores of a grid traced into one
        body (`_cores`) that many cores' SBUF and PSUM ("trn2x2")."""
        if not self._cores(mode):
            return self.target
        return f"{self.target}x{math.prod(self.grid)}"

    def _compile_ir(self, ir, target=None):
        target = target or self.target
        key = str(ir) if target == self.target else (str(ir), target)
        compiled = self._by_ir.get(key)
        if compiled is None:
            compiled = self._by_ir.setdefault(key, _C.compile(ir, target))
        return compiled

    def _fast_key(self, args):
        """The key of a positional native call whose tensors are contiguous, writable CPU
        arrays and whose parameters are plain scalars: (shape, dtype) per tensor, (type, value)
        per parameter; None for any other call (it takes the general path)."""
        key = []
        torch_tensor = runtime.torch_tensor_type()
        for a in args:
            t = type(a)
            if t is np.ndarray:
                if not (a.flags.c_contiguous and a.flags.writeable):
                    return None
                key.append((a.shape, a.dtype))
            elif torch_tensor is not None and isinstance(a, torch_tensor):
                if not (a.is_cpu and a.is_contiguous()):
                    return None
                key.append((a.shape, a.dtype))
            elif t is int or t is bool or t is str or a is None:
                key.append((t, a))
            elif t is float:
                key.append((t, a.hex()))  # -0.0 is not 0.0
            else:
                return None
        return tuple(key)

    def _call_fast(self, entry, args):
        """A cached native call without binding, tracing or copies: the arrays' memory is the
        kernel's HBM, as in the general path when they are contiguous."""
        compiled, grid, returns, consts, tensor_at, dtypes, like_torch = entry
        host = []
        for i, d in zip(tensor_at, dtypes):
            a = args[i]
            if type(a) is np.ndarray:
                host.append(_C.HostTensor.borrow_array(a, d))
            else:
                host.append(_C.HostTensor.borrow(a.data_ptr(), list(a.shape), d))
        if consts:
            copies = [a.copy() for a in consts]  # a write cannot stick
            host += runtime.host_tensors(copies)
        outs, report = runtime.run_native_host(compiled, host, grid)
        self._last.report = report
        if like_torch:
            outs = [runtime.from_numpy(o, True) for o in outs]
        return returns.results(outs, [args[i] for i in tensor_at])

    def __call__(self, *args, **kwargs):
        __tracebackhide__ = True  # pytest and IPython hide this frame (the re-raise below)
        fast = None
        if not kwargs and self.mode == "native" and not self.profile and self._positional and \
                len(args) == len(self._params) and self._registered is None:
            fast = self._fast_key(args)
            entry = self._fast.get(fast) if fast is not None else None
            if entry is not None:
                try:
                    return self._call_fast(entry, args)
                except NeuronError as e:
                    raise e.with_traceback(strip_toolkit_frames(e.__traceback__)) from None
        # Off the cached path above: traced and eager tensors never take it.
        if _C.tracing() or eager.launching():
            return self._inline(args, kwargs)
        try:
            call = _Call(self, args, kwargs, specs_ok=False)
            tensors = list(call.tensors.values())
            if self.mode == "eager":
                outs = self._run_eager(call, tensors)
            else:
                compiled, grid, returns = self._launch(call)
                arrays, write_back = runtime.host_arrays(tensors)
                consts = self._constants(call)
                arrays += [a.copy() for a in consts]  # a write cannot stick
                outs, report = runtime.run(compiled, arrays, grid, self.mode, self.profile)
                write_back()
                if fast is not None:
                    at = [i for i, n in enumerate(self._params) if n in call.tensors]
                    self._fast[fast] = (compiled, grid, returns, consts, at,
                                        [to_dtype(args[i].dtype) for i in at],
                                        any(runtime.is_torch(a) for a in tensors))
                if self.mode == "native" and not self.profile:
                    self._last.report = report
                else:
                    self._last.profile = report
        except NeuronError as e:
            raise e.with_traceback(strip_toolkit_frames(e.__traceback__)) from None
        like_torch = any(runtime.is_torch(a) for a in tensors)
        if self.mode == "eager":
            outs = [o if any(o is t for t in tensors) else runtime.from_numpy(o, like_torch)
                    for o in outs]
            return None if not outs else outs[0] if len(outs) == 1 else tuple(outs)
        outs = [runtime.from_numpy(o, like_torch) for o in outs]
        return returns.results(outs, tensors)

    def _inline(self, args, kwargs):
        """A kernel called while another kernel is traced (or runs eagerly) is part of it, as
        in NKI: its Python runs on the caller's tensors."""
        if self._registered is not None:
            raise TypeError(f"kernel {self.__name__} is a C++ kernel: it cannot be called from "
                            "inside another kernel")
        if any(g != 1 for g in self.grid):
            raise TypeError(f"kernel {self.__name__}{list(self.grid)} called from inside another "
                            "kernel: an inlined kernel runs in its caller's programs, so call "
                            "it without a launch grid")
        return self.fn(*args, **kwargs)

    def _run_eager(self, call, tensors):
        if self._registered is not None:
            raise TypeError(f"kernel {self.__name__} is a C++ kernel: it cannot run eagerly "
                            "(mode='eager' runs Python kernels); use mode='simulate'")
        # The caller's contiguous arrays are the kernel's HBM inputs (zero-copy, as compiled).
        specs = call.specs()
        arrays, write_back = runtime.host_arrays(tensors)
        outs = eager.run_kernel(call.function(self.fn), self.fn.__name__,
                                function_span(self.fn), specs, arrays, self.grid, self.target)
        write_back()
        # An input the kernel returned (an output argument) is the caller's own object.
        return [next((t for a, t in zip(arrays, tensors) if a is o), o) for o in outs]


def kernel(fn=None, *, target="trn2", mode=None):
    """Decorator: @neuron.kernel, or @neuron.kernel(mode="simulate", target="trn2"). mode is
    "native" (the default), "simulate" or "eager"; NEURON_EAGER=1 makes "eager" the default."""
    if fn is None:
        return lambda f: Kernel(f, target=target, mode=mode)
    return Kernel(fn, target=target, mode=mode)


class _Profiled:
    """A kernel that profiles its calls: on the simulator with the timing model (mode
    "simulate", neuron.simulate) or natively per instruction (mode "native",
    neuron.native_profile); .profile holds the last call's profile."""

    def __init__(self, k, mode):
        self.mode = mode
        self.kernel = Kernel(k.fn, k.grid, k.target, True, k._cache, mode, k._by_ir,
                             k._consts) \
            if isinstance(k, Kernel) else Kernel(k, profile=True, mode=mode)

    def __getitem__(self, grid):
        return _Profiled(self.kernel[grid], self.mode)

    def __call__(self, *args, **kwargs):
        out = self.kernel(*args, **kwargs)
        self.profile = self.kernel.last_profile
        return out


def simulate(k):
    """neuron.simulate(kernel)(...): runs on the simulator with the timing model; the profile
    summary text is in .profile after the call."""
    return _Profiled(k, "simulate")


def native_profile(k):
    """neuron.native_profile(kernel)(...): runs natively, then once more with every engine
    instruction timed; .profile is then a runtime.NativeProfile (print it for the table of
    where the CPU time goes, per instruction and source line)."""
    return _Profiled(k, "native")
