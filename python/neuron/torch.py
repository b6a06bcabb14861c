"""neuron.torch: a kernel as a PyTorch operator (torch.library.custom_op) with a fake
implementation from the traced IR, so torch.compile(fullgraph=True) traces through it.

Inputs the kernel cannot take (a tensor on another device, a dtype neuron has no type for, shapes
the kernel rejects when it is traced) are handled as DESIGN.md says: with a `reference`
function the operator falls back to it with a one-time warning naming the reason, and counts
it (`fallback_counts()`); in strict mode (`strict=True` or NEURON_STRICT=1) or without a
reference it raises. Non-contiguous CPU tensors are copied, never refused."""
import collections
import warnings

import torch as _torch

from . import _C, runtime
from .errors import NeuronError, call_error
from .kernel import Kernel

_TORCH_DTYPES = {
    _C.DType.float32: _torch.float32, _C.DType.bfloat16: _torch.bfloat16,
    _C.DType.float16: _torch.float16, _C.DType.float8_e5m2: _torch.float8_e5m2,
    _C.DType.int8: _torch.int8, _C.DType.int16: _torch.int16, _C.DType.int32: _torch.int32,
    _C.DType.uint8: _torch.uint8, _C.DType.uint16: _torch.uint16,
    _C.DType.uint32: _torch.uint32, _C.DType.bool_: _torch.bool,
}
_FROM_TORCH = {t: d for d, t in _TORCH_DTYPES.items()}


class FallbackWarning(UserWarning):
    """An operator ran its PyTorch reference instead of the neuron kernel."""


_fallbacks = collections.Counter()  # (operator, reason) -> calls that fell back
_warned = set()


def fallback_counts():
    """How many calls of each operator fell back to the reference, by kind of reason:
    {("ns::name", "device" | "dtype" | "shape"): count}."""
    return dict(_fallbacks)


def _torch_dtype(d):
    if d not in _TORCH_DTYPES:
        raise TypeError(f"{d} has no torch dtype")
    return _TORCH_DTYPES[d]


def _neuron_dtype(t):
    d = _FROM_TORCH.get(t)
    if d is None:
        names = ", ".join(str(x).replace("torch.", "") for x in _FROM_TORCH)
        raise TypeError(f"torch dtype {str(t).replace('torch.', '')} has no neuron type "
                        f"(supported: {names}; torch.float8_e4m3fn is not neuron's IEEE-style "
                        "float8_e4m3)")
    return d


def _strict(flag):
    return _C.config().strict if flag is None else bool(flag)


def _input_problem(args):
    """Why these tensors cannot be passed to a kernel: (kind, reason), or None."""
    for i, a in enumerate(args):
        if a.device.type != "cpu":
            return "device", f"input {i} is on {a.device}; neuron kernels run on CPU tensors"
        try:
            _neuron_dtype(a.dtype)
        except TypeError as e:
            return "dtype", f"input {i}: {e}"
    return None


def custom_op(name, kernel, num_outputs=1, grid=None, backward=None, reference=None,
              strict=None):
    """Registers `kernel` as torch.ops.<namespace>.<name> ("namespace::name"). Inputs are the
    kernel's tensors; the operator returns num_outputs new tensors. grid: a launch grid, fixed or
    a function of the input tensors returning one. backward: a kernel taking
    (grad_output, *inputs) and returning one gradient per input (single-output ops only); it is
    registered as its own operator "<name>_backward" and wired in with register_autograd.
    reference: a PyTorch function with the operator's signature, used (with a one-time warning)
    for inputs the kernel cannot take; strict: raise instead (default: NEURON_STRICT)."""
    k = kernel if isinstance(kernel, Kernel) else Kernel(kernel)
    params = k._params
    short = name.split("::")[-1]
    ret = "_torch.Tensor" if num_outputs == 1 else \
        "tuple[" + ", ".join(["_torch.Tensor"] * num_outputs) + "]"
    src = (f"def {short}({', '.join(p + ': _torch.Tensor' for p in params)})"
           f" -> {ret}:\n    return _impl({', '.join(params)})\n")

    def launch_for(args):
        g = grid(*args) if callable(grid) else grid
        return k if g is None else k[tuple(g) if isinstance(g, (tuple, list)) else g]

    def fall_back(args, kind, reason):
        if reference is None or _strict(strict):
            hint = (" (give custom_op a reference= function to fall back to)" if reference is None
                    else " (strict mode: no fallback to the reference)")
            raise call_error("unsupported-input", f"operator {name} cannot run its kernel on "
                             f"these inputs: {reason}{hint}")
        _fallbacks[(name, kind)] += 1
        if (name, kind) not in _warned:
            _warned.add((name, kind))
            warnings.warn(f"operator {name} falls back to its PyTorch reference: {reason}",
                          FallbackWarning, stacklevel=3)
        return reference(*args)

    def _impl(*args):
        problem = _input_problem(args)
        if problem is not None:
            return fall_back(args, *problem)
        launch = launch_for(args)
        try:
            launch.compile(*args)  # tracing and compiling decide whether the shapes are legal
        except NeuronError as e:
            return fall_back(args, "shape", f"the kernel rejects these shapes: {e.message}")
        return launch(*args)

    scope = {"_torch": _torch, "_impl": _impl}
    exec(src, scope)  # a real signature: custom_op infers the schema from the annotations
    op = _torch.library.custom_op(name, mutates_args=())(scope[short])

    @op.register_fake
    def _fake(*args):
        try:
            specs = [(tuple(a.shape), _neuron_dtype(a.dtype)) for a in args]
            kir = k.trace(*specs)
        except (NeuronError, TypeError):
            if reference is None or _strict(strict):
                raise
            return reference(*args)  # torch ops propagate fake tensors
        outs = [args[0].new_empty(tuple(shape), dtype=_torch_dtype(dtype))
                for shape, dtype in kir.output_shapes]
        return outs[0] if num_outputs == 1 else tuple(outs)

    if backward is not None:
        if num_outputs != 1:
            raise ValueError("backward is supported for single-output operators only")
        bop = custom_op(name + "_backward", backward, num_outputs=len(params), grid=grid)

        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(*inputs)

        def grad_fn(ctx, grad):
            grads = bop(grad.contiguous(), *ctx.saved_tensors)
            return grads if isinstance(grads, tuple) else (grads,)

        op.register_autograd(grad_fn, setup_context=setup_context)
    return op
