"""neuron: a kernel language and JIT toolkit for AWS Trainium, from Python.

    import neuron
    import neuron.language as nl

    @neuron.kernel
    def add(a, b):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.load(a) + nl.load(b))
        return out

Submodules: language (nl), isa (nisa), cache, registry, dtypes, errors, eager, runtime are
imported with the package; torch, ops, compat, legacy and flex_attention on first use
(neuron.torch and neuron.flex_attention import torch; neuron.legacy adds the legacy tensor
methods), so `neuron.torch.custom_op` works after a bare `import neuron`. When torch is
already imported, `import neuron` imports neuron.ops too, so the torch.ops.neuron.*
operators exist from then on.
"""
import importlib
import sys

from . import _C
from . import cache, dtypes, eager, errors, isa, language, registry, runtime
from .errors import NeuronError
from .kernel import Kernel, kernel, native_profile, simulate
from .oplib import load_ops
from .profile import Profile, profile
from .ranks import run_ranks
from . import runs

__all__ = ["kernel", "simulate", "native_profile", "profile", "Profile", "runs", "Kernel", "NeuronError",
           "language", "isa", "cache", "registry", "dtypes", "errors", "eager", "runtime", "torch",
           "ops", "compat", "legacy", "flex_attention", "parse_kernel", "trace_example", "load_ops",
           "run_ranks"]

_LAZY = ("torch", "ops", "compat", "legacy", "flex_attention")


def __getattr__(name):
    if name in _LAZY:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'neuron' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


def parse_kernel(text, source_name="<ir>"):
    """Parses the Kernel IR text form (docs/ir.md)."""
    return _C.parse_kernel(text, source_name)


def trace_example(name, specs):
    """The Kernel IR of registered kernel `name` for specs, (shape, dtype, name) tuples: the
    same as neuron.registry.get(name).trace(...) with those tensors."""
    return registry.get(name).trace(*[_C.TensorSpec(list(s), dtypes.to_dtype(d), n)
                                      for s, d, n in specs])


if "torch" in sys.modules:  # registering the operators costs little once torch is loaded
    from . import ops  # noqa: E402, F401
