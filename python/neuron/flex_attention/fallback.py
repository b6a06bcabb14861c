"""The one-time warning (or, in strict mode, the error) when a mod cannot be traced."""
import os
import sys
import warnings

_NEURON = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # .../neuron


class FlexFallbackWarning(UserWarning):
    """A score_mod / mask_mod could not be traced: the dense reference runs instead."""


_warned = set()
counts = {}


def strict():
    """NEURON_STRICT=1 (the toolkit's strict-mode variable) turns fallbacks into errors."""
    return os.environ.get("NEURON_STRICT", "0") not in ("", "0", "false", "False")


def warn_fallback(error):
    """Raises `error` in strict mode; else warns once per distinct message."""
    if strict():
        raise error
    msg = str(error)
    counts[msg.splitlines()[0]] = counts.get(msg.splitlines()[0], 0) + 1
    if msg not in _warned:
        _warned.add(msg)
        warnings.warn(f"{msg}\nflex_attention falls back to the dense reference for this mod "
                      "(memory B*H*L*S; set NEURON_STRICT=1 to make this an error)",
                      FlexFallbackWarning, stacklevel=user_stacklevel())


def user_stacklevel():
    """The stacklevel that makes a warnings.warn in the calling function name the user's line:
    the first frame outside neuron and torch (torch.compiler.disable wraps flex_attention and
    create_block_mask in frames of its own)."""
    import torch
    skip = (_NEURON, os.path.dirname(os.path.abspath(torch.__file__)))
    frame, level = sys._getframe(2), 2  # warn_fallback's caller
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(skip):
        frame, level = frame.f_back, level + 1
    return level if frame is not None else 2
