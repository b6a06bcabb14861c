"""neuron.ops: the kernel library as PyTorch drop-ins, with PyTorch's signatures and semantics.

    import torch, neuron
    from neuron import ops
    y = ops.scaled_dot_product_attention(q, k, v, is_causal=True)   # flash attention kernels
    y = ops.linear(x, w, b); ops.rms_norm(x, (d,), w); ops.layer_norm(x, (d,), w, b)
    y = ops.softmax(x, dim=-1); ops.swiglu(x); ops.rope(x, cos, sin)

    with ops.patch():          # torch.nn.functional's names are ours: an unmodified model
        model(x)               # (nn.Linear, nn.LayerNorm, F.scaled_dot_product_attention...)
    ops.patch()                # or for good; .restore() undoes it

Each function calls a torch.ops.neuron.* operator (torch.library.custom_op, fake
implementation, autograd through the library's backward kernels), so torch.compile(fullgraph=
True) traces models that use them. The operators are registered when neuron.ops is imported:
at `import neuron` when torch is already imported, else on first use of neuron.ops (importing
neuron does not import torch). Unsupported arguments fall back to PyTorch with a one-time
warning, counted in neuron.torch.fallback_counts(); strict mode (NEURON_STRICT=1, or
`with ops.strict():`) raises instead. docs/kernels.md lists what each op supports."""
import contextlib
import warnings

import torch.nn.functional as _F

from . import _kernels, functional
from ._operators import clear_weight_cache
from .functional import (layer_norm, linear, rms_norm, rope, scaled_dot_product_attention,
                         softmax, swiglu)

__all__ = ["scaled_dot_product_attention", "linear", "rms_norm", "layer_norm", "softmax",
           "swiglu", "rope", "patch", "strict", "profiled", "clear_weight_cache", "PATCHED"]

# The torch.nn.functional names patch() replaces (swiglu and rope have no PyTorch function).
PATCHED = ("scaled_dot_product_attention", "linear", "rms_norm", "layer_norm", "softmax")


class patch:
    """Makes torch.nn.functional's PATCHED names resolve to neuron.ops' functions, at once:
    `ops.patch()` for good (`.restore()` undoes it), or `with ops.patch():` for a block.
    Modules (nn.Linear, nn.LayerNorm, nn.RMSNorm, nn.Softmax, nn.MultiheadAttention) look the
    names up in torch.nn.functional when called, so unmodified models run on the kernels.
    Patches nest; each restores what it replaced."""

    def __init__(self):
        self._saved = {n: getattr(_F, n) for n in PATCHED}
        _script_as_pytorch()
        _causal_bias_knows_pytorchs_sdpa()
        for n in PATCHED:
            setattr(_F, n, getattr(functional, n))

    def restore(self):
        for n, f in self._saved.items():
            setattr(_F, n, f)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.restore()


_scripted = False


def _script_as_pytorch():
    """Makes TorchScript compile calls of our functions as PyTorch's own (once per process):
    torch.jit.script of a module under patch() would otherwise compile functional.py's Python
    (and fail: nested functions, fallbacks), while a module scripted before the patch keeps
    PyTorch's ops anyway. Scripted code runs PyTorch's ops, so it can be saved and loaded
    anywhere. linear and sdpa are aten builtins to TorchScript; softmax and the norms are
    Python functions in torch.nn.functional, scripted once here (~20 ms) and given to
    TorchScript's function cache as ours. Private torch.jit APIs: if they are gone, scripting
    fails as before, nothing else changes."""
    global _scripted
    if _scripted:
        return
    _scripted = True
    try:
        import torch
        from torch.jit import _builtins, _state
        with warnings.catch_warnings():  # (torch.jit.script's deprecation: not the user's call)
            warnings.simplefilter("ignore", DeprecationWarning)
            scripted = {n: torch.jit.script(getattr(_F, n)) for n in PATCHED
                        if _builtins._find_builtin(getattr(_F, n)) is None
                        and getattr(_F, n) is not getattr(functional, n)}
        for n in PATCHED:
            theirs, ours = getattr(_F, n), getattr(functional, n)
            if theirs is ours:
                continue  # patched already (by an outer patch): its originals are scripted
            builtin = _builtins._find_builtin(theirs)
            if builtin is not None:
                _builtins._register_builtin(ours, builtin)
            else:
                _state._set_jit_function_cache(ours, scripted[n])
    except Exception:  # noqa: BLE001 (a torch without these internals: scripting as before)
        pass


_original_sdpa = _F.scaled_dot_product_attention


def _causal_bias_knows_pytorchs_sdpa():
    """A CausalBias mask (torch.nn.attention.bias) handles a call only of the function named
    torch.nn.functional.scaled_dot_product_attention now, ours under the patch: PyTorch's own,
    bound before the patch (`from torch.nn.functional import scaled_dot_product_attention`),
    then ran with the mask's uninitialised storage as the mask (silently wrong). Once per
    process, CausalBias handles PyTorch's own too (dispatching to the current name, as it
    does); unpatched, nothing changes."""
    try:
        from torch.nn.attention.bias import CausalBias
        inner = CausalBias.__dict__["__torch_function__"].__func__
    except (ImportError, KeyError, AttributeError):
        return
    if getattr(inner, "_neuron", False):
        return

    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func is _original_sdpa:
            return cls._dispatch(*args, **(kwargs or {}))
        return inner(cls, func, types, args, kwargs)
    __torch_function__._neuron = True
    CausalBias.__torch_function__ = classmethod(__torch_function__)


@contextlib.contextmanager
def strict(flag=True):
    """Within the block, unsupported arguments raise NeuronError "unsupported-input" instead of
    falling back (flag=False: fall back even when NEURON_STRICT is set)."""
    saved = _kernels.strict
    _kernels.strict = flag
    try:
        yield
    finally:
        _kernels.strict = saved


@contextlib.contextmanager
def profiled():
    """Within the block, every native kernel launch of the ops is followed by one more run with
    each engine instruction timed: yields a list that receives (kernel name, runtime.
    NativeProfile) per launch. Where an op's CPU time goes, per instruction and kernel line:

        with ops.profiled() as runs:
            ops.layer_norm(x, (1024,), w, b)
        print(runs[0][1])"""
    saved = _kernels.profiles
    _kernels.profiles = []
    try:
        yield _kernels.profiles
    finally:
        _kernels.profiles = saved
