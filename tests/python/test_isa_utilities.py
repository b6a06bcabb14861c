# nki.isa's GpSimd utilities composed from other instructions (python/neuron/isa_utilities.py):
# sequence_bounds, nonzero_with_count and topk, natively, simulated and eagerly (bit-identical),
# each against a NumPy reference written here from NKI's description, plus bad inputs.
import ml_dtypes
import numpy as np
import pytest

import neuron
import neuron.isa as nisa
import neuron.language as nl
from helpers import line_of
from test_dynamic import three_ways

RNG = np.random.default_rng(41)
MODES = ("native", "simulate", "eager")


def bounds_ref(ids):
    """[P, N] -> [P, 2, N]: start and exclusive end of each element's run of equal ids;
    id 0 (padding) gets start N, end -1 (NKI's NumPy description)."""
    p, n = ids.shape
    out = np.zeros((p, 2, n))
    for r in range(p):
        for j in range(n):
            if ids[r, j] == 0:
                out[r, :, j] = (n, -1)
                continue
            s = j
            while s > 0 and ids[r, s - 1] == ids[r, j]:
                s -= 1
            e = j + 1
            while e < n and ids[r, e] == ids[r, j]:
                e += 1
            out[r, :, j] = (s, e)
    return out


def bounds(f_ids, i_ids):
    a = nl.ndarray((3, 2, 40), nl.float32, buffer=nl.shared_hbm)
    b = nl.ndarray((1, 2, 40), nl.int32, buffer=nl.shared_hbm)
    d = nl.ndarray((3, 2, 40), nl.float32)
    nisa.sequence_bounds(d, nl.load(f_ids))
    nl.store(a, d)
    e = nl.ndarray((1, 2, 40), nl.int32)
    nisa.sequence_bounds(dst=e, segment_ids=nl.load(i_ids))
    nl.store(b, e)
    return a, b


def test_sequence_bounds():
    f_ids = np.sort(RNG.integers(0, 9, (3, 40)), axis=1).astype(np.float32)
    f_ids[2] = RNG.integers(0, 3, 40)  # unsorted: runs of equal ids, padding in between
    f_ids[1, :5] = 0
    i_ids = RNG.integers(0, 4, (1, 40)).astype(np.int32)
    a, b = three_ways(bounds, f_ids, i_ids, modes=MODES)
    np.testing.assert_array_equal(a, bounds_ref(f_ids))
    np.testing.assert_array_equal(b, bounds_ref(i_ids))


def nonzeros(x):
    out = nl.ndarray((48, 21), nl.int32, buffer=nl.shared_hbm)
    d = nl.full((48, 21), 7, nl.int32)
    nisa.nonzero_with_count(d, nl.load(x), index_offset=16, padding_val=-3)
    nl.store(out, d)
    return out


def test_nonzero_with_count_writes_every_16th_partition():
    x = RNG.integers(-2, 3, (48, 20)).astype(np.float32) * (RNG.random((48, 20)) > 0.5)
    x[16] = 0  # no nonzeros at all
    x[32] = 1  # all nonzero
    got = three_ways(nonzeros, x, modes=MODES)
    want = np.full((48, 21), 7)
    for p in (0, 16, 32):
        idx = np.flatnonzero(x[p])
        want[p, :] = -3
        want[p, :len(idx)] = idx + 16
        want[p, 20] = len(idx)
    np.testing.assert_array_equal(got, want)


def nonzeros_any(x):
    p, t = x.shape
    out = nl.ndarray((p, t + 1), nl.int32, buffer=nl.shared_hbm)
    d = nl.full((p, t + 1), 7, nl.int32)
    nisa.nonzero_with_count(d, nl.load(x), padding_val=-1)
    nl.store(out, d)
    return out


@pytest.mark.parametrize("t", [1, 2, 7, 8, 16, 33, 1000])
def test_nonzero_with_count_at_any_width(t):
    # widths around powers of two (the search's steps), rows empty, full, and half full
    x = ((RNG.random((32, t)) > 0.5) * RNG.integers(1, 5, (32, t))).astype(np.float32)
    x[16] = 0
    x[0] = 3
    got = three_ways(nonzeros_any, x, modes=MODES)
    for p in (0, 16):
        idx = np.flatnonzero(x[p])
        np.testing.assert_array_equal(got[p, :t], np.r_[idx, np.full(t - len(idx), -1)])
        assert got[p, t] == len(idx)
    np.testing.assert_array_equal(got[1:16], 7)


def nonzeros_3d(x):
    """nki-library's form: a [P, tiles, T] src and a [P, 1, tiles * T + 1] dst, flattened."""
    out = nl.ndarray((48, 1, 21), nl.int32, buffer=nl.shared_hbm)
    d = nl.ndarray((48, 1, 21), nl.int32, buffer=nl.sbuf)
    nisa.memset(d, 7)
    t = nl.ndarray((48, 4, 5), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(t, x)
    nisa.nonzero_with_count(dst=d, src=t, index_offset=16, padding_val=-3)
    nisa.dma_copy(out, d)
    return out


def test_nonzero_with_count_flattens_several_free_dims():
    x = RNG.integers(-2, 3, (48, 20)).astype(np.float32) * (RNG.random((48, 20)) > 0.5)
    got = three_ways(nonzeros_3d, x.reshape(48, 4, 5), modes=MODES)
    np.testing.assert_array_equal(got[:, 0], three_ways(nonzeros, x, modes=MODES))


def top(src):
    v_out = nl.ndarray((32, 20), nl.bfloat16, buffer=nl.shared_hbm)
    i_out = nl.ndarray((32, 20), nl.uint32, buffer=nl.shared_hbm)
    v = nl.full((32, 20), 5.0, nl.bfloat16)
    i = nl.full((32, 20), 9, nl.uint32)
    nisa.topk(v, i, nl.load(src), 70)
    nl.store(v_out, v)
    nl.store(i_out, i)
    return v_out, i_out


def test_topk_reads_and_writes_16_partition_snakes():
    src = RNG.permutation(32 * 5).reshape(32, 5).astype(ml_dtypes.bfloat16)
    src[0:16, 1] = src[0, 0]  # equal values: lower snake index first
    v, i = three_ways(top, src, modes=MODES)
    want_v = np.full((32, 20), 5.0)
    want_i = np.full((32, 20), 9)
    for g in range(2):
        snake = src[16 * g:16 * g + 16].astype(np.float64).T.reshape(-1)[:70]
        order = sorted(range(70), key=lambda s: (-snake[s], s))[:20]
        for j, s in enumerate(order):  # result j at partition j % 16, column j // 16
            want_v[16 * g + j % 16, j // 16] = snake[s]
            want_i[16 * g + j % 16, j // 16] = s
    np.testing.assert_array_equal(v.astype(np.float64), want_v)
    np.testing.assert_array_equal(i, want_i)


# ---- bad inputs: the rule, the values and the user's line ------------------------------------

def bad_bounds_shape(x):
    d = nl.ndarray((4, 6), nl.float32)
    nisa.sequence_bounds(d, nl.load(x))
    return x


def bad_nonzero_shape(x):
    d = nl.ndarray((4, 6), nl.float32)
    nisa.nonzero_with_count(d, nl.load(x))
    return x


def bad_topk_partitions(x):
    t = nl.load(x)
    v = nl.ndarray((4, 2), nl.bfloat16)
    i = nl.ndarray((4, 2), nl.uint32)
    nisa.topk(v, i, t, 8)
    return x


@pytest.mark.parametrize("fn,rule,text,line", [
    (bad_bounds_shape, "shape", "gives [4, 2, 6]", "sequence_bounds("),
    (bad_nonzero_shape, "shape", "gives [4, 7]", "nonzero_with_count("),
    (bad_topk_partitions, "shape", "has 4 partitions", "topk("),
])
def test_bad_inputs_name_rule_values_and_line(fn, rule, text, line):
    with pytest.raises(neuron.NeuronError) as e:
        neuron.kernel(fn, mode="simulate")(np.zeros((4, 6), np.float32))
    assert e.value.rule == rule and text in e.value.message
    assert e.value.line == line_of(fn, line)
