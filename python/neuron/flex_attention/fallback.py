"""The one-time warning (or, in strict mode, the error) when a mod cannot be traced."""
import os
import warnings

from .._span import warning_stacklevel


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
                      FlexFallbackWarning, stacklevel=warning_stacklevel())
