# Legacy (neuronxcc.nki) forms of the composed calls: nisa.select_reduce, range_select,
# dma_transpose; nl.prod, var, all, expand_dims, shared_identity_matrix (and softmax / rms_norm,
# which now share neuron.language's). Natively and on the simulator (bit-identical), each against
# a NumPy float64 reference written here, plus bad inputs.
import numpy as np
import pytest

import neuron
import neuron.compat

neuron.compat.install()
from neuronxcc import nki  # noqa: E402
import neuronxcc.nki.isa as nisa  # noqa: E402
import neuronxcc.nki.language as nl  # noqa: E402
from helpers import line_of  # noqa: E402

RNG = np.random.default_rng(31)
f64 = np.float64


def both(fn, *args):
    """fn natively and on the simulator; asserts bit-identical outputs, returns them."""
    a = nki.jit(fn)(*[x.copy() for x in args])
    b = nki.jit(fn, mode="simulation")(*[x.copy() for x in args])
    for u, v in zip(a, b):
        np.testing.assert_array_equal(u.view(np.uint8), v.view(np.uint8))
    return a


def isa_kernel(x, pred, lo, hi):
    sel = nl.ndarray((16, 24), nl.float32, buffer=nl.shared_hbm)
    rs = nl.ndarray((16, 24), nl.float32, buffer=nl.shared_hbm)
    red = nl.ndarray((16, 2), nl.float32, buffer=nl.shared_hbm)
    tr = nl.ndarray((24, 16), nl.float32, buffer=nl.shared_hbm)
    t, p, b0, b1 = nl.load(x), nl.load(pred), nl.load(lo), nl.load(hi)
    r = nl.ndarray((16, 2), nl.float32)
    o = nl.ndarray((16, 24), nl.float32)
    nisa.select_reduce(dst=o, predicate=p, on_true=t, on_false=-1.0, reduce_res=r[:, 0:1],
                       reduce_op=np.amax)
    nl.store(sel, o)
    i_p, i_f = nl.mgrid[0:16, 0:12]
    o2 = nisa.range_select(on_true_tile=t, comp_op0=nl.greater_equal, comp_op1=nl.less,
                           bound0=b0, bound1=b1, reduce_res=r[:, 1:2], range_start=2,
                           mask=(i_f < 12), on_false_value=-1.0)  # overridden, as NKI did
    nl.store(rs[i_p, i_f], o2[i_p, i_f])
    nl.store(red, r)
    nl.store(tr, nisa.dma_transpose(t))
    return sel, rs, red, tr


def test_legacy_select_reduce_range_select_dma_transpose():
    x = RNG.uniform(-5, 5, (16, 24)).astype(np.float32)
    pred = RNG.integers(0, 2, (16, 24)).astype(np.uint8)
    lo = RNG.integers(0, 10, (16, 1)).astype(np.float32)
    hi = lo + RNG.integers(0, 8, (16, 1)).astype(np.float32)
    sel, rs, red, tr = both(isa_kernel, x, pred, lo, hi)
    X = x.astype(f64)
    want = np.where(pred != 0, X, -1.0)
    np.testing.assert_array_equal(sel, want)
    np.testing.assert_array_equal(red[:, 0], want.max(1))
    idx = 2 + np.arange(12)[None, :]
    want = np.where((idx >= lo) & (idx < hi), X[:, :12], float(np.finfo(np.float32).min))
    np.testing.assert_array_equal(rs[:, :12], want)
    np.testing.assert_array_equal(red[:, 1], want.max(1))
    np.testing.assert_array_equal(tr, x.T)


def nl_kernel(x, b):
    p = nl.ndarray((8, 1), nl.float32, buffer=nl.shared_hbm)
    v = nl.ndarray((8, 1), nl.float32, buffer=nl.shared_hbm)
    a = nl.ndarray((8, 1), nl.uint8, buffer=nl.shared_hbm)
    e = nl.ndarray((8, 10, 1), nl.float32, buffer=nl.shared_hbm)
    e2 = nl.ndarray((8, 10, 1), nl.float32, buffer=nl.shared_hbm)
    i = nl.ndarray((8, 8), nl.float32, buffer=nl.shared_hbm)
    s = nl.ndarray((8, 10), nl.float32, buffer=nl.shared_hbm)
    t, bt = nl.load(x), nl.load(b)
    nl.store(p, nl.prod(t, axis=1, keepdims=True))
    nl.store(v, nl.var(t, axis=1))
    nl.store(a, nl.all(bt, axis=1, dtype=nl.uint8))
    nl.store(e, nl.expand_dims(t, 2))
    nl.store(e2, t.expand_dims(-1))
    nl.store(i, nl.load(nl.shared_identity_matrix(8, dtype=nl.float32)))
    nl.store(s, nl.softmax(t, axis=1))
    return p, v, a, e, e2, i, s


def test_legacy_prod_var_all_expand_dims_identity_softmax():
    x = RNG.uniform(0.5, 1.5, (8, 10)).astype(np.float32)
    b = RNG.integers(0, 2, (8, 10)).astype(np.float32)
    b[:3] = 1.0
    p, v, a, e, e2, i, s = both(nl_kernel, x, b)
    X = x.astype(f64)
    np.testing.assert_allclose(p[:, 0], X.prod(1), rtol=1e-5)
    np.testing.assert_allclose(v[:, 0], X.var(1), rtol=1e-4, atol=1e-7)
    np.testing.assert_array_equal(a[:, 0], b.all(1).astype(np.uint8))
    np.testing.assert_array_equal(e, x[:, :, None])
    np.testing.assert_array_equal(e2, x[:, :, None])
    np.testing.assert_array_equal(i, np.eye(8))
    ex = np.exp(X - X.max(1, keepdims=True))
    np.testing.assert_allclose(s, ex / ex.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)


def legacy_invert(x):
    out = nl.ndarray((4, 6), nl.int16, buffer=nl.shared_hbm)
    i_p, i_f = nl.mgrid[0:4, 0:6]
    t = nl.load(x)
    nl.store(out[i_p, i_f], nl.invert(t, mask=(i_f < 4)), mask=(i_f < 4))
    return out


def test_legacy_invert_with_mask():
    x = RNG.integers(-1000, 1000, (4, 6)).astype(np.int16)
    got = both(legacy_invert, x)
    np.testing.assert_array_equal(got[:, :4], ~x[:, :4])


def bad_transpose(x):
    out = nl.ndarray((8, 4), nl.float32, buffer=nl.shared_hbm)
    t = nisa.dma_transpose(nl.load(x), axes=(0, 1))
    nl.store(out, t)
    return out


def test_legacy_bad_dma_transpose_axes():
    with pytest.raises(neuron.NeuronError) as e:
        nki.jit(bad_transpose, mode="simulation")(np.zeros((8, 4), np.float32))
    assert e.value.rule == "unsupported" and "axes=(0, 1)" in e.value.message
    assert e.value.line == line_of(bad_transpose, "nisa.dma_transpose(")


def element_kernel(x, y):
    out = nl.ndarray((16, 24), nl.float32, buffer=nl.shared_hbm)
    t, u = nl.load(x), nl.load(y)
    r = nl.add(nl.mish(t), nl.fmod(nl.floor(t * 4.0), u))
    r = nl.add(r, nl.mod(nl.arctan(t), u))
    nl.store(out, nl.add(r, nisa.activation(op=nl.silu_dx, data=t)))
    return out


def test_new_element_functions():
    x = RNG.uniform(-3, 3, (16, 24)).astype(np.float32)
    y = RNG.uniform(0.5, 2, (16, 24)).astype(np.float32)
    got = nki.jit(element_kernel)(x, y)
    sim = nki.jit(element_kernel, mode="simulation")(x, y)
    np.testing.assert_array_equal(got.view(np.uint8), sim.view(np.uint8))
    X, Y = x.astype(f64), y.astype(f64)
    sig = 1 / (1 + np.exp(-X))
    want = X * np.tanh(np.log1p(np.exp(X))) + np.fmod(np.floor(X * 4), Y) \
        + np.mod(np.arctan(X), Y) + sig * (1 + X * (1 - sig))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def bounds_kernel(ids):
    out = nl.ndarray((1, 2, 24), nl.int32, buffer=nl.shared_hbm)
    i_p, i_x, i_y = nl.mgrid[0:1, 0:2, 0:24]
    b = nisa.sequence_bounds(segment_ids=nl.load(ids), dtype=nl.int32)
    nl.store(out[i_p, i_x, i_y], value=b[i_p, i_x, i_y])
    return out


def test_sequence_bounds():
    ids = np.array([[0, 0, 3, 3, 3, 1, 1, 0, 2, 2, 2, 2, 4, 0, 0, 5, 5, 5, 5, 5, 1, 1, 1, 1]],
                   np.float32)
    got = both(bounds_kernel, ids)
    starts, ends = [], []
    for j, v in enumerate(ids[0]):  # the run of equal ids around j; 0 is padding
        s, e = j, j + 1
        while s > 0 and ids[0, s - 1] == v:
            s -= 1
        while e < 24 and ids[0, e] == v:
            e += 1
        starts.append(24 if v == 0 else s)
        ends.append(-1 if v == 0 else e)
    np.testing.assert_array_equal(got, np.array([[starts, ends]]))


def npy_constant_kernel(x, path):
    out = nl.ndarray((4, 8), nl.float32, buffer=nl.shared_hbm)
    c = nl.load(nl.shared_constant(path, dtype=nl.float32))
    nl.store(out, value=nl.add(nl.load(x), c))
    return out


def test_shared_constant_from_an_npy_file(tmp_path):
    path = str(tmp_path / "c.npy")
    c = np.arange(32, dtype=np.int16).reshape(4, 8)
    np.save(path, c)
    x = RNG.uniform(-1, 1, (4, 8)).astype(np.float32)
    a = nki.jit(npy_constant_kernel)(x, path)  # path: a compile-time str argument
    b = nki.jit(npy_constant_kernel, mode="simulation")(x, path)
    np.testing.assert_array_equal(a, b)
    got = a
    np.testing.assert_array_equal(got, x + c.astype(np.float32))


def random_kernel(x):
    o = nl.ndarray((32, 24), nl.float32, buffer=nl.shared_hbm)
    d = nl.ndarray((32, 24), nl.float32, buffer=nl.shared_hbm)
    e = nl.ndarray((32, 24), nl.float32, buffer=nl.shared_hbm)
    nl.random_seed(7)
    nl.store(o, nl.rand((32, 24)))
    t = nl.load(x)
    nl.store(d, nl.dropout(t, 0.5))
    nl.store(e, nisa.dropout(t, 0.25))
    return o, d, e


def test_random_numbers():
    from test_random import reference_bits, unit
    x = RNG.uniform(1, 2, (32, 24)).astype(np.float32)
    o, d, e = both(random_kernel, x)
    ref = unit(reference_bits(7, 32, 72))
    np.testing.assert_array_equal(o, ref[:, :24].astype(np.float32))
    np.testing.assert_array_equal(d, np.where(ref[:, 24:48] >= 0.5, x, 0))
    np.testing.assert_array_equal(e, np.where(ref[:, 48:] >= np.float32(0.25), x, 0))
