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


@pytest.mark.parametrize("dt", [ml_dtypes.float8_e4m3, ml_dtypes.float8_e5m2])
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


def test_fp8_torch_tensors():
    torch = pytest.importorskip("torch")
    t = torch.linspace(-50, 50, 64).reshape(8, 8).to(torch.float8_e5m2)
    assert torch.equal(widen_double(t), t.float() * 2)
    with pytest.raises(TypeError, match="float8_e4m3fn"):
        widen_double(t.float().to(torch.float8_e4m3fn))
    with pytest.raises(TypeError, match="no torch dtype"):
        narrow(torch.ones(8, 8))
