"""Calling kernels: NumPy / torch arguments to host tensors (zero-copy when contiguous), the
simulator, and outputs back as the caller's array kind."""
import sys

import numpy as np

from . import _C
from .language import to_dtype  # noqa: F401 (re-exported)

try:
    import ml_dtypes
    _BF16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover
    ml_dtypes = None
    _BF16 = None



def _torch():
    # torch is never imported here: a torch tensor argument means the caller already has it.
    return sys.modules.get("torch")


def _numpy_dtype(d):
    if d == _C.DType.bfloat16:
        if _BF16 is None:
            raise TypeError("bfloat16 tensors need ml_dtypes")
        return _BF16
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
        t = x.detach()
        if not t.is_contiguous():
            t = t.contiguous()
        if t.dtype == torch.bfloat16:
            return t.view(torch.int16).numpy().view(_BF16)
        return t.numpy()
    if isinstance(x, np.ndarray):
        return x
    raise TypeError(f"kernel arguments are NumPy arrays or torch tensors, got {type(x).__name__}")


def from_numpy(a, like_torch):
    if not like_torch:
        return a
    torch = _torch()
    if a.dtype == _BF16:
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


def spec_of(a, name):
    return _C.TensorSpec(list(a.shape), to_dtype(a.dtype), name)


def run(compiled, arrays, grid, mode="native", profile=False):
    """Runs natively (LLVM JIT) or on the simulator; returns (NumPy outputs, report text: the
    native compile report, or the simulator's profile summary when profiling)."""
    keep = [np.ascontiguousarray(a) for a in arrays]
    host = [_C.HostTensor.borrow(a.__array_interface__["data"][0], list(a.shape),
                                 to_dtype(a.dtype)) for a in keep]
    if mode == "native":
        outs, printed, summary = _C.run_native(compiled, host, list(grid))
    else:
        outs, printed, summary = _C.simulate(compiled, host, list(grid), profile)
    if printed:
        sys.stdout.write(printed)
    return [o.to_numpy(_numpy_dtype(o.dtype)) for o in outs], summary
