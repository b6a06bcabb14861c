"""Helpers shared by the Python tests (tests/python is on sys.path: conftest.py)."""
import inspect

import neuron.language as nl


def line_of(fn, text):
    """The file line number of the first source line of fn containing text."""
    lines, start = inspect.getsourcelines(fn)
    for i, line in enumerate(lines):
        if text in line:
            return start + i
    raise AssertionError(text)


def softmax(x):
    """A row softmax kernel over 128-row tiles, one program per tile (launch kernel[n])."""
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    rows = nl.ds(nl.program_id(0) * 128, 128)
    t = nl.load(x[rows])
    e = nl.exp(t - nl.max(t, axis=1))
    nl.store(out[rows], e * nl.reciprocal(nl.sum(e, axis=1)))
    return out


def scale_inplace(a):
    """Writes 2*a back into its input and returns the old values."""
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a)
    nl.store(a, t * 2.0)
    nl.store(out, t)
    return out
