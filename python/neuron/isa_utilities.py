"""nki.isa's GpSimd utilities (current API, destination first), composed from the instructions
neuron has (NKI_API.md 4.9, 6.5): sequence_bounds, nonzero_with_count and topk. Each records
many instructions where NKI records one (the timing model sees that work); the values are
NKI's, within the limits each function states."""
import math

from . import _C
from . import eager as _eager
from ._span import user_span
from .errors import NeuronError, user_error
from .isa import dma_copy, iota, max8, memset, nc_find_index8, nc_match_replace8, \
    nc_n_gather, tensor_copy, tensor_scalar, tensor_tensor, tensor_tensor_scan

_f32, _u32 = _C.DType.float32, _C.DType.uint32


def _tile(shape, dtype, span):
    return _C.ndarray(list(shape), dtype, _C.Memory.sbuf, "", span)


def _two_dims(t, what, fn, span):
    if len(t.shape) != 2:
        user_error("shape", f"{fn}: {what} '{t.name}' has shape {list(t.shape)}; it takes a "
                   "[P, N] tile", span)
    return t.shape


def _free_flat(t, span):
    """A tile with several free dims as [P, their product] (a view of the same elements, when
    each partition's are one dense run, else t itself for _two_dims to refuse)."""
    if len(t.shape) <= 2:
        return t
    n = 1
    for d in t.shape[1:]:
        n *= d
    try:
        return t.reshape([t.shape[0], n])
    except NeuronError:
        return t


def _run_starts(ids, span):
    """start[p, j] = the index where the run of equal ids holding j begins (fp32), by a running
    maximum of j over the positions whose id differs from the one before."""
    p, n = ids.shape
    first = _tile([p, n], _f32, span)
    memset(first[:, 0:1], 1.0)
    if n > 1:
        tensor_tensor(first[:, 1:n], ids[:, 1:n], ids[:, 0:n - 1], "not_equal")
    j = _tile([p, n], _f32, span)
    iota(j, [[1, n]])
    tensor_tensor(first, first, j, "multiply")
    zeros = _C.zeros([p, n], _f32, _C.Memory.sbuf, "", span)
    start = _tile([p, n], _f32, span)
    tensor_tensor_scan(start, first, zeros, 0.0, "maximum", "add")
    return start


@_eager.op(writes=("dst",))
def sequence_bounds(dst, segment_ids, name=None):
    """dst[p, 0, j] / dst[p, 1, j] = the start / end (exclusive) index of the run of equal
    segment ids holding element j of segment_ids[p, :] ([P, N] -> [P, 2, N]); id 0 is padding:
    start N, end -1. Ids and dst float32 or int32 (exact below 2**24)."""
    span = user_span()
    p, n = _two_dims(segment_ids, "segment_ids", "sequence_bounds", span)
    if list(dst.shape) != [p, 2, n]:
        user_error("shape", f"sequence_bounds: dst has shape {list(dst.shape)}; segment_ids "
                   f"{[p, n]} gives [{p}, 2, {n}]", span)
    for what, t in (("segment_ids", segment_ids), ("dst", dst)):
        if t.dtype not in (_f32, _C.DType.int32):
            user_error("dtype", f"sequence_bounds: {what} '{t.name}' is {t.dtype.name_}; it "
                       "must be float32 or int32", span)
    ids = _tile([p, n], _f32, span)
    tensor_copy(ids, segment_ids)
    pad = _tile([p, n], _f32, span)
    tensor_scalar(pad, ids, "equal", 0.0)
    start = _run_starts(ids, span)
    tensor_copy(dst[:, 0, :], _C.where(pad, float(n), start, _f32, span))
    # The end of a run is where it starts when the row is read backwards: reverse the ids
    # (a gather by n-1-j), take the run starts there, and map them back.
    rev = _tile([p, n], _u32, span)
    iota(rev, [[-1, n]], offset=n - 1)
    back = _tile([p, n], _f32, span)
    nc_n_gather(back, ids, rev)
    end_back = _run_starts(back, span)
    tensor_scalar(end_back, end_back, "subtract", float(n), True)  # n - start, backwards
    end = _tile([p, n], _f32, span)
    nc_n_gather(end, end_back, rev)
    tensor_copy(dst[:, 1, :], _C.where(pad, -1.0, end, _f32, span))


@_eager.op(writes=("dst",))
def nonzero_with_count(dst, src, index_offset=0, padding_val=-1, name=None):
    """For partitions 0, 16, ..., 112 of src ([P, T]): dst[p, 0:N] = index_offset + the
    indices of the N nonzero elements (ascending), dst[p, N:T] = padding_val, dst[p, T] = N
    (dst is [P, T + 1]); the other partitions of dst are left alone, as on GpSimd. Indices
    are exact below 2**24."""
    span = user_span()
    src, dst = _free_flat(src, span), _free_flat(dst, span)  # [P, a, b] walks its a * b
    p, t = _two_dims(src, "src", "nonzero_with_count", span)
    if list(dst.shape) != [p, t + 1]:
        user_error("shape", f"nonzero_with_count: dst has shape {list(dst.shape)}; src "
                   f"{[p, t]} gives [{p}, {t + 1}] (one more element: the count)", span)
    nz = _tile([p, t], _f32, span)
    tensor_scalar(nz, src, "not_equal", 0.0)
    rank = _tile([p, t], _f32, span)  # how many nonzeros up to and including j
    zeros = _C.zeros([p, t], _f32, _C.Memory.sbuf, "", span)
    tensor_tensor_scan(rank, nz, zeros, 0.0, "add", "add")
    res = _tile([p, t + 1], _f32, span)
    tensor_copy(res[:, t:t + 1], rank[:, t - 1:t])
    # Slot k holds the index of the (k + 1)-th nonzero, which is the number of positions j
    # with rank[j] < k + 1 (rank never decreases): a binary search per slot, all slots at once,
    # by gathers of rank (log2(T) + 1 rounds of five instructions; a search by value with
    # nc_find_index8, 8 slots per instruction, costs T / 8 passes over the row).
    want = _tile([p, t], _f32, span)
    iota(want, [[1, t]], offset=1)  # k + 1
    pos = res[:, 0:t]
    memset(pos, 0.0)
    probe, got = _tile([p, t], _u32, span), nz  # nz is no longer needed
    step = 1 << (t.bit_length() - 1)
    while step:
        # probe = min(pos + step, T) - 1; pos += step where rank[probe] < k + 1
        tensor_scalar(probe, pos, "add", float(step - 1), False, "minimum", float(t - 1))
        nc_n_gather(got, rank, probe)
        tensor_tensor(got, got, want, "less")
        tensor_scalar(got, got, "multiply", float(step))
        tensor_tensor(pos, pos, got, "add")
        step >>= 1
    slot = _tile([p, t], _f32, span)
    iota(slot, [[1, t]])
    tensor_scalar(slot, slot, "less", res[:, t:t + 1])  # slot k < N: an index
    tensor_scalar(res[:, 0:t], res[:, 0:t], "add", float(index_offset))
    filled = _C.where(slot, res[:, 0:t], float(padding_val), _f32, span)
    tensor_copy(res[:, 0:t], filled)
    for q in range(0, p, 16):
        dma_copy(dst[q:q + 1, :], res[q:q + 1, :])


@_eager.op(writes=("val_dst", "idx_dst"))
def topk(val_dst, idx_dst, src, n, name=None):
    """Per group of 16 partitions, src holds a snake of n bfloat16 values (element s at
    partition s % 16, column s // 16); result j of the group's k largest (k = val_dst's
    free size) goes to partition j % 16, column j // 16 of val_dst (bfloat16) and idx_dst
    (uint32, its snake index), largest first (equal values: lower index first). The other
    elements of the destinations are left alone. n <= 16384 (max8's row limit)."""
    span = user_span()
    p, cols = _two_dims(src, "src", "topk", span)
    k = val_dst.shape[-1]
    n = int(n)
    if p % 16:
        user_error("shape", f"topk: src has {p} partitions; a snake group is 16, so the "
                   "partition count must be a multiple of 16", span)
    if not 8 <= n <= min(16384, 16 * cols):
        user_error("shape", f"topk: n={n} must be 8 to {min(16384, 16 * cols)} (src {[p, cols]} "
                   "holds 16 per column; neuron's max8 reads at most 16384 per row)", span)
    if not 1 <= k <= n or list(val_dst.shape) != [p, k] or list(idx_dst.shape) != [p, k]:
        user_error("shape", f"topk: val_dst {list(val_dst.shape)} and idx_dst "
                   f"{list(idx_dst.shape)} must both be [{p}, k] with 1 <= k <= n={n}", span)
    if src.dtype != _C.DType.bfloat16 or val_dst.dtype != _C.DType.bfloat16 or \
            idx_dst.dtype != _u32:
        user_error("dtype", f"topk: src and val_dst must be bfloat16 and idx_dst uint32, got "
                   f"{src.dtype.name_}, {val_dst.dtype.name_}, {idx_dst.dtype.name_}", span)
    g, width = p // 16, 16 * cols
    row = _C.full([g, width], float("-inf"), _f32, _C.Memory.sbuf, "", span)
    for q in range(p):  # the snake of each group as one row: s = 16 * column + partition
        dma_copy(row[q // 16:q // 16 + 1, q % 16:width:16], src[q:q + 1, :])
    if n < width:  # the slots past n take no part
        memset(row[:, n:width], float("-inf"))
    rounds = math.ceil(k / 8)
    vals = _tile([g, 8 * rounds], _f32, span)
    idx = _tile([g, 8 * rounds], _u32, span)
    for r in range(rounds):  # the next 8 largest, then those replaced by -inf
        v, i = vals[:, 8 * r:8 * r + 8], idx[:, 8 * r:8 * r + 8]
        max8(v, row)
        # Equal values lower index first: nc_find_index8's order (nc_match_replace8's dst_idx
        # pairs repeated values from the last slot down).
        nc_find_index8(i, row, v)
        nc_match_replace8(row, row, v, float("-inf"))
    for q in range(min(p, 16 * g)):
        j0, count = q % 16, len(range(q % 16, k, 16))
        if count:
            dma_copy(val_dst[q:q + 1, 0:count], vals[q // 16:q // 16 + 1, j0:k:16])
            dma_copy(idx_dst[q:q + 1, 0:count], idx[q // 16:q // 16 + 1, j0:k:16])


__all__ = ["sequence_bounds", "nonzero_with_count", "topk"]
