# Legacy-API forms that AWS's published NxD kernels (neuronx-distributed's top-k, router,
# find-index, indexed-flatten and output-projection kernels) use: tiles made in an
# nl.static_range loop used after it, isinstance(x, nt.tensor), a one-element tile plus a program
# id as a runtime offset, nl.ds subscripts of reshaped HBM tensors, reshaped[j][grid], an index
# grid as a value with a lower-rank tile partition aligned, nisa.tensor_tensor of [P, H] into
# [P, H, T], and nki.baremetal of a launch grid; and forms of vLLM's paged flash attention and
# nki-llama's attention (a masked grid past a reshaped size-1 dim, nl.where of index-grid
# comparisons); simulated and native, each against NumPy.
import numpy as np
import pytest

import neuron
import neuron.compat

neuron.compat.install()
from neuronxcc import nki  # noqa: E402
import neuronxcc.nki.isa as nisa  # noqa: E402
import neuronxcc.nki.language as nl  # noqa: E402
import neuronxcc.nki.typing as nt  # noqa: E402

RNG = np.random.default_rng(71)


def both(kernel, *args):
    """The kernel's outputs simulated and natively (asserted bit-identical)."""
    sim = nki.simulate_kernel(kernel, *args)
    nat = nki.baremetal(kernel)(*args)
    for s, n in zip(sim if isinstance(sim, tuple) else (sim,),
                    nat if isinstance(nat, tuple) else (nat,)):
        np.testing.assert_array_equal(np.asarray(s).view(np.uint8), np.asarray(n).view(np.uint8))
    return sim


def test_static_range_tiles_live_after_the_loop_and_isinstance_of_nt_tensor():
    def kernel(x):
        assert isinstance(x, nt.tensor) and isinstance(x, nt.tensor[4, 8])
        assert not isinstance(x, nt.tensor[4, 9]) and not isinstance(2.0, nt.tensor)
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.load(x)
        for i in nl.static_range(3):
            v = nl.add(t, float(i))
        nl.store(out, nl.copy(v))  # the last iteration's tile
        return out

    x = RNG.standard_normal((4, 8)).astype(np.float32)
    np.testing.assert_array_equal(both(kernel, x), x + 2)


def test_a_one_element_tile_plus_a_program_id_is_a_runtime_offset():
    def kernel(x, start):
        out = nl.ndarray((2, 4), dtype=x.dtype, buffer=nl.shared_hbm)
        pid = nl.program_id(0)
        off = nl.load(start) + pid * 4
        i0, i1 = nl.arange(1)[:, None], nl.arange(4)[None, :]
        nl.store(out[i0 + pid, i1], nl.load(x[i0, i1 + off]))
        return out

    x = np.arange(32, dtype=np.float32).reshape(1, 32)
    start = np.array([[3]], np.int32)
    for k in (nki.simulate_kernel, lambda k, *a: nki.baremetal(k)(*a)):
        got = k(nki.jit(kernel)[2], x, start)
        np.testing.assert_array_equal(got, x[0, 3:11].reshape(2, 4))


def test_subscripts_of_reshaped_hbm_tensors():
    def kernel(x, w):
        out = nl.ndarray((16, 32), dtype=x.dtype, buffer=nl.shared_hbm)
        rows = out.reshape((64, 8))
        for i in nl.affine_range(2):  # nl.ds of a reshaped tensor, with a loop index
            nl.store(rows[nl.ds(32 * i, 32), :], nl.load(x[nl.ds(32 * i, 32), :]))
        picked = nl.ndarray((3, 5), dtype=w.dtype, buffer=nl.shared_hbm)
        blocks = w.reshape((2, 3, 5))
        i_p, i_f = nl.mgrid[0:3, 0:5]
        nl.store(picked, nl.load(blocks[1][i_p, i_f]))  # reshaped[j][grid]
        return out, picked

    x = RNG.standard_normal((64, 8)).astype(np.float32)
    w = RNG.standard_normal((6, 5)).astype(np.float32)
    out, picked = both(kernel, x, w)
    np.testing.assert_array_equal(out, x.reshape(16, 32))
    np.testing.assert_array_equal(picked, w[3:6])


def test_runtime_offsets_in_reshaped_tensors_and_skipped_row_loads():
    """NxDI's chunked prefill: a one-element tile (and a program id in a size-1 dim) in the
    subscript of a reshaped tensor, and nl.load(mode=oob_mode.skip) of rows chosen at run
    time straight into a buffer whose skipped rows keep their values."""
    from neuronxcc.nki.isa.constants import oob_mode

    def kernel(q, tile_idx, table, rows):
        d, s = q.shape
        tiles = q.reshape((1, d, s // 128, 128))
        ti = nl.load(tile_idx)
        picked = nl.ndarray((d, 256), dtype=q.dtype, buffer=nl.shared_hbm)
        nl.store(picked[:, 0:128], nl.load(tiles[nl.program_id(0), :, ti[0, 1], :]))
        one_tile = q[:, 0:128].reshape((1, d, 1, 128))  # the runtime offset in a size-1 dim
        nl.store(picked[:, 128:256], nl.load(one_tile[nl.program_id(0), :, ti[0, 0], :]))
        gathered = nl.ndarray((32, 8), dtype=table.dtype, buffer=nl.shared_hbm)
        ids = nl.load(rows)
        i_p, i_f = nl.arange(32)[:, None], nl.arange(8)[None, :]
        buf = nl.full((32, 8), -1.0, dtype=table.dtype)
        buf[i_p, i_f] = nl.load(table[ids[i_p, 0], i_f], mode=oob_mode.skip)
        nl.store(gathered, buf)
        return picked, gathered

    q = RNG.standard_normal((16, 512)).astype(np.float32)
    table = RNG.standard_normal((64, 8)).astype(np.float32)
    rows = RNG.integers(0, 64, (32, 1)).astype(np.int32)
    rows[::3] = 1000  # outside the table: skipped
    picked, gathered = both(kernel, q, np.array([[0, 2]], np.int32), table, rows)
    np.testing.assert_array_equal(picked, np.concatenate([q[:, 256:384], q[:, 0:128]], 1))
    want = table[np.minimum(rows[:, 0], 63)]
    want[::3] = -1.0
    np.testing.assert_array_equal(gathered, want)


def test_an_index_grid_as_a_value_against_a_lower_rank_tile():
    def kernel(idx):
        P, K = idx.shape
        out = nl.ndarray((P, 8), dtype=nl.float32, buffer=nl.shared_hbm)
        hits = nl.equal(nl.load(idx), nl.arange(8)[None, None, :])  # [P, K] vs [1, 1, 8]
        nl.store(out, nisa.tensor_reduce(data=hits.astype(nl.float32), axis=1, op=nl.add))
        return out

    idx = RNG.integers(0, 8, (16, 3)).astype(np.int32)
    want = (idx[:, :, None] == np.arange(8)).sum(1).astype(np.float32)
    np.testing.assert_array_equal(both(kernel, idx), want)


def test_tensor_tensor_broadcasts_a_prefix_shaped_operand_along_trailing_dims():
    def kernel(x, w):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        xt = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        for h in range(x.shape[1]):
            xt[:, h, :] = nl.load(x[:, h, :])
        r = nisa.tensor_tensor(xt, nl.load(w), nl.multiply)  # [P, H, T] * [P, H]
        for h in range(x.shape[1]):
            nl.store(out[:, h, :], r[:, h, :])
        return out

    x = RNG.standard_normal((32, 2, 16)).astype(np.float32)
    w = RNG.standard_normal((32, 2)).astype(np.float32)
    np.testing.assert_array_equal(both(kernel, x, w), x * w[:, :, None])


def test_baremetal_keeps_the_launch_grid():
    @nki.jit
    def rows(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        pid = nl.program_id(0)
        i_p, i_f = nl.mgrid[0:1, 0:4]
        nl.store(out[pid + i_p, i_f], nl.add(nl.load(x[pid + i_p, i_f]), 1.0))
        return out

    x = RNG.standard_normal((2, 4)).astype(np.float32)
    np.testing.assert_array_equal(nki.baremetal(rows[2])(x), x + 1)


# ---- forms of vLLM's paged flash attention, nki-llama's and trnfft's kernels ---------------------

def test_masked_load_whose_grid_runs_past_a_reshaped_size1_dim():
    # vLLM's load_block_tables when the context is one tile: tab.reshape((1, n)) loaded by a
    # 128-row grid whose rows past the first the mask drops (was an [index] error); without
    # the mask, the same subscript is an error naming the dim.
    def kernel(tab, rows):
        t = tab.reshape((rows, tab.shape[0] // rows))
        out = nl.ndarray(t.shape, dtype=nl.int32, buffer=nl.shared_hbm)
        sb = nl.zeros((nl.par_dim(128), t.shape[1]), dtype=nl.int32)
        i_p, i_f = nl.arange(128)[:, None], nl.arange(t.shape[1])[None, :]
        sb[i_p, i_f] = nl.load(t[i_p, i_f], dtype=nl.int32, mask=(i_p < rows))
        nl.store(out[i_p, i_f], sb[i_p, i_f], mask=(i_p < rows))
        return out
    for rows in (1, 3):
        tab = np.arange(8 * rows, dtype=np.int32)
        np.testing.assert_array_equal(both(kernel, tab, rows).ravel(), tab)

    def unmasked(tab):
        t = tab.reshape((1, 8))
        out = nl.ndarray((128, 8), dtype=nl.int32, buffer=nl.shared_hbm)
        i_p, i_f = nl.arange(128)[:, None], nl.arange(8)[None, :]
        nl.store(out[i_p, i_f], nl.load(t[i_p, i_f]))
        return out
    with pytest.raises(neuron.NeuronError, match="dim 0 of the reshaped 'tab' has size 1 but "
                                                 "the subscript covers 0..127") as e:
        nki.simulate_kernel(unmasked, np.arange(8, dtype=np.int32))
    assert e.value.rule == "index"


def test_where_with_a_comparison_of_index_grids():
    # nki-llama's causal flash attention: nl.where(i_q >= i_k, scores, -9984), as NKI's
    # simulator evaluates index grids as arrays; & joins comparisons.
    def kernel(x):
        out = nl.ndarray((2, 128, 64), dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.load(x)
        i_q, i_k = nl.arange(128)[:, None], nl.arange(64)[None, :]
        nl.store(out[0], nl.where(i_q >= i_k, t, nl.full((128, 64), -9984.0,
                                                         dtype=nl.float32)))
        nl.store(out[1], nl.where((i_q >= i_k) & (i_k + 8 > i_q), t, -1.0))
        return out
    x = RNG.standard_normal((128, 64)).astype(np.float32)
    q, k = np.arange(128)[:, None], np.arange(64)[None, :]
    got = both(kernel, x)
    np.testing.assert_array_equal(got[0], np.where(q >= k, x, -9984.0))
    np.testing.assert_array_equal(got[1], np.where((q >= k) & (k + 8 > q), x, -1.0))
