"""Grid subscripts where one tensor dim is walked by several grid axes: `t[i_p, i_f1*F2 + i_f2]`
(transpose2d), `t[i0, p*i1 + i2, p*i3 + i4]` (pooling windows), `t[i_h + i_kh, i_w]` (overlapping
rows). A neuron view walks each dim of its tensor with one step, so such a subscript is split:
for every value of the extra axes ("E": all but the largest axis on each such dim) it is an
ordinary view, one instruction each. As an operand it is gathered into a fresh tile of the grid's
shape (nl.load copies the pieces straight into its result); as the target of `t[...] = value` each
piece of value is written in place. That costs one instruction per piece where NKI has one
access pattern (docs/nki-compat.md, "Index grids")."""
import itertools

from .. import _C
from .. import isa as _isa
from .. import language as _nl
from .grid import Grid, error
from .views import ON_CHIP, GridView, _sub, index_rect


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
        self.rest = [next((j for j in w if j not in self.extra), None) for _, w in self.dims]
        self._check(on_chip)
        super().__init__(base, None, [self.S[j] for j in self.res_axes], self.res_axes,
                         len(self.S))

    def _check(self, on_chip):
        name = self.base.name
        walked = [j for j in self.rest if j is not None]
        if len(set(walked)) != len(walked):
            error("index", f"two dims of '{name}' walk the same grid axis (a diagonal); only one "
                  "subscript may use each grid axis")
        if walked != sorted(walked):
            error("index", f"the grid axes walk the dims of '{name}' in another order (a "
                  "transposed placement); grid axes must follow the tensor's dims in order")
        for (const, walk), j in zip(self.dims, self.rest):
            if any(c < 0 for c in walk.values()):
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
            yield fixed, _C.index(self.base, subs)

    def part(self, t, fixed, rect=None):
        """The piece of t (a tile of this view's shape) for the extra axes' values `fixed`."""
        r = self._ranges(rect)
        return _C.index(t, [_sub("scalar", fixed[j]) if j in fixed else
                            _sub("ds", r[j][0], r[j][1] - r[j][0]) for j in self.res_axes])

    def copy_into(self, dst, rect=None):
        """dst[rect] (a tile of this view's shape) = the view's elements, piece by piece."""
        move = _isa.tensor_copy if self.base.buffer in ON_CHIP else _isa.dma_copy
        for fixed, src in self.pieces(rect):
            move(self.part(dst, fixed, rect), src)

    def resolve(self, rect=None):
        """The elements (rect-restricted) gathered into a fresh SBUF tile."""
        tile = _nl.ndarray(list(self.shape), self.dtype, buffer=_nl.sbuf)
        self.copy_into(tile, rect)
        return index_rect(tile, rect)

    def assign(self, value, write):
        """t[keys] = value: write(piece view, piece of value) for every piece."""
        for fixed, dst in self.pieces():
            v = value
            if isinstance(value, (_C.Tensor, GridView)):
                if list(value.shape) != list(self.shape):
                    error("shape", f"assigning a value of shape {list(value.shape)} to a "
                          f"subscript of shape {list(self.shape)}")
                v = self.part(value if isinstance(value, _C.Tensor) else value.resolve(),
                              fixed)
            write(dst, v)
