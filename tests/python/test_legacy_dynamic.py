# The dynamic half of the legacy NKI generation (neuronxcc.nki through neuron.compat,
# NKI_API.md 4.3, 4.9, 4.10): index tiles in HBM subscripts (indirect DMA rows, with oob_mode),
# one-element tiles as runtime offsets, nl.dynamic_range over a tile's value, gather_flattened
# and local_gather, each against a NumPy reference on the simulator and natively.
import numpy as np
import pytest

import neuron
import neuron.compat

neuron.compat.install()
from neuronxcc import nki  # noqa: E402
import neuronxcc.nki.isa as nisa  # noqa: E402
import neuronxcc.nki.language as nl  # noqa: E402
from helpers import line_of  # noqa: E402

RNG = np.random.default_rng(23)
TABLE = RNG.uniform(-4, 4, (100, 64)).astype(np.float32)


def ints(shape, values, dtype=np.int32):
    return np.asarray(values, dtype).reshape(shape)


def both(fn, *args):
    """fn on the simulator and natively: bit-identical outputs; returns them."""
    sim = nki.simulate_kernel(fn, *[a.copy() for a in args])
    nat = nki.jit(fn)(*[a.copy() for a in args])
    sims, nats = (sim if isinstance(sim, tuple) else (sim,)), (nat if isinstance(nat, tuple)
                                                                 else (nat,))
    for a, b in zip(sims, nats):
        np.testing.assert_array_equal(a.view(np.uint8), b.view(np.uint8))
    return sim


def gather_rows(table, idx):
    out = nl.ndarray((32, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    i_p, i_f = nl.arange(32)[:, None], nl.arange(64)[None, :]  # arange, not mgrid (as NKI)
    rows = nl.load(idx)
    nl.store(out[i_p, i_f], nl.load(table[rows[i_p, 0], i_f]))
    return out


def test_an_index_tile_in_the_row_subscript_loads_those_rows():
    idx = ints((32, 1), [(p * 37 + 5) % 100 for p in range(32)])
    np.testing.assert_array_equal(both(gather_rows, TABLE, idx), TABLE[idx[:, 0]])


def gather_rows_skip(table, idx):
    out = nl.ndarray((32, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    i_p, i_f = nl.arange(32)[:, None], nl.arange(64)[None, :]
    t = nl.full((32, 64), -1.0, dtype=nl.float32)
    nisa.dma_copy(dst=t, src=table[nl.load(idx)[i_p, 0], i_f], oob_mode=nisa.oob_mode.skip)
    nl.store(out, t)
    return out


def test_dma_copy_skips_out_of_range_rows_and_the_default_names_the_row():
    idx = ints((32, 1), [(p * 37 + 5) % 100 for p in range(32)])
    idx[3, 0] = 100
    want = TABLE[np.minimum(idx[:, 0], 99)].copy()
    want[3] = -1.0
    np.testing.assert_array_equal(both(gather_rows_skip, TABLE, idx), want)
    with pytest.raises(neuron.NeuronError) as e:
        nki.simulate_kernel(gather_rows, TABLE, idx)
    assert "row index 100" in str(e.value) and "element 3" in str(e.value)
    assert e.value.line == line_of(gather_rows, "table[rows[i_p, 0], i_f]")


def scatter_rows(src, idx):
    out = nl.ndarray((50, 16), dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out, nl.zeros((50, 16), dtype=nl.float32))
    i_p, i_f = nl.arange(16)[:, None], nl.arange(16)[None, :]
    out[nl.load(idx)[i_p, 0], i_f] = nl.load(src)
    return out


def test_an_index_tile_in_the_row_subscript_of_a_store_scatters_rows():
    src = RNG.uniform(-1, 1, (16, 16)).astype(np.float32)
    idx = ints((16, 1), [49 - 3 * p for p in range(16)])
    want = np.zeros((50, 16), np.float32)
    want[idx[:, 0]] = src
    np.testing.assert_array_equal(both(scatter_rows, src, idx), want)


def dynamic_offset(x, off):
    out = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.shared_hbm)
    i_p, i_f = nl.mgrid[0:128, 0:8]
    o = nl.load(off)
    t = nl.load(x)
    nl.store(out, nisa.tensor_copy_dynamic_src(t[i_p, o[0, 0] + i_f]))
    return out


@pytest.mark.parametrize("k", [0, 5, 24])
def test_a_one_element_tile_offsets_a_subscript_at_run_time(k):
    x = RNG.uniform(-1, 1, (128, 32)).astype(np.float32)
    np.testing.assert_array_equal(both(dynamic_offset, x, ints((1, 1), [k])), x[:, k:k + 8])


def runtime_sum(x, n):
    out = nl.ndarray((128, 16), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((128, 16), dtype=nl.float32)
    i_p, i_f = nl.mgrid[0:128, 0:16]
    for i in nl.dynamic_range(nl.load(n)[0, 0]):
        acc += nl.load(x[i * 128 + i_p, i_f])
    nl.store(out, acc)
    return out


TRACES = []


@pytest.mark.parametrize("n", [0, 2, 5])
def test_dynamic_range_reads_its_trip_count_from_a_tile(n):
    x = RNG.uniform(-1, 1, (640, 16)).astype(np.float32)
    want = x.astype(np.float64).reshape(5, 128, 16)[:n].sum(axis=0)
    np.testing.assert_allclose(both(runtime_sum, x, ints((1, 1), [n])), want, rtol=1e-5,
                               atol=1e-5)


def gathers(data, idx, lidx):
    g = nl.ndarray((32, 8), dtype=nl.float32, buffer=nl.shared_hbm)
    lg = nl.ndarray((32, 6), dtype=nl.float32, buffer=nl.shared_hbm)
    d = nl.load(data)
    nl.store(g, nl.gather_flattened(d, nl.load(idx)))
    nl.store(lg, nisa.local_gather(d, nl.load(lidx), num_elem_per_idx=2, num_valid_indices=3))
    return g, lg


def test_gather_flattened_and_local_gather():
    data = RNG.uniform(-1, 1, (32, 40)).astype(np.float32)
    idx = ints((32, 8), [(i * 13) % 40 for i in range(256)], np.uint32)
    lidx = ints((32, 1), [(i * 7) % 38 for i in range(32)], np.uint16)
    g, lg = both(gathers, data, idx, lidx)
    np.testing.assert_array_equal(g, np.take_along_axis(data, idx.astype(np.int64), axis=1))
    want = np.empty((32, 6), np.float32)
    for p in range(32):  # group q of 16 partitions reads lidx[16q + k], k < 3
        for k in range(3):
            s = lidx[16 * (p // 16) + k, 0]
            want[p, 2 * k:2 * k + 2] = data[p, s:s + 2]
    np.testing.assert_array_equal(lg, want)


def two_index_tiles(table, idx):
    out = nl.ndarray((32, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    i_p = nl.arange(32)[:, None]
    rows = nl.load(idx)
    nl.store(out, nl.load(table[rows[i_p, 0], rows[i_p, 0]]))
    return out


def test_errors_name_the_rule_and_the_users_line():
    idx = ints((32, 1), list(range(32)))
    with pytest.raises(neuron.NeuronError) as e:
        nki.simulate_kernel(two_index_tiles, TABLE, idx)
    assert e.value.rule == "indirect-dma", str(e.value)
    assert e.value.line == line_of(two_index_tiles, "table[rows[i_p, 0], rows[i_p, 0]]")
    assert "::" not in e.value.message
