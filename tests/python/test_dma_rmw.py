# DMA read-modify-write (neuron/dma_rmw.py) against NumPy: the current API's nisa.dma_compute
# (natively, on the simulator and eagerly, bit for bit) and the legacy nl.atomic_rmw and
# nisa.dma_copy(dst_rmw_op=np.add) (simulator and native); rows named twice are all added.
import numpy as np
import pytest

import neuron
import neuron.compat
import neuron.isa as nisa
import neuron.language as nl
from helpers import line_of

neuron.compat.install()
from neuronxcc import nki  # noqa: E402
import neuronxcc.nki.isa as lisa  # noqa: E402
import neuronxcc.nki.language as lnl  # noqa: E402

RNG = np.random.default_rng(41)
TABLE = RNG.uniform(-4, 4, (50, 16)).astype(np.float32)
VALS = RNG.uniform(-1, 1, (8, 16)).astype(np.float32)
DISTINCT = np.array([[3], [9], [5], [7], [48], [49], [0], [20]], np.int32)
REPEATED = np.array([[3], [3], [5], [7], [3], [49], [0], [5]], np.int32)


def scatter_add(table, idx):  # NumPy: every row applied in partition order
    want = table.copy()
    np.add.at(want, idx[:, 0], VALS)
    return want


def fresh(a):
    return a.copy() if isinstance(a, np.ndarray) else a


def three_ways(fn, *args):
    outs = [neuron.kernel(fn, mode=m)(*[fresh(a) for a in args])
            for m in ("native", "simulate", "eager")]
    for o in outs[1:]:
        np.testing.assert_array_equal(o.view(np.uint8), outs[0].view(np.uint8))
    return outs[0]


# ---- current API: nisa.dma_compute ---------------------------------------------------------------

def compute_scatter(table, vals, idx, unique):
    out = nl.ndarray((50, 16), nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(out, table)
    rows = out.ap([[16, 8], [1, 16]], vector_offset=nl.load(idx))
    nisa.dma_compute(rows, [rows, nl.load(vals)], nl.add, unique_indices=unique)
    return out


def test_scatter_rmw_with_distinct_rows():
    got = three_ways(compute_scatter, TABLE, VALS, DISTINCT, True)
    np.testing.assert_array_equal(got, scatter_add(TABLE, DISTINCT))


def test_scatter_rmw_applies_every_repeated_row_with_unique_indices_false():
    got = three_ways(compute_scatter, TABLE, VALS, REPEATED, False)
    np.testing.assert_array_equal(got, scatter_add(TABLE, REPEATED))


def compute_three(a, b, c):
    out = nl.ndarray((8, 16), nl.bfloat16, buffer=nl.shared_hbm)
    t = nl.ndarray((8, 16), nl.float32)
    nisa.dma_compute(t, [a, nl.load(b), nl.load(c)], nl.add, scales=[1.0, 1.0, 1.0])
    nisa.dma_compute(out, [t, nl.load(c)], np.add)  # to HBM, cast to bf16
    return out


def test_sum_of_three_sources_and_an_hbm_destination():
    a, b, c = (RNG.uniform(-2, 2, (8, 16)).astype(np.float32) for _ in range(3))
    got = three_ways(compute_three, a, b, c).astype(np.float64)
    want = a.astype(np.float64) + b + 2 * c.astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=2 ** -8, atol=1e-6)


def compute_hidden_shard(x, res, shard):
    """nki-library's MLP fused residual add, sharded on the hidden dim: [B, S, H] HBM tensors
    seen as [B * S, shards, H / shards] (reshapes; one shard of them is no view of [B, S, H]) and
    one shard of each added HBM to HBM."""
    b, s, h = x.shape
    out = nl.ndarray((b, s, h), x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(out, x)
    xs, rs, os = (v.reshape((b * s, 2, h // 2)) for v in (x, res, out))
    nisa.dma_compute(dst=os[0:b * s, shard, 0:h // 2], srcs=[xs[0:b * s, shard, 0:h // 2],
                                                            rs[0:b * s, shard, 0:h // 2]],
                     scales=[1.0, 1.0], reduce_op=nl.add)
    return out


@pytest.mark.parametrize("shard", (0, 1))
def test_dma_compute_between_views_of_reshaped_hbm_tensors(shard):
    x, res = (RNG.uniform(-2, 2, (7, 2, 64)).astype(np.float32) for _ in range(2))
    got = three_ways(compute_hidden_shard, x, res, shard)
    want = x.copy()
    cols = slice(32 * shard, 32 * shard + 32)
    want[:, :, cols] = x[:, :, cols] + res[:, :, cols]
    np.testing.assert_array_equal(got, want)


def compute_gather_skip(table, idx):
    out = nl.ndarray((8, 16), nl.float32, buffer=nl.shared_hbm)
    t = nl.full((8, 16), 1.0, nl.float32)
    nisa.dma_compute(t, [t, table.ap([[16, 8], [1, 16]], vector_offset=nl.load(idx))], nl.add,
                     oob_mode=nisa.oob_mode.skip)
    nl.store(out, t)
    return out


def compute_scatter_skip(table, vals, idx):
    out = nl.ndarray((50, 16), nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(out, table)
    rows = out.ap([[16, 8], [1, 16]], vector_offset=nl.load(idx))
    nisa.dma_compute(rows, [nl.load(vals), rows], nl.add, oob_mode=nisa.oob_mode.skip)
    return out


def test_oob_skip_drops_out_of_range_rows_in_gather_and_scatter():
    bad = DISTINCT.copy()
    bad[2, 0] = 50  # one past the last row
    want = 1.0 + np.where(bad < 50, TABLE[np.minimum(bad[:, 0], 49)], 0.0)
    np.testing.assert_array_equal(three_ways(compute_gather_skip, TABLE, bad), want)
    want = TABLE.copy()
    keep = bad[:, 0] < 50
    want[bad[keep, 0]] += VALS[keep]
    np.testing.assert_array_equal(three_ways(compute_scatter_skip, TABLE, VALS, bad), want)


def multiply_op(x):
    t = nl.load(x)
    nisa.dma_compute(t, [t, t], nl.multiply)
    return x


def scaled(x):
    t = nl.load(x)
    nisa.dma_compute(t, [t, t], nl.add, scales=[1.0, 2.0])
    return x


def seventeen(x):
    t = nl.load(x)
    nisa.dma_compute(t, [t] * 17, nl.add)
    return x


def other_rows(x, idx):
    out = nl.ndarray((50, 16), nl.float32, buffer=nl.shared_hbm)
    i = nl.load(idx)
    nisa.dma_compute(out.ap([[16, 8], [1, 16]], vector_offset=i),
                     [x.ap([[16, 8], [1, 16]], vector_offset=i), nl.load(x[0:8, :])], nl.add)
    return out


@pytest.mark.parametrize("fn,rule,text,words", [
    (multiply_op, "reduce-op", "nl.multiply)", "only add"),
    (scaled, "dma-compute", "scales=[1.0, 2.0]", "scales[1] = 2.0"),
    (seventeen, "dma-compute", "[t] * 17", "17 sources"),
    (other_rows, "indirect-dma", "nisa.dma_compute(", "dst's own rows"),
])
def test_refusals_name_the_rule_and_the_users_line(fn, rule, text, words):
    args = (TABLE,) if fn is not other_rows else (TABLE, DISTINCT)
    for mode in ("native", "eager"):
        with pytest.raises(neuron.NeuronError) as e:
            neuron.kernel(fn, mode=mode)(*[fresh(a) for a in args])
        assert e.value.rule == rule and words in e.value.message, str(e.value)
        assert e.value.file == __file__ and e.value.line == line_of(fn, text)


# ---- legacy API: nl.atomic_rmw, nisa.dma_copy(dst_rmw_op=np.add) ------------------------------

def both(fn, *args):
    sim = nki.simulate_kernel(fn, *[a.copy() for a in args])
    nat = nki.jit(fn)(*[a.copy() for a in args])
    np.testing.assert_array_equal(sim.view(np.uint8), nat.view(np.uint8))
    return sim


def legacy_copy_of(table):
    out = lnl.ndarray((50, 16), dtype=lnl.float32, buffer=lnl.shared_hbm)
    j_p, i_f = lnl.arange(50)[:, None], lnl.arange(16)[None, :]
    lnl.store(out[j_p, i_f], lnl.load(table[j_p, i_f]))
    return out


def legacy_atomic(table, vals, idx):
    out = legacy_copy_of(table)
    i_p, i_f = lnl.arange(8)[:, None], lnl.arange(16)[None, :]
    rows = lnl.load(idx)
    lnl.atomic_rmw(out[rows[i_p, 0], i_f], value=lnl.load(vals), op=np.add)
    return out


def legacy_dma_rmw(table, vals, idx):
    out = legacy_copy_of(table)
    i_p, i_f = lnl.arange(8)[:, None], lnl.arange(16)[None, :]
    rows = lnl.load(idx)
    lisa.dma_copy(dst=out[rows[i_p, 0], i_f], src=lnl.load(vals), dst_rmw_op=np.add)
    return out


@pytest.mark.parametrize("fn", [legacy_atomic, legacy_dma_rmw])
@pytest.mark.parametrize("idx", [DISTINCT, REPEATED], ids=["distinct", "repeated"])
def test_legacy_scatter_add_applies_every_row(fn, idx):
    np.testing.assert_array_equal(both(fn, TABLE, VALS, idx), scatter_add(TABLE, idx))


def legacy_direct(table, vals, idx):
    out = legacy_copy_of(table)
    lnl.atomic_rmw(out[10:18, :], value=lnl.load(vals), op=np.add)
    lisa.dma_copy(dst=out[20:28, :], src=lnl.load(vals), dst_rmw_op=np.add)
    i_p, i_f = lnl.arange(8)[:, None], lnl.arange(16)[None, :]
    lnl.atomic_rmw(out[30 + i_p, i_f], value=2.0, op=np.add, mask=(i_p < 4))
    return out


def test_legacy_direct_destinations():
    want = TABLE.copy()
    want[10:18] += VALS
    want[20:28] += VALS
    want[30:34] += 2.0
    np.testing.assert_array_equal(both(legacy_direct, TABLE, VALS, DISTINCT), want)


def legacy_multiply(table, vals, idx):
    out = legacy_copy_of(table)
    lnl.atomic_rmw(out[0:8, :], value=lnl.load(vals), op=np.multiply)
    return out


def legacy_rmw_skip(table, vals, idx):
    out = legacy_copy_of(table)
    i_p, i_f = lnl.arange(8)[:, None], lnl.arange(16)[None, :]
    lisa.dma_copy(dst=out[lnl.load(idx)[i_p, 0], i_f], src=lnl.load(vals), dst_rmw_op=np.add,
                  oob_mode=lisa.oob_mode.skip)
    return out


@pytest.mark.parametrize("fn,rule,text", [
    (legacy_multiply, "reduce-op", "op=np.multiply"),
    (legacy_rmw_skip, "unknown-arg", "lisa.dma_copy("),
])
def test_legacy_refusals(fn, rule, text):
    with pytest.raises(neuron.NeuronError) as e:
        nki.simulate_kernel(fn, TABLE.copy(), VALS, DISTINCT)
    assert e.value.rule == rule and e.value.line == line_of(fn, text), str(e.value)
