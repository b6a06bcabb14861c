"""The dtype table, one for the whole package: neuron's dtypes are the C++ list
(neuron/ir/dtype.hpp, bound as _C.DType), and each one's NumPy and torch dtype is the one of
the same name: NumPy's own, else ml_dtypes' (bfloat16, float8_e4m3, float8_e5m2,
float8_e4m3fn), and torch's (none for float8_e4m3, Trainium's IEEE-style format: torch has only
float8_e4m3fn, which neuron has too, docs/numerics.md)."""
import sys

import numpy as np

from . import _C

try:
    import ml_dtypes
except ImportError:  # pragma: no cover
    ml_dtypes = None

ALL = tuple(_C.DType.__members__.values())

_numpy_of = {}  # DType -> NumPy dtype, for the ones seen (every call converts its outputs')


# Types the host holds as another: MX x4 elements (four packed values, dtype.hpp) as their raw
# bits, tfloat32 as the float32 it is stored as (low 13 mantissa bits zero).
_HOST_AS = {"float8_e5m2_x4": "uint32", "float8_e4m3fn_x4": "uint32", "float4_e2m1fn_x4": "uint16",
           "tfloat32": "float32"}


def numpy_dtype(d):
    """The NumPy dtype of a neuron DType (ml_dtypes for bfloat16 and float8; the raw unsigned
    bits for MX x4 types)."""
    found = _numpy_of.get(d)
    if found is None and d.name_ in _HOST_AS:
        found = _numpy_of[d] = np.dtype(_HOST_AS[d.name_])
    if found is None:
        try:
            found = np.dtype(d.name_)
        except TypeError:
            if ml_dtypes is None:  # pragma: no cover
                raise TypeError(f"{d.name_} arrays need ml_dtypes") from None
            found = np.dtype(getattr(ml_dtypes, d.name_))
        _numpy_of[d] = found
    return found


# `array.astype(nl.bfloat16)`, `np.zeros(n, nl.float32)`: NumPy takes any object with a `dtype`
# attribute as that dtype, and NKI's dtypes are NumPy dtypes.
_C.DType.dtype = property(numpy_dtype)
# str() is the NumPy-style name ("bfloat16", "bool"), as str() of NKI's and NumPy's dtypes is;
# kernels compare it with names (`str(dtype) == "bfloat16"`). repr() keeps the enum's form.
_C.DType.__str__ = lambda d: d.name.rstrip("_")


def from_ml_dtypes(d):
    """Whether d's NumPy dtype comes from ml_dtypes (torch cannot share such arrays)."""
    return numpy_dtype(d).type.__module__.startswith("ml_dtypes")


def torch_dtype(d, torch=None):
    """The torch dtype of a neuron DType (MX x4 types: their raw bits' unsigned type); TypeError
    when torch has none (float8_e4m3)."""
    torch = torch or sys.modules["torch"]
    t = getattr(torch, _HOST_AS.get(d.name_, d.name_), None)
    if not isinstance(t, torch.dtype):
        raise TypeError(f"{d.name_} has no torch dtype (torch.float8_e4m3fn is the OCP format "
                        "without infinities, neuron's float8_e4m3fn); use float8_e4m3fn, "
                        "float8_e5m2 or a wider type with torch")
    return t


def _supported():
    return ", ".join(d.name_ for d in ALL)


_known = {}  # dtype-like -> DType, for the ones seen (a call converts one per tensor)


def to_dtype(d):
    """A neuron DType from an nl dtype, a name, a NumPy dtype (ml_dtypes too) or a torch
    dtype; None stays None."""
    if d is None or isinstance(d, _C.DType):
        return d
    try:
        return _known[d]
    except (KeyError, TypeError):  # TypeError: unhashable
        pass
    found = _convert(d)
    try:
        _known[d] = found
    except TypeError:
        pass
    return found


def _convert(d):
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(d, torch.dtype):
        name = str(d).replace("torch.", "")
    elif isinstance(d, str):
        name = d
    else:
        try:
            name = np.dtype(d).name
        except (TypeError, ValueError):
            raise TypeError(f"{d!r} is not a dtype") from None
    found = _C.dtype_from_name(name)
    if found is None:
        near = {"float64": "float32", "int64": "int32", "uint64": "uint32",
                "complex64": None, "complex128": None}.get(name)
        hint = f" (cast {name} data to {near} first)" if near else ""
        raise TypeError(f"unsupported dtype {name}: {name} has no neuron type; kernels take "
                        f"{_supported()}{hint}")
    return found


def of_array(a):
    """The neuron DType of a NumPy array's dtype."""
    return to_dtype(a.dtype)
