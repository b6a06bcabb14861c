"""Where the user's code is: the first caller frame outside the neuron package."""
import os
import sys
import weakref

from . import _C

PACKAGE_DIR = os.path.dirname(os.path.realpath(__file__))


_TOOLKIT = {}  # filename -> in the package or a subpackage? (realpath is slow: cached per name)

# The toolkit's own @neuron.kernel sources (the FlexAttention kernels) count as user code: their
# lines are the kernels' lines, which profiles and diagnostics of those kernels name (else the
# first frame outside the package would be PyTorch's wrapper around flex_attention).
KERNEL_SOURCES = frozenset(os.path.join(PACKAGE_DIR, "flex_attention", name)
                           for name in ("kernel.py", "kernel_bwd.py"))


def is_toolkit_file(filename):
    known = _TOOLKIT.get(filename)
    if known is None:
        real = os.path.realpath(filename)
        known = _TOOLKIT[filename] = (real.startswith(PACKAGE_DIR + os.sep) and
                                      real not in KERNEL_SOURCES)
    return known


def user_frame():
    f = sys._getframe(1)
    while f is not None and is_toolkit_file(f.f_code.co_filename):
        f = f.f_back
    return f


_TORCH_DIR = []  # torch's package directory, once torch is imported


def warning_stacklevel():
    """The stacklevel that makes a warnings.warn in the calling function name the user's line:
    the first frame outside neuron and outside torch (torch.compiler.disable wraps entry points
    such as flex_attention in frames of its own)."""
    torch = sys.modules.get("torch")
    if torch is not None and not _TORCH_DIR:
        _TORCH_DIR.append(os.path.dirname(os.path.realpath(torch.__file__)) + os.sep)
    f, level = sys._getframe(2), 2  # the warning function's caller is level 2
    while f is not None and (is_toolkit_file(f.f_code.co_filename) or bool(_TORCH_DIR) and
                             os.path.realpath(f.f_code.co_filename).startswith(_TORCH_DIR[0])):
        f, level = f.f_back, level + 1
    return level if f is not None else 2


# code object -> its instructions' positions (co_positions, one entry per 2-byte code unit):
# built once per function, as a long kernel calls into neuron thousands of times per trace
# (building the list per call took 80% of a 900-instruction trace).
_POSITIONS = weakref.WeakKeyDictionary()
_ABSPATH = {}  # filename -> os.path.abspath(filename)


def user_span(f=None):
    """The Span of the innermost user line calling into neuron (file, line, 1-based column), or
    of frame f's current line."""
    f = f or user_frame()
    if f is None:
        return _C.Span()
    code = f.f_code
    column = 0
    try:
        positions = _POSITIONS.get(code)
        if positions is None:
            positions = _POSITIONS[code] = list(code.co_positions())
        pos = positions[f.f_lasti // 2]
        if pos[0] == f.f_lineno and pos[2] is not None:
            column = pos[2] + 1
    except (AttributeError, IndexError, TypeError):
        pass
    path = _ABSPATH.get(code.co_filename)
    if path is None:
        path = _ABSPATH[code.co_filename] = os.path.abspath(code.co_filename)
    return _C.Span(path, f.f_lineno, column)


def function_span(fn):
    code = fn.__code__
    return _C.Span(os.path.abspath(code.co_filename), code.co_firstlineno, 1)
