"""Legacy subscripts on neuron tensors: grid keys (`t[i_p, i_f]`, `t[k*128 + i_p, 2*i_f+1]`),
`...`, operand masks (`x[i_f < 64]`) and reshaped HBM tensors, translated into the current
subscripts (nl.ds starts, strided slices) so the existing tensor indexing does the work.

A grid subscript that reaches outside the tensor is kept as a pending GridView: legacy kernels
index a whole 128-row tile and mask the tail, so the view only becomes concrete (and is only
bounds-checked) once the consumer's mask= has shrunk it. Masked value-returning calls produce
"partial" tiles whose valid rectangle is remembered, so that `acc[...] = f(..., mask=m)` and
`acc += f(..., mask=m)` only touch that rectangle, as in NKI.
"""
import threading

from .. import _C
from .. import language as _nl
from .._span import user_span
from .grid import Grid, broadcast_shapes, error, is_scalar_index
from .mask import rectangle
from ..reshape import NotABox, base_subscripts, new_shape, storage_view

ON_CHIP = (_C.Memory.sbuf, _C.Memory.psum)


class _TraceState(threading.local):  # per thread: threads may trace concurrently
    def __init__(self):
        self.partial = {}       # id(tile) -> (tile, rect): the valid rectangle of a masked result
        self.frames = {}        # id(view) -> (view, grid axes, grid rank) of grid subscripts
        self.grid = (1,)        # the launch grid of the kernel being traced
        self.active = False     # tracing a legacy kernel


_State = _TraceState()


def begin_trace(grid):
    end_trace()
    from .deferred import reset
    reset()
    _State.grid, _State.active = tuple(grid), True


def end_trace():
    from .deferred import reset
    reset()  # an unused pending result is dead code
    _State.partial, _State.frames = {}, {}  # drop the traced handles
    _State.active = False


def same_key(a, b):
    """Subscript keys that certainly select the same view (ints, slices, same objects)."""
    a = a if isinstance(a, tuple) else (a,)
    b = b if isinstance(b, tuple) else (b,)
    return len(a) == len(b) and all(
        x is y or (type(x) is type(y) and isinstance(x, (int, slice)) and x == y)
        for x, y in zip(a, b))


def mark_partial(tile, rect):
    if rect is not None and all(lo == 0 and hi == n for (lo, hi), n in zip(rect, tile.shape)):
        return tile
    _State.partial[id(tile)] = (tile, rect)
    return tile


def partial_rect(value):
    """(True, rect) for a partial tile (rect None = nothing valid), else (False, None)."""
    hit = _State.partial.get(id(value))
    if hit is not None and hit[0] is value:
        return True, hit[1]
    return False, None


def _sub(kind, start, a=0, b=0):
    return _C.subscript(kind, start if isinstance(start, _C.Affine) else _C.Affine(int(start)),
                        a, b, user_span())


def index_rect(t, rect):
    """The view of tensor t restricted to rect (dims of size 1 broadcast and stay whole)."""
    if rect is None or all(lo == 0 and hi == n for (lo, hi), n in zip(rect, t.shape)):
        return t
    subs = []
    for (lo, hi), n in zip(rect, t.shape):
        subs.append(_sub("all", 0) if (lo == 0 and hi == n) or n == 1
                    else _sub("ds", lo, hi - lo))
    return _C.index(t, subs)


class GridView:
    """A tensor subscripted per dim: ("fix", start) drops the dim (a scalar subscript),
    ("unit", start) keeps it with size 1, ("axis", start, step, k) walks dim k of the result
    shape. entries None: the whole base viewed as that shape (a reshape)."""

    # (name, dim, ("axis", start, step, k)): a size-1 dim of a reshaped tensor the base does not
    # have, walked by grid axis k: in range only where a mask keeps that axis at index 0.
    unit_axes = ()

    def __init__(self, base, entries, shape, axes=None, frame=None):
        self.base, self.entries, self.shape = base, entries, tuple(shape)
        self.axes, self.frame = axes, frame  # the grid axes of the dims, the grid's rank

    dtype = property(lambda self: self.base.dtype)
    buffer = property(lambda self: self.base.buffer)
    ndim = property(lambda self: len(self.shape))

    def __repr__(self):
        return f"<legacy view of {self.base!r} as {list(self.shape)}>"

    def index_shape(self):
        return self.base.shape  # the shape the entries index

    def out_of_bounds(self, rect=None):
        """A description of the first out-of-range subscript, or None."""
        if self.entries is None:
            return None
        for d, (e, n) in enumerate(zip(self.entries, self.index_shape())):
            lo, hi = e[1], e[1]
            if e[0] == "axis":
                a, b = (0, self.shape[e[3]]) if rect is None else rect[e[3]]
                lo, hi = e[1] + a * e[2], e[1] + (b - 1) * e[2]
            if isinstance(lo, _C.Affine):
                continue  # a program id: checked by the compiler
            if lo < 0 or hi >= n:
                return f"dim {d} of '{self.base.name}' has size {n} but the subscript covers " \
                       f"{lo}..{hi}"
        for name, d, e in self.unit_axes:
            a, b = (0, self.shape[e[3]]) if rect is None else rect[e[3]]
            lo, hi = e[1] + a * e[2], e[1] + (b - 1) * e[2]
            if lo < 0 or hi >= 1:
                return f"dim {d} of the reshaped '{name}' has size 1 but the subscript covers " \
                       f"{lo}..{hi}"
        return None

    def resolve(self, rect=None):
        """The neuron view of the (rect-restricted) elements."""
        if self.entries is None:
            if rect is not None and any((lo, hi) != (0, n) for (lo, hi), n in
                                        zip(rect, self.shape)):
                error("mask", "a mask on a reshaped tensor is not supported; subscript it "
                      "with index grids first")
            return self.base
        bad = self.out_of_bounds(rect)
        if bad:
            error("index", f"{bad}; index grids may reach outside a tensor only where a mask= "
                  "excludes those indices")
        subs = []
        for e in self.entries:
            if e[0] == "fix":
                subs.append(_sub("scalar", e[1]))
            elif e[0] == "unit":
                subs.append(_sub("ds", e[1], 1))
            else:
                _, start, step, j = e
                lo, hi = (0, self.shape[j]) if rect is None else rect[j]
                first = start + lo * step
                if step == 1:
                    subs.append(_sub("ds", first, hi - lo))
                else:
                    subs.append(_sub("slice", first, first + step * (hi - lo - 1) + 1, step))
        return _C.index(self.base, subs)


class CombinedAxes(Exception):
    """A dim walked by several grid axes (grid_view splits it: split.py)."""


def _translate(shape, on_chip, keys, name, combined_ok=False):
    """(entries per tensor dim, result shape, the grid axis of each result dim, the grid's
    rank) of a grid subscript of a tensor of `shape`."""
    if any(k is Ellipsis for k in keys):
        error("index", "`...` cannot be combined with index grids; give one index per dim")
    if len(keys) > len(shape):
        error("index", f"{len(keys)} subscripts given for '{name}' of shape {list(shape)}")
    keys = list(keys)
    for n in shape[len(keys):]:
        if n != 1:
            error("index", f"index every dim of '{name}' (shape {list(shape)}) when using "
                  "index grids")
        keys.append(0)
    grids = [k for k in keys if isinstance(k, Grid)]
    S = broadcast_shapes([g.shape for g in grids])
    entries, owner = [], {}
    for d, k in enumerate(keys):
        if isinstance(k, slice):
            error("index", "slices and index grids cannot be mixed in one subscript; write the "
                  "slice as a grid (nl.arange) or use slices only")
        if is_scalar_index(k):
            if not isinstance(k, _C.Affine) and k < 0:
                k += shape[d]
            entries.append(["fix", k, None])
            continue
        if not isinstance(k, Grid):
            error("index", f"unsupported subscript {k!r} next to index grids (use grids, ints "
                  "and loop indices)")
        coef = k.coefs_in(S)
        varying = [j for j, c in enumerate(coef) if c != 0 and S[j] > 1]
        if len(varying) > 1 and combined_ok:
            raise CombinedAxes()
        if len(varying) > 1:
            error("index", f"the subscript of dim {d} of '{name}' combines grid axes {varying} "
                  "(like i2*F1 + i1); each subscript may walk one grid axis only, so free-axis "
                  "permutations are not supported: copy with one grid axis per dim")
        if not varying:
            units = [j for j, c in enumerate(coef) if c != 0]
            entries.append(["fix", k.const, units[0] if units else None])
            continue
        j = varying[0]
        if coef[j] < 0 and combined_ok:
            raise CombinedAxes()  # a small axis walked backwards: split.py fixes it per piece
        if coef[j] < 0:
            error("index", f"the subscript of dim {d} of '{name}' walks grid axis {j} with a "
                  "negative stride, which a view cannot express")
        if coef[j] != 1 and isinstance(k.const, _C.Affine) and not k.const.is_constant():
            error("index", f"the strided subscript of dim {d} of '{name}' starts at '{k.const}' "
                  "(a program id or runtime value); strided grids need a constant start")
        if j in owner:
            error("index", f"dims {owner[j]} and {d} of '{name}' both walk grid axis {j} (a "
                  "diagonal); only one subscript may use each grid axis")
        owner[j] = d
        entries.append(["axis", k.const, coef[j], j])
    walked = [e[3] for e in entries if e[0] == "axis"]  # grid axes in the tensor's dim order
    if walked != sorted(walked) and combined_ok:
        raise CombinedAxes()  # small axes out of order: split.py fixes them per piece
    if walked != sorted(walked):
        error("index", f"the grid axes walk the dims of '{name}' in another order (a transposed "
              "placement such as t[i_f, i_p]); grid axes must follow the tensor's dims in order")
    for j, n in enumerate(S):
        if j in owner or n > 1:
            continue  # a larger axis no subscript walks is dropped from the result, as in NKI
        # A size-1 grid axis: keep one scalar-indexed dim with size 1 for it, if one fits.
        before = max([owner[i] for i in owner if i < j and S[i] > 1], default=-1)
        after = min([owner[i] for i in owner if i > j and S[i] > 1], default=len(entries))
        cands = [d for d in range(before + 1, after) if entries[d][0] == "fix"]
        pick = [d for d, e in enumerate(entries) if e[0] == "fix" and e[2] == j] or cands
        if pick:
            entries[pick[0]] = ["unit", entries[pick[0]][1], j]
            owner[j] = pick[0]
    if on_chip and entries and entries[0][0] == "axis" and entries[0][2] != 1:
        error("index", f"the partition dim of '{name}' (an SBUF/PSUM tile) must be indexed with "
              "unit stride; only free dims take strided grids")
    # The result's dims: the grid axes the subscripts use, in the tensor's dim order (axes no
    # subscript uses are dropped, as NKI does, but size-1 ones fill the result up to 2 dims,
    # each before the next used axis).
    def key(j):
        if j in owner:
            return owner[j]
        return min([owner[i] for i in owner if i > j], default=len(entries)) - 0.5
    spare = [j for j, n in enumerate(S) if j not in owner and n == 1]
    used = list(owner) + spare[:max(0, 2 - len(owner))]
    axes = sorted(used, key=key)
    out = []
    for e in entries:
        if e[0] == "axis":
            out.append(("axis", e[1], e[2], axes.index(e[3])))
        else:
            out.append((e[0], e[1]))
    return out, tuple(S[j] for j in axes), axes, len(S)


def _register(view, axes, frame):
    _State.frames[id(view)] = (view, axes, frame)
    return view


def mask_rect(mask, shape, *operands):
    """rectangle() for an op over `shape`, in the grid frame of a grid-subscripted operand."""
    for x in operands:
        f = frame_of(x) if list(getattr(x, "shape", ())) == list(shape) else None
        if f is not None:
            return rectangle(mask, shape, *f)
    return rectangle(mask, shape)


def frame_of(x):
    """(grid axes of x's dims, grid rank) when x came from a grid subscript, else None."""
    if isinstance(x, GridView):
        return (x.axes, x.frame) if x.axes is not None else None
    hit = _State.frames.get(id(x))
    return hit[1:] if hit is not None and hit[0] is x else None


def _finish(v):
    """A neuron view when in range and of the result shape, else the GridView."""
    if v.out_of_bounds() is not None:
        return v
    r = v.resolve()
    if tuple(r.shape) == v.shape:
        return _register(r, v.axes, v.frame)
    if isinstance(v, ReshapedView):
        return v  # kept whole, so that a mask can still shrink it
    if v.base.buffer in ON_CHIP:
        error("index", f"this subscript of the tile '{v.base.name}' would give shape "
              f"{list(r.shape)} instead of {list(v.shape)}: on chip the partition dim must be "
              "walked by the grid's first axis")
    return GridView(r, None, v.shape, v.axes, v.frame)


def grid_view(t, keys):
    """t[keys] for grid keys."""
    try:
        entries, S, axes, frame = _translate(list(t.shape), t.buffer in ON_CHIP, keys, t.name,
                                             combined_ok=True)
    except CombinedAxes:
        from .split import SplitView
        keys = list(keys) + [0] * (len(t.shape) - len(keys))
        grids = [k for k in keys if isinstance(k, Grid)]
        return SplitView(t, keys, broadcast_shapes([g.shape for g in grids]))
    return _finish(GridView(t, entries, S, axes, frame))


class Reshaped:
    """An HBM tensor viewed with another shape (legacy tensor.reshape); subscripts are
    translated onto the base tensor. Adding or removing size-1 dims keeps every subscript;
    merging or splitting dims takes the subscripts reshape.py can map to one box of the base."""

    def __init__(self, base, shape):
        self.base, self.shape = base, new_shape(base.shape, shape)
        self.merges = [n for n in self.shape if n != 1] != [n for n in base.shape if n != 1]

    dtype = property(lambda self: self.base.dtype)
    buffer = property(lambda self: self.base.buffer)
    name = property(lambda self: self.base.name)
    ndim = property(lambda self: len(self.shape))

    def whole(self):
        return GridView(self.base, None, self.shape)

    def reshape(self, shape, *more):
        shape = tuple(shape) if not more else (shape,) + more
        return Reshaped(self.base, shape) if list(shape) != list(self.base.shape) else self.base

    def __getitem__(self, key):
        keys = key if isinstance(key, tuple) else (key,)
        if len(keys) == 1 and keys[0] is Ellipsis:
            return self
        from . import dynamic  # it imports this module
        # a one-element tile is an offset read at run time (a register), as on other tensors
        keys = tuple(dynamic.register_of(dynamic._tile(k)) if dynamic._tile(k) is not None and
                     all(n == 1 for n in dynamic._tile(k).shape) else k for k in keys)
        if dynamic.is_runtime_key(keys):
            return dynamic.reshaped_rows(self, keys)
        if not any(isinstance(k, (Grid, slice, _nl.ds)) for k in keys):
            if len(keys) < len(self.shape) and all(is_scalar_index(k) for k in keys):
                return Prefixed(self, keys)  # weight.reshape((N, D, H))[j]: subscripted later
            error("index", f"subscript the reshaped tensor '{self.name}' with index grids, "
                  "slices or nl.ds (its result must keep at least one dim)")
        if not any(isinstance(k, Grid) for k in keys):  # basic subscripts: slices as grids
            rank = sum(isinstance(k, (slice, _nl.ds)) for k in keys)
            conv, axis = [], 0
            for d, k in enumerate(keys):
                if isinstance(k, (slice, _nl.ds)):
                    if isinstance(k, _nl.ds):  # nl.ds(start, size): start may be symbolic
                        g = Grid([int(k.size)], [1], k.start)
                    else:
                        start, stop, step = k.indices(self.shape[d])
                        g = Grid([max(0, -(-(stop - start) // step))], [step], start)
                    conv.append(g[tuple(slice(None) if i == axis else None
                                        for i in range(rank))])
                    axis += 1
                else:
                    conv.append(k)
            keys = tuple(conv)
        entries, S, axes, frame = _translate(self.shape, False, keys, self.name)
        if self.merges:
            return _finish(ReshapedView(self, entries, S, axes, frame))
        kept = [e for e, n in zip(entries, self.shape) if n != 1]
        units = []
        for d, (e, n) in enumerate(zip(entries, self.shape)):
            # A program id or runtime offset in a size-1 dim (NxDI's query tiles when a
            # sequence is one tile) can only be 0 in range: the dim is dropped either way.
            symbolic = isinstance(e[1], _C.Affine) and not e[1].is_constant()
            if n == 1 and e[0] == "axis" and S[e[3]] > 1:
                # A grid axis longer than the dim (vLLM's block tables when they are one
                # tile): only a mask keeping that axis at 0 makes it fit (checked where used).
                units.append((self.name, d, e))
            elif n == 1 and not symbolic and e[1] != 0:
                error("index", f"the subscript of a size-1 dim of '{self.name}' is out of range")
        base_entries, it = [], iter(kept)
        for n in self.base.shape:
            base_entries.append(next(it) if n != 1 else ("fix", 0))
        view = GridView(self.base, base_entries, S, axes, frame)
        view.unit_axes = tuple(units)
        return _finish(view)


class Prefixed:
    """reshaped[j] with ints (or loop indices) for leading dims only (NxD's output projection
    loads `weight.reshape((N, D, H))[j][i_p, i_h]`): the remaining dims, whose subscripts are
    those of the reshaped tensor with the leading indices put in front."""

    def __init__(self, reshaped, keys):
        self.reshaped, self.keys = reshaped, tuple(keys)
        self.shape = tuple(reshaped.shape[len(self.keys):])

    dtype = property(lambda self: self.reshaped.dtype)
    buffer = property(lambda self: self.reshaped.buffer)
    name = property(lambda self: self.reshaped.name)
    ndim = property(lambda self: len(self.shape))

    def whole(self):
        return self.reshaped[self.keys + (slice(None),) * len(self.shape)]

    def __getitem__(self, key):
        keys = key if isinstance(key, tuple) else (key,)
        if len(keys) == 1 and keys[0] is Ellipsis:
            return self
        return self.reshaped[self.keys + keys]


class ReshapedView(GridView):
    """A grid subscript of a tensor reshaped across dims: entries index the reshaped shape;
    resolve() gives the base tensor's view of the same elements in the same order (its shape
    is the base's, so loads and stores move it by DMA)."""

    def __init__(self, reshaped, entries, shape, axes=None, frame=None):
        super().__init__(reshaped.base, entries, shape, axes, frame)
        self.view_shape = reshaped.shape

    def index_shape(self):
        return self.view_shape

    def resolve(self, rect=None):
        bad = self.out_of_bounds(rect)
        if bad:
            error("index", f"{bad}; index grids may reach outside a tensor only where a mask= "
                  "excludes those indices")
        picks = []
        for e in self.entries:
            if e[0] != "axis":
                picks.append((e[1], 1, 1))
                continue
            _, start, step, j = e
            lo, hi = (0, self.shape[j]) if rect is None else rect[j]
            picks.append((start + lo * step, hi - lo, step))
        try:
            return _C.index(self.base, base_subscripts(list(self.base.shape), self.view_shape,
                                                       picks, self.base.name, _sub))
        except NotABox as e:
            return storage_view(self.base, self.view_shape, picks, self.base.name, str(e))


class MaskedOperand:
    """x[mask]: a matmul operand with its own mask (NKI's operand masking)."""

    def __init__(self, tile, rect):
        self.tile, self.rect = tile, rect

    shape = property(lambda self: self.tile.shape)


def is_view(x):
    return isinstance(x, (_C.Tensor, GridView, Reshaped, Prefixed))


def as_gridview(x):
    return x.whole() if isinstance(x, (Reshaped, Prefixed)) else x


def restrict(x, rect, shape):
    """Operand x (tensor, GridView or scalar) restricted to rect of the op's index space
    `shape` (x may broadcast: its size-1 dims stay whole)."""
    if rect is None or not is_view(x):
        return x
    x = as_gridview(x)
    xs = list(x.shape)
    if len(xs) != len(shape):
        error("mask", f"operand of shape {xs} does not match the masked index space "
              f"{list(shape)}")
    rect = [(0, 1) if n == 1 else r for n, r in zip(xs, rect)]
    return x.resolve(rect) if isinstance(x, GridView) else index_rect(x, rect)


def concrete(x):
    """A neuron tensor for x (a GridView resolved whole)."""
    x = as_gridview(x)
    return x.resolve() if isinstance(x, GridView) else x


def _arith(name):
    # A pending view in an expression (`3 * t[i_p, i_h + i_x]`): its elements as a tile.
    return lambda self, *args: getattr(concrete(self), name)(*args)


for _name in ("add radd sub rsub mul rmul truediv rtruediv neg pow lt le gt ge").split():
    setattr(GridView, f"__{_name}__", _arith(f"__{_name}__"))
