"""nl.shared_constant(constant, dtype=None) in @neuron.kernel / nki.jit kernels: a constant HBM
tensor holding a NumPy array (or a .npy file) fixed when the kernel is traced. neuron kernels
take their data as inputs, so each constant becomes a hidden input after the kernel's own
tensors: a trace that meets a constant it has no input for yet stops (Retrace), and Kernel
traces again with one more input, which every later call passes (kernel.py). Legacy kernels
have their own copy of this scheme (legacy/constants.py), wrapped around this one."""
import os
import threading

import numpy as np

from .dtypes import numpy_dtype, to_dtype
from .errors import user_error


class Retrace(Exception):
    """A constant the kernel has no input for yet was requested (never reaches the user)."""


class _State(threading.local):
    arrays = None   # the running trace's constants (NumPy arrays, in request order)
    handles = ()    # their input tensors in the running trace
    next = 0


_state = _State()


def begin(arrays, handles):
    _state.arrays, _state.handles, _state.next = arrays, list(handles), 0


def end():
    _state.arrays, _state.handles, _state.next = None, (), 0


def as_array(constant, dtype):
    """constant (an array, anything np.asarray takes, or a .npy path) cast to dtype."""
    if isinstance(constant, (str, os.PathLike)):
        constant = np.load(constant)
    a = np.asarray(constant)
    if dtype is not None:
        a = a.astype(numpy_dtype(to_dtype(dtype)))
    return np.ascontiguousarray(a)


def request(constant, dtype, span):
    """The input tensor holding constant (cast to dtype) in the running trace."""
    if _state.arrays is None:
        user_error("no-trace", "nl.shared_constant is only available inside a kernel", span)
    a = as_array(constant, dtype)
    i = _state.next
    _state.next += 1
    if i < len(_state.handles):
        known = _state.arrays[i]
        if known.shape != a.shape or known.dtype != a.dtype or not np.array_equal(known, a):
            user_error("unsupported", "nl.shared_constant: the kernel's constants changed "
                       "between traces; a constant must depend only on the kernel's arguments",
                       span)
        return _state.handles[i]
    _state.arrays.append(a)
    raise Retrace()
