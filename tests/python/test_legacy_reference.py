"""Legacy-API patterns of nki-samples' reference kernels (flash attention forward and backward,
the Stable Diffusion attention, fused RMSNorm-QKV, nearest-neighbour resize, adaptive pooling,
the fp8 double-row matmul; in that repository until January 2026), each in a small kernel of
our own against NumPy. The kernels themselves are not ours to ship: docs/nki-compat.md
"nki-samples' reference kernels" says how to run them."""
import numpy as np

import neuron.compat

neuron.compat.install()

from neuronxcc import nki  # noqa: E402
import neuronxcc.nki.isa as nisa  # noqa: E402
import neuronxcc.nki.language as nl  # noqa: E402

f64 = np.float64


def rand(*shape):
    return np.random.default_rng(sum(shape)).random(shape, dtype=np.float32)


@nki.jit(mode="simulation")
def grid_accumulate(a, b):
    # The SD attention's `psum[ip, if] += nisa.nc_matmul(moving=v[ip, j, if], ...)`: index-grid
    # subscripts on both sides of the `+=`.
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    st = nl.ndarray((nl.par_dim(128), 3, 128), dtype=nl.float32)
    mv = nl.ndarray((nl.par_dim(128), 3, 64), dtype=nl.float32)
    for j in nl.affine_range(3):
        st[:, j, :] = nl.load(a[j])
        mv[:, j, :] = nl.load(b[j])
    ip, i_m, i_n = nl.arange(128)[:, None], nl.arange(128)[None, :], nl.arange(64)[None, :]
    acc = nl.zeros((nl.par_dim(128), 64), dtype=nl.float32, buffer=nl.psum)
    for j in nl.affine_range(3):
        acc[ip, i_n] += nisa.nc_matmul(moving=mv[ip, j, i_n], stationary=st[ip, j, i_m])
    nl.store(out, value=nl.copy(acc))
    return out


def test_grid_subscripted_psum_accumulation():
    a, b = rand(3, 128, 128), rand(3, 128, 64)
    want = sum(a[j].astype(f64).T @ b[j] for j in range(3))
    np.testing.assert_allclose(grid_accumulate(a, b), want, rtol=1e-4, atol=1e-4)


@nki.jit(mode="simulation")
def transposed_store(x):
    # out[b, q, d] from a [d, q] tile, the SD attention's output store `out[b, i*Q + if, ip]`;
    # the tile is scaled by a pending nc_transpose result on the way (`t * nisa.nc_transpose(s)`).
    B, D, Q = x.shape
    out = nl.ndarray((B, Q, D), dtype=x.dtype, buffer=nl.shared_hbm)
    ip, i_f = nl.arange(D)[:, None], nl.arange(Q)[None, :]
    for b in nl.affine_range(B):
        t = nl.load(x[b])
        ones = nl.full((Q, D), 2.0, dtype=nl.float32)
        nl.store(out[b, i_f, ip], value=t * nisa.nc_transpose(ones))
    return out


@nki.jit(mode="simulation")
def transposed_load(x):
    out = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
    ix, iy = nl.arange(128)[:, None], nl.arange(64)[None, :]
    nl.store(out, value=nl.load(x[iy, ix]))
    return out


def test_transposed_store_and_load_and_pending_operand():
    x = rand(2, 64, 96)
    np.testing.assert_array_equal(transposed_store(x), 2 * x.transpose(0, 2, 1))
    y = rand(64, 128)
    np.testing.assert_array_equal(transposed_load(y), y.T)


@nki.jit(mode="simulation")
def gather_rows_masked(data, idx):
    # The resize's gather: rows chosen by an index tile, masked to the first `n` partitions,
    # stored through a reshape whose rows (here 40..79 of a merged [10, 7]) are no box of the
    # tensor's dims, and nl.floor of an int32 tile.
    n = idx.shape[0]
    out = nl.ndarray((2, 10, 7, 16), dtype=data.dtype, buffer=nl.shared_hbm)
    flat = out.reshape((2, 70, 16))
    ip, i_f = nl.arange(128)[:, None], nl.arange(16)[None, :]
    it = nl.load(idx[nl.arange(n)[:, None], nl.arange(1)[None, :]])
    rows = nl.ndarray((128, 1), dtype=nl.int32)
    rows[...] = nl.floor(nl.zeros((128, 1), dtype=nl.int32))
    rows[nl.arange(n)[:, None], nl.arange(1)[None, :]] = nl.floor(it)
    t = nl.load(data[rows[ip, 0], i_f], mask=(ip < n))
    nl.store(flat[1, 40 + ip, i_f], value=t, mask=(ip < n))
    return out


def test_masked_row_gather_into_a_reshaped_run():
    data = rand(50, 16)
    idx = np.random.default_rng(1).integers(0, 50, size=(30, 1)).astype(np.int32)
    got = gather_rows_masked(data, idx).reshape(2, 70, 16)
    np.testing.assert_array_equal(got[1, 40:70], data[idx[:, 0]])


@nki.jit(mode="simulation")
def masked_transpose_and_sink_sum(x):
    # RMSNorm-QKV's `nisa.nc_matmul(t, identity, is_transpose=True, mask=cond)` under a true
    # and a false condition, and flash attention backward's sink gradient: a pending
    # tensor_reduce result accumulated by nl.loop_reduce, its partition sum ([1, 1]) stored into
    # one element of a [B, H] tensor.
    out = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.shared_hbm)
    total = nl.ndarray((1, 2), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(x[0])
    ident = nl.zeros((128, 128), dtype=nl.float32)
    res = nl.full((128, 128), -1.0, dtype=nl.float32, buffer=nl.psum)
    res[...] = nisa.nc_matmul(t, ident, is_transpose=True, mask=(0 < 1))
    res[...] = nisa.nc_matmul(ident, ident, is_transpose=True, mask=(1 < 0))  # dropped
    nl.store(out, value=nl.copy(res))
    acc = nl.zeros((128, 1), dtype=nl.float32)
    for k in nl.affine_range(2):
        s = nisa.tensor_reduce(np.add, data=nl.load(x[k]), axis=(1,))
        acc[...] = nl.loop_reduce(s, op=np.add, loop_indices=(k,))
    nl.store(total[0, 1], value=nisa.tensor_partition_reduce(np.add, acc))
    return out, total


def test_masked_is_transpose_and_loop_reduce_of_a_pending_result():
    x = rand(2, 128, 128)
    out, total = masked_transpose_and_sink_sum(x)
    np.testing.assert_array_equal(out, x[0].T)
    np.testing.assert_allclose(total[0, 1], x.astype(f64).sum(), rtol=1e-5)


@nki.jit(mode="simulation")
def double_row(a, b, scale):
    # perf_mode="double_row_gen3": [K, 2, M] and [K, 2, N] operands contract over both rows;
    # the result rows then scaled by a [P, 1] column through nisa.tensor_tensor.
    out = nl.ndarray((64, 96), dtype=nl.float32, buffer=nl.shared_hbm)
    i_k, i_r, i_m = nl.mgrid[0:128, 0:2, 0:64]
    st = nl.load(a[i_k, i_r, i_m])
    i_k, i_r, i_n = nl.mgrid[0:128, 0:2, 0:96]
    mv = nl.load(b[i_k, i_r, i_n])
    acc = nl.zeros((64, 96), dtype=nl.float32, buffer=nl.psum)
    acc[...] += nisa.nc_matmul(st, mv, perf_mode="double_row_gen3")
    r = nisa.tensor_tensor(nl.copy(acc), nl.load(scale), nl.multiply)
    nl.store(out, value=r)
    return out


def test_double_row_matmul_and_column_operand():
    a, b, scale = rand(128, 2, 64), rand(128, 2, 96), rand(64, 1)
    want = (np.einsum("krm,krn->mn", a.astype(f64), b)) * scale
    np.testing.assert_allclose(double_row(a, b, scale), want, rtol=1e-5, atol=1e-5)


def test_current_api_reshape_rows_that_are_no_box():
    import neuron
    import neuron.language as cnl

    @neuron.kernel(mode="simulate")
    def rows_40_to_69(x):
        out = cnl.ndarray((2, 10, 7, 16), cnl.float32, buffer=cnl.shared_hbm)
        t = cnl.load(x)
        cnl.store(out.reshape((2, 70, 16))[1, 40:70, :], t)
        return out

    x = rand(30, 16)
    got = np.asarray(rows_40_to_69(x)).reshape(2, 70, 16)
    np.testing.assert_array_equal(got[1, 40:70], x)


def test_current_api_reshape_a_column_of_a_split_dim():
    # trnfft's butterflies: x (B, n) reshaped to (rows, m), then column k of the rows, loaded
    # and stored (elements r * m + k: one stride of the storage, no run); any base shape.
    import neuron
    import neuron.language as cnl

    def column(x, rows, m, k):
        x2 = x.reshape((rows, m))
        out = cnl.ndarray(x.shape, x.dtype, buffer=cnl.shared_hbm)
        cnl.store(out.reshape((rows, m))[0:rows, m - 1 - k:m - k], cnl.load(x2[0:rows, k:k + 1]))
        return out

    for shape in [(64,), (1, 64), (2, 32), (4, 16)]:
        x = np.arange(64, dtype=np.float32).reshape(shape)
        for mode in ("simulate", "native"):
            got = np.asarray(neuron.kernel(column, mode=mode)(x, 32, 2, 1)).reshape(32, 2)
            np.testing.assert_array_equal(got[:, 0], x.reshape(32, 2)[:, 1])


def test_no_box_rows_of_a_strided_view_are_refused():
    import pytest
    import neuron
    import neuron.language as cnl
    from neuron.errors import NeuronError

    @neuron.kernel(mode="simulate")
    def strided(x):
        out = cnl.ndarray((2, 10, 7, 32), cnl.float32, buffer=cnl.shared_hbm)
        half = out[:, :, :, 0:16]  # every row 32 apart: the merged rows are no run of storage
        cnl.store(half.reshape((2, 70, 16))[1, 40:70, :], cnl.load(x))
        return out

    with pytest.raises(NeuronError, match="do not form a box"):
        strided(rand(30, 16))
