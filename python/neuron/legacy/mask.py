"""Solving a legacy mask= predicate (a conjunction of index-grid comparisons) into the index
rectangle of a tile where it holds."""
import numpy as np

from .grid import Cmp, Grid, Mask, const_int, error


def _floordiv(a, b):
    return a // b


def _ceildiv(a, b):
    return -((-a) // b)


def _solve(a, c, op):
    """Integer s with a*s + c op 0 as an interval (lo, hi), hi exclusive, None = unbounded."""
    lo, hi = None, None

    def at_most(k):  # a*s + c <= k
        nonlocal lo, hi
        if a > 0:
            v = _floordiv(k - c, a) + 1
            hi = v if hi is None else min(hi, v)
        else:
            v = _ceildiv(k - c, a)
            lo = v if lo is None else max(lo, v)

    def at_least(k):  # a*s + c >= k
        nonlocal lo, hi
        if a > 0:
            v = _ceildiv(k - c, a)
            lo = v if lo is None else max(lo, v)
        else:
            v = _floordiv(k - c, a) + 1
            hi = v if hi is None else min(hi, v)

    if op == "<":
        at_most(-1)
    elif op == "<=":
        at_most(0)
    elif op == ">":
        at_least(1)
    elif op == ">=":
        at_least(0)
    elif op == "==":
        at_most(0)
        at_least(0)
    else:
        error("mask", "a mask comparison with != does not describe one rectangle; use < or > "
              "(two masked calls)")
    return lo, hi


_CONST_OPS = {"<": lambda v: v < 0, "<=": lambda v: v <= 0, ">": lambda v: v > 0,
              ">=": lambda v: v >= 0, "==": lambda v: v == 0, "!=": lambda v: v != 0}


def _dim_of(e, j, shape, axes, frame):
    """The tile dim that grid axis j of mask expression e restricts (None: an axis the tile
    does not have)."""
    if axes is not None and e.ndim == frame:  # the frame of the tile's grid subscript
        return axes.index(j) if j in axes else None
    if e.ndim > len(shape):  # e.g. a 3-D nl.mgrid: its size-1 axes are not tile dims
        big = [a for a, n in enumerate(e.shape) if n > 1]
        if len(big) == len(shape):
            return big.index(j)
    dim = j + len(shape) - e.ndim  # numpy's right alignment
    return dim if dim >= 0 else None


def rectangle(mask, shape, axes=None, frame=None):
    """The index rectangle [(lo, hi), ...] of `shape` where the mask holds, or None when it
    holds nowhere. A grid axis of the mask restricts the tile dim that the same axis indexed
    (axes/frame: the grid axes of the tile's dims and the grid's rank, for tiles made by a grid
    subscript); otherwise an r-D mask addresses the last r dims (numpy's right alignment)."""
    rect = [(0, n) for n in shape]
    if mask is None or mask is True:
        return rect
    if mask is False:
        return None
    terms = mask.terms if isinstance(mask, Mask) else [mask]
    for t in terms:
        if isinstance(t, (bool, np.bool_)):
            if not t:
                return None
            continue
        if not isinstance(t, Cmp):
            error("mask", f"mask= takes comparisons of index grids joined with &, got "
                  f"{type(t).__name__}")
        e = t.expr
        if not isinstance(e, Grid):
            if not _CONST_OPS[t.op](const_int(e, "a mask comparison")):
                return None
            continue
        varying = [j for j, c in enumerate(e.coef) if c != 0 and e.shape[j] > 1]
        c = const_int(e.const, "a mask comparison")
        if not varying:
            if not _CONST_OPS[t.op](c):
                return None
            continue
        if len(varying) > 1:
            error("mask", f"a mask comparison may involve one grid axis; this one involves "
                  f"axes {varying} (split it into one comparison per axis)")
        j = varying[0]
        dim = _dim_of(e, j, shape, axes, frame)
        if dim is None:
            error("mask", f"the mask restricts grid axis {j}, which is not a dim of this "
                  f"{len(shape)}-D tile")
        lo, hi = _solve(e.coef[j], c, t.op)
        a, b = rect[dim]
        rect[dim] = (a if lo is None else max(a, lo), b if hi is None else min(b, hi))
        if rect[dim][0] >= rect[dim][1]:
            return None
    return rect
