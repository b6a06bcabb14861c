# The current API's reshapes of HBM tensors (python/neuron/reshaped.py): reshape, reshape_dim,
# expand_dim and flatten_dims of kernel arguments and shared_hbm outputs are views, so tiles
# loaded from them and stored into them match NumPy's reshape of the same arrays, in the three
# execution modes; subscripts that are not one box of the base dims are refused at the user's
# line.
import numpy as np
import pytest

import neuron
import neuron.isa as nisa
import neuron.language as nl

MODES = ("native", "simulate", "eager")
B, H, S, D = 2, 3, 128, 8
RNG = np.random.default_rng(11)
Q = RNG.standard_normal((B, H, S, D)).astype(np.float32)
X = RNG.standard_normal((3 * 128, D)).astype(np.float32)


def per_head(q):
    """Each (b, h) tile of a [B, H, S, D] argument via [B*H, S, D] views, in and out."""
    out = nl.ndarray(q.shape, q.dtype, buffer=nl.shared_hbm)
    qr, outr = q.reshape((B * H, S, D)), out.flatten_dims(0, 1)
    for i in nl.affine_range(B * H):
        nl.store(outr[i], nl.add(nl.load(qr[i]), 2.0))
    # the rows of a [B*H*S, D] view of q walked with .ap() at an offset
    out2 = nl.ndarray((B * H * S, D), q.dtype, buffer=nl.shared_hbm)
    q2 = q.reshape((-1, D))
    for r in nl.affine_range(B * H):
        nisa.dma_copy(out2[r * S:(r + 1) * S], q2.ap([[D, S], [1, D]], offset=r * S * D))
    return out, out2


@pytest.mark.parametrize("mode", MODES)
def test_merged_heads_read_and_written_per_tile(mode):
    out, out2 = neuron.kernel(per_head, mode=mode)(Q)
    np.testing.assert_array_equal(out, Q + 2.0)
    np.testing.assert_array_equal(out2, Q.reshape(-1, D))


def row_blocks(x):
    """[N*128, D] split into [N, 128, D]: loop-index subscripts, merged free dims, expand_dim."""
    n = x.shape[0] // 128
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    x3, o3 = x.reshape_dim(0, (n, 128)), out.reshape((n, 128, D))
    for k in nl.affine_range(n):
        o3[k] = nl.add(nl.load(x3[k]), 1.0)  # t[k] = tile stores through the view
    pairs = nl.ndarray((128, 2, D), x.dtype, buffer=nl.shared_hbm)
    merged = pairs.reshape((128, 2 * D))  # pairs[p, j] = x3[j, p]
    nl.store(merged[:, 0:D], nl.load(x3[0]))
    nisa.dma_copy(merged[:, D:2 * D], nl.load(x3[1]))
    last = nl.ndarray((128, D), x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 1, D), x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(t, x3[n - 1])
    nl.store(last.expand_dim(1), t)  # a whole [128, 1, D] view of a [128, D] output
    return out, pairs, last


@pytest.mark.parametrize("mode", MODES)
def test_split_rows_read_and_written(mode):
    out, pairs, last = neuron.kernel(row_blocks, mode=mode)(X)
    np.testing.assert_array_equal(out, X + 1.0)
    np.testing.assert_array_equal(pairs, np.stack([X[0:128], X[128:256]], axis=1))
    np.testing.assert_array_equal(last, X[256:])


def by_program(x):
    out = nl.ndarray((128, D), x.dtype, buffer=nl.shared_hbm)
    nl.store(out.reshape((1, 128, D))[0], nl.load(x.reshape((3, 128, D))[nl.program_id(0)]))
    return out


def test_program_id_subscripts_the_outer_dim_of_a_split():
    for mode in ("native", "eager"):
        np.testing.assert_array_equal(neuron.kernel(by_program, mode=mode)[3](X), X[256:])


def test_inspection_matches_numpy():
    seen = []

    def k(q):
        for v in (q.reshape((B * H, S, D)), q.flatten_dims(2, 3), q.expand_dim(1)):
            seen.append((tuple(v.shape), v.strides, v.offset, v.is_contiguous(), v.size))
        out = nl.ndarray((S, D), q.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.load(q[0, 0]))
        return out

    neuron.kernel(k)(Q)
    for got, shape in zip(seen, [(B * H, S, D), (B, H, S * D), (B, 1, H, S, D)]):
        v = Q.reshape(shape)
        assert got == (shape, tuple(s // 4 for s in v.strides), 0, True, v.size)


# ---- what is refused, and where ----------------------------------------------------------------

def a_box(q):
    out = nl.ndarray((2, 4, D), q.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.load(q.reshape((B * H, S, D))[1:3, 0:4]))  # heads (0, 1), (0, 2): a box
    return out


def straddles(q):
    # heads (0, 2), (1, 0): no box of q's dims, but a run of q's storage
    out = nl.ndarray((2, D), q.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.load(q.reshape((B * H, S, D))[2:4, 0]))
    return out


def straddles_a_view(q):
    # the same rows of a strided view of q (every other head dim element): refused
    return nl.load(q[:, :, :, 0:D // 2].reshape((B * H, S, D // 2))[2:4, 0])


def merged_program_id(q):
    # head pid of the merged (B*H) dim: (pid // H, pid % H), each program traced on its own
    out = nl.ndarray((B * H, S, D), q.dtype, buffer=nl.shared_hbm)
    pid = nl.program_id(0)
    nl.store(out[pid], nl.load(q.reshape((B * H, S, D))[pid]))
    return out


@pytest.mark.parametrize("mode", ("native", "eager"))
def test_subscripts_that_are_not_a_box_of_the_base_are_refused(mode):
    np.testing.assert_array_equal(neuron.kernel(a_box, mode=mode)(Q),
                                  Q.reshape(B * H, S, D)[1:3, 0:4])
    np.testing.assert_array_equal(neuron.kernel(straddles, mode=mode)(Q),
                                  Q.reshape(B * H, S, D)[2:4, 0])
    with pytest.raises(neuron.NeuronError) as e:
        neuron.kernel(straddles_a_view, mode=mode)[2](Q)
    assert e.value.rule == "unsupported" and "do not form a box" in e.value.message
    assert e.value.line == straddles_a_view.__code__.co_firstlineno + 2
    np.testing.assert_array_equal(neuron.kernel(merged_program_id, mode=mode)[B * H](Q),
                                  Q.reshape(B * H, S, D))


def test_on_chip_tiles_drop_size_one_dims_only():
    def k(x):
        t = nl.load(x.reshape((128, 1, 3 * D)))   # HBM: a size-1 dim added
        out = nl.ndarray((128, 3 * D), x.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.add(t.reshape((128, 3 * D)), 0.5))  # on chip: t[:, 0, :]
        return out

    x = X.reshape(128, 3 * D)
    for mode in ("native", "eager"):
        np.testing.assert_array_equal(neuron.kernel(k, mode=mode)(x), x + 0.5)

    def merge_on_chip(x):
        nl.load(x).reshape((3 * 128 * D,))

    with pytest.raises(neuron.NeuronError) as e:
        neuron.kernel(merge_on_chip)(X)
    assert e.value.rule == "unsupported" and "HBM tensors reshape as views" in e.value.message


def reshaped_access_patterns(q, k, rows):
    """.ap() of a reshaped whole tensor walks the same storage elements (from element 0): a
    block chosen at run time by scalar_offset (counted in the reshaped dim 0), rows chosen by
    vector_offset (rows of the reshaped [B*H*S, D]), the bytes read as int32 (dtype=), and a
    pattern that splits a reshaped dim."""
    heads, flat = q.reshape((B * H, S, D)), q.reshape((B * H * S, D))
    out = nl.ndarray((4, S, D), nl.float32, buffer=nl.shared_hbm)
    bits = nl.ndarray((S, D), nl.int32, buffer=nl.shared_hbm)
    nl.store(out[0], nl.load(heads.ap([[D, S], [1, D]], scalar_offset=nl.load(k),
                                      indirect_dim=0)))
    nl.store(out[1], nl.load(flat.ap([[D, S], [1, D]], vector_offset=nl.load(rows))))
    nl.store(bits, nl.load(flat.ap([[D, S], [1, D]], offset=S * D, dtype=nl.int32)))
    t = nl.ndarray((S, 2, D), nl.float32, buffer=nl.sbuf)  # heads 2 and 3, row by row
    nisa.dma_copy(t, heads.ap([[D, S], [S * D, 2], [1, D]], offset=2 * S * D))
    nl.store(out[2], t[:, 0, :])
    nl.store(out[3], t[:, 1, :])
    return out, bits


@pytest.mark.parametrize("mode", ("native", "simulate"))
def test_access_patterns_of_a_reshaped_tensor(mode):
    k = np.array([[4]], np.int32)
    rows = RNG.permutation(B * H * S)[:S].astype(np.int32).reshape(S, 1)
    out, bits = neuron.kernel(reshaped_access_patterns, mode=mode)(Q, k, rows)
    heads = Q.reshape(B * H, S, D)
    np.testing.assert_array_equal(out[0], heads[4])
    np.testing.assert_array_equal(out[1], Q.reshape(-1, D)[rows[:, 0]])
    np.testing.assert_array_equal(bits, heads[1].view(np.int32))
    np.testing.assert_array_equal(out[2], heads[2])
    np.testing.assert_array_equal(out[3], heads[3])


def returns_a_reshape(x):
    out = nl.ndarray((3 * 128, D), nl.float32, buffer=nl.shared_hbm)
    nl.store(out.reshape((3, 128, D))[1], nl.load(x.reshape((3, 128, D))[2]))
    nl.store(out.reshape((3, 128, D))[0], nl.load(x.reshape((3, 128, D))[0]))
    nl.store(out.reshape((3, 128, D))[2], nl.load(x.reshape((3, 128, D))[1]))
    return out.reshape((3, 128, D)), x.reshape((128, 3 * D))


@pytest.mark.parametrize("mode", MODES)
def test_a_kernel_may_return_a_reshape_of_a_whole_tensor(mode):
    k = neuron.kernel(returns_a_reshape, mode=mode)
    for _ in range(2):  # the second call takes the cached path
        out, same = k(X)
        assert out.shape == (3, 128, D) and same.shape == (128, 3 * D)
        np.testing.assert_array_equal(out, X.reshape(3, 128, D)[[0, 2, 1]])
        np.testing.assert_array_equal(same, X.reshape(128, 3 * D))


def reshapes_there_and_back(x):
    """nki-library's MLP (token generation, B = S = 1): the [B, S, H] output seen as [B * S, H]
    to store its rows (a view dropping a size-1 dim), then reshaped back and returned."""
    b, s, h = x.shape
    out = nl.ndarray((b, s, h), x.dtype, buffer=nl.shared_hbm)
    rows = out.reshape((b * s, h))
    nl.store(rows, nl.multiply(nl.load(x.reshape((b * s, h))), 2.0))
    return [rows.reshape((b, s, h))]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape", ((1, 1, 64), (2, 3, 64)))
def test_a_view_reshaped_back_to_its_tensors_shape_is_that_tensor(mode, shape):
    x = RNG.standard_normal(shape).astype(np.float32)
    out = neuron.kernel(reshapes_there_and_back, mode=mode)(x)
    out = out[0] if isinstance(out, (list, tuple)) else out
    assert out.shape == shape
    np.testing.assert_array_equal(out, x * 2)


def returns_its_output_less_a_unit_dim(x):
    """nki-library's batch-shard kernel: a [G, 1, B, d] output returned as [G, B, d] (a reshape
    that only drops a size-1 dim, so a view rather than a Reshaped)."""
    g, b, d = x.shape
    out = nl.ndarray((g, 1, b, d), x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out[:, 0], src=x)
    return out.reshape((g, b, d))


@pytest.mark.parametrize("mode", MODES)
def test_a_kernel_may_return_its_output_with_a_size_one_dim_dropped(mode):
    x = RNG.standard_normal((4, 3, 16)).astype(np.float32)
    out = neuron.kernel(returns_its_output_less_a_unit_dim, mode=mode)(x)
    assert out.shape == x.shape
    np.testing.assert_array_equal(out, x)


def drops_a_unit_dim(pos):
    """nki-library's position ids: a [B, 1] argument seen as [P, B // P] rows, one per program."""
    out = nl.ndarray((2, pos.shape[0] // 2), pos.dtype, buffer=nl.shared_hbm)
    rows = pos.reshape([2, pos.shape[0] // 2])
    for p in nl.affine_range(2):
        t = nl.ndarray((1, pos.shape[0] // 2), pos.dtype, buffer=nl.sbuf)
        nisa.dma_copy(t, rows[p, :])
        nisa.dma_copy(out[p:p + 1, :], t)
    return out


@pytest.mark.parametrize("mode", MODES)
def test_a_reshape_that_drops_size_one_dims_is_subscripted_like_numpy(mode):
    pos = RNG.integers(0, 100, (8, 1)).astype(np.int32)
    out = neuron.kernel(drops_a_unit_dim, mode=mode)(pos)
    np.testing.assert_array_equal(out, pos.reshape(2, 4))


def cache_update_through_a_squeezed_view(cache, idx, v):
    """nki-library's KV-cache update: the [B, 1, S, d] cache squeezed to [B, S, d] (a reshape
    that drops the size-1 head dim), rows written at a run-time position given by scalar_offset
    with indirect_dim=1, which counts in the squeezed view's dims (S), not the storage's."""
    pos = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(pos, idx[0:1, :])
    squeezed = cache.reshape((2, 16, 8))
    rows = nl.load(v)
    nisa.dma_copy(dst=squeezed.ap([[8, 3], [1, 8]], offset=16 * 8, scalar_offset=pos,
                                  indirect_dim=1), src=rows)
    return cache


@pytest.mark.parametrize("mode", MODES)
def test_scalar_offset_counts_in_the_dims_of_a_squeezed_view(mode):
    cache = np.zeros((2, 1, 16, 8), np.float32)
    v = RNG.standard_normal((3, 8)).astype(np.float32)
    neuron.kernel(cache_update_through_a_squeezed_view, mode=mode)(cache, np.array([[5]], np.int32),
                                                                    v)
    want = np.zeros_like(cache)
    want[1, 0, 5:8] = v
    np.testing.assert_array_equal(cache, want)
