"""nl.shared_constant(array, dtype): a constant HBM tensor built from a NumPy array when the
kernel is traced. neuron kernels take their data as inputs, so each constant becomes a hidden
input: the first trace that meets a new constant stops (Retrace), and the kernel is traced
again with one more input, which every call then passes (legacy/__init__.py)."""
import threading

import numpy as np

from ..shared_constants import as_array
from .grid import error


class Retrace(Exception):
    """A constant the kernel has no input for yet was requested (never reaches the user)."""


class _State(threading.local):
    arrays = None   # the kernel's constants found so far (NumPy arrays, in call order)
    handles = ()    # their input tensors in the running trace
    next = 0


_state = _State()


def begin(arrays, handles):
    _state.arrays, _state.handles, _state.next = arrays, list(handles), 0


def request(constant, dtype):
    """The input tensor holding constant (cast to dtype)."""
    if _state.arrays is None:
        error("no-trace", "nl.shared_constant is only available inside a kernel")
    a = as_array(constant, dtype)  # an array or a .npy path
    i = _state.next
    _state.next += 1
    if i < len(_state.handles):
        known = _state.arrays[i]
        if known.shape != a.shape or known.dtype != a.dtype or not np.array_equal(known, a):
            error("unsupported", "nl.shared_constant: the kernel's constants changed between "
                  "traces; a constant must depend only on the kernel's arguments")
        return _state.handles[i]
    _state.arrays.append(a)
    raise Retrace()
