"""neuron.torch: a kernel as a PyTorch operator (torch.library.custom_op) with a fake
implementation from the traced IR, so torch.compile(fullgraph=True) traces through it.

The operator's arguments are the kernel's: its tensors (a parameter without a default), optional
tensors (default None) and compile-time parameters of type int, float, bool or str (inferred
from their defaults). Its outputs are all the kernel's outputs. A backward kernel receives the
gradients of the outputs it differentiates and what the forward saved (its inputs by default;
any of its outputs, such as a logsumexp, with `save=`).

Inputs the kernel cannot take (a tensor on another device, a dtype neuron has no type for, shapes
the kernel rejects when it is traced) are handled as DESIGN.md says: with a `reference`
function the operator falls back to it with a one-time warning naming the reason, and counts
it (`fallback_counts()`); in strict mode (`strict=True` or NEURON_STRICT=1) or without a
reference it raises. Non-contiguous CPU tensors are copied, never refused."""
import collections
import inspect
import os
import typing
import warnings

import torch as _torch

from . import _C
from .dtypes import to_dtype, torch_dtype
from ._span import user_frame, user_span
from .errors import NeuronError, user_error
from .kernel import Kernel


class FallbackWarning(UserWarning):
    """An operator ran its PyTorch reference instead of the neuron kernel."""


_fallbacks = collections.Counter()  # (operator, reason) -> calls that fell back
_warned = set()


def fallback_counts():
    """How many calls of each operator fell back to the reference, by kind of reason:
    {("ns::name", "device" | "dtype" | "shape"): count}; neuron.ops' functions count under
    ("neuron.ops.<name>", kind) with kinds such as "mask", "dropout", "dim", "grad", "empty"
    too, and their operators' kernel rejections under ("neuron::<op>", "shape")."""
    return dict(_fallbacks)


def _strict(flag):
    return _C.config().strict if flag is None else bool(flag)


_TORCH_DIR = os.path.dirname(os.path.realpath(_torch.__file__)) + os.sep


def _caller_span():
    """The user's line that called the operator: the first frame outside neuron and PyTorch
    (none in a backward pass, which PyTorch's autograd engine runs: then no location)."""
    f = user_frame()
    while f is not None and os.path.realpath(f.f_code.co_filename).startswith(_TORCH_DIR):
        f = f.f_back
    return user_span(f) if f is not None else _C.Span()


def note_fallback(op, kind, reason, strict=None,
                  hint=" (strict mode: no fallback to the reference)", stacklevel=3):
    """DESIGN.md's fallback rule for operator `op` that cannot run its kernel on some inputs:
    in strict mode (`strict`, else NEURON_STRICT) raises NeuronError "unsupported-input" naming
    the reason; otherwise counts the fallback under (op, kind) and warns the first time."""
    if _strict(strict):
        user_error("unsupported-input", f"operator {op} cannot run its kernel on these "
                   f"inputs: {reason}{hint}", _caller_span())
    _fallbacks[(op, kind)] += 1
    if (op, kind) not in _warned:
        _warned.add((op, kind))
        warnings.warn(f"operator {op} falls back to its PyTorch reference: {reason}",
                      FallbackWarning, stacklevel=stacklevel + 1)


def _input_problem(tensors):
    """Why these tensors cannot be passed to a kernel: (kind, reason), or None."""
    for i, a in enumerate(tensors):
        if a.device.type != "cpu":
            return "device", f"input {i} is on {a.device}; neuron kernels run on CPU tensors"
        try:
            to_dtype(a.dtype)
        except TypeError as e:
            return "dtype", f"input {i}: {e}"
    return None


_ANNOTATIONS = {bool: "bool", int: "int", float: "float", str: "str"}


def _schema_params(k, name):
    """(parameter name, annotation, default text) of each kernel parameter for the operator's
    signature: a tensor, an optional tensor (default None) or an int/float/bool/str."""
    out = []
    for p in k._signature.parameters.values():
        if p.default is inspect.Parameter.empty:
            out.append((p.name, "_torch.Tensor", ""))
        elif p.default is None:
            out.append((p.name, "_typing.Optional[_torch.Tensor]", " = None"))
        elif type(p.default) in _ANNOTATIONS:
            out.append((p.name, _ANNOTATIONS[type(p.default)], f" = {p.default!r}"))
        else:
            raise TypeError(f"custom_op {name}: parameter '{p.name}' (default "
                            f"{p.default!r}) has no torch operator type; operators take tensors, "
                            "optional tensors (default None) and int, float, bool or str "
                            "parameters")
    return out


def custom_op(name, kernel, num_outputs=1, grid=None, backward=None, reference=None,
              strict=None, save=None, grads=None):
    """Registers `kernel` as torch.ops.<namespace>.<name> ("namespace::name"), returning
    num_outputs tensors (all the kernel's outputs). grid: a launch grid, fixed or a function of
    the operator's arguments returning one.

    backward: a kernel taking, in order, the gradients of the outputs listed in `grads` (default:
    all) and the tensors `save(inputs, outputs)` returns (default: the forward's tensor inputs),
    plus any of the forward's parameters it names; it returns one gradient per tensor input of
    the forward (optional tensors get none). It is registered as its own operator
    "<name>_backward" and wired in with register_autograd; outputs not in `grads` are marked
    non-differentiable.

    reference: a PyTorch function with the operator's signature, used (with a one-time
    warning) for inputs the kernel cannot take; strict: raise instead (default:
    NEURON_STRICT)."""
    k = kernel if isinstance(kernel, Kernel) else Kernel(kernel)
    short = name.split("::")[-1]
    schema = _schema_params(k, name)
    names = [n for n, _, _ in schema]
    ret = "_torch.Tensor" if num_outputs == 1 else \
        "tuple[" + ", ".join(["_torch.Tensor"] * num_outputs) + "]"
    src = (f"def {short}({', '.join(f'{n}: {a}{d}' for n, a, d in schema)})"
           f" -> {ret}:\n    return _impl({', '.join(names)})\n")

    def tensors_of(args):
        return [a for a in args if isinstance(a, _torch.Tensor)]

    def launch_for(args):
        g = grid(*args) if callable(grid) else grid
        return k if g is None else k[tuple(g) if isinstance(g, (tuple, list)) else g]

    def fall_back(args, kind, reason):
        if reference is None:
            note_fallback(name, kind, reason, strict=True,
                          hint=" (give custom_op a reference= function to fall back to)")
        note_fallback(name, kind, reason, strict)
        return reference(*args)

    def _impl(*args):
        problem = _input_problem(tensors_of(args))
        if problem is not None:
            return fall_back(args, *problem)
        launch = launch_for(args)
        try:
            launch.compile(*args)  # tracing and compiling decide whether the shapes are legal
        except NeuronError as e:
            return fall_back(args, "shape", f"the kernel rejects these shapes: {e.message}")
        return launch(*args)

    scope = {"_torch": _torch, "_typing": typing, "_impl": _impl}
    exec(src, scope)  # a real signature: custom_op infers the schema from the annotations
    op = _torch.library.custom_op(name, mutates_args=())(scope[short])

    @op.register_fake
    def _fake(*args):
        try:
            kir = k.trace(*[(tuple(a.shape), to_dtype(a.dtype))
                            if isinstance(a, _torch.Tensor) else a for a in args])
        except (NeuronError, TypeError):
            if reference is None or _strict(strict):
                raise
            return reference(*args)  # torch ops propagate fake tensors
        like = tensors_of(args)[0]
        outs = [like.new_empty(tuple(shape), dtype=torch_dtype(dtype, _torch))
                for shape, dtype in kir.output_shapes]
        return outs[0] if num_outputs == 1 else tuple(outs)

    if backward is not None:
        _wire_backward(op, name, k, names, num_outputs, grid, backward, save, grads)
    return op


def _wire_backward(op, name, k, names, num_outputs, grid, backward, save, grads):
    bk = backward if isinstance(backward, Kernel) else Kernel(backward)
    required = [p.name for p in k._signature.parameters.values()
                if p.default is inspect.Parameter.empty]
    grads = tuple(range(num_outputs)) if grads is None else tuple(grads)
    if not all(isinstance(i, int) and 0 <= i < num_outputs for i in grads):
        raise ValueError(f"custom_op {name}: grads= lists output indices 0..{num_outputs - 1}, "
                         f"got {grads!r}")
    params = [n for n in names if n not in required]
    passed = [n for n in params if n in bk._signature.parameters]  # forward params it names
    bop = custom_op(name + "_backward", bk, num_outputs=len(required), grid=grid)

    def setup_context(ctx, inputs, output):
        args = dict(zip(names, inputs))
        outputs = output if isinstance(output, tuple) else (output,)
        tensors = tuple(args[n] for n in required)
        saved = tensors if save is None else tuple(save(tensors, outputs))
        ctx.save_for_backward(*saved)
        ctx.neuron_params = {n: args[n] for n in passed}
        ctx.mark_non_differentiable(*[o for i, o in enumerate(outputs) if i not in grads])

    def grad_fn(ctx, *output_grads):
        gs = [output_grads[i].contiguous() for i in grads]
        result = bop(*gs, *ctx.saved_tensors, **ctx.neuron_params)
        result = result if isinstance(result, tuple) else (result,)
        it = iter(result)
        return tuple(next(it) if n in required else None for n in names)

    op.register_autograd(grad_fn, setup_context=setup_context)
