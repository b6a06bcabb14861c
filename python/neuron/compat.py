"""NKI compatibility (docs/nki-compat.md): neuron.compat.install() makes both NKI generations
resolve to neuron, so published kernels run unmodified here:

- current API: `import nki`, `nki.language`, `nki.isa` -> neuron, neuron.language, neuron.isa;
- legacy API: `neuronxcc.nki` (also `from neuronxcc import nki`), `neuronxcc.nki.language`,
  `neuronxcc.nki.isa`, `neuronxcc.nki.typing`, `neuronxcc.nki.compiler` -> neuron.legacy and
  its modules (value-returning nisa calls, nl.arange index grids, mask=, nl.par_dim blocks;
  loops unrolled at trace time).

`python -m neuron.compat script.py [args]` runs a script with the aliases installed."""
import os
import runpy
import sys
import types

from . import isa, language, ranks
from .kernel import Kernel, kernel, simulate as _simulate


class JitKernel(Kernel):
    """What nki.jit makes: a neuron Kernel that also runs on the simulator while the
    environment has NKI_SIMULATOR=1 (read at each call, as the legacy nki.jit does)."""

    @property
    def mode(self):
        return "simulate" if os.environ.get("NKI_SIMULATOR") == "1" else self._mode

    @mode.setter
    def mode(self, mode):
        self._mode = mode


def jit(fn=None, **kwargs):
    """nki.jit: a neuron kernel (native run, or eager with NEURON_EAGER=1; mode="simulation",
    or NKI_SIMULATOR=1 when it is called, runs on the simulator). The target is platform_target=
    (trn1, trn2, trn3) or the environment's NEURON_PLATFORM_TARGET_OVERRIDE, else trn2. Other
    NKI options (mode=baremetal, ...) are accepted and ignored."""
    if fn is None:
        return lambda f: jit(f, **kwargs)
    fn = getattr(fn, "func", fn) if isinstance(fn, Kernel) else fn  # nki.jit of a jit kernel
    mode = "simulate" if kwargs.get("mode") == "simulation" else None
    return JitKernel(fn, mode=mode, target=platform_target(kwargs.get("platform_target")))


# NKI's platform names and the NeuronCore generation names NKI's simulator also takes.
_TARGETS = {"trn1": "trn1", "trn2": "trn2", "trn3": "trn3", "gen2": "trn1", "gen3": "trn2",
            "gen4": "trn3", "inf2": "trn1"}


def platform_target(given=None):
    """neuron's target for NKI's platform_target= (or, when None, the environment's
    NEURON_PLATFORM_TARGET_OVERRIDE; neither: trn2). An unknown name is a ValueError, never a
    silent trn2 (gen4's MX instructions would then fail as if the kernel were wrong)."""
    name = given if given is not None else os.environ.get("NEURON_PLATFORM_TARGET_OVERRIDE")
    if name is None or name == "":
        return "trn2"
    target = _TARGETS.get(str(name).lower())
    if target is None:
        where = "platform_target" if given is not None else "NEURON_PLATFORM_TARGET_OVERRIDE"
        raise ValueError(f"{where}={name!r} is not a NeuronCore target neuron knows; use one of "
                         f"{', '.join(sorted(_TARGETS))}")
    return target


def simulate(k):
    """nki.simulate(kernel)(*args): run on the simulator; outputs of the arguments' kind."""
    return _simulate(k if isinstance(k, Kernel) else kernel(k))


def simulate_kernel(k, *args, **kwargs):
    """nki.simulate_kernel(kernel, *args, **kwargs): run on the simulator with NumPy arrays
    (keyword arguments as the kernel takes them: tensors or compile-time parameters)."""
    return simulate(k)(*args, **kwargs)


def simulate_kernel_lnc(k, args=(), kwargs=None, lnc=1):
    """nki.simulator.simulate_kernel(kernel, args, kwargs, lnc): the simulator run of
    `kernel[lnc](*args, **kwargs)` (a grid of `lnc` programs when lnc > 1)."""
    k = k if isinstance(k, Kernel) else kernel(k)
    return simulate(k[int(lnc)] if int(lnc) > 1 else k)(*args, **(kwargs or {}))


def baremetal(fn=None, **kwargs):
    """nki.baremetal: compile and run with NumPy arrays (here: natively on the host)."""
    if fn is None:
        return lambda f: baremetal(f, **kwargs)
    return kernel(fn)


class _Measured:
    """A kernel run on the simulator with the timing model (nki.benchmark / nki.profile of the
    current API). `kernel[g]` launches a grid; `.benchmark_result.nc_latency` and `.profile`
    (the summary text) describe the last call."""

    def __init__(self, k, trace=None):
        self._k = k if isinstance(k, Kernel) else kernel(k)
        self._trace = trace  # nki.profile's (working_directory, save_trace_name)

    def __getitem__(self, grid):
        return _Measured(self._k[grid], self._trace)

    def __call__(self, *args, **kwargs):
        from .legacy import BenchmarkResult, _total_us
        sim = _simulate(self._k)
        out = sim(*args, **kwargs)
        self.profile = sim.profile
        self.benchmark_result = BenchmarkResult(_total_us(sim.profile), sim.profile)
        if self._trace:
            from .legacy import write_profile
            self.profile_path = write_profile(*self._trace, sim.profile)
        return out


def benchmark(kernel=None, warmup=10, iters=100, **kwargs):
    """nki.benchmark(kernel, warmup=, iters=): one run on the simulator with the timing model;
    `.benchmark_result.nc_latency.get_latency_percentile(p)` is the modelled latency in us (one
    deterministic figure for every percentile). warmup, iters and file names are accepted and
    ignored: the model's latency does not vary between runs."""
    return (lambda f: _Measured(f)) if kernel is None else _Measured(kernel)


def profile(func=None, working_directory=None, save_neff_name=None,
            save_trace_name="profile.ntff", **kwargs):
    """nki.profile: a run on the simulator with the timing model that writes the profile summary
    (text, not a device NTFF trace) to <working_directory>/<save_trace_name's stem>.txt."""
    trace = (working_directory, save_trace_name)
    return (lambda f: _Measured(f, trace)) if func is None else _Measured(func, trace)


def _install_legacy():
    from . import legacy
    neuronxcc = sys.modules.get("neuronxcc")
    if neuronxcc is None or not getattr(neuronxcc, "_neuron_compat", False):
        neuronxcc = types.ModuleType("neuronxcc")
        neuronxcc.__doc__ = "neuron's legacy NKI compatibility package (neuron.compat)"
        neuronxcc.__path__ = []
        neuronxcc._neuron_compat = True
    neuronxcc.nki = legacy
    sys.modules["neuronxcc"] = neuronxcc
    sys.modules["neuronxcc.nki"] = legacy
    for name in ("language", "isa", "typing", "compiler"):
        sys.modules[f"neuronxcc.nki.{name}"] = getattr(legacy, name)
    sys.modules["neuronxcc.nki.isa.constants"] = legacy.isa.constants
    return legacy


def install():
    """Registers `nki`, `nki.language`, `nki.isa`, `nki.isa.constants`, `nki.typing`,
    `nki.collectives` (neuron.ranks: between the ranks of neuron.run_ranks) and
    `nki.simulator` (current API) and `neuronxcc`,
    `neuronxcc.nki`, `neuronxcc.nki.language`, `.isa`, `.typing` (legacy API); returns the
    current-API `nki` module."""
    nki = types.ModuleType("nki")
    nki.__doc__ = "neuron's NKI compatibility module (neuron.compat)"
    nki.language, nki.isa = language, isa
    nki.jit, nki.simulate, nki.simulate_kernel, nki.baremetal = (jit, simulate, simulate_kernel,
                                                                 baremetal)
    nki.benchmark, nki.profile = benchmark, profile
    nki.dtype, nki.tensor = type(language.float32), language.tensor  # for annotations
    nki.collectives = ranks
    simulator = types.ModuleType("nki.simulator")
    simulator.simulate_kernel, simulator.simulate = simulate_kernel_lnc, simulate
    nki.simulator = simulator
    nki.__path__ = []  # a package, so `import nki.language` works
    sys.modules["nki"] = nki
    sys.modules["nki.language"] = language
    sys.modules["nki.isa"] = isa
    sys.modules["nki.isa.constants"] = isa.constants
    sys.modules["nki.collectives"] = ranks
    sys.modules["nki.simulator"] = simulator
    legacy = _install_legacy()
    nki.typing = legacy.typing
    sys.modules["nki.typing"] = legacy.typing
    return nki


def main(argv):
    if not argv:
        print("usage: python -m neuron.compat script.py [args...]", file=sys.stderr)
        return 2
    install()
    sys.argv = list(argv)
    runpy.run_path(argv[0], run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
