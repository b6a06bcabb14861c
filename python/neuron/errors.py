"""User errors raised while tracing or compiling, shown at the user's kernel line."""
import types

from . import _C
from ._span import is_toolkit_file

# str(e) is the full diagnostic ("file:line:col: error: [rule] message", the source line and a
# caret); e.rule, e.message, e.file, e.line and e.column hold the parts.
NeuronError = _C.UserError


def user_error(rule, message, span):
    """Raises a NeuronError rendered like the C++ diagnostics."""
    where = f"{span.file}:{span.line}:{span.column}" if span.line > 0 else "<unknown location>"
    text = f"{where}: error: [{rule}] {message}"
    try:
        with open(span.file) as f:
            line = f.read().splitlines()[span.line - 1]
        text += f"\n  {line}\n  {' ' * max(span.column - 1, 0)}^"
    except (OSError, IndexError):
        pass
    e = NeuronError(text)
    e.rule, e.message = rule, message
    e.file, e.line, e.column = span.file, span.line, span.column
    raise e


def call_error(rule, message):
    """A NeuronError about a call rather than a kernel line (no source location)."""
    e = NeuronError(f"error: [{rule}] {message}")
    e.rule, e.message = rule, message
    e.file, e.line, e.column = "", 0, 0
    return e


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
