"""nl.shared_constant(array, dtype) in legacy kernels: the current API's scheme
(shared_constants.py) in a Scope of its own, since a legacy kernel is traced inside a Kernel
and each layer retraces for its own constants (legacy/__init__.py catches this Retrace)."""
from .._span import user_span
from ..shared_constants import Scope

_scope = Scope()
Retrace, begin = _scope.Retrace, _scope.begin


def request(constant, dtype):
    """The input tensor holding constant (cast to dtype; an array or a .npy path)."""
    return _scope.request(constant, dtype, user_span())
