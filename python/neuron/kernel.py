"""@neuron.kernel: traces a Python function into Kernel IR, compiles it once per argument
signature and runs it natively (LLVM JIT, the default) or on the simulator; or runs it eagerly,
one operation at a time (mode="eager", or NEURON_EAGER=1: python/neuron/eager.py)."""
import functools
import inspect
import threading

from . import _C
from . import eager
from . import runtime
from ._span import function_span
from .errors import NeuronError, strip_toolkit_frames
from .language import _State


MODES = ("native", "simulate", "eager")


def default_mode():
    """The mode of a kernel made without one: eager when NEURON_EAGER is set (to anything but
    0, false, off or no: runtime/config.hpp), else native."""
    return "eager" if _C.config().eager else "native"


class Kernel:
    """A traced-on-call kernel. kernel[g0, g1](...) launches a grid of programs."""

    def __init__(self, fn, grid=(1,), target="trn2", profile=False, _cache=None, mode=None):
        mode = default_mode() if mode is None else mode
        if mode not in MODES:
            raise ValueError(f"mode is 'native', 'simulate' or 'eager', got {mode!r}")
        self.fn = fn
        self.mode = mode
        self.grid = tuple(grid)
        self.target = target
        self.profile = profile
        self._last = threading.local()  # per thread: threads may call one kernel at once
        self._cache = {} if _cache is None else _cache
        functools.update_wrapper(self, fn, updated=())  # never copy fn.__dict__ over ours
        self._params = [p.name for p in inspect.signature(fn).parameters.values()]

    @property
    def last_report(self):
        """The native compile report of this thread's last call ("" before one)."""
        return getattr(self._last, "report", "")

    @property
    def last_profile(self):
        """The simulator's profile summary of this thread's last call (neuron.simulate)."""
        return getattr(self._last, "profile", "")

    def __getitem__(self, grid):
        grid = grid if isinstance(grid, tuple) else (grid,)
        if not 1 <= len(grid) <= 4 or not all(isinstance(g, int) and g > 0 for g in grid):
            raise ValueError(f"a launch grid is 1 to 4 positive ints, got {grid!r}")
        return Kernel(self.fn, grid, self.target, self.profile, self._cache, self.mode)

    def trace(self, *args):
        """The Kernel IR for these arguments (arrays, or (shape, dtype) pairs)."""
        __tracebackhide__ = True
        try:
            return self._trace_specs(self._specs(args))
        except NeuronError as e:
            raise e.with_traceback(strip_toolkit_frames(e.__traceback__)) from None

    def _specs(self, args):
        if len(args) != len(self._params):
            raise TypeError(f"kernel {self.fn.__name__} takes {len(self._params)} tensors, "
                            f"got {len(args)}")
        specs = []
        for a, name in zip(args, self._params):
            if isinstance(a, tuple) and len(a) == 2 and not hasattr(a, "shape"):
                specs.append(_C.TensorSpec(list(a[0]), runtime.to_dtype(a[1]), name))
            else:
                specs.append(runtime.spec_of(runtime.to_numpy(a), name))
        return specs

    def _trace_specs(self, specs):
        _State.serial += 1
        with eager.paused():
            return _C.trace(self.fn.__name__, self.fn, specs, function_span(self.fn))

    def compile(self, *args):
        specs = self._specs(args)
        key = tuple((tuple(s.shape), s.dtype) for s in specs)
        if key not in self._cache:
            self._cache[key] = _C.compile(self._trace_specs(specs), self.target)
        return self._cache[key]

    def __call__(self, *args):
        __tracebackhide__ = True  # pytest and IPython hide this frame (the re-raise below)
        try:
            if self.mode == "eager":
                outs = self._run_eager(args)
            else:
                compiled = self.compile(*args)
                arrays, write_back = runtime.host_arrays(args)
                outs, report = runtime.run(compiled, arrays, self.grid, self.mode, self.profile)
                write_back()
                if self.mode == "native":
                    self._last.report = report
                else:
                    self._last.profile = report
        except NeuronError as e:
            raise e.with_traceback(strip_toolkit_frames(e.__traceback__)) from None
        like_torch = any(runtime.is_torch(a) for a in args)
        outs = [runtime.from_numpy(o, like_torch) for o in outs]
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _run_eager(self, args):
        # The caller's contiguous arrays are the kernel's HBM inputs (zero-copy, as compiled).
        specs = self._specs(args)
        arrays, write_back = runtime.host_arrays(args)
        outs = eager.run_kernel(self.fn, self.fn.__name__, specs, arrays, self.grid, self.target)
        write_back()
        return outs


def kernel(fn=None, *, target="trn2", mode=None):
    """Decorator: @neuron.kernel, or @neuron.kernel(mode="simulate", target="trn2"). mode is
    "native" (the default), "simulate" or "eager"; NEURON_EAGER=1 makes "eager" the default."""
    if fn is None:
        return lambda f: Kernel(f, target=target, mode=mode)
    return Kernel(fn, target=target, mode=mode)


class _Simulated:
    def __init__(self, k):
        self.kernel = Kernel(k.fn, k.grid, k.target, True, k._cache, "simulate") \
            if isinstance(k, Kernel) else Kernel(k, profile=True, mode="simulate")

    def __getitem__(self, grid):
        return _Simulated(self.kernel[grid])

    def __call__(self, *args):
        out = self.kernel(*args)
        self.profile = self.kernel.last_profile
        return out


def simulate(k):
    """neuron.simulate(kernel)(...): runs on the simulator with the timing model; the profile
    summary text is in .profile after the call."""
    return _Simulated(k)
