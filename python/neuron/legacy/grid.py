"""Legacy NKI index grids: nl.arange, nl.mgrid, their affine expressions, and the comparisons
joined with `&` that form a `mask=` predicate (solved in mask.py).

A grid expression is `const + sum_j coef[j] * s[j]` over the positions s of an n-D shape
(numpy broadcasting: a size-1 dim does not vary). const is an int or a neuron Affine (a
program id); loop indices of the legacy API are plain ints because its loops are unrolled.
"""
import re

import numpy as np

from .. import _C, unroll
from .._span import user_span
from ..errors import user_error


def error(rule, message):
    user_error(rule, message, user_span())


def _is_int(v):
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def is_scalar_index(v):
    """An int or an Affine (program id / loop index): a grid expression that does not vary."""
    return _is_int(v) or isinstance(v, _C.Affine)


def const_int(v, what):
    """v as an int; an Affine must be constant (a symbolic program id is not decidable)."""
    if isinstance(v, _C.Affine):
        if not v.is_constant():
            # A program id: trace each program on its own, its ids ints (vLLM's paged attention
            # takes nisa.iota(nl.program_id(1)) as its head's index); a rolled loop's index:
            # unroll it. Registers and runtime loop indices stay an error.
            unroll.need_value(v)
            kind = "a runtime value" if re.search(r"\b[ri]\d", str(v)) else "a program id"
            error("mask", f"{what} depends on '{v}' ({kind}), which has no value at trace "
                  "time; use index grids, unrolled loop indices and constants here")
        return int(v.constant)
    return int(v)


def broadcast_shapes(shapes):
    """NumPy's broadcast of index-grid shapes (shorter ones padded with leading 1s), by the
    C++ DSL's rule (rule "broadcast")."""
    return tuple(_C.broadcast_shape([list(s) for s in shapes], user_span(), pad_ranks=True))


class Grid:
    """An affine index grid (from nl.arange / nl.mgrid and + - * with ints)."""

    __array_ufunc__ = None  # numpy scalars defer to our reflected operators
    __slots__ = ("shape", "coef", "const")

    def __init__(self, shape, coef, const=0):
        self.shape, self.coef, self.const = tuple(shape), tuple(coef), const

    def __repr__(self):
        terms = [f"{c}*s{j}" for j, c in enumerate(self.coef) if c]
        return f"<index grid {self.const} + {' + '.join(terms) or '0'} over {self.shape}>"

    @property
    def ndim(self):
        return len(self.shape)

    def coefs_in(self, shape):
        """The coefficients in the frame of a broadcast shape (a size-1 dim stretched to a
        larger one does not vary, so its coefficient becomes 0)."""
        pad = len(shape) - len(self.shape)
        coef = [0] * pad + list(self.coef)
        mine = (1,) * pad + self.shape
        return [0 if mine[j] == 1 and shape[j] > 1 else coef[j] for j in range(len(shape))]

    # ---- placement: arange(n)[:, None], arange(m)[None, :] ----
    def __getitem__(self, key):
        keys = key if isinstance(key, tuple) else (key,)
        shape, coef, axis = [], [], 0
        for k in keys:
            if k is None:
                shape.append(1)
                coef.append(0)
            elif isinstance(k, slice) and k == slice(None):
                if axis >= len(self.shape):
                    error("index", f"too many ':' in grid placement {key!r}")
                shape.append(self.shape[axis])
                coef.append(self.coef[axis])
                axis += 1
            else:
                error("index", f"an index grid is placed with ':' and None only (as in "
                      f"nl.arange(n)[:, None]); got {k!r}")
        if axis != len(self.shape):
            error("index", f"grid placement {key!r} must use every axis of the grid")
        return Grid(shape, coef, self.const)

    # ---- affine arithmetic ----
    def _combine(self, other, sign):
        if isinstance(other, Grid):
            shape = broadcast_shapes([self.shape, other.shape])
            a, b = self.coefs_in(shape), other.coefs_in(shape)
            return Grid(shape, [x + sign * y for x, y in zip(a, b)],
                        self.const + other.const * sign)
        if is_scalar_index(other):
            return Grid(self.shape, self.coef, self.const + other * sign)
        return NotImplemented

    def __add__(self, other):
        return self._combine(other, 1)

    __radd__ = __add__

    def __sub__(self, other):
        return self._combine(other, -1)

    def __rsub__(self, other):
        return (-self)._combine(other, 1)

    def __neg__(self):
        return Grid(self.shape, [-c for c in self.coef], -self.const)

    def __mul__(self, other):
        if isinstance(other, _C.Affine) and other.is_constant():
            other = int(other.constant)
        if _is_int(other):
            k = int(other)
            return Grid(self.shape, [c * k for c in self.coef], self.const * k)
        if isinstance(other, (Grid, _C.Affine)):
            error("index", "an index grid can only be multiplied by an integer constant (a "
                  "product of two indices is not affine)")
        return NotImplemented

    __rmul__ = __mul__

    def _not_affine(self, *args):
        error("index", "index grids support + - and * by an integer only; // and % are not "
              "affine (compute such indices with nl.ds slices instead)")

    __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = __truediv__ = _not_affine

    # ---- comparisons build mask terms ----
    def _cmp(self, other, op):
        diff = self._combine(other, -1)
        return diff if diff is NotImplemented else Cmp(diff, op)

    def __lt__(self, other):
        return self._cmp(other, "<")

    def __le__(self, other):
        return self._cmp(other, "<=")

    def __gt__(self, other):
        return self._cmp(other, ">")

    def __ge__(self, other):
        return self._cmp(other, ">=")

    def __eq__(self, other):
        return self._cmp(other, "==")

    def __ne__(self, other):
        return self._cmp(other, "!=")

    __hash__ = None

    def __bool__(self):
        error("control-flow", "an index grid has no value at trace time: it cannot steer "
              "`if`/`while`; use it in a subscript, a mask= or nisa.iota")

    def __iter__(self):
        error("index", "an index grid cannot be iterated; unpack nl.mgrid[...] instead")


def arange(start, stop=None):
    """nl.arange(stop) / nl.arange(start, stop): a 1-D index grid (place it with [:, None])."""
    if stop is None:
        start, stop = 0, start
    start, stop = int(start), int(stop)
    if stop <= start:
        error("index", f"nl.arange({start}, {stop}) is empty")
    return Grid((stop - start,), (1,), start)


class MGridResult(tuple):
    """nl.mgrid[...]: one dense grid per dim; unpack it or use .p .x .y .z."""

    p = property(lambda self: self[0])
    x = property(lambda self: self[1])
    y = property(lambda self: self[2])
    z = property(lambda self: self[3])


class _MGrid:
    def __getitem__(self, key):
        keys = key if isinstance(key, tuple) else (key,)
        ranges = []
        for k in keys:
            if not isinstance(k, slice) or k.stop is None:
                error("index", f"nl.mgrid takes start:stop[:step] slices, got {k!r}")
            start, step = k.start or 0, k.step or 1
            n = max(0, -(-(k.stop - start) // step))
            if n == 0 or step <= 0:
                error("index", f"nl.mgrid slice {k!r} is empty or has a negative step")
            ranges.append((start, step, n))
        shape = [n for _, _, n in ranges]
        return MGridResult(Grid(shape, [step if j == d else 0 for j in range(len(ranges))],
                                start) for d, (start, step, _) in enumerate(ranges))


mgrid = _MGrid()


# ---- mask terms --------------------------------------------------------------------------------

class Cmp:
    """One mask term: `expr op 0` where expr is a grid expression (or a constant)."""

    __array_ufunc__ = None

    def __init__(self, expr, op):
        self.expr, self.op = expr, op

    def __and__(self, other):
        return Mask([self]) & other

    __rand__ = __and__

    def _bad_join(self, *args):
        error("mask", "mask comparisons are joined with & only (a conjunction); | and ^ "
              "cannot describe one rectangle")

    __or__ = __ror__ = __xor__ = __rxor__ = __invert__ = _bad_join

    def __bool__(self):
        error("mask", "a mask comparison has no truth value at trace time: join comparisons "
              "with & (not `and`/`or`) and pass them as mask=")


class Mask:
    """A conjunction of Cmp terms (or constant truths)."""

    __array_ufunc__ = None

    def __init__(self, terms):
        self.terms = list(terms)

    def __and__(self, other):
        if isinstance(other, Mask):
            return Mask(self.terms + other.terms)
        if isinstance(other, Cmp):
            return Mask(self.terms + [other])
        if isinstance(other, (bool, np.bool_)):
            return Mask(self.terms + [bool(other)])
        return NotImplemented

    __rand__ = __and__
    __or__ = __ror__ = __xor__ = __rxor__ = __invert__ = Cmp._bad_join
    __bool__ = Cmp.__bool__
