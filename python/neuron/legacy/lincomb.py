"""Sums of scaled split views, `9 * w * t[i_p, i_y + i_x] + 3 * w * t[i_p, i_y + 1 - i_x] + ...`
(the interpolation samples): kept as terms and evaluated when used, term by term into one tile
with in-place adds. Evaluated operator by operator, each `+` would need its two operands and a
fresh result (three tiles the size of the expression) and each scaled view a gathered copy
first; here a term reads its pieces straight from the source tile, and the sum holds two tiles
at a time, so an expression that fits SBUF on hardware fits here.

Order is kept as for deferred results (deferred.py): a pending sum is evaluated before the next
legacy call, assignment, in-place update or loop iteration, so a later write to its source
cannot change it. The result has the views' dtype."""
import numbers

from .. import isa as _isa
from .. import language as _nl
from .views import ON_CHIP, concrete

_pending = []  # sums not yet evaluated (per trace; see deferred._Pending)


def _number(x):
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


class LinComb:
    def __init__(self, terms):
        self.terms = list(terms)  # [(coefficient, split view)]
        self._tile = None
        _pending.append(self)

    view = property(lambda self: self.terms[0][1])
    dtype = property(lambda self: self.view.dtype)
    shape = property(lambda self: tuple(self.view.tile_shape()))
    ndim = property(lambda self: len(self.shape))

    def _neuron_tile(self):  # as an operand of neuron's tensor operators (language._operand)
        return self.tile()

    def _drop(self):
        if self in _pending:
            _pending.remove(self)

    def tile(self):
        """The sum in a fresh SBUF tile (evaluated now if still pending)."""
        if self._tile is None:
            self._drop()
            out = None
            for k, v in self.terms:
                t = _scaled(v, k)
                if out is None:
                    out = t
                else:
                    _isa.tensor_tensor(out, out, t, "add")
            self._tile = out
        return self._tile

    def _combine(self, other, sign):
        if isinstance(other, LinComb) and other.shape == self.shape and self._tile is None and \
                other._tile is None:
            self._drop()
            other._drop()
            return LinComb(self.terms + [(sign * k, v) for k, v in other.terms])
        return None

    def __add__(self, other):
        r = self._combine(other, 1.0)
        return r if r is not None else self.tile() + _resolve(other)

    def __radd__(self, other):
        return _resolve(other) + self.tile()

    def __sub__(self, other):
        r = self._combine(other, -1.0)
        return r if r is not None else self.tile() - _resolve(other)

    def __rsub__(self, other):
        return _resolve(other) - self.tile()

    def __mul__(self, other):
        if _number(other) and self._tile is None:
            self._drop()
            return LinComb([(k * float(other), v) for k, v in self.terms])
        return self.tile() * _resolve(other)

    __rmul__ = __mul__

    def __truediv__(self, other):
        if _number(other) and self._tile is None:
            return self * (1.0 / float(other))
        return self.tile() / _resolve(other)

    def __neg__(self):
        return self * -1.0

    def __getattr__(self, name):  # tile attributes and methods
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.tile(), name)

    def __repr__(self):
        return f"<pending sum of {len(self.terms)} scaled views {list(self.shape)}>"


def _resolve(x):
    return x.tile() if isinstance(x, LinComb) else x


def _scaled(view, k):
    """k * view in a fresh tile of view's gathered shape: piece by piece from an on-chip source."""
    if view.base.buffer not in ON_CHIP:
        return concrete(view) * k
    dst = _nl.ndarray(view.tile_shape(), view.dtype, buffer=_nl.sbuf)
    for fixed, src in view.pieces():
        if k == 1.0:
            _isa.tensor_copy(view.part(dst, fixed), src)
        else:
            _isa.tensor_scalar(view.part(dst, fixed), src, "multiply", k)
    return dst


def flush():
    """Evaluates the pending sums (before anything can write their sources)."""
    while _pending:
        _pending[0].tile()


def reset():
    _pending.clear()


def install(split_view):
    """Arithmetic of split views with numbers and with each other builds sums."""
    def scale(self, k):
        return LinComb([(float(k), self)]) if _number(k) else concrete(self) * _resolve(k)

    def add(sign):
        def op(self, other):
            if isinstance(other, split_view):
                other = LinComb([(1.0, other)])
            if isinstance(other, LinComb):
                return LinComb([(1.0, self)])._combine(other, sign) or \
                    (concrete(self) + sign * other.tile())
            return concrete(self) + _resolve(other) if sign > 0 else \
                concrete(self) - _resolve(other)
        return op

    split_view.__mul__ = split_view.__rmul__ = scale
    split_view.__truediv__ = lambda self, k: scale(self, 1.0 / float(k)) if _number(k) else \
        concrete(self) / _resolve(k)
    split_view.__add__ = split_view.__radd__ = add(1.0)
    split_view.__sub__ = add(-1.0)
    split_view.__neg__ = lambda self: scale(self, -1.0)
