"""NKI access patterns: `t.ap(pattern, offset=None, scalar_offset=None, vector_offset=None,
indirect_dim=0)` (NKI_API.md 6.3). The C++ DSL (nl::ap) maps the pattern onto an ordinary view
of t's storage; scalar_offset (a register, or a [1, 1] SBUF tile read into one) moves it at run
time. vector_offset (a [P, 1] SBUF index tile) selects rows of an HBM tensor at run time: the
result is an IndirectView, which nl.load, nl.store and nisa.dma_copy move row by row."""
import math

import numpy as np

from . import _C
from ._span import user_span
from .dtypes import to_dtype
from .errors import NeuronError, user_error


class IndirectView:
    """Rows of an HBM tensor chosen at run time: partition p of the on-chip side moves row
    rows[p, 0] of `view`'s first dim (taken whole). From t.ap(..., vector_offset=rows) or, in
    the legacy API, t[idx_tile[i_p, 0], i_f]."""

    def __init__(self, view, rows):
        self.view, self.rows = view, rows

    shape = property(lambda self: (self.rows.shape[0],) + tuple(self.view.shape[1:]))
    ndim = property(lambda self: len(self.view.shape))
    dtype = property(lambda self: self.view.dtype)
    buffer = property(lambda self: self.view.buffer)
    name = property(lambda self: self.view.name)

    def __repr__(self):
        return f"<rows {self.rows.name}[:, 0] of {self.view!r}>"

    def is_indirect(self):
        return True

    def __getitem__(self, key):
        """The chosen rows' other dims subscripted (`A.vector_select(0, idx)[:, 0:100]`); the
        chosen dim itself is NKI's indirected dim, which cannot be sliced or selected again."""
        keys = key if isinstance(key, tuple) else (key,)
        if keys == (Ellipsis,):
            return self
        if keys[0] is Ellipsis and len(keys) == len(self.shape):
            keys = (slice(None),) + keys[1:]
        if not (isinstance(keys[0], slice) and keys[0] == slice(None)):
            user_error("index", f"subscript {keys[0]!r} of dim 0 of the rows index tile "
                       f"'{self.rows.name}' chose: that dim cannot be sliced or selected again "
                       "(NKI's rule for indirect views); subscript the index tile instead, or "
                       "write ':' for it", user_span())
        return IndirectView(self.view[keys], self.rows)


class BitcastView:
    """t.ap(pattern, offset, dtype=D): the bytes of t's storage read as D elements, walking
    `pattern` (counted in D elements) from element `offset` of D. `view` is the same bytes as a
    view in t's own dtype (each D element a run of t's elements, or several D elements one of
    t's). DMA copies (nisa.dma_copy, nl.load, nl.store) move it byte for byte; NKI uses it to
    read packed MX data handed to the kernel as uint32 / uint8 arrays (docs/mx.md)."""

    def __init__(self, view, dtype, shape):
        self.view, self.dtype, self.shape = view, dtype, tuple(shape)

    ndim = property(lambda self: len(self.shape))
    buffer = property(lambda self: self.view.buffer)
    name = property(lambda self: self.view.name)

    def __repr__(self):
        return f"<{self.view!r} read as {self.dtype.name_} {list(self.shape)}>"

    def is_indirect(self):
        return False


def bitcast_pattern(t, pat, offset, dtype, span):
    """pattern/offset in elements of `dtype` as a pattern/offset in t's own elements."""
    dtype = to_dtype(dtype)
    sd, sb = dtype.itemsize, t.dtype.itemsize
    if t.buffer in (_C.Memory.sbuf, _C.Memory.psum):
        user_error("unsupported", f"ap(dtype={dtype.name_}): reinterpreting views are supported "
                   f"on HBM tensors; '{t.name}' is in {t.buffer.name}", span)
    if sd % sb == 0:  # each new element is a run of k old ones
        k = sd // sb
        if k > 1 and pat[-1][0] != 1:
            user_error("access-pattern", f"ap(dtype={dtype.name_}): each {dtype.name_} element "
                       f"is {k} {t.dtype.name_} elements; the pattern's innermost step must be 1 "
                       f"(contiguous), got {list(pat[-1])}", span)
        return dtype, [(s * k, c) for s, c in pat[:-1]] + [(1, pat[-1][1] * k)], \
            None if offset is None else offset * k
    k = sb // sd  # k new elements per old one: whole old elements only
    inner_s, inner_c = pat[-1]
    off = offset
    ok = inner_s == 1 and inner_c % k == 0 and all(s % k == 0 for s, _ in pat[:-1]) and \
        (off is None or (is_int(off) and off % k == 0))
    if not ok:
        user_error("access-pattern", f"ap(dtype={dtype.name_}): {t.dtype.name_} elements hold "
                   f"{k} {dtype.name_} elements each; the pattern {[list(p) for p in pat]} and "
                   f"offset must select whole ones (innermost stride 1, counts and steps "
                   f"multiples of {k})", span)
    return dtype, [(s // k, c) for s, c in pat[:-1]] + [(1, inner_c // k)], \
        None if off is None else off // k


class OutOfRange:
    """An `.ap()` view that cannot exist: its pattern from its offset leaves the tensor (a
    constant offset, or in eager mode a scalar_offset's value). As in NKI, building it is no
    error: kernels build a view per loop step and use it only on the steps where it fits
    (nki-library's output projection). `nisa.dma_copy(..., oob_mode=skip)` skips a copy
    through it; any other use (an instruction, an attribute) raises the error, which names the
    .ap() call's line. A direct pattern that runs past the end of an HBM tensor whatever its
    offset has its shape, ndim and dtype (nki-library sizes tiles by them)."""

    def __init__(self, error, shape=None, dtype=None):
        self.error = error
        if shape is not None:  # a pattern past the tensor's end still has NKI's shape
            self.shape, self.ndim, self.dtype = tuple(shape), len(shape), dtype

    def __getattr__(self, name):
        raise self.error


class SplitView:
    """t.ap(pattern) whose entries no single view walks (a transposing walk such as
    [[F, P], [P*F, 4], [1, F]] over a [4, P, F] tensor, or an overlapping sliding window such as
    [[1, 8], [1, 32]], which is read only): the views of its parts, each
    the pattern without some entries at one index of theirs. nisa.dma_copy and nisa.tensor_copy
    copy it part by part (one instruction per part), taking the same index of the other side."""

    def __init__(self, parts, shape, like, overlapping=False):
        self.parts, self.shape, self._like = parts, tuple(shape), like
        self.overlapping = overlapping  # elements seen twice: a source only

    ndim = property(lambda self: len(self.shape))
    dtype = property(lambda self: self._like.dtype)
    buffer = property(lambda self: self._like.buffer)
    name = property(lambda self: self._like.name)

    def __repr__(self):
        return f"<{len(self.parts)} views of {self._like.name} {list(self.shape)}>"

    def is_indirect(self):
        return False


# A transposing pattern is split into at most this many parts (instructions).
_SPLIT_MAX = 512


def split_pattern(make, pat, offset, keep_first):
    """[(indices {entry: index}, view)] covering pattern `pat` from `offset`: make(pat, offset)
    when one view walks it, else the parts of the entry whose removal lets the rest walk in the
    fewest parts (keep_first: never entry 0, an on-chip tile's partition entry). Raises make's
    error when no split works."""
    from .errors import NeuronError
    try:
        return [({}, make(pat, offset))]
    except NeuronError as e:
        if e.rule != "access-pattern":
            raise
        first = e
    base = 0 if offset is None else offset
    best = None
    for j in sorted(range(1 if keep_first else 0, len(pat)), key=lambda j: pat[j][1]):
        stride, count = pat[j]
        if best is not None and count >= len(best):
            break
        rest = pat[:j] + pat[j + 1:]
        parts = []
        try:
            for i in range(count):
                for idx, v in split_pattern(make, rest, base + i * stride, keep_first):
                    parts.append(({**{(k if k < j else k + 1): x for k, x in idx.items()},
                                   j: i}, v))
                if len(parts) > _SPLIT_MAX:
                    raise first
        except NeuronError:
            continue
        if best is None or len(parts) < len(best):
            best = parts
    if best is None:
        raise first
    return best


def _overlaps(pat):
    """Do two entries of a pattern reach the same element (a sliding window such as
    [[1, 4], [1, 32]])? Sorted by stride, each stride must pass the extent of the ones below."""
    reach = 0
    for stride, count in sorted((abs(s), c) for s, c in pat if c > 1):
        if stride == 0 or stride <= reach:
            return True
        reach += stride * (count - 1)
    return False


def split_or_view(make, t, pat, offset):
    """make(pat, offset), or a SplitView of it when only parts of it are views."""
    parts = split_pattern(make, pat, offset, t.buffer in (_C.Memory.sbuf, _C.Memory.psum))
    if len(parts) == 1 and not parts[0][0]:
        return parts[0][1]
    return SplitView(parts, [c for _, c in pat], t, _overlaps(pat))


def copy_split(copy, dst, src):
    """copy(dst, src) for every part when either side is a SplitView (the other side indexed
    alike), else once."""
    if not isinstance(dst, SplitView) and not isinstance(src, SplitView):
        return copy(dst, src)
    split, other = (dst, src) if isinstance(dst, SplitView) else (src, dst)
    if isinstance(other, SplitView):
        user_error("access-pattern", "a copy takes a transposing .ap() pattern on one side only",
                   user_span())
    if split is dst and split.overlapping:
        user_error("access-pattern", f"the .ap() pattern of the destination '{dst.name}' reaches "
                   "some elements more than once (a sliding window); such a pattern can only be "
                   "read", user_span())
    for idx, view in split.parts:
        sub = other[tuple(idx.get(d, slice(None)) for d in range(len(split.shape)))]
        copy(view, sub) if split is dst else copy(sub, view)


def is_int(v):
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def as_index(v, what):
    """An int or an Affine (loop index, program id, register) as an Affine."""
    if isinstance(v, _C.Affine):
        return v
    if is_int(v):
        return _C.Affine(int(v))
    raise TypeError(f"{what} must be an int or a register (nisa.register_alloc), got {v!r} "
                    f"({type(v).__name__})")


def scalar_register(v, what, span):
    """scalar_offset: a register or int as is; a one-element tile read into a fresh register."""
    if isinstance(v, _C.Tensor):
        r = _C.register_alloc(0, span)
        _C.register_load(r, v, span)
        return r
    return as_index(v, what)


def _known(v):
    """A pattern number: an int, or a loop index whose value the trace knows (a one-trip loop's,
    or, by unrolling that loop, any rolled loop's)."""
    if isinstance(v, _C.Affine):
        if not v.is_constant():
            from . import unroll
            unroll.need_value(v)  # restarts the trace with the loop unrolled
        if v.is_constant():
            return int(v.constant)
    return v


def pattern_pairs(pattern):
    try:
        pairs = [tuple(_known(v) for v in p) for p in pattern]
    except TypeError:
        pairs = None
    if not pairs or any(len(p) != 2 or not all(is_int(v) for v in p) for p in pairs):
        raise TypeError(f"ap: pattern must be a list of [stride, count] int pairs, got "
                        f"{pattern!r}")
    return [(int(s), int(c)) for s, c in pairs]


def _fits_elsewhere(t, pattern):
    """Does the pattern make a view of t from element 0 (so that only its offset failed)?"""
    try:
        ap_over(t, None, pattern, 0)
        return True
    except (NeuronError, TypeError):
        return False


def _runs_past_end(t, pattern, offset, scalar_offset, vector_offset):
    """Does a direct pattern over an HBM tensor, its strides positive, walk past the tensor's
    last element (and only that is wrong with it)?"""
    if scalar_offset is not None or vector_offset is not None or \
            t.buffer in (_C.Memory.sbuf, _C.Memory.psum):
        return False
    try:
        pat = pattern_pairs(pattern)
    except TypeError:
        return False
    start = 0 if offset is None else offset if is_int(offset) else None
    if start is None or start < 0 or any(st < 0 or c < 1 for st, c in pat):
        return False
    return start + sum((c - 1) * st for st, c in pat) >= math.prod(_C.storage_shape(t))


def ap(self, pattern, offset=None, scalar_offset=None, vector_offset=None, indirect_dim=0,
       dtype=None):
    """The view of this tensor's storage walking pattern = [[stride, count], ...] from element
    `offset` (None: this view's first element); see the module doc."""
    try:
        return ap_over(self, None, pattern, offset, scalar_offset, vector_offset, indirect_dim,
                       dtype)
    except NeuronError as e:
        if e.rule != "access-pattern":
            raise
        if _fits_elsewhere(self, pattern):
            return OutOfRange(e)  # raised where the view is used (OutOfRange)
        if _runs_past_end(self, pattern, offset, scalar_offset, vector_offset):
            # nki-library sizes a tile by such a view's .shape (MoE blockwise matmul's
            # block_to_expert.ap(...).shape): that works, any other use raises
            return OutOfRange(e, [c for _, c in pattern_pairs(pattern)],
                              to_dtype(dtype) if dtype is not None else self.dtype)
        raise


def ap_over(self, storage, pattern, offset=None, scalar_offset=None, vector_offset=None,
            indirect_dim=0, dtype=None):
    """ap() of self, whose storage elements are counted, for scalar_offset's indirect_dim and
    vector_offset's rows, in the dims of the row-major shape `storage` (None: self's own; a
    whole-storage reshape passes its shape, reshaped.py)."""
    span = user_span()
    if storage is not None and scalar_offset is not None:
        if not is_int(indirect_dim) or not 0 <= int(indirect_dim) < len(storage):
            user_error("access-pattern", f"ap: indirect_dim {indirect_dim} is not a dim of the "
                       f"shape {list(storage)}", span)
        # The offset's step in elements: a multiple of the buffer's last dim (stride 1).
        step = math.prod(storage[int(indirect_dim) + 1:])
        scalar_offset = scalar_register(scalar_offset, "ap scalar_offset", span) * step
        indirect_dim = len(_C.storage_shape(self)) - 1
    pat = pattern_pairs(pattern)
    if dtype is not None:
        if to_dtype(dtype) != self.dtype:
            if scalar_offset is not None or vector_offset is not None:
                user_error("unsupported", "ap(dtype=...) with scalar_offset or vector_offset is "
                           "not supported", span)
            if self.buffer in (_C.Memory.sbuf, _C.Memory.psum) and storage is None:
                # A tile's bytes read as dtype: an ordinary view every instruction takes.
                return _C.ap_as(self, to_dtype(dtype), pat,
                                None if offset is None else as_index(offset, "ap offset"), span)
            shape = [c for _, c in pat]
            dt, bpat, boff = bitcast_pattern(self, pat, offset, dtype, span)
            boff = None if boff is None else as_index(boff, "ap offset")
            return BitcastView(_C.ap(self, bpat, boff, None, 0, span), dt, shape)
    if not is_int(indirect_dim):
        raise TypeError(f"ap: indirect_dim must be an int, got {indirect_dim!r}")
    if storage is None and scalar_offset is not None and isinstance(self, _C.Tensor):
        indirect_dim = storage_dim_of(self, int(indirect_dim))
    off = None if offset is None else as_index(offset, "ap offset")
    if vector_offset is None:
        if scalar_offset is None and int(indirect_dim) == 0:
            return split_or_view(
                lambda p, o: _C.ap(self, p, None if o is None else as_index(o, "ap offset"),
                                   None, 0, span), self, pat, off)
        so = None if scalar_offset is None else \
            scalar_register(scalar_offset, "ap scalar_offset", span)
        return _C.ap(self, pat, off, so, int(indirect_dim), span)
    if scalar_offset is not None:
        user_error("access-pattern", "ap: scalar_offset and vector_offset are mutually "
                   "exclusive", span)
    whole = indirect_pattern(self, pat, vector_offset, indirect_dim,
                             list(storage) if storage is not None else _C.storage_shape(self),
                             span)

    row_stride, n_rows = whole[0]

    def rows_view(p, o):
        # The rows whose window from o stays inside the storage (all of them, unless o is
        # past a row: a window element of a split below).
        start = o if isinstance(o, int) else o.constant if o is not None and o.is_constant() \
            else 0
        reach = start + sum((c - 1) * abs(st) for st, c in p[1:]) + 1
        rows = min(n_rows, (row_stride * n_rows - reach) // row_stride + 1)
        return IndirectView(_C.ap(self, [(row_stride, rows)] + p[1:], o, None, 0, span),
                            vector_offset)
    # A row's window may reach past the next row (a flat [B*d*S] cache written at a column of
    # each row: [[1, B], [S, d]]), which no view walks: one copy per index of the window entry
    # that keeps the rest a view, each moving one element per row (traced only).
    parts = split_pattern(rows_view, pat, off, keep_first=True)
    if len(parts) == 1 and not parts[0][0]:
        return parts[0][1]
    return SplitView(parts, [c for _, c in pat], self)


def storage_dim_of(t, dim):
    """The storage dim of dim `dim` of view t: a subscript that dropped size-1 dims
    (`cache[:, 0]`, or the reshape that squeezes a [B, 1, S, d] cache to [B, S, d]) counts
    only the dims it kept, as its shape shows them (scalar_offset's indirect_dim)."""
    try:
        kept = [i for i, d in enumerate(_C.view_dims(t)) if d[3]]
    except ValueError:  # it starts at a program id or register: its dims are storage's
        return dim
    if list(_C.view_storage(t)) or len(kept) == len(_C.storage_shape(t)) or \
            not 0 <= dim < len(kept):
        return dim
    return kept[dim]


def indirect_pattern(t, pat, rows, indirect_dim, storage, span):
    """The pattern of the HBM view that t.ap(pat, vector_offset=rows) moves row by row: its row
    dim taken whole (the stride comes from the storage, as in NKI), the index tile picking the
    rows at run time."""
    if not hasattr(rows, "shape") or not hasattr(rows, "buffer"):
        raise TypeError(f"ap: vector_offset must be a [P, 1] SBUF index tile, got {rows!r}")
    if int(indirect_dim) != 0:
        user_error("access-pattern", f"ap: vector_offset selects rows of dim 0; indirect_dim="
                   f"{indirect_dim} is not supported", span)
    if t.buffer in (_C.Memory.sbuf, _C.Memory.psum):
        user_error("indirect-dma", f"ap: vector_offset selects rows of an HBM tensor; "
                   f"'{t.name}' is in {t.buffer.name}", span)
    if pat[0][1] != rows.shape[0]:
        columns = math.prod(rows.shape[1:])
        if columns > 1 and pat[0][1] == rows.shape[0] * columns:  # NKI's 2-D index form
            user_error("unsupported", f"ap: vector_offset '{rows.name}' of {columns} columns "
                       f"selecting {pat[0][1]} rows (column-major) is not supported; use one "
                       f"[{rows.shape[0]}, 1] column of it per {rows.shape[0]} rows "
                       f"(vector_offset={rows.name}[:, j:j + 1])", span)
        user_error("access-pattern", f"ap: the pattern's first entry counts {pat[0][1]} rows "
                   f"but vector_offset '{rows.name}' has {rows.shape[0]} partitions", span)
    return [(math.prod(storage[1:]), storage[0])] + pat[1:]
