# nisa.tensor_tensor_scan (NKI_API.md §4.9, §6.5): r = op1(op0(data0[i], r), data1[i]) along each
# partition's free dims, in both API generations and every mode, against a NumPy recurrence.
import numpy as np
import pytest

import neuron
import neuron.compat
import neuron.isa as cisa
import neuron.language as cnl

neuron.compat.install()
from neuronxcc import nki  # noqa: E402
import neuronxcc.nki.isa as nisa  # noqa: E402
import neuronxcc.nki.language as nl  # noqa: E402

RNG = np.random.default_rng(53)


def recurrence(a, b, init, op0, op1, reverse0=False, reverse1=False):
    """The scan in float64, element by element (init: a number or one value per row)."""
    a, b = a.astype(np.float64).reshape(a.shape[0], -1), b.astype(np.float64).reshape(
        b.shape[0], -1)
    out = np.empty_like(a)
    r = np.broadcast_to(np.asarray(init, np.float64).reshape(-1), (a.shape[0],)).copy()
    for i in range(a.shape[1]):
        t = op0(r, a[:, i]) if reverse0 else op0(a[:, i], r)
        r = op1(b[:, i], t) if reverse1 else op1(t, b[:, i])
        out[:, i] = r
    return out


def linear_scan(a, b, init):
    """h = a * h + b along the free dim, from a [P, 1] initial tile (the Mamba recurrence)."""
    out = cnl.ndarray(a.shape, cnl.float32, buffer=cnl.shared_hbm)
    t = cnl.ndarray(a.shape, cnl.float32)
    cisa.tensor_tensor_scan(t, cnl.load(a), cnl.load(b), cnl.load(init), cnl.multiply, cnl.add)
    cnl.store(out, t)
    return out


@pytest.mark.parametrize("mode", ["native", "simulate", "eager"])
def test_current_api_scan_with_a_column_initial(mode):
    a = RNG.uniform(0.5, 1.0, (128, 96)).astype(np.float32)
    b = RNG.uniform(-1, 1, (128, 96)).astype(np.float32)
    init = RNG.uniform(-1, 1, (128, 1)).astype(np.float32)
    got = neuron.kernel(linear_scan, mode=mode)(a, b, init)
    np.testing.assert_allclose(got, recurrence(a, b, init, np.multiply, np.add), rtol=1e-5,
                               atol=1e-5)


@nki.jit(mode="simulation")
def legacy_scans(a, b):
    out = nl.ndarray((2,) + a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    x, y = nl.load(a), nl.load(b)
    nl.store(out[0], nisa.tensor_tensor_scan(x, y, initial=0, op0=np.multiply, op1=np.add))
    # reversed operands: r = y[i] - max(r, x[i])
    nl.store(out[1], nisa.tensor_tensor_scan(x, y, 2.0, np.maximum, np.subtract, reverse0=True,
                                             reverse1=True))
    return out


def test_legacy_scans_with_a_number_initial_and_reversed_operands():
    a = RNG.uniform(-1, 1, (64, 4, 8)).astype(np.float32)  # the free dims scan row-major
    b = RNG.uniform(-1, 1, (64, 4, 8)).astype(np.float32)
    got = legacy_scans(a, b)
    np.testing.assert_allclose(got[0].reshape(64, -1), recurrence(a, b, 0.0, np.multiply, np.add),
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got[1].reshape(64, -1),
                               recurrence(a, b, 2.0, np.maximum, np.subtract, True, True),
                               rtol=1e-5, atol=1e-5)


def test_a_mismatched_scan_names_the_rule_and_line():
    def bad(a):
        out = cnl.ndarray(a.shape, cnl.float32, buffer=cnl.shared_hbm)
        t = cnl.ndarray((128, 16), cnl.float32)
        x = cnl.load(a)
        cisa.tensor_tensor_scan(t, x, x[:, 0:8], 0.0, cnl.multiply, cnl.add)
        cnl.store(out[:, 0:16], t)
        return out

    with pytest.raises(neuron.NeuronError) as e:
        neuron.kernel(bad)(np.zeros((128, 16), np.float32))
    assert "tensor_tensor_scan" in str(e.value) and e.value.line is not None
    assert "::" not in e.value.message
