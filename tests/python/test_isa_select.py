# Partition reduction, selection and statistics instructions (NKI_API.md 4.9-4.10, 6.4):
# tensor_partition_reduce, max8, nc_find_index8, nc_match_replace8, bn_stats, bn_aggr,
# nc_stream_shuffle, in the current API (natively, on the simulator and eagerly, bit for bit)
# and the legacy value-returning API, each against a NumPy reference.
import numpy as np
import pytest

import neuron
import neuron.isa as nisa
import neuron.language as nl
from helpers import line_of
from test_dynamic import three_ways

RNG = np.random.default_rng(11)


def partition_reduce(x, bits):
    s = nl.ndarray((1, 24), nl.float32, buffer=nl.shared_hbm)
    m = nl.ndarray((1, 24), nl.float32, buffer=nl.shared_hbm)
    o = nl.ndarray((1, 24), nl.int32, buffer=nl.shared_hbm)
    t, b = nl.load(x), nl.load(bits)
    for out, op, src, dt in ((s, nl.add, t, nl.float32), (m, nl.maximum, t, nl.float32),
                             (o, nl.bitwise_or, b, nl.int32)):
        r = nl.ndarray((1, 24), dt)
        nisa.tensor_partition_reduce(r, op, src)
        nl.store(out, r)
    return s, m, o


def test_tensor_partition_reduce():
    x = RNG.uniform(-2, 2, (96, 24)).astype(np.float32)
    bits = (1 << RNG.integers(0, 30, (96, 24))).astype(np.int32)
    s, m, o = three_ways(partition_reduce, x, bits)
    np.testing.assert_allclose(s[0], x.astype(np.float64).sum(0), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(m[0], x.max(0))
    np.testing.assert_array_equal(o[0], np.bitwise_or.reduce(bits, axis=0))


def top8(x, vals):
    mx = nl.ndarray((64, 8), nl.float32, buffer=nl.shared_hbm)
    ix = nl.ndarray((64, 8), nl.uint32, buffer=nl.shared_hbm)
    rep = nl.ndarray((64, 300), nl.float32, buffer=nl.shared_hbm)
    t = nl.load(x)
    m = nl.ndarray((64, 8), nl.float32)
    nisa.max8(m, t)
    nl.store(mx, m)
    i = nl.ndarray((64, 8), nl.uint32)
    nisa.nc_find_index8(i, t, nl.load(vals))
    nl.store(ix, i)
    nisa.nc_match_replace8(t, t, m, -1e30)  # in place, as top-k loops do
    nl.store(rep, t)
    return mx, ix, rep


def test_max8_find_index8_match_replace8():
    x = RNG.integers(-50, 50, (64, 300)).astype(np.float32)  # many repeated values
    vals = np.stack([np.concatenate([x[p, [5, 5, 17]], [1000.0], x[p, 40:44]]) for p in range(64)])
    mx, ix, rep = three_ways(top8, x, vals.astype(np.float32))
    np.testing.assert_array_equal(mx, -np.sort(-x, axis=1)[:, :8])
    for p in range(64):
        want, taken = [], set()
        for v in vals[p]:
            hits = [j for j in np.flatnonzero(x[p] == v) if j not in taken]
            want.append(hits[0] if hits else 0xFFFFFFFF)
            taken.update(hits[:1])
        np.testing.assert_array_equal(ix[p], want)
        # The 8 largest are replaced, repeated maxima one occurrence each.
        expect, taken = x[p].copy(), set()
        for v in mx[p]:
            j = [j for j in np.flatnonzero(x[p] == v) if j not in taken][0]
            taken.add(j)
            expect[j] = -1e30
        np.testing.assert_array_equal(rep[p], expect)


def moments(x):
    out = nl.ndarray((128, 2), nl.float32, buffer=nl.shared_hbm)
    t = nl.load(x)
    stats = nl.ndarray((128, 12), nl.float32)
    nisa.bn_stats(stats[:, 0:6], t[:, 0:500])
    nisa.bn_stats(stats[:, 6:12], t[:, 500:777])
    mv = nl.ndarray((128, 2), nl.float32)
    nisa.bn_aggr(mv, stats)
    nl.store(out, mv)
    return out


def test_bn_stats_and_bn_aggr_give_row_mean_and_variance():
    x = (RNG.normal(3, 2, (128, 777))).astype(np.float32)
    mv = three_ways(moments, x)
    ref = x.astype(np.float64)
    np.testing.assert_allclose(mv[:, 0], ref.mean(1), rtol=2e-5, atol=1e-5)
    np.testing.assert_allclose(mv[:, 1], ref.var(1), rtol=2e-4)


def one_bn_stats(x):
    out = nl.ndarray((8, 6), nl.float32, buffer=nl.shared_hbm)
    s = nl.ndarray((8, 6), nl.float32)
    nisa.bn_stats(s, nl.load(x))
    nl.store(out, s)
    return out


def test_bn_stats_splits_even_and_odd_elements():
    x = RNG.uniform(-1, 1, (8, 9)).astype(np.float32)
    s = three_ways(one_bn_stats, x)
    for half, cols in ((0, x[:, 0::2]), (3, x[:, 1::2])):
        c = cols.astype(np.float64)
        np.testing.assert_array_equal(s[:, half], c.shape[1])
        np.testing.assert_allclose(s[:, half + 1], c.mean(1), atol=1e-6)
        np.testing.assert_allclose(s[:, half + 2], ((c - c.mean(1, keepdims=True)) ** 2).sum(1),
                                   rtol=1e-5, atol=1e-6)


MASK = [(i * 7 + 3) % 32 for i in range(32)]
MASK[4] = 255


def shuffle(x):
    out = nl.ndarray((64, 16), nl.float32, buffer=nl.shared_hbm)
    t = nl.load(x)
    d = nl.full((64, 16), -1.0, nl.float32)
    nisa.nc_stream_shuffle(d, t, MASK)
    nl.store(out, d)
    return out


def test_nc_stream_shuffle_moves_partitions_per_quadrant():
    x = RNG.uniform(-1, 1, (64, 16)).astype(np.float32)
    got = three_ways(shuffle, x)
    for p in range(64):
        q, i = divmod(p, 32)
        want = -np.ones(16, np.float32) if MASK[i] == 255 else x[32 * q + MASK[i]]
        np.testing.assert_array_equal(got[p], want)


def broadcast_row(x):
    """nki-library's stream_shuffle_broadcast: a [1, F] row onto 32 partitions (mask of zeros),
    the last 8 left alone (255)."""
    out = nl.ndarray((32, 16), nl.float32, buffer=nl.shared_hbm)
    d = nl.full((32, 16), -1.0, nl.float32)
    nisa.nc_stream_shuffle(d, nl.load(x), [0] * 24 + [255] * 8)
    nl.store(out, d)
    return out


def test_nc_stream_shuffle_broadcasts_a_row_to_other_partitions():
    x = RNG.uniform(-1, 1, (1, 16)).astype(np.float32)
    got = three_ways(broadcast_row, x)
    np.testing.assert_array_equal(got[:24], np.repeat(x, 24, axis=0))
    np.testing.assert_array_equal(got[24:], -1.0)

    def past_the_source(x):
        d = nl.ndarray((64, 16), nl.float32, buffer=nl.sbuf)
        nisa.nc_stream_shuffle(d, nl.load(x), [0] * 32)  # partition 32 would read src row 32
        out = nl.ndarray((64, 16), nl.float32, buffer=nl.shared_hbm)
        nl.store(out, d)
        return out

    with pytest.raises(neuron.NeuronError) as e:
        neuron.kernel(past_the_source, mode="simulate")(x)
    assert e.value.rule == "shuffle-mask" and "dst partition 32 reads src partition 32" in \
        str(e.value)


def test_shape_rules_name_the_line():
    def bad(x):
        out = nl.ndarray((4, 8), nl.float32, buffer=nl.shared_hbm)
        m = nl.ndarray((4, 8), nl.float32)
        nisa.max8(m, nl.load(x))  # only 6 elements per partition
        nl.store(out, m)
        return out

    with pytest.raises(neuron.NeuronError) as e:
        neuron.kernel(bad, mode="simulate")(np.zeros((4, 6), np.float32))
    assert "max8" in str(e.value) and "8 to 16384" in str(e.value)
    assert str(line_of(bad, "nisa.max8")) in str(e.value)


def test_legacy_value_returning_forms():
    import neuron.compat
    neuron.compat.install()
    from neuronxcc import nki
    import neuronxcc.nki.isa as lisa
    import neuronxcc.nki.language as lnl

    @nki.jit(mode="simulation")
    def legacy(x):
        out = lnl.ndarray((32, 8), dtype=lnl.float32, buffer=lnl.shared_hbm)
        idx = lnl.ndarray((32, 8), dtype=lnl.uint32, buffer=lnl.shared_hbm)
        col = lnl.ndarray((1, 40), dtype=lnl.float32, buffer=lnl.shared_hbm)
        mv = lnl.ndarray((32, 2), dtype=lnl.float32, buffer=lnl.shared_hbm)
        t = lnl.load(x)
        m = lisa.max8(src=t)
        lnl.store(out, m)
        lnl.store(idx, lisa.nc_find_index8(data=t, vals=m))
        lnl.store(col, lisa.tensor_partition_reduce(np.add, t))
        lnl.store(mv, lisa.bn_aggr(lisa.bn_stats(t)))
        return out, idx, col, mv

    x = RNG.permutation(32 * 40).reshape(32, 40).astype(np.float32)
    out, idx, col, mv = legacy(x)
    order = np.argsort(-x, axis=1)[:, :8]
    np.testing.assert_array_equal(out, np.take_along_axis(x, order, 1))
    np.testing.assert_array_equal(idx, order)
    np.testing.assert_allclose(col[0], x.sum(0), rtol=1e-6)
    np.testing.assert_allclose(mv[:, 1], x.astype(np.float64).var(1), rtol=1e-5)
