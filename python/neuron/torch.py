"""neuron.torch: a kernel as a PyTorch operator (torch.library.custom_op) with a fake
implementation from the traced IR, so torch.compile(fullgraph=True) traces through it."""
import torch as _torch

from . import _C, runtime
from .kernel import Kernel

_TORCH_DTYPES = {
    _C.DType.float32: _torch.float32, _C.DType.bfloat16: _torch.bfloat16,
    _C.DType.float16: _torch.float16, _C.DType.int8: _torch.int8, _C.DType.int16: _torch.int16,
    _C.DType.int32: _torch.int32, _C.DType.uint8: _torch.uint8, _C.DType.bool_: _torch.bool,
}


def _torch_dtype(d):
    if d not in _TORCH_DTYPES:
        raise TypeError(f"{d} has no torch dtype")
    return _TORCH_DTYPES[d]


def custom_op(name, kernel, num_outputs=1, grid=None, backward=None):
    """Registers `kernel` as torch.ops.<namespace>.<name> ("namespace::name"). Inputs are the
    kernel's tensors (CPU); the operator returns num_outputs new tensors. grid: a launch grid,
    fixed or a function of the input tensors returning one. backward: a kernel taking
    (grad_output, *inputs) and returning one gradient per input (single-output ops only); it
    is registered as its own operator "<name>_backward" and wired in with register_autograd."""
    k = kernel if isinstance(kernel, Kernel) else Kernel(kernel)
    params = k._params
    ret = "_torch.Tensor" if num_outputs == 1 else \
        "tuple[" + ", ".join(["_torch.Tensor"] * num_outputs) + "]"
    src = (f"def {name.split('::')[-1]}({', '.join(p + ': _torch.Tensor' for p in params)})"
           f" -> {ret}:\n    return _impl({', '.join(params)})\n")

    def _impl(*args):
        g = grid(*args) if callable(grid) else grid
        launch = k if g is None else k[tuple(g) if isinstance(g, (tuple, list)) else g]
        return launch(*args)

    scope = {"_torch": _torch, "_impl": _impl}
    exec(src, scope)  # a real signature: custom_op infers the schema from the annotations
    op = _torch.library.custom_op(name, mutates_args=())(scope[name.split("::")[-1]])

    @op.register_fake
    def _fake(*args):
        kir = k.trace(*[(tuple(a.shape), runtime.to_dtype(str(a.dtype).replace("torch.", "")))
                        for a in args])
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
