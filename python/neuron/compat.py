"""NKI compatibility (current `import nki` API, first part): neuron.compat.install() makes
`import nki`, `nki.language` and `nki.isa` resolve to neuron's, so kernels written against the
current NKI run unmodified here. `python -m neuron.compat script.py [args]` runs a script with
the aliases installed. The legacy `neuronxcc.nki` API is not provided yet (docs/python.md)."""
import os
import runpy
import sys
import types

from . import isa, language
from .kernel import Kernel, kernel, simulate as _simulate


def jit(fn=None, **kwargs):
    """nki.jit: a neuron kernel (native run; NKI_SIMULATOR=1 or mode="simulation" runs on the
    simulator). Other NKI options (platform_target, mode=baremetal, ...) are accepted and
    ignored."""
    mode = "simulate" if (os.environ.get("NKI_SIMULATOR") == "1"
                          or kwargs.get("mode") == "simulation") else "native"
    if fn is None:
        return lambda f: jit(f, **kwargs)
    return kernel(fn, mode=mode)


def simulate(k):
    """nki.simulate(kernel)(*args): run on the simulator; outputs of the arguments' kind."""
    return _simulate(k if isinstance(k, Kernel) else kernel(k))


def simulate_kernel(k, *args, **kwargs):
    """nki.simulate_kernel(kernel, *args): run on the simulator with NumPy arrays."""
    return simulate(k)(*args)


def baremetal(fn=None, **kwargs):
    """nki.baremetal: compile and run with NumPy arrays (here: natively on the host)."""
    if fn is None:
        return lambda f: baremetal(f, **kwargs)
    return kernel(fn)


def install():
    """Registers the `nki`, `nki.language` and `nki.isa` modules."""
    nki = types.ModuleType("nki")
    nki.__doc__ = "neuron's NKI compatibility module (neuron.compat)"
    nki.language, nki.isa = language, isa
    nki.jit, nki.simulate, nki.simulate_kernel, nki.baremetal = (jit, simulate, simulate_kernel,
                                                                 baremetal)
    nki.__path__ = []  # a package, so `import nki.language` works
    sys.modules["nki"] = nki
    sys.modules["nki.language"] = language
    sys.modules["nki.isa"] = isa
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
