"""Calling kernels: NumPy / torch arguments to host tensors (zero-copy when contiguous), the
simulator, and outputs back as the caller's array kind."""
import sys

import numpy as np

from . import _C
from .language import to_dtype  # noqa: F401 (re-exported)

try:
    import ml_dtypes
    _BF16 = np.dtype(ml_dtypes.bfloat16)
    # neuron's float8_e4m3 is the IEEE-style one (inf and NaN), ml_dtypes.float8_e4m3, not
    # float8_e4m3fn (docs/numerics.md).
    _ML_DTYPES = {_C.DType.bfloat16: _BF16,
                  _C.DType.float8_e4m3: np.dtype(ml_dtypes.float8_e4m3),
                  _C.DType.float8_e5m2: np.dtype(ml_dtypes.float8_e5m2)}
except ImportError:  # pragma: no cover
    ml_dtypes = None
    _BF16 = None
    _ML_DTYPES = {}



def _torch():
    # torch is never imported here: a torch tensor argument means the caller already has it.
    return sys.modules.get("torch")


def _numpy_dtype(d):
    if d in (_C.DType.bfloat16, _C.DType.float8_e4m3, _C.DType.float8_e5m2):
        if d not in _ML_DTYPES:
            raise TypeError(f"{d} arrays need ml_dtypes")
        return _ML_DTYPES[d]
    names = {_C.DType.float32: "float32", _C.DType.float16: "float16", _C.DType.int8: "int8",
             _C.DType.int16: "int16", _C.DType.int32: "int32", _C.DType.uint8: "uint8",
             _C.DType.uint16: "uint16", _C.DType.uint32: "uint32", _C.DType.bool_: "bool"}
    if d not in names:
        raise TypeError(f"{d} has no NumPy dtype here")
    return np.dtype(names[d])


def is_torch(x):
    torch = _torch()
    return torch is not None and isinstance(x, torch.Tensor)


def to_numpy(x):
    """A NumPy view of an argument (torch CPU tensors share memory; bf16 via ml_dtypes)."""
    if is_torch(x):
        torch = _torch()
        if x.device.type != "cpu":
            raise TypeError(f"neuron kernels take CPU tensors; got a tensor on {x.device}")
        t = x.detach()  # shares memory; a non-contiguous tensor gives a strided view
        if t.dtype == torch.bfloat16:
            return t.view(torch.int16).numpy().view(_BF16)
        if t.dtype == torch.float8_e5m2:
            return t.view(torch.uint8).numpy().view(_ML_DTYPES[_C.DType.float8_e5m2])
        if t.dtype == torch.float8_e4m3fn:
            raise TypeError("torch.float8_e4m3fn (no inf, largest 448) is not neuron's "
                            "IEEE-style float8_e4m3 (largest 240); pass an ml_dtypes.float8_e4m3 "
                            "NumPy array, or convert")
        return t.numpy()
    if isinstance(x, np.ndarray):
        return x
    raise TypeError(f"kernel arguments are NumPy arrays or torch tensors, got {type(x).__name__}")


def host_arrays(args):
    """Contiguous NumPy arrays of the kernel arguments (the caller's memory when contiguous,
    else copies), and a function to call after the run that copies what the kernel wrote into a
    copy back into the caller's array or tensor, so in-place writes are never lost."""
    views = [to_numpy(a) for a in args]
    # A read-only array is copied too, so a kernel that writes it fails below, not silently.
    arrays = [np.ascontiguousarray(v) if v.flags.writeable else np.array(v, order="C")
              for v in views]

    def write_back():
        for i, (v, a) in enumerate(zip(views, arrays)):
            if a is v or np.shares_memory(a, v):
                continue
            bits = np.dtype(f"u{v.dtype.itemsize}")  # compare bits: NaN == NaN, -0 != +0
            if np.array_equal(v.view(bits), a.view(bits)):
                continue
            if not v.flags.writeable:
                raise ValueError(f"the kernel writes argument {i}, a read-only array")
            np.copyto(v, a)
    return arrays, write_back


def from_numpy(a, like_torch):
    if not like_torch:
        return a
    torch = _torch()
    if a.dtype == _BF16:
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    if a.dtype == _ML_DTYPES.get(_C.DType.float8_e5m2):
        return torch.from_numpy(a.view(np.uint8)).view(torch.float8_e5m2)
    if a.dtype == _ML_DTYPES.get(_C.DType.float8_e4m3):
        raise TypeError("a float8_e4m3 output has no torch dtype (torch.float8_e4m3fn is a "
                        "different format); return float8_e5m2 or a wider type to torch callers")
    return torch.from_numpy(a)


def spec_of(a, name):
    return _C.TensorSpec(list(a.shape), to_dtype(a.dtype), name)


def run(compiled, arrays, grid, mode="native", profile=False):
    """Runs natively (LLVM JIT) or on the simulator; returns (NumPy outputs, report text: the
    native compile report, or the simulator's profile summary when profiling)."""
    keep = [np.ascontiguousarray(a) for a in arrays]  # already contiguous from host_arrays
    host = [_C.HostTensor.borrow(a.__array_interface__["data"][0], list(a.shape),
                                 to_dtype(a.dtype)) for a in keep]
    if mode == "native":
        outs, printed, summary = _C.run_native(compiled, host, list(grid))
    else:
        outs, printed, summary = _C.simulate(compiled, host, list(grid), profile)
    if printed:
        sys.stdout.write(printed)
    return [o.to_numpy(_numpy_dtype(o.dtype)) for o in outs], summary
