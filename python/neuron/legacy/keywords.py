"""Keyword arguments of the legacy NKI functions.

NKI declares its legacy functions with a trailing **kwargs, and so did this layer: any keyword
was accepted and dropped. A dropped keyword can be a wrong result, e.g. the current API's
`nisa.activation(dst=t, op=..., data=...)` in a legacy kernel discarded dst=, so t stayed
unwritten. So a legacy call takes only its function's own parameters and the few NKI hints
that cannot change a result here (the allowlists below, docs/nki-compat.md "Keyword
arguments"); any other keyword is an `unknown-arg` error at the user's line."""
import inspect

from .grid import error

# NKI keywords that every legacy call accepts and neuron ignores:
#   name=    an instruction label for NKI's scheduler and profiles (every current-API call
#            takes it, NKI_API.md 6.5; the published pipelined attention passes it to
#            nisa.tensor_scalar_reduce / activation_reduce / tensor_copy and nl.loop_reduce).
NL = frozenset({"name"})
#   engine=  the engine that runs an ISA instruction (NKI_API.md 4.9, "where offered"; neuron
#            chooses the engine itself, so it is ignored wherever it is passed).
NISA = NL | {"engine"}

_FREE = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)


def allowed(fn, ignored):
    """The keywords a call of fn may pass: its named parameters, plus `ignored` when fn takes
    **kwargs (where they land). None: fn checks its keywords itself (not checked here)."""
    if getattr(fn, "checks_own_keywords", False):
        return None
    params = inspect.signature(fn).parameters.values()
    named = {p.name for p in params if p.kind not in _FREE and
             p.kind is not inspect.Parameter.POSITIONAL_ONLY}
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params)
    return frozenset(named | ignored) if takes_any else frozenset(named)


def refuse(what, kwargs, ok, ignored):
    """Raises the unknown-arg error for the first keyword of kwargs outside ok."""
    key = next(k for k in kwargs if k not in ok)
    takes = ", ".join(sorted(ok - ignored)) or "no keywords"
    quiet = [f"{k}=" for k in sorted(ok & ignored)]
    hint = f"; {' and '.join(quiet)} {'are' if len(quiet) > 1 else 'is'} accepted and " \
        "ignored" if quiet else ""
    if key == "dst":  # the current API's destination-first form
        hint += f"; the legacy {what} returns its result: write `t[...] = {what}(...)`"
    error("unknown-arg", f"{what} got an unexpected keyword argument '{key}' (it takes "
          f"{takes}{hint})")
