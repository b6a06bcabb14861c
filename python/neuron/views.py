"""NKI's tensor view methods (NKI_API.md 6.3) on traced tensors: t.slice, t.select,
t.squeeze_dim, t.broadcast, the reshapes and the inspection attributes (size, strides, offset,
get_pattern(), is_contiguous()). Eager tensors get the same methods in eager_views.py, reshaped
HBM tensors (reshaped.py) here too.

A neuron view (ir.hpp Access) is one slice (start, size, step, kept) per storage dim, its dims in
storage order or another (a transposing view), where the storage may be seen with another
row-major shape of the same elements. Views
that keep that form are built on the subscript machinery (language._getitem), so a write
through t.slice(...) reaches the storage. reshape, reshape_dim, expand_dim and flatten_dims of
an HBM tensor are Reshaped views (reshaped.py: subscripts map to views of the base, DMAs move
them); on chip dropping size-1 free dims is a subscript and regrouping a dense run of each
partition's free elements is an .ap() view of the storage seen with the new shape. permute of
the other dims is a transposing .ap() view, and rearrange (split, permute, merge) the .ap() of
the regrouped walk when each merged group is one arithmetic sequence in storage. Views that
move a tile's partition dim, and on-chip reshapes that move elements between partitions or
regroup a non-dense view, have no such form, and a copy in their place would silently drop
writes: they are refused (rule unsupported) unless the call changes nothing. broadcast repeats
a size-1 dim with step 0 (_C.broadcast_view; eager chains hold a BroadcastKey), a view for
reading (docs/nki-compat.md)."""
import math

from . import _C
from . import reshaped as _reshaped_mod
from . import unroll as _unroll
from ._span import user_span
from .access import IndirectView, is_int
from .errors import user_error

_ON_CHIP = (_C.Memory.sbuf, _C.Memory.psum)


def _dim(t, dim, method, span):
    """dim as a non-negative axis of t (negative counts from the end, as in NumPy)."""
    if not is_int(dim):
        raise TypeError(f"{method}: dim must be an int, got {dim!r} ({type(dim).__name__})")
    n = len(t.shape)
    d = int(dim) + n if int(dim) < 0 else int(dim)
    if not 0 <= d < n:
        user_error("index", f"{method}: dim {dim} is not a dim of '{t.name}' of shape "
                   f"{list(t.shape)} ({n} dims)", span)
    return d


def _whole(dim):
    return (slice(None),) * dim


# ---- views on the subscript machinery ---------------------------------------------------------
# Each builds the subscript key of the view; `index` applies it (t[key] for traced tensors, the
# eager subscript for eager ones), so bounds and placement rules are the subscript's own.

def slice_key(t, dim, start, end, step, span):
    d = _dim(t, dim, "slice", span)
    if step is not None and not is_int(step):
        raise TypeError(f"slice: step must be an int, got {step!r}")
    return _whole(d) + (slice(start, end, None if step in (None, 1) else int(step)),)


def select_key(t, dim, index, span):
    d = _dim(t, dim, "select", span)
    if d == 0 and t.buffer in _ON_CHIP:
        user_error("index", f"select(0, {index}) of on-chip '{t.name}': dim 0 is the partition "
                   "dim and cannot be selected away (NKI rule); slice it instead: "
                   f"t.slice(0, i, i + 1)", span)
    if hasattr(index, "shape") and hasattr(index, "buffer"):
        index = runtime_index(index, f"select(dim={dim}, index=<tensor '{index.name}'>)", span)
    return _whole(d) + (index,)


def runtime_index(index, call, span):
    """A runtime scalar index (a one-element tensor, NKI's dynamic select) as a register read
    from it where the view is made (nisa.register_load: floats round to an int)."""
    if math.prod(index.shape) != 1:
        user_error("index", f"{call}: a tensor index must hold one element (a [1, 1] tile), "
                   f"'{index.name}' has shape {list(index.shape)}", span)
    from . import isa as _isa  # isa imports views through language: imported on first use
    r = _isa.register_alloc()
    _isa.register_load(r, index)
    return r


def squeeze_key(t, dim, span):
    d = _dim(t, dim, "squeeze_dim", span)
    if t.shape[d] != 1:
        user_error("index", f"squeeze_dim({dim}) of '{t.name}' of shape {list(t.shape)}: dim "
                   f"{d} has size {t.shape[d]}, not 1", span)
    if d == 0 and t.buffer in _ON_CHIP:
        user_error("index", f"squeeze_dim(0) of on-chip '{t.name}': dim 0 is the partition dim "
                   "and cannot be removed (NKI rule)", span)
    return _whole(d) + (0,)


def check_squeezed(t, view, dim, span):
    """A scalar subscript keeps a dim where dropping it would leave fewer than 2 dims on chip
    (1 on HBM): squeeze_dim must not silently keep it."""
    if len(view.shape) != len(t.shape) - 1:
        least = "on-chip tiles keep at least 2" if t.buffer in _ON_CHIP else \
            "HBM tensors keep at least 1"
        user_error("index", f"squeeze_dim({dim}) of '{t.name}' of shape {list(t.shape)} would "
                   f"leave {len(t.shape) - 1} dims; {least}", span)
    return view


def broadcast_check(t, dim, size, span):
    """t.broadcast(dim, size): the dim (normalized) to repeat with step 0, or None when it
    already has that size (t itself is the view)."""
    d = _dim(t, dim, "broadcast", span)
    if not is_int(size) or int(size) < 1:
        raise TypeError(f"broadcast: size must be a positive int, got {size!r}")
    if t.shape[d] == int(size):
        return None
    if t.shape[d] != 1:
        user_error("index", f"broadcast({dim}, {size}) of '{t.name}' of shape {list(t.shape)}: "
                   f"only a size-1 dim broadcasts, dim {d} has size {t.shape[d]}", span)
    if d == 0 and t.buffer in _ON_CHIP:
        user_error("index", f"broadcast(0, {size}) of on-chip '{t.name}': the partition dim "
                   "cannot be broadcast (NKI rule)", span)
    return d


# ---- refused: views that reorder, split or merge storage dims ---------------------------------

_WHY = ("neuron's views walk each storage dim once (one slice per dim, the partition dim first "
        "on chip), so a view cannot {what}, and a copy would not be a view (writes through it "
        "would be lost)")


def refuse(method, what, instead, span):
    user_error("unsupported", f"t.{method} is not supported: " + _WHY.format(what=what) +
               f"; {instead}", span)


def _identity_perm(dims, n):
    try:
        return [int(d) % n for d in dims] == list(range(n))
    except (TypeError, ValueError):
        return False


def _resolved(shape, total):
    """shape with one -1 resolved against total elements; None if it cannot be."""
    try:
        shape = [int(s) for s in shape]
    except (TypeError, ValueError):
        return None
    if shape.count(-1) == 1:
        rest = math.prod(s for s in shape if s != -1)
        if rest <= 0 or total % rest:
            return None
        shape[shape.index(-1)] = total // rest
    return shape


def permute(self, dims):
    """The view with its dims in order `dims`: the same walk with its entries reordered (a
    transposing .ap() view, ir.hpp Access::order). On chip the partition dim stays first."""
    span = user_span()
    n = len(self.shape)
    if len(dims) == n and _identity_perm(dims, n):
        return self
    try:
        perm = [int(d) + n if int(d) < 0 else int(d) for d in dims]
    except (TypeError, ValueError):
        perm = None
    if perm is None or sorted(perm) != list(range(n)):
        user_error("index", f"permute({list(dims)}) of '{self.name}' of shape {list(self.shape)}: "
                   f"dims must list each of 0..{n - 1} once", span)
    if self.buffer in _ON_CHIP and perm[0] != 0:
        refuse(f"permute({list(dims)})", "move the partition dim",
               "transpose on chip with nisa.nc_transpose / nl.transpose, or while moving with "
               "nisa.dma_transpose (into a tile of the permuted shape)", span)
    walk = _reshaped_mod.walk_of(self)
    return self.ap([list(walk[d]) for d in perm])


def _reshaped(self, shape, call, what, instead, span):
    """self seen with `shape`: itself, a view, an HBM Reshaped (reshaped.py), or refused."""
    new = _reshaped_mod.reshape(self, shape, span)
    if new is None:  # on chip: dropping size-1 free dims is a subscript
        new = _reshaped_mod.squeeze_on_chip(self, _reshaped_mod.new_shape(self.shape, shape))
    if new is None:  # a dense run of free elements per partition regrouped: an .ap() view
        new = _reshaped_mod.regroup_on_chip(self, list(_reshaped_mod.new_shape(self.shape,
                                                                               shape)))
    if new is None:
        refuse(call, what, f"{instead} (HBM tensors reshape as views: reshape the kernel "
               "argument or shared_hbm tensor, then load tiles from it)", span)
    return new


def expand_dim(self, dim):
    span = user_span()
    n = len(self.shape)
    if not is_int(dim) or not -n - 1 <= int(dim) <= n:
        user_error("index", f"expand_dim({dim}) of '{self.name}' of shape {list(self.shape)}: "
                   f"dim must be an int in {-n - 1}..{n}", span)
    d = int(dim) + n + 1 if int(dim) < 0 else int(dim)
    shape = list(self.shape[:d]) + [1] + list(self.shape[d:])
    return _reshaped(self, shape, f"expand_dim({dim})", "gain a dim its storage does not have",
                     "allocate the tile with the extra size-1 dim (nl.ndarray) and use t[...] "
                     "on it, or give the instruction the view as it is", span)


def reshape_dim(self, dim, shape):
    span = user_span()
    d = _dim(self, dim, "reshape_dim", span)
    parts = list(shape) if isinstance(shape, (list, tuple)) else [shape]
    new = _resolved(parts, self.shape[d])
    if new is None or math.prod(new) != self.shape[d]:
        user_error("shape", f"reshape_dim({dim}, {parts}) of '{self.name}' of shape "
                   f"{list(self.shape)}: {parts} does not have the {self.shape[d]} elements of "
                   f"dim {d}", span)
    if new == [self.shape[d]]:
        return self
    return _reshaped(self, list(self.shape[:d]) + new + list(self.shape[d + 1:]),
                     f"reshape_dim({dim}, {parts})", "split one dim into several",
                     "allocate the tensor with the split shape, or copy into a tile of that "
                     "shape (nisa.tensor_copy / nisa.dma_copy)", span)


def flatten_dims(self, start, end):
    """Merges dims start..end (both included) into one."""
    span = user_span()
    s, e = _dim(self, start, "flatten_dims", span), _dim(self, end, "flatten_dims", span)
    if s > e:
        user_error("index", f"flatten_dims({start}, {end}) of '{self.name}': start dim {s} is "
                   f"after end dim {e}", span)
    if s == e:
        return self
    shape = list(self.shape[:s]) + [math.prod(self.shape[s:e + 1])] + list(self.shape[e + 1:])
    return _reshaped(self, shape, f"flatten_dims({start}, {end})", "merge dims",
                     "allocate the tensor with the merged shape, or copy into a tile of that "
                     "shape (nisa.tensor_copy / nisa.dma_copy)", span)


def reshape_unchanged(t, shape):
    return _resolved(shape, math.prod(t.shape)) == list(t.shape)


def reshape(self, shape, *more):
    span = user_span()
    shape = (shape,) + more if more or is_int(shape) else tuple(shape)
    if reshape_unchanged(self, shape):
        return self
    return _reshaped(self, shape, f"reshape({list(shape)})", "split or merge dims",
                     "copy into a tile of that shape (nisa.tensor_copy / nisa.dma_copy)", span)


def _pattern_dims(pattern, arg, call, span):
    """An einops-style pattern as its dims, each a list of names: 'b (h w) c' or
    ('b', ('h', 'w'), 'c') -> [['b'], ['h', 'w'], ['c']]."""
    def bad(why):
        user_error("index", f"{call}: {arg} {why}", span)
    if isinstance(pattern, str):
        dims, group = [], None
        for tok in pattern.replace("(", " ( ").replace(")", " ) ").split():
            if tok == "(":
                if group is not None:
                    bad("nests parentheses")
                group = []
            elif tok == ")":
                if not group:
                    bad("closes a group it did not open, or an empty one")
                dims.append(group)
                group = None
            elif group is not None:
                group.append(tok)
            else:
                dims.append([tok])
        if group is not None:
            bad("leaves a parenthesis open")
        return dims
    if not isinstance(pattern, (tuple, list)):
        bad(f"must be a string such as 'b (h w)' or a tuple such as ('b', ('h', 'w')), got "
            f"{pattern!r}")
    dims = []
    for entry in pattern:
        group = [entry] if isinstance(entry, str) else list(entry) \
            if isinstance(entry, (tuple, list)) else None
        if not group or not all(isinstance(n, str) for n in group):
            bad(f"entry {entry!r} is neither a dim name nor a tuple of names")
        dims.append(group)
    return dims


def rearrange(self, src_pattern, dst_pattern, fixed_sizes=None):
    """einops-style: the dims of src_pattern (a group splits its dim, sizes from fixed_sizes,
    one per group inferred), reordered and merged as dst_pattern says; NKI's reshape_dim,
    permute and flatten_dims in one call. A view (the same walk regrouped, as .ap()) when
    every merged group is one arithmetic sequence in storage; on chip the partition dim stays
    first and whole. Otherwise refused: a copy would drop writes through it."""
    span = user_span()
    call = f"rearrange({src_pattern!r}, {dst_pattern!r})"
    src = _pattern_dims(src_pattern, "src_pattern", call, span)
    dst = _pattern_dims(dst_pattern, "dst_pattern", call, span)
    names = [n for g in src for n in g]
    if len(src) != len(self.shape):
        user_error("shape", f"{call} of '{self.name}' of shape {list(self.shape)}: src_pattern "
                   f"names {len(src)} dims, the tensor has {len(self.shape)}", span)
    if len(set(names)) != len(names) or sorted(names) != sorted(n for g in dst for n in g):
        user_error("index", f"{call}: each name must appear once in src_pattern and once in "
                   "dst_pattern", span)
    sizes = {}
    for key, value in dict(fixed_sizes or {}).items():
        if key not in names or not is_int(value) or int(value) <= 0:
            user_error("shape", f"{call}: fixed_sizes[{key!r}]={value!r} must be a positive "
                       "int for a name of src_pattern", span)
        sizes[key] = int(value)
    for group, size in zip(src, self.shape):
        unknown = [n for n in group if n not in sizes]
        known = math.prod(sizes[n] for n in group if n in sizes)
        if len(unknown) > 1 or (unknown and size % known) or (not unknown and known != size):
            user_error("shape", f"{call} of '{self.name}' of shape {list(self.shape)}: group "
                       f"{group} cannot split a dim of {size} (give fixed_sizes for all but "
                       "one name of a group, whose sizes divide the dim)", span)
        if unknown:
            sizes[unknown[0]] = size // known
    if src == dst:
        return self
    if self.buffer in _ON_CHIP and (len(src[0]) != 1 or dst[0] != src[0]):
        refuse(call, "move, split or merge the partition dim",
               "transpose on chip with nisa.nc_transpose / nl.transpose, or while moving with "
               "nisa.dma_transpose (into a tile of the rearranged shape)", span)
    entry = {}  # name -> [stride, count] of the split walk
    for group, (stride, _) in zip(src, _reshaped_mod.walk_of(self)):
        for n in reversed(group):
            entry[n] = [stride, sizes[n]]
            stride *= sizes[n]
    walk = []
    for group in dst:
        parts = [entry[n] for n in group if entry[n][1] != 1] or [entry[group[-1]]]
        for (outer, _), (inner, count) in zip(parts, parts[1:]):
            if outer != inner * count:
                refuse(call, f"merge the dims {group}, which are not one arithmetic sequence "
                       "in storage", "merge dims that are adjacent in storage, or copy into a "
                       "tile of the rearranged shape (nisa.tensor_copy / nisa.dma_copy)", span)
        walk.append([parts[-1][0], math.prod(c for _, c in parts)])
    return self.ap(walk)


def view(self, dtype):
    """t.view(dtype) / t.reinterpret_cast(dtype): the same bytes as `dtype` elements, the last
    dim scaled by the size ratio (NKI); the last dim must be contiguous. Of an HBM tensor: a
    reinterpreting view (access.py BitcastView) that DMA copies take; of a tile: a view every
    instruction takes (ir.hpp Access::as_dtype)."""
    span = user_span()
    from .dtypes import to_dtype
    d = to_dtype(dtype)
    if d == self.dtype:
        return self
    if not isinstance(self, _reshaped_mod.Reshaped):
        pat, off = [list(p) for p in self.get_pattern()], self.offset
        sd, sb = d.itemsize, self.dtype.itemsize
        last_s, last_c = pat[-1]
        ok = last_s == 1 and isinstance(off, int) and (
            sd <= sb or (last_c * sb % sd == 0 and off * sb % sd == 0 and
                         all(s * sb % sd == 0 for s, _ in pat[:-1])))
        if not ok:
            user_error("access-pattern", f"view({d.name_}) of '{self.name}' (pattern {pat}, "
                       f"offset {off}): the last dim must be contiguous and hold whole "
                       f"{d.name_} elements", span)
        # The same walk counted in elements of d (access.ap converts it back to bytes).
        dpat = [[s * sb // sd, c] for s, c in pat[:-1]] + [[1, last_c * sb // sd]]
        return self.ap(dpat, offset=off * sb // sd, dtype=d)
    refuse(f"view({to_dtype(dtype).name_})", "reinterpret the bytes of a reshaped view as "
           "another dtype", "call .view(dtype) on the tensor before reshaping it", span)


# ---- inspection -------------------------------------------------------------------------------

def row_major(shape):
    r = [1] * len(shape)
    for k in range(len(shape) - 1, 0, -1):
        r[k - 1] = r[k] * shape[k]
    return r


def layout(dims, storage, order=(), origin=0, partition=None):
    """(pattern, offset) of a view given per storage dim (start, size, step, kept): pattern
    [[stride, count], ...] over its kept dims (in `order`, storage dims in view order, when the
    view transposes), offset its first element in storage elements. The storage starts at
    element `origin` (per partition on chip, where a partition is `partition` elements)."""
    r = row_major(storage)
    if partition is not None:
        r[0] = partition
    offset = origin + sum(start * rk for (start, _, _, _), rk in zip(dims, r))
    view = list(order) if order else [d for d, x in enumerate(dims) if x[3]]
    pattern = [[dims[d][2] * r[d], dims[d][1]] for d in view]
    return pattern, offset


def contiguous(pattern):
    """Do the view's elements fill one dense row-major range of its storage? (NumPy's
    C-contiguity: dims of size 1 may have any stride.)"""
    expected = 1
    for stride, count in reversed(pattern):
        if count == 1:
            continue
        if stride != expected:
            return False
        expected *= count
    return True


def _view_dims(t, span):
    try:
        return _C.view_dims(t)
    except ValueError as e:
        start = str(e).split("'")[1] if "'" in str(e) else str(e)
        _unroll.need_value(_Expr(start))  # a rolled loop's index: unroll that loop
        user_error("index", f"the view '{t.name}' starts at '{start}', which has no value when "
                   "tracing (a program id, register or runtime loop index), so its offset and "
                   "pattern are not numbers (the view itself works in instructions)", span)


class _Expr:
    """An index expression known by its text (unroll.need_value reads the names in it)."""

    def __init__(self, text):
        self.text = text

    def __str__(self):
        return self.text


def traced_layout(t, span):
    buffer = _C.storage_shape(t)
    return layout(_view_dims(t, span), list(_C.view_storage(t)) or buffer, _C.view_order(t),
                  _C.view_origin(t), math.prod(buffer[1:]) if t.buffer in _ON_CHIP else None)


def _slice(self, dim, start, end=None, step=1):
    span = user_span()
    return self[slice_key(self, dim, start, end, step, span)]


def _select(self, dim, index):
    span = user_span()
    return self[select_key(self, dim, index, span)]


def _squeeze_dim(self, dim):
    span = user_span()
    return check_squeezed(self, self[squeeze_key(self, dim, span)], dim, span)


def _broadcast(self, dim, size):
    span = user_span()
    d = broadcast_check(self, dim, size, span)
    if d is None:
        return self
    if isinstance(self, _C.Tensor):
        return _C.broadcast_view(self, d, int(size), span)
    return self._broadcast_view(d, int(size))  # EagerTensor (eager.py)


def vector_select(self, dim, offsets):
    """Rows of an HBM tensor chosen at run time: partition p of the result is row
    offsets[p, 0] of dim 0 (offsets a [P, 1] SBUF integer tile), as t.ap(...,
    vector_offset=offsets) gives; a DMA operand (nl.load / nl.store / nisa.dma_copy)."""
    span = user_span()
    d = _dim(self, dim, "vector_select", span)
    if d != 0:
        user_error("unsupported", f"vector_select({dim}, ...) of '{self.name}': only dim 0 rows "
                   "are selected at run time (NKI rule)", span)
    if isinstance(self, _reshaped_mod.Reshaped):
        user_error("unsupported", f"vector_select of the reshaped tensor '{self.name}' is not "
                   "supported; select rows of the tensor before reshaping it", span)
    if self.buffer in _ON_CHIP:
        user_error("indirect-dma", f"vector_select selects rows of an HBM tensor; '{self.name}' "
                   f"is in {self.buffer.name}", span)
    if not hasattr(offsets, "shape") or not hasattr(offsets, "buffer"):
        raise TypeError(f"vector_select: offsets must be a [P, 1] SBUF index tile, got "
                        f"{offsets!r}")
    return IndirectView(self, offsets)


def indirect(self, index, num_elem=None):
    """NeuronCore-v4 tensor indirection: the [P, num_elem] columns of this on-chip tile chosen
    at run time by the SBUF index tile, as an operand of the instructions NKI documents with
    it (gather when read, scatter as the destination); indirection.py has the rule."""
    from . import indirection
    return indirection.make(self, index, num_elem)


def attach(cls, layout_of):
    """The view methods and attributes on a tensor class (traced or eager); layout_of(t, span)
    gives a view's (pattern, offset)."""
    def get_pattern(self):
        """The view as .ap() takes it: [[stride, count], ...] over its dims, in storage
        elements (t.ap(t.get_pattern(), offset=t.offset) is the same view)."""
        return layout_of(self, user_span())[0]

    def is_contiguous(self):
        """Do the view's elements fill one dense row-major range of its storage?"""
        return contiguous(layout_of(self, user_span())[0])

    cls.slice, cls.select, cls.squeeze_dim, cls.broadcast = \
        _slice, _select, _squeeze_dim, _broadcast
    cls.permute, cls.expand_dim, cls.reshape_dim = permute, expand_dim, reshape_dim
    cls.flatten_dims, cls.reshape, cls.rearrange = flatten_dims, reshape, rearrange
    cls.view = cls.reinterpret_cast = view
    cls.vector_select = vector_select
    cls.indirect = indirect
    # NKI's indirect views: rows chosen by an index tile (IndirectView, TensorIndirection), and
    # views that start at a register (select with an index tile, .ap(scalar_offset=))
    cls.is_indirect = lambda self: isinstance(self, _C.Tensor) and _C.starts_at_register(self)
    cls.get_pattern, cls.is_contiguous = get_pattern, is_contiguous
    cls.strides = property(lambda self: tuple(s for s, _ in layout_of(self, user_span())[0]))
    cls.offset = property(lambda self: layout_of(self, user_span())[1])
    cls.size = property(lambda self: math.prod(self.shape))


def reshaped_layout(r, span):
    """A Reshaped's (pattern, offset): row-major over its shape from its base's first element,
    which holds when the base view is contiguous."""
    if not r.base.is_contiguous():
        user_error("unsupported", f"'{r.name}' reshaped to {list(r.shape)} is a reshape of a "
                   "view that is not contiguous, so it has no single stride per dim", span)
    return [[s, n] for s, n in zip(row_major(r.shape), r.shape)], r.base.offset


def _no_broadcast(self, dim, size):
    user_error("unsupported", f"broadcast of the reshaped tensor '{self.name}' is not "
               "supported; broadcast the tile it is loaded into", user_span())


attach(_C.Tensor, traced_layout)
attach(_reshaped_mod.Reshaped, reshaped_layout)
_reshaped_mod.Reshaped._broadcast_view = _no_broadcast
