"""Grid subscripts where one tensor dim is walked by several grid axes: `t[i_p, i_f1*F2 + i_f2]`
(transpose2d), `t[i0, p*i1 + i2, p*i3 + i4]` (pooling windows), `t[i_h + i_kh, i_w]` (overlapping
rows). A neuron view walks each dim of its tensor with one step, so such a subscript is split:
for every value of the extra axes ("E": all but the largest axis on each such dim) it is an
ordinary view, one instruction each. As an operand it is gathered into a fresh tile of the grid's
shape (nl.load copies the pieces straight into its result); as the target of `t[...] = value` each
piece of value is written in place. That costs one instruction per piece where NKI has one
access pattern (docs/nki-compat.md, "Index grids")."""
import itertools
import math

from .. import _C
from .. import isa as _isa
from .. import language as _nl
from . import lincomb
from .grid import Grid, error
from .views import ON_CHIP, GridView, _sub, index_rect


MAX_REORDER_PIECES = 8
MAX_TILE_DIMS = 5  # a partition dim and 4 free dims: what an access pattern walks


class SplitView(GridView):
    """t[keys] whose dims may combine grid axes; shape: the walked grid axes, in grid order."""

    def __init__(self, base, keys, S):
        self.base, self.S = base, tuple(S)
        on_chip = base.buffer in ON_CHIP
        self.dims = []  # per base dim: (const, {axis: coef})
        for d, k in enumerate(keys):
            if not isinstance(k, Grid) and (isinstance(k, (slice, bool)) or k is Ellipsis):
                error("index", f"index every dim of '{base.name}' with index grids or ints when "
                      "a subscript combines grid axes")
            if isinstance(k, Grid):
                coef = k.coefs_in(self.S)
                self.dims.append((k.const, {j: c for j, c in enumerate(coef)
                                            if c != 0 and self.S[j] > 1}))
            else:
                self.dims.append((k, {}))
        self.extra = set()
        for d, (_, walk) in enumerate(self.dims):
            if len(walk) > 1:
                keep = 0 if on_chip and d == 0 and 0 in walk else max(
                    walk, key=lambda j: (self.S[j], -abs(walk[j])))
                self.extra |= set(walk) - {keep}
        self.res_axes = sorted({j for _, w in self.dims for j in w})
        reorder = 1
        while True:
            self.rest = [next((j for j in w if j not in self.extra), None) for _, w in self.dims]
            # Small axes walked backwards or out of the dims' order (`t[i_p, i_y + i_x, c * i_w]`
            # over a grid [P, X, W, Y], corners `t[i_p, c * i_h, c * i_w]` over [P, W, H]) are
            # fixed per piece too, the smallest first, until the rest is in order: at most
            # MAX_REORDER_PIECES more pieces; a real transposition is refused (_check).
            walked = [j for j in self.rest if j is not None]
            out = {a for i, a in enumerate(walked) for b in walked[i + 1:] if a >= b} | \
                {b for i, a in enumerate(walked) for b in walked[i + 1:] if a >= b}
            out |= {j for (_, w), j in zip(self.dims, self.rest) if j is not None and w[j] < 0}
            out -= {0} if on_chip else set()
            if not out:
                break
            j = min(out, key=lambda j: (self.S[j], -j))
            reorder *= self.S[j]
            if reorder > MAX_REORDER_PIECES:
                break
            self.extra.add(j)
        merged = {j for g in self.layout() if len(g) > 1 for j in g}
        if merged - self.extra:
            self.extra |= merged
            self.rest = [next((j for j in w if j not in self.extra), None) for _, w in self.dims]
        self._check(on_chip)
        # An HBM tensor's dims walked out of the grid's order (`out[b, i_f, i_p]`, a transposed
        # store, as nki-samples' Stable Diffusion attention writes its output): each piece's
        # view gets its dims reordered into the grid's, which a DMA walks like any view.
        walked = [j for j in self.rest if j is not None]
        self.dim_order = None if walked == sorted(walked) else \
            sorted(range(len(walked)), key=lambda d: walked[d])
        super().__init__(base, None, [self.S[j] for j in self.res_axes], self.res_axes,
                         len(self.S))

    def _check(self, on_chip):
        name = self.base.name
        walked = [j for j in self.rest if j is not None]
        if len(set(walked)) != len(walked):
            error("index", f"two dims of '{name}' walk the same grid axis (a diagonal); only one "
                  "subscript may use each grid axis")
        if walked != sorted(walked) and on_chip:
            error("index", f"the grid axes walk the dims of the tile '{name}' in another order "
                  "(a transposed placement); grid axes must follow a tile's dims in order")
        for (const, walk), j in zip(self.dims, self.rest):
            if j is not None and walk[j] < 0:  # extra axes are fixed per piece: any sign
                error("index", f"a subscript of '{name}' walks a grid axis with a negative "
                      "stride, which a view cannot express")
            if j is not None and walk[j] != 1 and isinstance(const, _C.Affine) and \
                    not const.is_constant():
                error("index", f"a strided subscript of '{name}' starts at '{const}' (a program "
                      "id or runtime value); strided grids need a constant start")
        if on_chip and (self.rest[0] != 0 or self.dims[0][1][0] != 1):
            error("index", f"the partition dim of the tile '{name}' must be walked by the grid's "
                  "first axis with unit stride")
        if not self.res_axes or self.res_axes[0] != 0:
            error("index", f"the grid's first axis must walk a dim of '{name}' (it is the "
                  "partition dim of the result)")

    def out_of_bounds(self, rect=None):
        return None  # each piece is bounds-checked as an ordinary view

    def _ranges(self, rect):
        """(lo, hi) of every grid axis (rect is over the result dims)."""
        r = {j: (0, self.S[j]) for j in range(len(self.S))}
        if rect is not None:
            for j, lh in zip(self.res_axes, rect):
                r[j] = lh
        return r

    def pieces(self, rect=None):
        """(values of the extra axes, the base's view for them), over rect."""
        r = self._ranges(rect)
        extra = sorted(self.extra)
        for vals in itertools.product(*(range(*r[j]) for j in extra)):
            fixed = dict(zip(extra, vals))
            subs = []
            for (const, walk), j in zip(self.dims, self.rest):
                start = const + sum(c * fixed[a] for a, c in walk.items() if a in fixed)
                if j is None:
                    subs.append(_sub("scalar", start))
                    continue
                lo, hi = r[j]
                first, step = start + walk[j] * lo, walk[j]
                subs.append(_sub("ds", first, hi - lo) if step == 1 else
                            _sub("slice", first, first + step * (hi - lo - 1) + 1, step))
            view = _C.index(self.base, subs)
            yield fixed, view if self.dim_order is None else view.permute(self.dim_order)

    def layout(self):
        """The dims of the tile this view gathers into, as groups of result axes: one each, but
        past 5 dims (what an instruction walks) the adjacent pair of axes with the fewest
        elements merges into one dim (row-major), again until 5 are left, as the 7-D grids of
        the trilinear interpolation sample need. Every view of one grid gets the same layout,
        so their gathered tiles combine; the merged axes are fixed per piece."""
        groups = [[j] for j in self.res_axes]
        while len(groups) > MAX_TILE_DIMS:
            size = [math.prod(self.S[j] for j in g) for g in groups]
            i = min(range(1, len(groups) - 1), key=lambda i: size[i] * size[i + 1])
            groups[i:i + 2] = [groups[i] + groups[i + 1]]
        return groups

    def tile_shape(self):
        return [math.prod(self.S[j] for j in g) for g in self.layout()]

    def part(self, t, fixed, rect=None):
        """The piece of t (a tile of this view's shape or tile_shape()) for the extra axes'
        values `fixed`."""
        r = self._ranges(rect)
        groups = [[j] for j in self.res_axes] if len(t.shape) == len(self.res_axes) else \
            self.layout()
        subs = []
        for g in groups:
            if g[0] in fixed:
                at = 0
                for j in g:
                    at = at * self.S[j] + fixed[j]
                subs.append(_sub("scalar", at))
            else:
                subs.append(_sub("ds", r[g[0]][0], r[g[0]][1] - r[g[0]][0]))
        return _C.index(t, subs)

    def copy_into(self, dst, rect=None):
        """dst[rect] (a tile of this view's shape) = the view's elements, piece by piece."""
        move = _isa.tensor_copy if self.base.buffer in ON_CHIP else _isa.dma_copy
        for fixed, src in self.pieces(rect):
            move(self.part(dst, fixed, rect), src)

    def resolve(self, rect=None):
        """The elements (rect-restricted) gathered into a fresh SBUF tile."""
        shape = self.tile_shape()
        if shape != list(self.shape) and rect is not None and \
                any(hi - lo != n for (lo, hi), n in zip(rect, self.shape)):
            error("mask", f"a mask on a subscript of '{self.base.name}' with more than "
                  f"{MAX_TILE_DIMS} result dims is not supported")
        tile = _nl.ndarray(shape, self.dtype, buffer=_nl.sbuf)
        self.copy_into(tile, rect)
        return tile if shape != list(self.shape) else index_rect(tile, rect)

    def assign(self, value, write):
        """t[keys] = value: write(piece view, piece of value) for every piece."""
        for fixed, dst in self.pieces():
            v = value
            if isinstance(value, (_C.Tensor, GridView)):
                if list(value.shape) not in (list(self.shape), self.tile_shape()):
                    error("shape", f"assigning a value of shape {list(value.shape)} to a "
                          f"subscript of shape {list(self.shape)}")
                v = self.part(value if isinstance(value, _C.Tensor) else value.resolve(),
                              fixed)
            write(dst, v)


lincomb.install(SplitView)  # `k * view + ...` builds sums evaluated term by term
