"""nl.loop_reduce (NKI_API.md 4.5): `dst[...] = nl.loop_reduce(x, op, loop_indices=[k])`
accumulates x into dst across the iterations of the listed loops: dst = op(dst, x) each time
the assignment runs. Legacy loops are unrolled, so each iteration simply applies it in place
(one tensor_tensor; no extra copy)."""
from .. import isa as _isa
from .deferred import resolve
from .ops import operand
from .views import concrete


class LoopReduce:
    """The value of nl.loop_reduce(...): only meaningful as the right side of an assignment."""

    def __init__(self, x, op, dtype):
        self.x, self.op, self.dtype = x, op, dtype

    def apply(self, view):
        """view = op(view, x), in place."""
        from .isa import _name
        # x may be a pending result (nisa.tensor_reduce(...) passed straight in, as nki-samples'
        # flash attention backward does for its sink gradients): emitted into its tile first.
        x = concrete(operand(resolve(self.x), "nl.loop_reduce"))
        _isa.tensor_tensor(view, view, x, _name(self.op))
