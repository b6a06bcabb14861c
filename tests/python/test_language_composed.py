# nki.language functions composed from others (python/neuron/language_composed.py), current
# API: natively, on the simulator and eagerly (bit-identical), each against a NumPy float64
# reference written here, plus bad inputs.
import numpy as np
import pytest

import neuron
import neuron.language as nl
from helpers import line_of
from test_dynamic import three_ways

RNG = np.random.default_rng(29)
f64 = np.float64


def reductions(x, b):
    p = nl.ndarray((16, 1), nl.float32, buffer=nl.shared_hbm)
    v = nl.ndarray((16, 1), nl.float32, buffer=nl.shared_hbm)
    a = nl.ndarray((16, 3), nl.float32, buffer=nl.shared_hbm)
    t, bt = nl.load(x), nl.load(b)
    nl.store(p, nl.prod(t, axis=1, keepdims=True))
    nl.store(v, nl.var(t, axis=[1]))
    nl.store(a, nl.all(bt, axis=2))
    return p, v, a


def test_prod_var_all():
    x = RNG.uniform(0.5, 1.5, (16, 12)).astype(np.float32)
    b = RNG.integers(0, 2, (16, 3, 4)).astype(np.float32)
    b[0] = 1.0
    p, v, a = three_ways(reductions, x, b)
    X = x.astype(f64)
    np.testing.assert_allclose(p[:, 0], X.prod(1), rtol=1e-5)
    np.testing.assert_allclose(v[:, 0], X.var(1), rtol=1e-4, atol=1e-7)
    np.testing.assert_array_equal(a, b.all(2).astype(np.float32))


def norms(x, w):
    s = nl.ndarray((32, 24), nl.float32, buffer=nl.shared_hbm)
    r = nl.ndarray((32, 24), nl.float32, buffer=nl.shared_hbm)
    t = nl.load(x)
    nl.store(s, nl.softmax(t))
    nl.store(r, nl.rms_norm(t, nl.load(w), axis=1, n=24, epsilon=1e-3))
    return s, r


def test_softmax_and_rms_norm():
    x = RNG.uniform(-3, 3, (32, 24)).astype(np.float32)
    w = RNG.uniform(0.5, 2, (1, 24)).astype(np.float32)
    s, r = three_ways(norms, x, w)
    X = x.astype(f64)
    e = np.exp(X - X.max(1, keepdims=True))
    np.testing.assert_allclose(s, e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)
    want = X / np.sqrt((X ** 2).sum(1, keepdims=True) / 24 + 1e-3) * w
    np.testing.assert_allclose(r, want, rtol=1e-5, atol=1e-6)


def elementwise(x, y):
    mx = nl.ndarray((8, 10), nl.float32, buffer=nl.shared_hbm)
    mn = nl.ndarray((8, 10), nl.float32, buffer=nl.shared_hbm)
    ms = nl.ndarray((8, 10), nl.float32, buffer=nl.shared_hbm)
    ln = nl.ndarray((8, 10), nl.uint8, buffer=nl.shared_hbm)
    t, u = nl.load(x), nl.load(y)
    nl.store(mx, nl.abs_max(t, u))
    nl.store(mn, nl.abs_min(t, u))
    nl.store(ms, nl.abs_max(1.5, t))
    nl.store(ln, nl.logical_not(u, dtype=nl.uint8))
    return mx, mn, ms, ln


def test_abs_max_abs_min_logical_not():
    x = RNG.integers(-4, 5, (8, 10)).astype(np.float32)
    y = RNG.integers(-4, 5, (8, 10)).astype(np.float32)  # ties of magnitude: y wins
    mx, mn, ms, ln = three_ways(elementwise, x, y)
    np.testing.assert_array_equal(mx, np.where(np.abs(x) > np.abs(y), x, y))
    np.testing.assert_array_equal(mn, np.where(np.abs(x) < np.abs(y), x, y))
    np.testing.assert_array_equal(ms, np.where(1.5 > np.abs(x), 1.5, x))
    np.testing.assert_array_equal(ln, (y == 0).astype(np.uint8))


def bits(x, y):
    a = nl.ndarray((4, 5), nl.int8, buffer=nl.shared_hbm)
    b = nl.ndarray((4, 5), nl.uint16, buffer=nl.shared_hbm)
    nl.store(a, nl.invert(nl.load(x)))
    nl.store(b, nl.invert(nl.load(y)))
    return a, b


def test_invert():
    x = RNG.integers(-128, 128, (4, 5)).astype(np.int8)
    y = RNG.integers(0, 65536, (4, 5)).astype(np.uint16)
    a, b = three_ways(bits, x, y)
    np.testing.assert_array_equal(a, ~x)
    np.testing.assert_array_equal(b, ~y)


def shapes(x, a):
    e = nl.ndarray((8, 6, 1), nl.float32, buffer=nl.shared_hbm)
    i = nl.ndarray((40, 40), nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((20, 100), nl.bfloat16, buffer=nl.shared_hbm)
    i_dst = nl.ndarray((11, 11), nl.bfloat16, buffer=nl.shared_hbm)
    nl.store(e, nl.expand_dims(nl.load(x), 2))
    nl.store(i, nl.shared_identity_matrix(40, dtype=nl.float32))
    nl.store(t, nl.load_transpose2d(a, dtype=nl.bfloat16))
    into = nl.ndarray((11, 11), nl.bfloat16)
    nl.shared_identity_matrix(11, dtype=nl.bfloat16, dst=into)  # written in every mode
    nl.store(i_dst, into)
    return e, i, t, i_dst


def test_expand_dims_identity_load_transpose2d():
    import ml_dtypes
    x = RNG.uniform(-1, 1, (8, 6)).astype(np.float32)
    a = RNG.uniform(-1, 1, (100, 20)).astype(np.float32)
    e, i, t, i_dst = three_ways(shapes, x, a)
    np.testing.assert_array_equal(e, x[:, :, None])
    np.testing.assert_array_equal(i, np.eye(40, dtype=np.float32))
    np.testing.assert_array_equal(i_dst.astype(np.float32), np.eye(11, dtype=np.float32))
    np.testing.assert_array_equal(t, a.T.astype(ml_dtypes.bfloat16))


def bad_expand(x):
    nl.expand_dims(nl.load(x), 0)
    return nl.ndarray((1, 1), nl.float32, buffer=nl.shared_hbm)


def bad_identity(x):
    nl.shared_identity_matrix(200)
    return nl.ndarray((1, 1), nl.float32, buffer=nl.shared_hbm)


def bad_invert(x):
    nl.invert(nl.load(x))
    return nl.ndarray((1, 1), nl.float32, buffer=nl.shared_hbm)


@pytest.mark.parametrize("fn,rule,text,line", [
    (bad_expand, "shape", "expand_dims(axis=0)", "expand_dims("),
    (bad_identity, "shape", "n=200", "shared_identity_matrix("),
    (bad_invert, "dtype", "is float32", "nl.invert("),
])
def test_bad_inputs_name_rule_values_and_line(fn, rule, text, line):
    with pytest.raises(neuron.NeuronError) as e:
        neuron.kernel(fn, mode="simulate")(np.zeros((4, 6), np.float32))
    assert e.value.rule == rule and text in e.value.message
    assert e.value.line == line_of(fn, line)


def test_memory_regions_and_no_reorder():
    assert nl.MemoryRegion.sbuf == nl.sbuf and nl.MemoryRegion.private_hbm == nl.hbm
    assert nl.is_hbm(nl.shared_hbm) and nl.is_hbm(nl.hbm) and not nl.is_hbm(nl.psum)
    assert nl.is_on_chip(nl.psum) and nl.is_on_chip(nl.sbuf) and not nl.is_on_chip(nl.hbm)
    assert nl.is_sbuf(nl.sbuf) and nl.is_psum(nl.psum) and not nl.is_sbuf(nl.psum)

    def k(x):
        out = nl.ndarray((4, 6), nl.float32, buffer=nl.shared_hbm)
        with nl.no_reorder():
            t = nl.load(x)
            nl.store(out, nl.exp(t))
        return out

    x = RNG.uniform(-1, 1, (4, 6)).astype(np.float32)
    np.testing.assert_allclose(three_ways(k, x), np.exp(x.astype(f64)), rtol=1e-6)


def test_program_ndim_is_the_grids_rank():
    @neuron.kernel
    def k(x):
        out = nl.ndarray((1, 1), nl.float32, buffer=nl.shared_hbm)
        t = nl.full((1, 1), float(nl.program_ndim()), nl.float32)
        nl.store(out, t)  # every program stores the same value
        return out

    x = np.zeros((1, 1), np.float32)
    assert k(x)[0, 0] == 1.0
    assert k[2, 3](x)[0, 0] == 2.0
    assert k[2, 3, 1](x)[0, 0] == 3.0
    assert neuron.kernel(k.fn, mode="simulate")[4, 1](x)[0, 0] == 2.0
    assert neuron.kernel(k.fn, mode="eager")[1, 1, 1, 1](x)[0, 0] == 4.0
    with pytest.raises(neuron.NeuronError) as info:
        nl.program_ndim()
    assert info.value.rule == "no-trace"


WEIGHTS = RNG.uniform(-3, 3, (8, 12))


def constants(x, path):
    out = nl.ndarray((8, 12), nl.float32, buffer=nl.shared_hbm)
    w = nl.shared_constant(WEIGHTS, dtype=nl.bfloat16)  # rounded to bfloat16 once, on the host
    s = nl.shared_constant(path)  # a .npy file (a compile-time str parameter)
    again = nl.shared_constant(WEIGHTS, dtype=nl.bfloat16)  # a second input, same values
    t = nl.multiply(nl.load(x), nl.load(w), dtype=nl.float32)
    t = nl.add(t, nl.load(s), dtype=nl.float32)
    nl.store(out, nl.subtract(t, nl.load(again), dtype=nl.float32))
    return out


def test_shared_constant_is_a_hidden_input(tmp_path):
    import ml_dtypes
    path = str(tmp_path / "shift.npy")
    shift = RNG.uniform(-1, 1, (8, 12)).astype(np.float32)
    np.save(path, shift)
    x = RNG.uniform(-2, 2, (8, 12)).astype(np.float32)
    got = three_ways(lambda x: constants(x, path), x)
    w = WEIGHTS.astype(ml_dtypes.bfloat16).astype(f64)
    np.testing.assert_allclose(got, x.astype(f64) * w + shift - w, rtol=1e-5, atol=1e-5)
    k = neuron.kernel(lambda x: constants(x, path), mode="simulate")
    np.testing.assert_array_equal(k(x), k(x))  # the second call passes the same constants
    ir = str(k.trace(x))
    assert "shared_constant0" in ir and "shared_constant2" in ir


def test_shared_constant_outside_a_kernel():
    with pytest.raises(neuron.NeuronError) as e:
        nl.shared_constant(WEIGHTS)
    assert e.value.rule == "no-trace" and "only available inside a kernel" in e.value.message
