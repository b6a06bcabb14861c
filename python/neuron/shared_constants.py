"""nl.shared_constant(constant, dtype=None) in @neuron.kernel / nki.jit kernels: a constant HBM
tensor holding a NumPy array (or a .npy file) fixed when the kernel is traced. neuron kernels
take their data as inputs, so each constant becomes a hidden input after the kernel's own
tensors: a trace that meets a constant it has no input for yet stops (Retrace), and Kernel
traces again with one more input, which every later call passes (kernel.py).

Legacy kernels (legacy/constants.py) run the same scheme in a Scope of their own: a legacy
kernel is traced inside a Kernel, and each layer must catch only its own Retrace."""
import os
import threading

import numpy as np

from .dtypes import numpy_dtype, to_dtype
from .errors import user_error


def as_array(constant, dtype):
    """constant (an array, anything np.asarray takes, or a .npy path) cast to dtype."""
    if isinstance(constant, (str, os.PathLike)):
        constant = np.load(constant)
    a = np.asarray(constant)
    if dtype is not None:
        a = a.astype(numpy_dtype(to_dtype(dtype)))
    return np.ascontiguousarray(a)


class Scope:
    """The constants of the running trace (per thread) and the Retrace exception that asks
    the tracing layer for one more input."""

    def __init__(self):
        self._local = threading.local()
        self.Retrace = type("Retrace", (Exception,), {
            "__doc__": "A constant the kernel has no input for yet was requested (never "
                       "reaches the user)."})

    def begin(self, arrays, handles):
        """arrays: the constants found so far (appended to); handles: their input tensors."""
        s = self._local
        s.arrays, s.handles, s.next = arrays, list(handles), 0

    def end(self):
        s = self._local
        s.arrays, s.handles, s.next = None, (), 0

    def request(self, constant, dtype, span):
        """The input tensor holding constant (cast to dtype) in the running trace."""
        s = self._local
        if getattr(s, "arrays", None) is None:
            user_error("no-trace", "nl.shared_constant is only available inside a kernel", span)
        a = as_array(constant, dtype)
        i = s.next
        s.next += 1
        if i < len(s.handles):
            known = s.arrays[i]
            if known.shape != a.shape or known.dtype != a.dtype or not np.array_equal(known, a):
                user_error("unsupported", "nl.shared_constant: the kernel's constants changed "
                           "between traces; a constant must depend only on the kernel's "
                           "arguments", span)
            return s.handles[i]
        s.arrays.append(a)
        raise self.Retrace()


_current = Scope()  # @neuron.kernel / nki.jit (current API)
Retrace, begin, end, request = _current.Retrace, _current.begin, _current.end, _current.request
