"""neuron.flex_attention: a drop-in for torch.nn.attention.flex_attention on CPU, forward and
backward (docs/flex_attention.md).

    from neuron.flex_attention import flex_attention, create_block_mask

score_mod / mask_mod are traced once into an expression graph (tracing.py), compiled into a
vectorized tile function (codegen.py); create_block_mask classifies blocks by interval
evaluation of the graph (intervals.py, block_mask.py); the attention runs block-sparse over the
mask's block lists read at run time (plan.py, forward.py, backward.py). Mods the tracer cannot
express fall back to a dense reference with a one-time warning (NEURON_STRICT=1: an error).
"""
import torch
# PyTorch's typing names, the same objects (code written for torch imports them from here too)
from torch.nn.attention.flex_attention import (FlexKernelOptions, _mask_mod_signature,  # noqa
                                               _score_mod_signature)

from .api import AuxOutput, AuxRequest, flex_attention
from .block_mask import (BlockMask, and_masks, create_block_mask, create_mask, noop_mask,
                         or_masks)
from .fallback import FlexFallbackWarning
from .tracing import UnsupportedModError

__all__ = ["flex_attention", "create_block_mask", "create_mask", "BlockMask", "and_masks",
           "or_masks", "noop_mask", "AuxRequest", "AuxOutput", "FlexKernelOptions", "patch",
           "FlexFallbackWarning", "UnsupportedModError"]

_PATCHED = ("flex_attention", "create_block_mask", "create_mask", "BlockMask", "and_masks",
            "or_masks", "noop_mask")


class patch:
    """Makes torch.nn.attention.flex_attention's names resolve to ours. Call it (stays in
    effect), or use it as a context manager (restored on exit):

        neuron.flex_attention.patch()
        with neuron.flex_attention.patch(): ...
    """

    def __init__(self):
        import torch.nn.attention.flex_attention as tfa
        self._module = tfa
        self._saved = {n: getattr(tfa, n) for n in _PATCHED if hasattr(tfa, n)}
        g = globals()
        for n in _PATCHED:
            setattr(tfa, n, g[n])

    def restore(self):
        for n, v in self._saved.items():
            setattr(self._module, n, v)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.restore()
        return False


del torch
