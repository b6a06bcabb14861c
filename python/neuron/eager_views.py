"""The tensor view methods (views.py) on eager tensors. The views compose on the eager
subscript, so they are views of the same NumPy array and writes through them land in it; the
inspection attributes trace the eager view (a tiny kernel, nothing runs) and read its layout as
a compiled kernel would, refusing what compiling refuses (a view that starts at a program id or
register)."""
from . import _C, eager, views
from .eager_values import EagerIndex, has_value
from .errors import user_error


def _indices(v):
    if isinstance(v, EagerIndex):
        yield v
    elif isinstance(v, (tuple, list)):
        for x in v:
            yield from _indices(x)
    elif isinstance(v, slice):
        yield from _indices((v.start, v.stop, v.step))
    elif hasattr(v, "start") and hasattr(v, "size"):  # nl.ds
        yield from _indices(v.start)


def _layout(t, span):
    for key, _ in t._chain:
        for i in _indices(key):
            if not has_value(i._sym):
                user_error("index", f"the view '{t.name}' starts at '{i._sym}' (here {int(i)}), "
                           "which has no value when the kernel is compiled (a program id or "
                           "register), so eager mode refuses its offset and pattern too (the "
                           "view itself works in instructions)", span)
    base, found = t._base, []

    def k(root):
        found.append(views.traced_layout(t._apply(eager._root(base, root, span)), span))
        return [_C.ndarray([1], _C.DType.float32, _C.Memory.shared_hbm, "eager_unused", span)]
    with eager.paused():
        _C.trace(eager._launch_name(), k, [eager._spec(base, 0)], span)
    return found[0]


views.attach(eager.EagerTensor, _layout)
