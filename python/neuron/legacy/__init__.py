"""neuron.legacy: the legacy NKI generation (`neuronxcc.nki`, NKI 0.1) on top of neuron.

neuron.compat.install() makes `neuronxcc.nki`, `.language`, `.isa` and `.typing` resolve here,
so published legacy kernels (value-returning nisa calls, nl.arange index grids, mask=,
nl.par_dim blocks, kernels that return their outputs) run unmodified on neuron's simulator or
natively. Legacy loops are unrolled at trace time (docs/nki-compat.md says why).

    from neuronxcc import nki
    import neuronxcc.nki.language as nl

    @nki.jit(mode="simulation")
    def add(a, b):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        ...
        return out
"""
import copy
import functools
import inspect
import os
import re
import warnings

import numpy as np

from .. import _C, _span, errors, runtime
from ..kernel import Kernel, param_key
from ..kernel import simulate as _simulate
from . import compiler, constants, isa, language, methods, spill, typing, views

methods.install()
tensor = _C.Tensor  # nki.tensor
__all__ = ["jit", "trace", "simulate_kernel", "baremetal", "benchmark", "profile", "tensor",
           "language", "isa", "typing", "compiler"]


def _is_array(v):
    return isinstance(v, np.ndarray) or runtime.is_torch(v)


def _freeze(name, v):
    """A constant's compile key: the current API's parameter key (type and exact value: 1, 1.0
    and True differ, and so do 0.0 and -0.0), or for other values their type and repr."""
    try:
        return param_key(name, v)
    except TypeError:
        return (type(v).__name__, repr(v))


class _Traced:
    """The function neuron traces: the kernel with its non-array arguments bound. It carries
    the kernel's code object, so trace errors point at the kernel's `def` line."""

    def __init__(self, fn, names, consts, grid, shared_constants=None, spilling=spill.NONE):
        # Kernel copies this object's __dict__ onto itself (functools.update_wrapper): private
        # names only.
        self._lk_fn, self._lk_names, self._lk_consts, self._lk_grid = fn, names, consts, grid
        self._lk_spill = spilling  # where PSUM block tensors too big for PSUM go (spill.py)
        self._lk_spillable, self._lk_spill_notes = 0, []  # how many the last trace found
        # nl.shared_constant arrays found so far: hidden inputs after the kernel's own
        self._lk_constants = [] if shared_constants is None else shared_constants
        hidden = [f"shared_constant{i}" for i in range(len(self._lk_constants))]
        self.__code__, self.__name__ = fn.__code__, fn.__name__
        self.__qualname__ = getattr(fn, "__qualname__", fn.__name__)
        self.__signature__ = inspect.Signature(
            [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD)
             for n in names + hidden])
        self._lk_returned = {}  # spec key -> (single?, positions of returned inputs)

    def __call__(self, *tensors):
        tensors, hidden = tensors[:len(self._lk_names)], tensors[len(self._lk_names):]
        constants.begin(self._lk_constants, hidden)
        views.begin_trace(self._lk_grid)
        spill.begin(self._lk_spill)
        sig = inspect.signature(self._lk_fn)
        values = dict(self._lk_consts, **dict(zip(self._lk_names, tensors)))
        for name, t in zip(self._lk_names, tensors):
            ann = sig.parameters[name].annotation
            why = ann.mismatch(t) if isinstance(ann, typing.TensorType) else None
            if why:
                errors.user_error("typing", f"argument '{name}' {why}",
                                  _span.function_span(self._lk_fn))
        args, kwargs = [], {}
        for p in sig.parameters.values():
            if p.kind == p.POSITIONAL_ONLY:
                args.append(values[p.name])
            else:
                kwargs[p.name] = values[p.name]
        try:
            out = self._lk_fn(*args, **kwargs)
        finally:
            views.end_trace()
            self._lk_spillable, self._lk_spill_notes = spill.candidates(), spill.notes()
            spill.begin(spill.NONE)
        single = not isinstance(out, (tuple, list))
        outs = [] if out is None else [out] if single else list(out)
        # A returned t.reshape(...) is t, reshaped on the host after the run.
        shapes = [tuple(o.shape) if isinstance(o, views.Reshaped) else None for o in outs]
        outs = [o.base if isinstance(o, views.Reshaped) else o for o in outs]
        inputs = [next((i for i, t in enumerate(tensors) if o is t), None) for o in outs]
        key = tuple((tuple(t.shape), t.dtype) for t in tensors)
        kept = [o for o, i in zip(outs, inputs) if i is None]
        dummy = not kept and any(i is not None for i in inputs)
        if dummy:  # only mutated parameters are returned; a kernel needs one output
            kept = [language.ndarray((1,), language.float32, buffer=language.shared_hbm)]
        kept = [self._as_output(o) for o in kept]
        # shared_hbm tensors the kernel wrote but did not return are its scratch (the
        # tracer's rule, as in NKI).
        self._lk_returned[key] = (single and out is not None, inputs, dummy, shapes)
        return kept if len(kept) != 1 else kept[0]


    def _as_output(self, t):
        """A returned nl.hbm (private HBM) tensor or on-chip tile of a one-program kernel is an
        output, as NKI's simulator takes it (the NKI docs' own examples return both): the
        program owns it, so its values are copied into a shared_hbm output at the end. With
        more programs the tracer's [kernel-output] error stands (whose copy would it be?)."""
        from ..reshaped import _covers_storage
        if not isinstance(t, _C.Tensor) or t.buffer == _C.Memory.shared_hbm or \
                np.prod(self._lk_grid) != 1 or not _covers_storage(t):
            return t
        out = language.ndarray(tuple(t.shape), t.dtype, buffer=language.shared_hbm)
        if t.buffer == _C.Memory.hbm:
            isa.dma_copy(dst=out, src=t)
        else:
            language.store(out, value=t)
        return out


class LegacyKernel:
    """@nki.jit: kernel(args) or kernel[g0, g1](args); arrays become HBM tensors, other
    arguments are compile-time values. Returns the kernel's outputs (NumPy or torch)."""
    __test__ = False  # a kernel named test_* is not a pytest test (NKI's docs name kernels so)

    def __init__(self, fn, mode="auto", grid=None, target="trn2", _shared=None):
        if grid is None:  # nki.baremetal(kernel[2]) keeps the launch grid it wraps
            grid = fn.grid if isinstance(fn, (Kernel, LegacyKernel)) else (1,)
        if isinstance(fn, (Kernel, LegacyKernel)):
            fn = fn.fn
        self.fn, self.mode_name, self.grid, self.target = fn, mode, tuple(grid), target
        self._kernels = {} if _shared is None else _shared
        functools.update_wrapper(self, fn)
        self.func_name = fn.__name__
        self.benchmark_result = None
        self.profile_text = ""

    def __getitem__(self, grid):
        grid = grid if isinstance(grid, tuple) else (grid,)
        if any(isinstance(g, (int, np.integer)) and g == 0 for g in grid):
            # Published kernels launch kernel[0](...) and check the result of one program:
            # NKI runs a 0-sized grid dim as one program, so neuron does too, and says so.
            warnings.warn(f"launch grid {grid!r}: a 0-sized grid dimension runs one program "
                          "along it (as NKI does); write 1", stacklevel=2)
            grid = tuple(1 if isinstance(g, (int, np.integer)) and g == 0 else g for g in grid)
        if not all(isinstance(g, (int, np.integer)) and g > 0 for g in grid):
            errors.user_error("unsupported", f"launch grid {grid!r}: neuron takes 1 to 4 "
                              "positive ints (nl.nc / nl.spmd_dim are not supported)",
                              _span.user_span())
        k = copy.copy(self)  # shares the compiled kernels
        k.grid, k.benchmark_result = tuple(int(g) for g in grid), None
        return k

    @property
    def mode(self):
        """"simulate" (mode="simulation" or NKI_SIMULATOR=1) or "native"."""
        sim = self.mode_name == "simulation" or os.environ.get("NKI_SIMULATOR") == "1"
        return "simulate" if sim else "native"

    def __call__(self, *args, **kwargs):
        __tracebackhide__ = True
        if _C.tracing():  # a kernel called from a kernel is inlined (legacy mode="trace")
            return self.fn(*args, **kwargs)
        return self.run(args, kwargs, self.mode)

    def _kernel_for(self, args, kwargs, mode, retrace=False, spilling=None):
        """(neuron Kernel, its _Traced, array arguments) for this call's constants."""
        sig = inspect.signature(self.fn)
        bound = sig.bind(*args, **kwargs)
        bound.apply_defaults()
        names, arrays, consts = [], [], {}
        for name, v in bound.arguments.items():
            if sig.parameters[name].kind in (inspect.Parameter.VAR_POSITIONAL,
                                             inspect.Parameter.VAR_KEYWORD):
                raise TypeError(f"kernel {self.func_name}: *args / **kwargs parameters are "
                                "not supported")
            if _is_array(v):
                names.append(name)
                arrays.append(v)
            else:
                consts[name] = v
        key = (tuple(names), tuple(sorted((n, _freeze(n, v)) for n, v in consts.items())),
               self.grid, mode or "native")
        k, traced = self._kernels.get(key, (None, None))
        if k is None or retrace:  # retrace: a new nl.shared_constant, or spilling (spill.py)
            traced = _Traced(self.fn, names, consts, self.grid,
                             None if traced is None else traced._lk_constants,
                             spilling if spilling is not None else
                             traced._lk_spill if traced is not None else spill.NONE)
            k = Kernel(traced, grid=self.grid, target=self.target, mode=mode or "native")
            self._kernels[key] = (k, traced)
        return k, traced, arrays + list(traced._lk_constants)

    def trace(self, *args, **kwargs):
        """The Kernel IR for these arguments (arrays; other arguments are constants)."""
        __tracebackhide__ = True
        retrace = False
        while True:
            k, _, arrays = self._kernel_for(args, kwargs, None, retrace)
            try:
                return k.trace(*arrays)
            except constants.Retrace:
                retrace = True

    def run(self, args, kwargs, mode, profile=False):
        __tracebackhide__ = True
        retrace, spilling = False, None
        while True:
            k, traced, arrays = self._kernel_for(args, kwargs, mode, retrace, spilling)
            try:
                if profile:
                    sim = _simulate(k)
                    out = sim(*arrays)
                    self.profile_text = sim.profile
                else:
                    out = k(*arrays)
                spill.warn(traced._lk_spill_notes)  # compiled: the spills it took
                break
            except constants.Retrace:  # one more nl.shared_constant input (constants.py)
                retrace = True
            except errors.NeuronError as e:  # the user's frames only, as neuron kernels do
                level = spill.next_level(traced._lk_spill, e.rule)
                if level is not None and traced._lk_spillable:
                    retrace, spilling = True, level  # traced again, too-big PSUM blocks spilled
                    continue
                raise e.with_traceback(errors.strip_toolkit_frames(e.__traceback__)) from None
        arrays = arrays[:len(arrays) - len(traced._lk_constants)]
        spec = tuple((tuple(a.shape), runtime.to_dtype(a.dtype))
                     for a in map(runtime.to_numpy, arrays))
        single, inputs, dummy, shapes = traced._lk_returned.get(spec, (False, [], False, []))
        if not any(i is not None for i in inputs) and not any(shapes):
            return out
        outs = [] if dummy else list(out) if isinstance(out, tuple) else [out]
        it = iter(outs)
        full = [arrays[i] if i is not None else next(it) for i in inputs]
        full = [f if s is None else f.reshape(s) for f, s in zip(full, shapes)]
        return full[0] if single else tuple(full)


class NcLatency:
    """Latency percentiles in microseconds. Here every percentile is the timing model's
    estimated kernel time (a deterministic model, not a device measurement)."""

    def __init__(self, us):
        self.us = us

    def get_latency_percentile(self, p):
        return self.us

    def __repr__(self):
        return f"<nc_latency {self.us:.2f} us (timing-model estimate)>"


class BenchmarkResult:
    def __init__(self, us, profile):
        self.nc_latency, self.profile = NcLatency(us), profile


def _total_us(profile_text):
    m = re.search(r"total time\s+([0-9.]+)\s*(ns|us|ms|s)\b", profile_text)
    if not m:
        raise RuntimeError(f"no total time in the simulator profile:\n{profile_text}")
    return float(m.group(1)) * {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}[m.group(2)]


class BenchmarkKernel(LegacyKernel):
    """nki.benchmark: runs on the simulator with the timing model; .benchmark_result holds the
    estimated latency. warmup/iters and file names are accepted and ignored."""

    def __call__(self, *args, **kwargs):
        __tracebackhide__ = True
        out = self.run(args, kwargs, "simulate", profile=True)
        self.benchmark_result = BenchmarkResult(_total_us(self.profile_text), self.profile_text)
        return out


def write_profile(working_directory, save_trace_name, text):
    """nki.profile's output here: the profile summary text in
    <working_directory>/<save_trace_name without extension>.txt (no device NTFF); its path."""
    stem = os.path.splitext(os.path.basename(save_trace_name or "profile.ntff"))[0]
    os.makedirs(working_directory or ".", exist_ok=True)
    path = os.path.join(working_directory or ".", stem + ".txt")
    with open(path, "w") as f:
        f.write(text)
    return path


class ProfileKernel(LegacyKernel):
    """nki.profile: runs on the simulator with the timing model and writes the profile summary
    (text) to <working_directory>/<save_trace_name without extension>.txt."""

    def __call__(self, *args, **kwargs):
        __tracebackhide__ = True
        out = self.run(args, kwargs, "simulate", profile=True)
        self.profile_path = write_profile(self.working_directory, self.save_trace_name,
                                          self.profile_text)
        return out


def _decorator(cls, fn, **kw):
    return (lambda f: cls(f, **kw)) if fn is None else cls(fn, **kw)


def _target(kwargs):
    from ..compat import platform_target
    return platform_target(kwargs.get("platform_target"))


def jit(func=None, mode="auto", **kwargs):
    """nki.jit: mode "simulation" (or NKI_SIMULATOR=1) runs on the simulator, "benchmark"
    as nki.benchmark; every other mode (auto, baremetal, jax, torchxla, trace) runs natively
    with NumPy or torch CPU arrays."""
    if mode == "benchmark":
        return _decorator(BenchmarkKernel, func, mode=mode, target=_target(kwargs))
    return _decorator(LegacyKernel, func, mode=mode, target=_target(kwargs))


def trace(func=None, **kwargs):
    """nki.trace: the oldest entry point, for kernels that write into output arguments (NKI's
    docs still use it with nki.simulate_kernel); as jit(mode="trace")."""
    return jit(func, mode="trace", **kwargs)


def simulate_kernel(kernel, *args, **kwargs):
    """nki.simulate_kernel(kernel, *args): one run on the simulator with NumPy arrays."""
    k = kernel if isinstance(kernel, LegacyKernel) else LegacyKernel(kernel)
    return k.run(args, kwargs, "simulate")


def baremetal(kernel=None, **kwargs):
    """nki.baremetal: compile and run natively (LLVM JIT) with NumPy arrays; save_neff_name
    and the other options are accepted and ignored."""
    return _decorator(LegacyKernel, kernel, mode="baremetal")


def benchmark(kernel=None, warmup=10, iters=100, **kwargs):
    return _decorator(BenchmarkKernel, kernel, mode="benchmark")


def profile(func=None, working_directory=None, save_neff_name=None,
            save_trace_name="profile.ntff", **kwargs):
    """nki.profile: the simulator's profile summary instead of a device trace (NTFF)."""
    def make(f):
        k = ProfileKernel(f, mode="profile")
        k.working_directory = working_directory or "."
        k.save_trace_name = save_trace_name or "profile.ntff"
        return k
    return make if func is None else make(func)
