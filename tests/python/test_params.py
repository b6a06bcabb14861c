# Compile-time kernel parameters: keyword and positional, with defaults; part of the cache key
# (by type and exact value) without recompiling for values that trace to the same IR; optional
# tensors; every mode.
import enum

import numpy as np
import pytest

import neuron
import neuron.language as nl

X = np.linspace(-2, 2, 256 * 16, dtype=np.float32).reshape(256, 16)


def scale_rows(x, factor=2.0, rows=128, act=None, out_dtype=nl.float32):
    """out = act(x * factor), `rows` rows per tile; act an nl function or None."""
    out = nl.ndarray(x.shape, out_dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(x.shape[0] // rows):
        t = nl.load(x[i * rows:(i + 1) * rows, :]) * factor
        if act is not None:
            t = act(t)
        nl.store(out[i * rows:(i + 1) * rows, :], nl.copy(t, out_dtype))
    return out


@pytest.mark.parametrize("mode", ["native", "simulate", "eager"])
def test_keyword_and_positional_parameters_in_every_mode(mode):
    k = neuron.kernel(scale_rows, mode=mode)
    np.testing.assert_allclose(k(X), X * 2.0, rtol=1e-6)
    np.testing.assert_allclose(k(X, 0.5, rows=64), X * 0.5, rtol=1e-6)
    np.testing.assert_allclose(k(X, factor=3, act=nl.exp), np.exp(X.astype(np.float64) * 3),
                               rtol=1e-5)
    out = k(x=X, out_dtype=nl.bfloat16)
    assert out.dtype.name == "bfloat16"


def test_parameters_shape_the_ir():
    k = neuron.kernel(scale_rows)
    assert "affine_range(2)" in str(k.trace(((256, 16), nl.float32)))
    assert "affine_range(4)" in str(k.trace(((256, 16), nl.float32), rows=64))
    assert "exp" in str(k.trace(((256, 16), nl.float32), act=nl.exp))


def test_values_of_different_types_or_bits_never_share_a_compile():
    @neuron.kernel
    def typed(x, v=0):
        out = nl.ndarray(x.shape, nl.float32, buffer=nl.shared_hbm)
        # The kernel looks at the type: 1, 1.0 and True trace differently.
        nl.store(out, nl.load(x) + (10.0 if isinstance(v, bool) else 5.0 if isinstance(v, float)
                                    else float(v)))
        return out
    x = np.zeros((128, 4), np.float32)
    assert typed(x, 1)[0, 0] == 1.0
    assert typed(x, 1.0)[0, 0] == 5.0
    assert typed(x, True)[0, 0] == 10.0
    keys = {key[1] for key in typed._cache}
    assert len(keys) == 3


def test_float_parameters_are_keyed_by_their_bits():
    @neuron.kernel
    def signed_zero(x, z=0.0):
        out = nl.ndarray(x.shape, nl.float32, buffer=nl.shared_hbm)
        nl.store(out, nl.load(x) * 0.0 + (1.0 if np.copysign(1.0, z) > 0 else -1.0))
        return out
    x = np.ones((128, 4), np.float32)
    assert signed_zero(x, 0.0)[0, 0] == 1.0
    assert signed_zero(x, -0.0)[0, 0] == -1.0  # 0.0 == -0.0 in Python, but not as a key
    signed_zero(x, float("nan"))
    signed_zero(x, float("nan"))  # NaN != NaN, yet the same key: no second trace
    assert len(signed_zero._cache) == 3


def test_parameters_that_do_not_change_the_ir_do_not_recompile(monkeypatch):
    compiles = []
    real = neuron._C.compile
    monkeypatch.setattr(neuron._C, "compile", lambda *a: compiles.append(1) or real(*a))

    @neuron.kernel
    def labelled(x, label="a"):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.load(x) + 1.0)
        return out
    x = np.zeros((128, 4), np.float32)
    for label in ("a", "b", "c"):
        np.testing.assert_array_equal(labelled(x, label=label), x + 1)
    assert len(compiles) == 1  # three signatures, one IR: one pipeline compile
    assert len(labelled._cache) == 3


class Act(enum.Enum):
    NONE = 0
    RELU = 1


def test_enum_tuple_dtype_and_function_parameters():
    @neuron.kernel
    def many(x, act=Act.NONE, tile=(128, 16), dtype=np.float32, post=None):
        out = nl.ndarray(x.shape, dtype, buffer=nl.shared_hbm)
        t = nl.load(x[0:tile[0], 0:tile[1]])
        if act is Act.RELU:
            t = nl.relu(t)
        if post is not None:
            t = post(t)
        nl.store(out[0:tile[0], 0:tile[1]], nl.copy(t, dtype))
        return out
    x = X[:128]
    np.testing.assert_array_equal(many(x, act=Act.RELU), np.maximum(x, 0))
    half = many(x, tile=(128, 8), dtype="float16", post=lambda t: t * 2.0)
    assert half.dtype == np.float16
    np.testing.assert_allclose(half[:, :8], (x[:, :8] * 2).astype(np.float16))


def test_none_leaves_out_an_optional_tensor():
    @neuron.kernel
    def add_bias(x, bias=None):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        t = nl.load(x)
        nl.store(out, t if bias is None else t + nl.load(bias))
        return out
    x, b = X[:128], np.ones((128, 16), np.float32)
    np.testing.assert_array_equal(add_bias(x), x)
    np.testing.assert_array_equal(add_bias(x, b), x + 1)
    np.testing.assert_array_equal(add_bias(x, bias=b), x + 1)
    assert add_bias.trace(x, b).inputs == ["x", "bias"]
    assert add_bias.trace(x).inputs == ["x"]


def test_unsupported_values_and_signatures_are_type_errors():
    k = neuron.kernel(scale_rows)
    with pytest.raises(TypeError, match="argument 'factor' is a set: kernel arguments are"):
        k(X, factor={1})
    with pytest.raises(TypeError, match=r"kernel scale_rows\(x, factor=2.0.*unexpected keyword"):
        k(X, fatcor=2.0)
    with pytest.raises(TypeError, match=r"\*args and \*\*kwargs parameters are not supported"):
        neuron.kernel(lambda *xs: None)


def test_a_grid_and_parameters_together():
    @neuron.kernel
    def rows_plus(x, k=1.0):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        r = nl.ds(nl.program_id(0) * 128, 128)
        nl.store(out[r], nl.load(x[r]) + k)
        return out
    np.testing.assert_array_equal(rows_plus[2](X, k=4.0), X + 4)
    np.testing.assert_array_equal(neuron.simulate(rows_plus)[2](X, 3.0), X + 3)
