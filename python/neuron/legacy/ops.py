"""Applying legacy mask= predicates: the op runs on the operands restricted to the mask's
rectangle and writes that rectangle of a fresh full-shape result (a "partial" tile; the other
elements are left unwritten, as NKI leaves them); a mask that holds nowhere drops the op."""
from .. import _C
from .. import isa as _isa
from .. import language as _nl
from .._span import user_span
from .blocks import check_tile
from .grid import error
from .mask import rectangle
from .views import (ON_CHIP, GridView, MaskedOperand, Reshaped, as_gridview, concrete,
                    index_rect, is_view, mark_partial, mask_rect, restrict)

def promote(a, b):
    """The result dtype of a binary op on tiles of dtypes a and b: the C++ DSL's rule
    (nl::promote, NKI_API.md 3.3), for results that are never computed (dropped masked ops)."""
    return _C.promote(a, b)


def operand(x, what="this call"):
    """A call argument as a tile/GridView/scalar (Blocks and operand masks are errors)."""
    check_tile(x, what)
    if isinstance(x, MaskedOperand):
        error("mask", "operand masks (x[i < n]) are only supported by nl.matmul and "
              "nisa.nc_matmul; pass mask= instead")
    return as_gridview(x)


def space(operands):
    """The index space: the broadcast of the view operands' shapes (the C++ DSL's rule: equal
    ranks, size-1 dims expand)."""
    shapes = [list(o.shape) for o in operands if is_view(o)]
    if not shapes:
        error("operand", "at least one operand must be a tile")
    return _C.broadcast_shape(shapes, user_span())


def pad_trailing(t, rank):
    """Tile view t with size-1 dims appended up to `rank`: a lower-rank tile partition aligned
    against a higher-rank one (NKI_API.md 4.8 treats a reduced `(P,)` tile as `[P, 1]`)."""
    for d in range(len(t.shape), rank):
        t = _C.Tensor.expand_dim(t, d)
    return t


def is_full(rect, shape):
    return rect is not None and all(lo == 0 and hi == n for (lo, hi), n in zip(rect, shape))


def intersect(a, b):
    if a is None or b is None:
        return None
    r = [(max(x0, y0), min(x1, y1)) for (x0, x1), (y0, y1) in zip(a, b)]
    return None if any(lo >= hi for lo, hi in r) else r


def new_like(shape, dtype, buffer=_nl.sbuf):
    return _nl.ndarray(list(shape), dtype, buffer=buffer)


def write_rect(dst, rect, value):
    """dst[rect] = value (same shape) with an engine copy."""
    _isa.tensor_copy(index_rect(dst, rect), value)


def masked(call, operands, mask, out_dtype, out_shape=None, out_rect=None):
    """Runs call(*operands) under mask: operands are restricted to the mask's rectangle of the
    index space and the result is written into that rectangle of a full-size fresh tile.
    out_shape/out_rect map the space to the result (reductions); out_dtype() is the result
    dtype for a dropped op."""
    ops = [operand(o) for o in operands]
    if mask is None or mask is True:
        return call(*[concrete(o) if is_view(o) else o for o in ops])
    shape = space(ops)
    rect = mask_rect(mask, shape, *ops)
    full_shape = shape if out_shape is None else out_shape
    if rect is None:
        return mark_partial(new_like(full_shape, out_dtype()), None)
    if is_full(rect, shape):
        return call(*[concrete(o) if is_view(o) else o for o in ops])
    r = call(*[restrict(o, rect, shape) for o in ops])
    res_rect = rect if out_rect is None else out_rect(rect)
    dst = new_like(full_shape, r.dtype, r.buffer if r.buffer in ON_CHIP else _nl.sbuf)
    write_rect(dst, res_rect, r)
    return mark_partial(dst, res_rect)


def unmask(x):
    """(tile, rect or None) of a matmul operand (operand masking: x[i_f < 64])."""
    if isinstance(x, MaskedOperand):
        return x.tile, x.rect
    x = operand(x)
    return (concrete(x) if isinstance(x, (GridView, Reshaped)) else x), None


def on_sbuf(t):
    """A matmul operand tile, copied into a fresh SBUF tile when it is in PSUM: the Tensor
    engine reads SBUF only, and neuronx-cc places a legacy value there itself (nki-samples'
    flash attention backward passes an nc_transpose result, in PSUM, as the stationary)."""
    if t.buffer != _nl.psum:
        return t
    c = new_like(t.shape, t.dtype)
    _isa.tensor_copy(c, t)
    return c


def matmul_parts(x, y, x_km, mask):
    """Rectangles of a matmul: (x tile, y tile, x sub-rect, y sub-rect, (M, N), out rect or
    None for a dropped op). x_km: x is [K, M] (stationary / transpose_x=True), else [M, K]."""
    xt, xr = unmask(x)
    yt, yr = unmask(y)
    xt, yt = on_sbuf(xt), on_sbuf(yt)
    xs, ys = list(xt.shape), list(yt.shape)
    if len(xs) != 2 or len(ys) != 2:
        error("matmul-rank", f"matmul takes 2-D tiles, got {xs} and {ys}")
    kxs = xs[0] if x_km else xs[1]
    if xr is None and yr is None and kxs != ys[0]:
        # (Masked operands contract over the rows both keep: intersected below.)
        error("matmul-shape", f"contraction sizes differ: x {xs} contracts over {kxs} "
              f"{'partitions' if x_km else 'columns'} but y {ys} has {ys[0]} rows; slice both "
              "to the same K")
    xr = xr or [(0, n) for n in xs]
    yr = yr or [(0, n) for n in ys]
    kx, mx = (xr[0], xr[1]) if x_km else (xr[1], xr[0])
    M, N = (xs[1] if x_km else xs[0]), ys[1]
    k = intersect([kx], [yr[0]])
    if k is None:
        return xt, yt, None, None, (M, N), None
    k = k[0]  # a contraction row masked out of either operand contributes nothing
    out = intersect([mx, yr[1]], rectangle(mask, [M, N]))
    if out is None:
        return xt, yt, None, None, (M, N), None
    x_sub = [k, out[0]] if x_km else [out[0], k]
    return xt, yt, x_sub, [k, out[1]], (M, N), out


def reduced(shape, axis, keepdims):
    """(axes, result dims, result shape) of a free-axis reduction, by the C++ DSL's rule
    (nl::reduction): reduced dims are kept as size 1 with keepdims, else dropped, but never
    below 2 dims on chip (then [P, 1], which broadcasts against [P, F] as the legacy tutorials
    use it)."""
    axes = [axis] if isinstance(axis, int) else list(axis)
    axes, full, kept = _C.reduction(list(shape), axes, bool(keepdims), user_span())
    return axes, kept, [full[d] for d in kept]
