"""User errors raised while tracing or compiling, shown at the user's kernel line."""
import types

from . import _C
from ._span import is_toolkit_file

# str(e) is the full diagnostic ("file:line:col: error: [rule] message", the source line and a
# caret); e.rule, e.message, e.file, e.line and e.column hold the parts.
NeuronError = _C.UserError


def _error(rule, message, span):
    # Rendered by the C++ toolkit (neuron/error.hpp), like every other diagnostic.
    e = NeuronError(_C.render_diagnostic(rule, message, span))
    e.rule, e.message = rule, message
    e.file, e.line, e.column = span.file, span.line, span.column
    return e


def user_error(rule, message, span):
    """Raises a NeuronError at the user's line, rendered like the C++ diagnostics."""
    raise _error(rule, message, span)


def call_error(rule, message):
    """A NeuronError about a call rather than a kernel line (no source location)."""
    return _error(rule, message, _C.Span())


def strip_toolkit_frames(tb):
    """The traceback without the neuron package's own frames (the user's frames stay)."""
    kept = []
    while tb is not None:
        if not is_toolkit_file(tb.tb_frame.f_code.co_filename):
            kept.append(tb)
        tb = tb.tb_next
    new = None
    for t in reversed(kept):
        new = types.TracebackType(new, t.tb_frame, t.tb_lasti, t.tb_lineno)
    return new
