"""neuron: a kernel language and JIT toolkit for AWS Trainium, from Python.

    import neuron
    import neuron.language as nl

    @neuron.kernel
    def add(a, b):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.load(a) + nl.load(b))
        return out
"""
from . import _C
from . import isa, language
from .errors import NeuronError
from .kernel import Kernel, kernel, simulate
from .profile import Profile, profile
from . import runs

__all__ = ["kernel", "simulate", "profile", "Profile", "runs", "Kernel", "NeuronError",
           "language", "isa", "parse_kernel", "trace_example"]


def parse_kernel(text, source_name="<ir>"):
    """Parses the Kernel IR text form (docs/ir.md)."""
    return _C.parse_kernel(text, source_name)


def trace_example(name, specs):
    """Traces a built-in C++ example kernel (vector_add, matmul, softmax) to Kernel IR;
    specs are (shape, dtype, name) tuples."""
    return _C.trace_example(name, [_C.TensorSpec(list(s), language.to_dtype(d), n)
                                   for s, d, n in specs])
