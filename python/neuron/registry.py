"""neuron.registry: the C++ kernels registered by name (NEURON_KERNEL in neuron/registry.hpp:
the examples' kernels and the kernel library), listed and called like @neuron.kernel functions.

    import neuron
    neuron.registry.list()                                 # ['matmul', 'scaled_activation', ...]
    k = neuron.registry.get("scaled_activation")           # a neuron.Kernel
    out = k(x, scale=0.5, act="tanh")                      # native; k[grid](...) for a grid
    ir = k.trace(((256, 64), "float32"), rows=64)          # the Kernel IR
    neuron.registry.info("scaled_activation").params[0].doc

A registered kernel takes its tensors positionally (or by name) and its parameters by keyword
only; parameters left out take their registered defaults. A value of the wrong kind is a
TypeError (an int is a float parameter's value; a bool is not an int); an enum parameter takes
one of its names, a dtype parameter any dtype neuron knows. Errors from the kernel's own rules
point at its C++ source."""
import enum
import functools
import inspect

import numpy as np

from . import _C
from ._span import user_span
from .dtypes import to_dtype
from .kernel import Kernel

__all__ = ["list", "info", "get"]

def list():  # noqa: A001 (the documented name)
    """The names of the registered kernels, sorted."""
    return [k.name for k in _C.registry_list()]


def info(name):
    """The registration of kernel `name`: .name, .doc, .inputs (tensor names), .params (each
    with .name, .kind, .default, .required, .doc, .choices), .span (where it is registered)."""
    k = _C.registry_find(name)
    if k is None:
        raise ValueError(f"no kernel named {name!r} is registered (registered: "
                       f"{', '.join(list()) or 'none'})")
    return k


@functools.lru_cache(maxsize=None)
def get(name, *, mode=None, target="trn2"):
    """Registered kernel `name` as a neuron.Kernel (mode "native" by default, or "simulate";
    C++ kernels cannot run eagerly). The same Kernel is returned for the same arguments, so its
    compiled signatures are kept between calls."""
    return Kernel(_Registered(info(name)), target=target, mode=mode or "native")


def _param_value(p, v):
    """A Python value in the form the C++ registry checks: NumPy scalars as Python numbers,
    enum members by name, any dtype as a neuron DType."""
    if p.kind == _C.ParamKind.dtype and not isinstance(v, _C.DType):
        try:
            return to_dtype(v)
        except TypeError:
            return v  # the C++ check names the parameter and its kind
    if isinstance(v, enum.Enum):
        return v.name
    if isinstance(v, np.bool_):
        return bool(v)
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.floating):
        return float(v)
    return v


def _describe(p):
    kind = p.kind.name
    if p.choices:
        kind += " " + "|".join(p.choices)
    value = p.default.name_ if isinstance(p.default, _C.DType) else repr(p.default)
    default = "required" if p.required else f"default {value}"
    return f"  {p.name} ({kind}, {default}): {p.doc}"


class _Registered:
    """What a Kernel traces for a registered C++ kernel: a callable with the kernel's name,
    doc and signature (tensors, then keyword-only parameters with their defaults), traced by
    the C++ registry."""

    def __init__(self, k):
        self._neuron_registered = self
        self.info = k
        self.__name__ = self.__qualname__ = k.name
        self.__module__ = __name__
        lines = [k.doc, "", f"Tensors: {', '.join(k.inputs) or 'none'}."]
        if k.params:
            lines += ["Parameters:"] + [_describe(p) for p in k.params]
        lines.append(f"Registered at {k.span}.")
        self.__doc__ = "\n".join(lines)
        P = inspect.Parameter
        self.__signature__ = inspect.Signature(
            [P(n, P.POSITIONAL_OR_KEYWORD) for n in k.inputs] +
            [P(p.name, P.KEYWORD_ONLY, default=P.empty if p.required else p.default)
             for p in k.params])

    def __call__(self, *args, **kwargs):
        raise TypeError(f"{self.__name__} is a C++ kernel: call it through "
                        f"neuron.registry.get({self.__name__!r})")

    def trace(self, specs, params):
        byname = {p.name: p for p in self.info.params}
        for n, v in params.items():
            if n not in byname:
                raise TypeError(f"kernel {self.__name__}: argument '{n}' is a tensor; pass a "
                                f"NumPy array or torch tensor, got {type(v).__name__}")
        values = {n: _param_value(byname[n], v) for n, v in params.items()}
        return _C.registry_trace(self.info.name, specs, values, user_span())

    def __repr__(self):
        return f"<registered C++ kernel {self.__name__}{self.__signature__}>"
