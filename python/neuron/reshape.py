"""A reshape of an HBM tensor that merges or splits dims (`[2, 64, H, W] -> [128, H, W]`, and
back; `[B, H, S, D] -> [B*H, S, D]`): a subscript of the reshaped tensor becomes a view of the base
tensor. Both API generations use it (legacy/views.py for `t.reshape` in legacy kernels,
reshaped.py for the current API's `reshape`, `reshape_dim`, `expand_dim`, `flatten_dims`).

A reshape pairs the dims of both shapes into groups of equal element count (`[2, 64]` with
`[128]`). Within a group, the subscripted box of the new dims must be one contiguous run of
elements, and that run one box of the base dims: then the base view holds exactly the selected
elements in the same (row-major) order, and a DMA moves them between it and a tile of the new
shape (the consumer sees a view whose shape differs from the tile's; docs/nki-compat.md). A run
that is not a box (rows 32..95 of a merged [2, 64]), a box that is no run (column 1 of a [64]
split into [32, 2]: trnfft's butterflies) and a strided subscript are a view of the base's
storage when the base is a whole HBM tensor (storage_view), else refused with the rule that
fails.

A start that has no value at trace time (a loop index, program id or register) works where the
run stays affine in it: on a dim the reshape leaves alone, and on the outermost dim of a split
(`[N*128, D] -> [N, 128, D]`, row n is rows n*128.. of the base). Elsewhere (a merged dim: row i
of `[B*H, ...]` is (i // H, i % H)) a rolled loop's index makes the trace unroll that loop
(unroll.py); a program id or register is refused."""
import math

from . import _C
from ._span import user_span
from .errors import user_error
from .unroll import need_value


def error(rule, message):
    user_error(rule, message, user_span())


def new_shape(old, shape):
    """The reshape's target shape (one -1 is inferred), checked against the element count."""
    shape = [int(n) for n in shape]
    total = math.prod(old)
    if shape.count(-1) == 1:
        rest = math.prod(n for n in shape if n != -1)
        if rest and total % rest == 0:
            shape[shape.index(-1)] = total // rest
    if any(n < 0 for n in shape) or math.prod(shape) != total:
        error("shape", f"cannot reshape shape {list(old)} ({total} elements) to {shape}")
    return tuple(shape)


def groups(old, new):
    """[(old dims, new dims)]: consecutive dims of both shapes with equal element counts."""
    out, i, j = [], 0, 0
    while i < len(old) or j < len(new):
        go, gn, po, pn = [], [], 1, 1
        if i < len(old):
            go.append(i)
            po, i = po * old[i], i + 1
        if j < len(new):
            gn.append(j)
            pn, j = pn * new[j], j + 1
        while po != pn:
            if po < pn:
                go.append(i)
                po, i = po * old[i], i + 1
            else:
                gn.append(j)
                pn, j = pn * new[j], j + 1
        out.append((go, gn))
    return out


def _run(ranges, sizes, name):
    """The linear [start, end) of a box of ranges over dims of `sizes`, if contiguous."""
    k = max([d for d, ((lo, hi), n) in enumerate(zip(ranges, sizes)) if hi - lo != n],
            default=-1)  # the innermost dim not taken whole
    if any(hi - lo != 1 for lo, hi in ranges[:max(k, 0)]):
        raise NotABox(f"this subscript of the reshaped tensor '{name}' selects elements that "
                      "are not contiguous across the merged dims (only the outermost "
                      "subscripted dim of a merged group may take a range)")
    start = end = 0
    for (lo, hi), n in zip(ranges, sizes):
        start, end = start * n + lo, end * n + hi - 1
    return start, end + 1


class NotABox(Exception):
    """A run of a merged dim that is no box of the base dims (the message says which):
    storage_view() may still give its view, else the caller reports the message."""


def _box(start, end, sizes, name):
    """(start, size) per dim of `sizes` whose box is the linear run [start, end)."""
    m, inner = len(sizes) - 1, 1  # the outermost dim the run varies in, its inner size
    while m > 0 and end - start > inner * sizes[m]:
        inner, m = inner * sizes[m], m - 1
    if start % inner or (end - start) % inner or \
            start // (inner * sizes[m]) != (end - 1) // (inner * sizes[m]):
        raise NotABox(f"this subscript of the reshaped tensor '{name}' selects elements "
                      f"{start}..{end - 1} of a merged dim, which do not form a box of the "
                      f"tensor's dims {list(sizes)}")
    out, rest = [], start // (inner * sizes[m])
    for d in range(m - 1, -1, -1):
        out.insert(0, (rest % sizes[d], 1))
        rest //= sizes[d]
    out.append(((start // inner) % sizes[m], (end - start) // inner))
    out += [(0, n) for n in sizes[m + 1:]]
    return out


def symbolic(v):
    """The affine form of a start with no value at trace time (a loop index, program id or
    register; an eager index keeps it as `_sym`), else None."""
    a = getattr(v, "_sym", v)
    return a if isinstance(a, _C.Affine) and not a.is_constant() else None


def _constant(start, name):
    a = symbolic(start)
    if a is None:
        return int(start.constant) if isinstance(start, _C.Affine) else int(start)
    need_value(a)  # a rolled loop's index: the trace restarts with that loop unrolled
    error("unsupported", f"the subscript of a merged dim (or of an inner dim of a split one) of "
          f"the reshaped tensor '{name}' starts at '{a}' (a program id or runtime value), whose "
          "place in the base tensor's dims is not affine; it needs a constant start here "
          "(subscript the tensor before reshaping it, or give the program grid one axis per "
          "base dim)")


def _split_run(picks, sizes, name):
    """(start, size) in one base dim of a box of (start, size) picks of the dims it is split
    into: affine in the outermost pick's start (symbolic there), the others constant."""
    _run([(0, size) for _, size in picks], sizes, name)  # refuses a box that is not one run
    start, size = picks[0][0], picks[0][1]
    for (s, n), dim in zip(picks[1:], sizes[1:]):
        start, size = start * dim + _constant(s, name), size * n
    return start, size


def base_subscripts(base_shape, shape, picks, name, sub):
    """The subscripts of the base tensor for `picks`, one per dim of the reshaped `shape`:
    (start, size, step) with int or Affine start. sub(kind, start, a, b) makes one."""
    subs = [None] * len(base_shape)
    for go, gn in groups(list(base_shape), list(shape)):
        if len(go) == 1 and len(gn) == 1:  # the same dim: any subscript carries over
            start, size, step = picks[gn[0]]
            subs[go[0]] = (sub("ds", start, size) if step == 1 or size == 1 else
                           sub("slice", start, start + step * (size - 1) + 1, step))
            continue
        if not go:
            continue  # new size-1 dims (their subscripts are 0, checked by the caller)
        if not gn:  # size-1 dims of the base the reshape drops: their one element
            for d in go:
                subs[d] = sub("ds", 0, 1)
            continue
        for d in gn:
            start, size, step = picks[d]
            if step != 1 and size > 1:
                raise NotABox(f"a strided subscript of a merged or split dim of the reshaped "
                              f"tensor '{name}' is not supported")
        if len(go) == 1:  # a split (or size-1 dims added): one run of the base dim
            subs[go[0]] = sub("ds", *_split_run([picks[d][:2] for d in gn],
                                                [shape[d] for d in gn], name))
            continue
        ranges = []
        for d in gn:
            start = _constant(picks[d][0], name)
            ranges.append((start, start + picks[d][1]))
        run = _run(ranges, [shape[d] for d in gn], name)
        for d, (start, size) in zip(go, _box(*run, [base_shape[d] for d in go], name)):
            subs[d] = sub("ds", start, size)
    return subs


def storage_view(base, shape, picks, name, message):
    """The view of `picks` ((start, size, step) per dim of the reshaped `shape`) through base's
    storage, for a subscript whose runs are no box of base's dims (rows 0..127 of a merged
    [59, 38], as nki-samples' nearest-neighbour resize stores its pixels): possible when base
    is a whole HBM tensor, whose elements lie back to back in row-major order, so the reshaped
    tensor is a row-major view of the same storage. Else the error `message`. The view's shape
    is the picks' sizes."""
    if isinstance(base, _C.Tensor):
        whole = base.is_contiguous() and _C.storage_shape(base) == list(base.shape)
    else:  # an eager tensor: whole when not subscripted
        whole = not getattr(base, "_chain", True)
    if not whole or base.buffer in (_C.Memory.sbuf, _C.Memory.psum):
        error("unsupported", message)
    stride, pattern, offset = 1, [], 0
    for n, (start, size, step) in zip(reversed(shape), reversed(picks)):
        pattern.insert(0, [stride * step, size])
        offset += _constant(start, name) * stride
        stride *= n
    return base.ap(pattern, offset)
