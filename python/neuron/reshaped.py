"""The current API's reshapes of an HBM tensor (NKI_API.md 6.3): `t.reshape(shape)`,
`t.reshape_dim(dim, shape)`, `t.expand_dim(dim)` and `t.flatten_dims(start, end)` of a kernel
argument or an `nl.ndarray(..., buffer=nl.shared_hbm)`, traced and eager.

A neuron view is one slice per storage dim (ir.hpp Access), so a reshape that merges or splits
dims, or adds a size-1 dim, is not one. It is a Reshaped: the base view and the new shape, whose
elements are the base's in the same row-major order. Its subscripts map to a view of the base
(reshape.py, shared with the legacy layer): a plain neuron view when the shapes agree up to
size-1 dims (then every instruction takes it), else again a Reshaped. A Reshaped is a DMA
operand (nl.load, nl.store, nisa.dma_copy move the base view, whose shape differs from the
tile's but whose element order is the same), for reads and writes: nothing is copied.
`.ap(...)` of a whole reshaped tensor is the tensor's own .ap() (a pattern walks storage
elements, which a reshape does not move).

Reshapes of SBUF/PSUM tiles that only drop size-1 free dims are subscripts (t[:, 0, :]); those
that keep the partitions and regroup a dense run of free elements are .ap() views
(regroup_on_chip); the others stay refused (views.py)."""
import math

import numpy as np

from . import _C
from ._span import user_span
from .dtypes import to_dtype
from .errors import user_error
from .reshape import NotABox, base_subscripts, new_shape, storage_view, symbolic

_ON_CHIP = (_C.Memory.sbuf, _C.Memory.psum)


class Reshaped:
    """An HBM view (`base`, a traced or eager tensor) seen with another shape; see the module
    doc. The view methods and inspection attributes are those of tensors (attach below)."""

    def __init__(self, base, shape):
        self.base, self._shape = base, tuple(int(n) for n in shape)

    shape = property(lambda self: self._shape)
    ndim = property(lambda self: len(self._shape))
    dtype = property(lambda self: self.base.dtype)
    buffer = property(lambda self: self.base.buffer)
    name = property(lambda self: self.base.name)

    def __repr__(self):
        return f"<nl tensor {self.name} {list(self._shape)} reshaped from {self.base!r}>"

    def __getitem__(self, key):
        return subscript(self, key, user_span())

    def __setitem__(self, key, value):
        from . import language
        if not hasattr(value, "shape"):
            user_error("unsupported", f"assigning a number to a subscript of the reshaped "
                       f"tensor '{self.name}' is not supported; store a tile (nl.store)",
                       user_span())
        language.store(self[key], value)

    def ap(self, pattern, offset=None, scalar_offset=None, vector_offset=None, indirect_dim=0,
           dtype=None):
        return ap(self, pattern, offset, scalar_offset, vector_offset, indirect_dim, dtype)

    def is_indirect(self):
        return False


def is_reshaped(x):
    return isinstance(x, Reshaped)


# ---- subscripts -------------------------------------------------------------------------------

def _is_index(v):
    return isinstance(v, (int, np.integer, _C.Affine)) and not isinstance(v, (bool, np.bool_))


def _known(v):
    """An int start (not a symbol: comparing an eager program id is refused)."""
    return isinstance(v, (int, np.integer)) and symbolic(v) is None


def _value(v):
    """An index as an int when it has one at trace time (eager: a rolled loop's index too, as
    the compiled kernel unrolls that loop), else as given."""
    if isinstance(v, _C.Affine):
        return int(v.constant) if v.is_constant() else v
    sym = getattr(v, "_sym", None)
    if sym is not None:
        from .eager_values import has_value
        return int(v) if has_value(sym) else v
    return int(v)


def _picks(t, key, span):
    """(start, size, step, kept) per dim of t for the subscript key, as NKI reads it on HBM:
    ints drop the dim (the result keeps at least one), slices and nl.ds keep it."""
    from .language import _expand_ellipsis, ds
    shape, name = list(t.shape), t.name
    keys = _expand_ellipsis(key if isinstance(key, tuple) else (key,), len(shape), span)
    if len(keys) > len(shape):
        user_error("index", f"{len(keys)} subscripts given for '{name}' of shape {shape}", span)
    keys = tuple(keys) + (slice(None),) * (len(shape) - len(keys))
    out = []
    for d, (k, n) in enumerate(zip(keys, shape)):
        if isinstance(k, ds):
            pick = (_value(k.start), int(k.size), 1, True)
        elif isinstance(k, slice):
            pick = _slice_pick(k, n, span)
        elif _is_index(k):
            v = _value(k)
            pick = (v + n if _known(v) and v < 0 else v, 1, 1, False)
        else:
            user_error("index", f"unsupported subscript {k!r} of type {type(k).__name__} (use "
                       "ints, loop indices, slices or nl.ds)", span)
        start, size, step, _ = pick
        if _known(start) and (start < 0 or size < 1 or start + step * (size - 1) >= n):
            user_error("index", f"dim {d} of '{name}' (reshaped to {shape}) has size {n}; "
                       f"subscript covers {start}..{start + step * (size - 1)} which is out of "
                       "range", span)
        out.append(pick)
    if not any(kept for *_, kept in out):  # HBM subscripts keep at least one dim
        out[-1] = out[-1][:3] + (True,)
    return out


def _slice_pick(k, n, span):
    start, stop = _value(k.start) if k.start is not None else None, \
        _value(k.stop) if k.stop is not None else None
    if symbolic(start) is not None or symbolic(stop) is not None:
        if start is None or stop is None or k.step not in (None, 1):
            user_error("index", "a slice with loop indices needs a start and a stop and no "
                       "step (t[i*128:(i+1)*128]); use nl.ds(start, size)", span)
        width = stop - start
        width = getattr(width, "_sym", width)
        if isinstance(width, _C.Affine) and not width.is_constant():
            user_error("index", f"slice {k.start}:{k.stop} does not have a constant size (stop "
                       "- start must not depend on loop indices)", span)
        return (start, int(width.constant if isinstance(width, _C.Affine) else width), 1, True)
    r = range(*slice(start, stop, k.step).indices(n))
    if r.step < 1:
        user_error("index", f"slice step {r.step} is not supported (steps are positive)", span)
    return (r.start, len(r), r.step, True)


def _box_key(kind, start, a=0, b=0):
    """A base subscript (reshape.base_subscripts' sub): (start, size, step)."""
    if kind == "ds":
        return (start, a, 1)
    return (start, len(range(start, a, b)), b)


def _drops(sizes, target):
    """The size-1 dims of a box of `sizes` to drop (scalar subscripts) so that its shape is
    `target`, or None if no choice does. Later ones go first: on chip dim 0 stays."""
    if [n for n in sizes if n != 1] != [n for n in target if n != 1]:
        return None
    drop, i, j = [], 0, 0
    while True:
        i2, j2 = i, j
        while i2 < len(sizes) and sizes[i2] == 1:
            i2 += 1
        while j2 < len(target) and target[j2] == 1:
            j2 += 1
        if i2 - i < j2 - j:
            return None
        drop += range(i + (j2 - j), i2)
        if i2 == len(sizes):
            return drop
        i, j = i2 + 1, j2 + 1


def _key(start, size, step):
    from .language import ds
    return ds(start, size) if step == 1 else slice(start, start + step * (size - 1) + 1, step)


def view_as(base, box, target):
    """The elements of base's box (start, size, step per dim) seen with shape `target` (same
    count, same row-major order): a view of base when only size-1 dims differ, else a
    Reshaped of the box."""
    drop = _drops([size for _, size, _ in box], list(target))
    if drop is not None:
        return base[tuple(start if d in drop else _key(start, size, step)
                          for d, (start, size, step) in enumerate(box))]
    whole = all(_known(start) and start == 0 and size == n and step == 1
                for (start, size, step), n in zip(box, base.shape))
    view = base if whole else base[tuple(_key(*b) for b in box)]
    return Reshaped(view, target)


def subscript(r, key, span):
    picks = _picks(r, key, span)
    target = [size for _, size, _, kept in picks if kept]
    try:
        box = base_subscripts(list(r.base.shape), list(r.shape), [p[:3] for p in picks], r.name,
                              _box_key)
    except NotABox as e:  # through the storage, with the kept dims' shape
        view = storage_view(r.base, list(r.shape), [p[:3] for p in picks], r.name, str(e))
        return view_as(view, [(0, n, 1) for n in view.shape], target)
    return view_as(r.base, box, target)


def reshape(t, shape, span):
    """t seen with `shape` (one -1 inferred): t itself, a view of t, or a Reshaped (HBM)."""
    shape = list(new_shape(list(t.shape), shape))
    if shape == list(t.shape):
        return t
    if t.buffer in _ON_CHIP:
        return None  # views.py: a subscript when it only drops size-1 free dims, else refused
    base = t.base if isinstance(t, Reshaped) else t
    whole = _whole_buffer(base)
    if whole is not None:  # e.g. [1, 1, H] -> [1, H] (a view) -> [1, 1, H]: the tensor again
        if shape == list(whole.shape):
            return whole
        base = whole
    return view_as(base, [(0, n, 1) for n in base.shape], shape)


def _whole_buffer(t):
    """The whole tensor when the view t covers all of its storage in order (a subscript that
    only dropped size-1 dims), else None."""
    if hasattr(t, "_chain"):  # eager: a view of the whole array, C-ordered from its start
        if not t._chain:
            return t
        v, whole = t._view(), t._base.array
        same = t.dtype == t._base.dtype and v.size == whole.size and v.flags.c_contiguous and \
            v.__array_interface__["data"][0] == whole.__array_interface__["data"][0]
        return type(t)(t._base) if same else None
    if not isinstance(t, _C.Tensor) or list(_C.view_storage(t)) or _C.view_origin(t) or \
            list(_C.view_order(t)) or _C.view_as_dtype(t) is not None:
        return None
    try:
        dims = _C.view_dims(t)
    except ValueError:  # it starts at a program id or register
        return None
    storage = _C.storage_shape(t)
    if not _spans(dims, storage):
        return None
    return t if list(t.shape) == list(storage) else _C.storage_view(t, [], 0, None)


def _spans(dims, storage):
    """Do a view's dims (view_dims) take all of each dim of `storage`?"""
    return len(dims) == len(storage) and all(
        start == 0 and size == n for (start, size, _, _), n in zip(dims, storage))


def walk_of(t):
    """A view's [[stride, count], ...] without its start (a traced view's may be symbolic), as
    .ap() takes it; an eager view's from its layout."""
    return _C.view_walk(t) if isinstance(t, _C.Tensor) else t.get_pattern()


def regroup_on_chip(t, shape):
    """A tile view's reshape that keeps dim 0 (the partitions) and regroups each partition's
    free elements when they are one dense run ([P, 4F] <-> [P, 4, F], also of a slice such as
    t[:, 0:512]): t.ap() over the new shape, a view of the tile's storage seen with that shape
    (ir.hpp Access::storage) that every instruction takes, and writes through it land in the
    tile. None when not such a reshape."""
    if t.buffer not in _ON_CHIP or len(shape) < 2 or shape[0] != t.shape[0] or \
            math.prod(shape) != math.prod(t.shape):
        return None
    walk = walk_of(t)
    expected = 1  # the free dims dense, innermost first (size-1 dims take any stride)
    for stride, count in reversed(walk[1:]):
        if count > 1 and stride != expected:
            return None
        expected *= count
    return t.ap([list(walk[0])] + [[s, n] for s, n in zip(_row_major(shape[1:]), shape[1:])])


def squeeze_on_chip(t, shape):
    """A tile's reshape that only drops size-1 free dims, as t[:, 0, ...]; None otherwise."""
    drop = _drops(list(t.shape), list(shape))
    if drop is None or 0 in drop or len(shape) < 2:
        return None
    return t[tuple(0 if d in drop else slice(None) for d in range(len(t.shape)))]


# ---- access patterns --------------------------------------------------------------------------

def _row_major(shape):
    r = [1] * len(shape)
    for k in range(len(shape) - 1, 0, -1):
        r[k - 1] = r[k] * shape[k]
    return r


def _covers_storage(t):
    """Is the view t its whole storage (a kernel argument or allocation, unsubscripted)?"""
    if isinstance(t, _C.Tensor):
        try:
            dims, storage = _C.view_dims(t), list(_C.view_storage(t)) or _C.storage_shape(t)
        except ValueError:  # it starts at a program id or register
            return False
        return list(t.shape) == list(storage) and _spans(dims, storage)
    return not getattr(t, "_chain", True)  # an eager tensor without subscripts


def ap(r, pattern, offset, scalar_offset, vector_offset, indirect_dim, dtype):
    """r.ap(...): a pattern walks storage elements, which a reshape does not move. When r
    reshapes a whole storage it is the base's .ap() with the same pattern, from element 0 by
    default (scalar_offset's indirect_dim and vector_offset's rows count in r's dims); else the
    base's own ap."""
    span = user_span()
    if dtype is not None and to_dtype(dtype) == r.dtype:
        dtype = None  # the tensor's own dtype: nothing to reinterpret
    dynamic = scalar_offset is not None or vector_offset is not None
    if offset is not None and symbolic(_value(offset)) is not None:
        # A rolled loop's index may step across several of the base's dims (one head of merged
        # [B, H] heads per iteration), which one view's start cannot: unroll that loop, the
        # offset is a number then. Program ids and registers stay symbolic.
        from .unroll import need_value
        need_value(symbolic(_value(offset)))
    if _covers_storage(r.base) and isinstance(r.base, _C.Tensor):
        from .access import ap_over
        return ap_over(r.base, list(r.shape), pattern, 0 if offset is None else offset,
                       scalar_offset, vector_offset, indirect_dim, dtype)
    if dynamic or dtype is not None:
        where = " in eager mode" if _covers_storage(r.base) else " (it reshapes part of a tensor)"
        user_error("unsupported", f"ap(scalar_offset=, vector_offset=, dtype=) of the reshaped "
                   f"tensor '{r.name}' is not supported{where}; the pattern walks the same "
                   "storage, so call .ap() on the tensor before reshaping it", span)
    if _covers_storage(r.base):  # eager: the pattern walks the same elements
        return r.base.ap(pattern, 0 if offset is None else offset)
    return r.base.ap(pattern, offset)


# ---- whole-operand uses: DMA ------------------------------------------------------------------

def dma_operand(x, other, what, span):
    """The view a DMA moves for operand x (a Reshaped: its base, checked against the other
    side's element count), else x."""
    if not isinstance(x, Reshaped):
        return x
    n = math.prod(x.shape)
    m = math.prod(other.shape) if hasattr(other, "shape") else n
    if m != n:
        user_error("shape", f"{what}: the reshaped tensor '{x.name}' of shape {list(x.shape)} "
                   f"has {n} elements but the other side has {m} (shape "
                   f"{list(other.shape)})", span)
    return x.base
