# Rolled loops unrolled where the kernel's Python needs an index value (neuron/unroll.py): lists
# of tiles indexed by loop indices, comparisons, range(k); loops that never need one stay rolled.
import numpy as np
import pytest

import neuron
import neuron.isa as nisa
import neuron.language as nl

RNG = np.random.default_rng(31)
f64 = np.float64


def hoisted_matmul(lhsT, rhs):
    """The shape of the NKI tutorial's hoisted-load matmul: tiles kept in Python lists that a
    later loop indexes with its own loop index."""
    K, M = lhsT.shape
    _, N = rhs.shape
    out = nl.ndarray((M, N), nl.float32, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // 128):
        lhs_tiles = []
        for k in nl.affine_range(K // 128):
            t = nl.ndarray((128, 128), lhsT.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=lhsT[k * 128:(k + 1) * 128, m * 128:(m + 1) * 128])
            lhs_tiles.append(t)
        for n in nl.affine_range(N // 256):  # never needs a value: stays rolled
            rhs_tiles = []
            for k in nl.affine_range(K // 128):
                t = nl.ndarray((128, 256), rhs.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=t, src=rhs[k * 128:(k + 1) * 128, n * 256:(n + 1) * 256])
                rhs_tiles.append(t)
            acc = nl.ndarray((128, 256), nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // 128):
                nisa.nc_matmul(dst=acc, stationary=lhs_tiles[k], moving=rhs_tiles[k])
            res = nl.ndarray((128, 256), nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(dst=res, src=acc, dtype=nl.float32)
            nisa.dma_copy(dst=out[m * 128:(m + 1) * 128, n * 256:(n + 1) * 256], src=res)
    return out


@pytest.mark.parametrize("mode", ["native", "simulate"])
def test_lists_of_tiles_indexed_by_loop_indices(mode):
    a = RNG.uniform(-1, 1, (384, 256)).astype(np.float32)
    b = RNG.uniform(-1, 1, (384, 512)).astype(np.float32)
    got = neuron.kernel(hoisted_matmul, mode=mode)(a, b)
    np.testing.assert_allclose(got, a.astype(f64).T @ b.astype(f64), rtol=1e-4, atol=1e-4)


def test_the_needing_loop_and_the_closed_ones_unroll_enclosing_loops_stay_rolled():
    ir = str(neuron.kernel(hoisted_matmul).trace(((384, 256), nl.float32),
                                                 ((384, 512), nl.float32)))
    # `lhs_tiles[k]` needs k: that k loop unrolls, with the two k loops that filled the lists
    # (closed by then); m and n, still open around the use, stay rolled.
    assert ir.count("affine_range(") == 2 and "affine_range(3)" not in ir


def first_tile_special(x):
    out = nl.ndarray(x.shape, nl.float32, buffer=nl.shared_hbm)
    for i in nl.affine_range(x.shape[0] // 128):
        t = nl.load(x[i * 128:(i + 1) * 128, :])
        if i == 0:  # a comparison on the index: Python needs its value
            t = t * 2.0
        nl.store(out[i * 128:(i + 1) * 128, :], t + float(min(i, 1)))
    for j in nl.affine_range(2):  # opened after: stays rolled
        nl.store(out[j * 128:(j + 1) * 128, 0:1], nl.load(x[j * 128:(j + 1) * 128, 0:1]))
    return out


def test_comparisons_and_min_unroll_and_later_loops_stay_rolled():
    x = RNG.uniform(-1, 1, (384, 8)).astype(np.float32)
    want = x.astype(f64).copy()
    want[:128] *= 2
    want[128:] += 1
    want[:256, 0] = x[:256, 0]
    np.testing.assert_allclose(neuron.kernel(first_tile_special)(x), want, rtol=1e-6)
    ir = str(neuron.kernel(first_tile_special).trace(((384, 8), nl.float32)))
    assert ir.count("affine_range(") == 1 and "affine_range(2)" in ir


def true_division_of_an_index(x):
    out = nl.ndarray(x.shape, nl.float32, buffer=nl.shared_hbm)
    for i in nl.affine_range(3):  # `i / 2` is Python arithmetic on the index: unrolled
        nl.store(out[i * 128:(i + 1) * 128, :], nl.load(x[i * 128:(i + 1) * 128, :]) + i / 2)
    return out


@pytest.mark.parametrize("mode", ("native", "eager"))
def test_true_division_of_a_loop_index_is_python_arithmetic(mode):
    x = RNG.uniform(-1, 1, (384, 8)).astype(np.float32)
    want = x + np.repeat([0.0, 0.5, 1.0], 128)[:, None]
    np.testing.assert_allclose(neuron.kernel(true_division_of_an_index, mode=mode)(x), want,
                               rtol=1e-6)


def rolled_only(x):
    out = nl.ndarray(x.shape, nl.float32, buffer=nl.shared_hbm)
    for i in nl.affine_range(3):
        nl.store(out[i * 128:(i + 1) * 128, :], nl.load(x[i * 128:(i + 1) * 128, :]) + 1.0)
    return out


def test_kernels_that_never_need_a_value_trace_once_rolled():
    calls = []

    def k(x):
        calls.append(1)
        return rolled_only(x)
    assert "affine_range(3)" in str(neuron.kernel(k).trace(((384, 8), nl.float32)))
    assert len(calls) == 1


def program_id_as_list_index(x):
    out = nl.ndarray((256, 8), nl.float32, buffer=nl.shared_hbm)
    scales = [1.0, 2.0, 3.0, 4.0]
    pid = nl.program_id(0)
    rows = x.shape[0] // nl.num_programs(0)  # the grid's size as an int
    part = slice(pid * rows, (pid + 1) * rows)
    nl.store(out[part, :], nl.load(x[part, :]) * scales[pid])
    return out


@pytest.mark.parametrize("mode", ("native", "simulate", "eager"))
def test_a_program_id_used_as_a_value_traces_each_program(mode):
    # NKI 0.3+: program ids and grid sizes are Python ints at trace time. The compiled kernel
    # traces each program with its ids as ints (one IR, every body) and compiles per grid.
    x = RNG.standard_normal((256, 8)).astype(np.float32)
    k = neuron.kernel(program_id_as_list_index, mode=mode)
    np.testing.assert_array_equal(k[2](x), np.concatenate([x[:128], 2 * x[128:]]))
    np.testing.assert_array_equal(k[4](x), x * np.repeat([1.0, 2.0, 3.0, 4.0], 64)[:, None]
                                  .astype(np.float32))  # another grid: traced again


def one_head(x):
    """nki-library's output projection: an SBUF .ap() offset by head * (elements per row) in a
    loop over the heads, here one head. A one-trip loop's index is the constant 0, so the offset
    stays inside partition 0's row instead of naming a partition by a loop variable."""
    out = nl.ndarray((128, 16), x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    for head in nl.affine_range(1):
        nl.store(out, nl.copy(t.ap([[32, 128], [1, 16]], offset=head * 32 + 16)))
    return out


@pytest.mark.parametrize("mode", ("native", "simulate", "eager"))
def test_a_one_trip_loops_index_is_a_constant(mode):
    x = RNG.standard_normal((128, 32)).astype(np.float32)
    np.testing.assert_array_equal(neuron.kernel(one_head, mode=mode)(x), x[:, 16:32])
    ir = str(neuron.kernel(one_head).trace(x))
    assert "affine_range(1)" in ir  # the loop stays: a block for the tiles made inside it


def tiles_kept_in_a_list(x):
    """nki-library's depthwise conv1d: tiles allocated in one loop, kept in a Python list and
    used by a later loop. With one trip (a one-tile kernel) neither loop's index is needed as a
    value, so both stay rolled and the tile would be used outside its loop's block; the kernel
    is traced again with its loops unrolled, as NKI (loops are Python ranges) runs it."""
    n = x.shape[0] // 128
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    tiles = []
    for i in nl.affine_range(n):
        t = nl.ndarray((128, x.shape[1]), x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[i * 128:(i + 1) * 128, :])
        tiles.append(t)
    for j in nl.affine_range(n):
        nisa.dma_copy(dst=out[j * 128:(j + 1) * 128, :], src=tiles[j])
    return out


@pytest.mark.parametrize("mode", ("native", "simulate", "eager"))
@pytest.mark.parametrize("rows", (128, 256))
def test_a_tile_kept_past_its_rolled_loop_unrolls_the_loop(mode, rows):
    x = np.random.default_rng(3).standard_normal((rows, 64)).astype(np.float32)
    np.testing.assert_array_equal(neuron.kernel(tiles_kept_in_a_list, mode=mode)(x), x)
