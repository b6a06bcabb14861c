# Calling kernels with every element type: fp8 as ml_dtypes NumPy arrays and torch tensors,
# checked against ml_dtypes' own conversions (an independent implementation of the formats).
import ml_dtypes
import numpy as np
import pytest

import neuron
import neuron.language as nl


@neuron.kernel
def widen_double(a):
    out = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
    nl.store(out, nl.load(a, dtype=nl.float32) * 2.0)
    return out


@neuron.kernel
def narrow(a):
    out = nl.ndarray(a.shape, nl.float8_e4m3, buffer=nl.shared_hbm)
    nl.store(out, nl.load(a, dtype=nl.float8_e4m3))
    return out


@pytest.mark.parametrize("dt", [ml_dtypes.float8_e4m3, ml_dtypes.float8_e5m2,
                                ml_dtypes.float8_e4m3fn])
def test_fp8_numpy_inputs(dt):
    x = np.linspace(-200, 200, 64, dtype=np.float32).reshape(8, 8).astype(dt)
    np.testing.assert_array_equal(widen_double(x), x.astype(np.float32) * 2)


def test_fp8_numpy_outputs_round_like_ml_dtypes():
    x = np.linspace(-300, 300, 128, dtype=np.float32).reshape(8, 16)
    y = narrow(x)
    assert y.dtype == np.dtype(ml_dtypes.float8_e4m3)
    # ml_dtypes rounds to nearest even and overflows to inf, as docs/numerics.md specifies.
    np.testing.assert_array_equal(y.astype(np.float32), x.astype(ml_dtypes.float8_e4m3)
                                  .astype(np.float32))


def narrow_fn(a):
    out = nl.ndarray(a.shape, nl.float8_e4m3fn, buffer=nl.shared_hbm)
    nl.store(out, nl.load(a, dtype=nl.float8_e4m3fn))
    return out


@pytest.mark.parametrize("mode", ["native", "simulate"])
def test_fp8_e4m3fn_rounds_like_ml_dtypes(mode):
    # Every code read back, and writes at and between all codes (ties, 448, overflow to NaN,
    # +-inf and NaN to NaN, subnormals): OCP e4m3fn has no infinities.
    codes = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).reshape(16, 16)
    np.testing.assert_array_equal(neuron.kernel(widen_double.fn, mode=mode)(codes) / 2,
                                  codes.astype(np.float32))
    exact = codes.astype(np.float32).ravel()
    exact = np.sort(exact[np.isfinite(exact)])
    mids = (exact[:-1] + exact[1:]) / 2
    x = np.concatenate([exact, mids, np.nextafter(mids, np.float32(0)), [464, 465, 500, 1e9, -1e9,
                        np.inf, -np.inf, np.nan, 2.0**-10, 2.0**-11, 3 * 2.0**-11]])
    x = np.resize(x.astype(np.float32), (8, (x.size + 7) // 8)).astype(np.float32)
    got = neuron.kernel(narrow_fn, mode=mode)(x)
    assert got.dtype == np.dtype(ml_dtypes.float8_e4m3fn)
    np.testing.assert_array_equal(got.view(np.uint8), x.astype(ml_dtypes.float8_e4m3fn)
                                  .view(np.uint8))


def widen_e8m0(a):
    out = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
    nl.store(out, nl.load(a, dtype=nl.float32))
    return out


def narrow_e8m0(a):
    out = nl.ndarray(a.shape, nl.float8_e8m0fnu, buffer=nl.shared_hbm)
    nl.store(out, nl.load(a, dtype=nl.float8_e8m0fnu))
    return out


@pytest.mark.parametrize("mode", ["native", "simulate"])
def test_e8m0fnu_rounds_like_ml_dtypes(mode):
    # The MX scale type: every code read back (2^(code - 127), 0xFF NaN), and writes of every
    # power of two, the values between (rounding up from half the mantissa), zero, negatives,
    # infinities, NaN, subnormals and overflow.
    codes = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e8m0fnu).reshape(16, 16)
    np.testing.assert_array_equal(neuron.kernel(widen_e8m0, mode=mode)(codes),
                                  codes.astype(np.float32))  # (2^127 doubled would be inf)
    p = np.ldexp(np.float32(1), np.arange(-126, 128)).astype(np.float32)
    x = np.concatenate([p, p * 1.25, p * 1.5, np.nextafter(p * 1.5, np.float32(0)), p * 1.75,
                        [0, -0.0, -1, -3, np.inf, -np.inf, np.nan, 1e-40, 2.0**-127, 3e-39,
                         3.4e38]]).astype(np.float32)
    x = np.resize(x, (8, (x.size + 7) // 8)).astype(np.float32)
    with np.errstate(over="ignore"):
        got = neuron.kernel(narrow_e8m0, mode=mode)(x)
        want = x.astype(ml_dtypes.float8_e8m0fnu)
    assert got.dtype == np.dtype(ml_dtypes.float8_e8m0fnu)
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


def test_fp8_torch_tensors():
    torch = pytest.importorskip("torch")
    t = torch.linspace(-50, 50, 64).reshape(8, 8).to(torch.float8_e5m2)
    assert torch.equal(widen_double(t), t.float() * 2)
    t = torch.linspace(-400, 400, 64).reshape(8, 8).to(torch.float8_e4m3fn)
    assert torch.equal(widen_double(t), t.float() * 2)
    with pytest.raises(TypeError, match="no torch dtype"):
        narrow(torch.ones(8, 8))


# ---- non-contiguous arguments: copied in, and what the kernel writes is copied back ----

@neuron.kernel
def bump(a):
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a)
    nl.store(a, t + 1.0)  # writes its input in place
    nl.store(out, t)
    return out


@pytest.mark.parametrize("mode", ["native", "simulate", "eager"])
def test_in_place_writes_reach_non_contiguous_numpy_inputs(mode):
    k = neuron.kernel(bump.fn, mode=mode)
    base = np.arange(64, dtype=np.float32).reshape(8, 8)
    x = base.T  # a transposed view: the kernel gets a contiguous copy
    before = x.copy()
    out = k(x)
    np.testing.assert_array_equal(out, before)
    np.testing.assert_array_equal(x, before + 1)
    np.testing.assert_array_equal(base, before.T + 1)


def test_in_place_writes_reach_non_contiguous_torch_inputs():
    torch = pytest.importorskip("torch")
    base = torch.arange(64, dtype=torch.float32).reshape(8, 8)
    x = base.t()
    before = x.clone()
    assert torch.equal(bump(x), before)
    assert torch.equal(x, before + 1)


def test_a_read_only_input_the_kernel_writes_is_an_error():
    x = np.broadcast_to(np.ones((1, 8), np.float32), (8, 8))  # read-only, not contiguous
    with pytest.raises(ValueError, match="read-only"):
        bump(x)


def to_tf32_and_matmul(a, b):
    # a through a tfloat32 tile and back, and a tf32 x tf32 matmul in fp32 PSUM
    rounded = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
    prod = nl.ndarray((a.shape[1], b.shape[1]), nl.float32, buffer=nl.shared_hbm)
    ta = nl.load(a, dtype=nl.tfloat32)
    tb = nl.load(b, dtype=nl.tfloat32)
    nl.store(rounded, nl.copy(ta, nl.float32))
    assert nl.add(ta, rounded_tile := nl.copy(ta, nl.float32)).dtype == nl.float32  # with fp32
    assert nl.add(ta, ta).dtype == nl.tfloat32 and rounded_tile.dtype == nl.float32
    nl.store(prod, nl.copy(nl.matmul(ta, tb, transpose_x=True), nl.float32))
    return rounded, prod


def tf32_reference(x):
    # round to 11 significant bits, ties to even, in float64 (normal fp32 range)
    m, e = np.frexp(x.astype(np.float64))
    return (np.round(m * 2.0 ** 11) * 2.0 ** (e - 11)).astype(np.float32)


@pytest.mark.parametrize("mode", ("native", "simulate", "eager"))
def test_tfloat32_rounds_each_write_to_ten_mantissa_bits(mode):
    rng = np.random.default_rng(5)
    a = rng.standard_normal((64, 32)).astype(np.float32) * 100
    a[0, :4] = [1 + 2 ** -11, 1 + 3 * 2 ** -11, -(1 + 2 ** -12), 3.0]  # ties to even, below half
    b = rng.standard_normal((64, 16)).astype(np.float32)
    rounded, prod = neuron.kernel(to_tf32_and_matmul, mode=mode)(a, b)
    np.testing.assert_array_equal(rounded, tf32_reference(a))
    assert list(rounded[0, :4]) == [1.0, 1 + 2 ** -9, -1.0, 3.0]
    ref = tf32_reference(a).astype(np.float64).T @ tf32_reference(b).astype(np.float64)
    np.testing.assert_allclose(prod, ref, rtol=1e-5, atol=1e-4)
