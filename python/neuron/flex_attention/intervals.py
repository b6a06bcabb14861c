"""Interval evaluation of a traced mask graph over whole blocks at once.

create_block_mask must classify Q_BLOCK x KV_BLOCK blocks as full / partial / empty without
evaluating every element (131072^2 elements would take minutes). Each index argument is
replaced by the interval it spans over a block ([q0, q1] for q_idx, a point for b and h), and
every node maps intervals to an interval that contains all its possible values. The result
is sound, never exact: a block whose mask interval is [1, 1] is certainly all True, [0, 0]
certainly all False, and anything else is evaluated element by element (usually only the
blocks on a boundary: the diagonal of a causal mask, the edges of documents).

All intervals are float64 tensors (exact for integers below 2^53); booleans are 0 / 1.
"""
import math

import torch

_INF = math.inf


def _fix(lo, hi):
    """NaN bounds (inf - inf, 0 * inf, log of a negative) become unbounded."""
    return (torch.where(torch.isnan(lo), -_INF, lo), torch.where(torch.isnan(hi), _INF, hi))


def _unknown(like):
    return (torch.full_like(like, -_INF), torch.full_like(like, _INF))


def _corners(f, a, b):
    vals = [f(x, y) for x in a for y in b]
    lo = vals[0]
    hi = vals[0]
    for v in vals[1:]:
        lo = torch.fmin(lo, v)
        hi = torch.fmax(hi, v)
    return lo, hi


def _point(iv):
    return iv[0] == iv[1]


_MONO_UP = {"exp": torch.exp, "exp2": torch.exp2, "log": torch.log, "log2": torch.log2,
            "tanh": torch.tanh, "sigmoid": torch.sigmoid, "sqrt": torch.sqrt,
            "floor": torch.floor, "ceil": torch.ceil, "round": torch.round,
            "relu": torch.relu}


def _bool(lo, hi):
    return lo.to(torch.float64), hi.to(torch.float64)


def evaluate(graph, args, gather):
    """args: name -> (lo, hi) broadcastable float64 tensors; gather(node, index_intervals) ->
    (lo, hi). Returns the output's interval."""
    vals = {}
    for n in graph.nodes:
        vals[n.id] = _eval(n, vals, args, gather)
    return vals[graph.output.id]


def _eval(n, vals, args, gather):
    op = n.op
    a = [vals[x.id] for x in n.args if hasattr(x, "op") and x.op != "input"]
    if op == "arg":
        return args[n.args[0]]
    if op == "const":
        t = torch.tensor(float(n.args[0]), dtype=torch.float64)
        return (t, t)
    if op == "gather":
        return gather(n, a)
    if op == "cast":
        x = a[0]
        dt = n.args[1]
        if dt == "torch.bool":
            nz_lo = (x[0] > 0) | (x[1] < 0)          # certainly nonzero
            z = (x[0] == 0) & (x[1] == 0)            # certainly zero
            return _bool(nz_lo, ~z)
        if "int" in dt or "uint" in dt:
            return (torch.trunc(x[0]), torch.trunc(x[1]))
        return x
    if op == "where":
        c, x, y = a
        lo = torch.where(c[0] >= 1, x[0], torch.where(c[1] <= 0, y[0], torch.fmin(x[0], y[0])))
        hi = torch.where(c[0] >= 1, x[1], torch.where(c[1] <= 0, y[1], torch.fmax(x[1], y[1])))
        return lo, hi
    if op == "add":
        return _fix(a[0][0] + a[1][0], a[0][1] + a[1][1])
    if op == "sub":
        return _fix(a[0][0] - a[1][1], a[0][1] - a[1][0])
    if op == "mul":
        return _fix(*_corners(torch.mul, a[0], a[1]))
    if op in ("truediv", "floordiv"):
        d = a[1]
        safe = (d[0] > 0) | (d[1] < 0)
        f = torch.div if op == "truediv" else (lambda x, y: torch.floor(x / y))
        with torch.no_grad():
            lo, hi = _corners(f, a[0], d)
        lo, hi = _fix(lo, hi)
        return torch.where(safe, lo, -_INF), torch.where(safe, hi, _INF)
    if op == "mod":
        x, d = a
        c = d[0]
        pos = _point(d) & (c > 0)
        same = torch.floor(x[0] / c) == torch.floor(x[1] / c)
        exact = pos & same & torch.isfinite(x[0]) & torch.isfinite(x[1])
        xlo = x[0] - torch.floor(x[0] / c) * c
        xhi = x[1] - torch.floor(x[1] / c) * c
        lo = torch.where(exact, xlo, torch.where(pos, 0.0, -_INF))
        hi = torch.where(exact, xhi, torch.where(pos, c, _INF))
        return _fix(lo, hi)
    if op == "pow":
        return _unknown(a[0][0] + a[1][0])
    if op in ("square",):
        x = a[0]
        lo = torch.where(x[0] >= 0, x[0] * x[0], torch.where(x[1] <= 0, x[1] * x[1], 0.0))
        hi = torch.fmax(x[0] * x[0], x[1] * x[1])
        return lo, hi
    if op == "minimum":
        return torch.fmin(a[0][0], a[1][0]), torch.fmin(a[0][1], a[1][1])
    if op == "maximum":
        return torch.fmax(a[0][0], a[1][0]), torch.fmax(a[0][1], a[1][1])
    if op in ("and", "or", "xor"):
        if n.kind != "bool":
            return _unknown(a[0][0] + a[1][0])
        (al, ah), (bl, bh) = a
        if op == "and":
            return torch.fmin(al, bl), torch.fmin(ah, bh)
        if op == "or":
            return torch.fmax(al, bl), torch.fmax(ah, bh)
        pt = _point(a[0]) & _point(a[1])
        v = (al != bl).to(torch.float64)
        return torch.where(pt, v, 0.0), torch.where(pt, v, 1.0)
    if op == "not":
        x = a[0]
        if n.kind == "bool":
            return 1 - x[1], 1 - x[0]
        return -x[1] - 1, -x[0] - 1
    if op in ("lt", "le", "gt", "ge"):
        x, y = a if op in ("lt", "le") else (a[1], a[0])
        strict = op in ("lt", "gt")
        if strict:
            yes, no = x[1] < y[0], x[0] >= y[1]
        else:
            yes, no = x[1] <= y[0], x[0] > y[1]
        return _bool(yes, ~no)
    if op in ("eq", "ne"):
        x, y = a
        yes = _point(x) & _point(y) & (x[0] == y[0])
        no = (x[1] < y[0]) | (y[1] < x[0])
        if op == "eq":
            return _bool(yes, ~no)
        return _bool(no, ~yes)
    if op == "neg":
        return -a[0][1], -a[0][0]
    if op == "abs":
        x = a[0]
        lo = torch.where(x[0] >= 0, x[0], torch.where(x[1] <= 0, -x[1], 0.0))
        hi = torch.fmax(x[0].abs(), x[1].abs())
        return lo, hi
    if op in _MONO_UP:
        f = _MONO_UP[op]
        return _fix(f(a[0][0]), f(a[0][1]))
    if op == "rsqrt":
        return _fix(torch.rsqrt(a[0][1]), torch.rsqrt(a[0][0]))
    if op in ("sin", "cos"):
        one = torch.ones_like(a[0][0])
        return -one, one
    return _unknown(a[0][0])
