# NeuronCore-v4 tensor indirection, `t.indirect(index, num_elem)` (python/neuron/indirection.py):
# columns of an on-chip tile chosen at run time, read (gather) and written (scatter) by the
# instructions NKI documents with it, natively, on the simulator and eagerly (bit for bit),
# against a NumPy reference that follows NKI's rule directly: offset i of the group of G
# partitions starting at g*G is index[g*G + i % G, i // G] (G = 16, or 32 on the Tensor engine).
import ml_dtypes
import numpy as np
import pytest

import neuron
import neuron.isa as nisa
import neuron.language as nl
from helpers import line_of

MODES = ("native", "simulate", "eager")
RNG = np.random.default_rng(11)


def offsets(index, P, n, G):
    """offsets[p, i]: the column element (p, i) of the view names, by NKI's snake rule."""
    return np.array([[index[(p // G) * G + i % G, i // G] for i in range(n)] for p in range(P)])


def three_ways(fn, *args):
    outs = [neuron.kernel(fn, mode=m)(*[a.copy() for a in args]) for m in MODES]
    for o in outs[1:]:
        np.testing.assert_array_equal(np.asarray(o).view(np.uint8),
                                      np.asarray(outs[0]).view(np.uint8))
    return outs[0]


P, F, K, N = 32, 40, 3, 40  # two groups of 16; 40 of each group's 48 offsets
DATA = RNG.standard_normal((P, F)).astype(np.float32)
VALS = RNG.standard_normal((P, N)).astype(np.float32)
INDEX = RNG.integers(0, F, (P, K)).astype(np.uint16)


def gather(data, index):
    out = nl.ndarray((P, N), nl.float32, buffer=nl.shared_hbm)
    view = nl.load(data).indirect(nl.load(index), N)
    assert view.is_indirect() and tuple(view.shape) == (P, N)
    r = nl.ndarray((P, N), nl.float32)
    nisa.tensor_copy(r, view)
    nl.store(out, r)
    return out


def test_a_read_gathers_each_groups_columns():
    off = offsets(INDEX, P, N, 16)
    want = np.take_along_axis(DATA, off, axis=1)
    np.testing.assert_array_equal(three_ways(gather, DATA, INDEX), want)


def gather_3d(data, index):
    out = nl.ndarray((P, 16), nl.float32, buffer=nl.shared_hbm)
    r = nl.ndarray((P, 16), nl.float32)
    nisa.activation(r, nl.exp, nl.load(data).indirect(nl.load(index), 16))
    nl.store(out, r)
    return out


def test_offsets_count_the_free_elements_row_major():
    data = RNG.standard_normal((P, 4, 10)).astype(np.float32)
    index = RNG.integers(0, 40, (P, 1)).astype(np.uint16)
    off = offsets(index, P, 16, 16)
    want = np.exp(np.take_along_axis(data.reshape(P, 40), off, axis=1).astype(np.float64))
    np.testing.assert_allclose(three_ways(gather_3d, data, index), want, rtol=2e-7)


def add_in_place(data, vals, index):
    out = nl.ndarray((P, F), nl.float32, buffer=nl.shared_hbm)
    t = nl.load(data)
    view = t.indirect(nl.load(index), N)
    nisa.tensor_tensor(view, view, nl.load(vals), nl.add)  # read, add, write back
    nl.store(out, t)
    return out


def test_a_destination_scatters_back_and_leaves_the_other_columns():
    off = offsets(INDEX, P, N, 16)
    want = DATA.copy()
    for p in range(P):
        for i in range(N):  # in order: an offset named twice keeps its last value
            want[p, off[p, i]] = DATA[p, off[p, i]] + VALS[p, i]
    assert len(set(off[0])) < N  # the random index repeats offsets: the rule above is tested
    np.testing.assert_array_equal(three_ways(add_in_place, DATA, VALS, INDEX), want)


KP, M, NM = 64, 48, 16  # stationary on 64 partitions: two Tensor-engine groups of 32
ST = RNG.standard_normal((KP, 100)).astype(ml_dtypes.bfloat16)
MV = RNG.standard_normal((KP, NM)).astype(ml_dtypes.bfloat16)
ST_INDEX = RNG.integers(0, 100, (KP, 2)).astype(np.uint16)


def matmul_gathered(st, mv, index):
    out = nl.ndarray((M, NM), nl.float32, buffer=nl.shared_hbm)
    acc = nl.ndarray((M, NM), nl.float32, buffer=nl.psum)
    nisa.nc_matmul(acc, nl.load(st).indirect(nl.load(index), M), nl.load(mv))
    r = nl.ndarray((M, NM), nl.float32)
    nisa.tensor_copy(r, acc)
    nl.store(out, r)
    return out


def test_the_tensor_engine_reads_offsets_per_32_partitions():
    off = offsets(ST_INDEX, KP, M, 32)
    sel = np.take_along_axis(ST.astype(np.float64), off, axis=1)
    np.testing.assert_allclose(three_ways(matmul_gathered, ST, MV, ST_INDEX),
                               sel.T @ MV.astype(np.float64), rtol=1e-5, atol=1e-5)


def matmul_scattered(st, mv, index):
    out = nl.ndarray((32, 64), nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((32, 64), nl.float32, buffer=nl.psum)
    nisa.nc_matmul(acc.indirect(nl.load(index), NM), nl.load(st)[:, 0:32], nl.load(mv),
                   accumulate=True)
    r = nl.ndarray((32, 64), nl.float32)
    nisa.tensor_copy(r, acc)
    nl.store(out, r)
    return out


def test_a_psum_destination_takes_the_products_at_its_offsets():
    index = RNG.permutation(64)[:32].reshape(32, 1).astype(np.uint16)  # distinct offsets
    off = offsets(index, 32, NM, 32)
    prod = ST[:, 0:32].astype(np.float64).T @ MV.astype(np.float64)
    want = np.zeros((32, 64))
    for p in range(32):
        want[p, off[p]] += prod[p]
    np.testing.assert_allclose(three_ways(matmul_scattered, ST, MV, index), want,
                               rtol=1e-5, atol=1e-5)


# ---- the rules, each at the user's line ----------------------------------------------------------

def on_hbm(data, index):
    return data.indirect(nl.load(index), 4)


def index_rows(data, index):
    t, ix = nl.load(data), nl.load(index)
    nisa.tensor_copy(nl.ndarray((P, 4), nl.float32), t.indirect(ix[0:16], 4))


def too_many(data, index):
    nisa.tensor_copy(nl.ndarray((P, 60), nl.float32), nl.load(data).indirect(nl.load(index), 60))


def odd_partitions(data, index):
    t, ix = nl.load(data), nl.load(index)
    nisa.tensor_copy(nl.ndarray((8, 4), nl.float32), t[0:8].indirect(ix[0:8], 4))


def transpose(data, index):
    nisa.nc_transpose(nl.ndarray((4, P), nl.float32), nl.load(data).indirect(nl.load(index), 4))


def fp32_matmul(data, index):
    acc = nl.ndarray((4, F), nl.float32, buffer=nl.psum)
    t = nl.load(data)
    nisa.nc_matmul(acc, t.indirect(nl.load(index), 4), t)


def predicated_src(data, index):
    t = nl.load(data)
    nisa.tensor_copy_predicated(nl.ndarray((P, 4), nl.float32), t.indirect(nl.load(index), 4),
                                nl.ndarray((P, 4), nl.uint8))


@pytest.mark.parametrize("mode", ("native", "eager"))
@pytest.mark.parametrize("fn, text, call", [
    (on_hbm, "SBUF or PSUM tile", "data.indirect("),
    (index_rows, "the index has 16 partitions", "nisa.tensor_copy("),
    (too_many, "pass num_elem <= 48", "nisa.tensor_copy("),
    (odd_partitions, "multiple of 16", "nisa.tensor_copy("),
    (transpose, "nc_transpose does not take", "nisa.nc_transpose("),
    (fp32_matmul, "must be float16, bfloat16", "nisa.nc_matmul("),
    (predicated_src, "tensor_copy_predicated's 'src'", "nisa.tensor_copy_predicated("),
])
def test_rules_name_the_users_line(fn, text, call, mode):
    with pytest.raises(neuron.NeuronError) as e:
        neuron.kernel(fn, mode=mode)(DATA, INDEX)
    assert e.value.rule == "indirection" and text in e.value.message, e.value.message
    assert e.value.line == line_of(fn, call)
