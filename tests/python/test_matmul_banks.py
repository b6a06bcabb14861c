# A PSUM tile may span several 2 KiB banks (nki-library's top-k keeps [128, 1024] fp32 tiles in
# PSUM on trn2); each matmul writes within one bank (codegen/src/verify.cpp bank_of_result).
import numpy as np
import pytest

import neuron
import neuron.isa as nisa
import neuron.language as nl
from helpers import line_of

RNG = np.random.default_rng(17)


def two_bank_product(a, b):
    """a.T @ b for b [128, 1024]: one matmul per bank of a [128, 1024] fp32 PSUM tile."""
    out = nl.ndarray((128, 1024), nl.float32, buffer=nl.shared_hbm)
    sa, sb = nl.load(a), nl.load(b)
    acc = nl.ndarray((128, 1024), nl.float32, buffer=nl.psum)
    for half in range(2):
        cols = slice(half * 512, (half + 1) * 512)
        nisa.nc_matmul(dst=acc[:, cols], stationary=sa, moving=sb[:, cols])
    res = nl.ndarray((128, 1024), nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=acc)
    nl.store(out, res)
    return out


@pytest.mark.parametrize("mode", ("native", "simulate", "eager"))
def test_a_psum_tile_of_two_banks_takes_a_matmul_per_bank(mode):
    a = RNG.standard_normal((128, 128)).astype(np.float32)
    b = RNG.standard_normal((128, 1024)).astype(np.float32)
    got = neuron.kernel(two_bank_product, mode=mode)(a, b)
    np.testing.assert_allclose(got, a.T.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)


def across_banks(a, b):
    out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
    acc = nl.ndarray((128, 1024), nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=acc[:, 256:768], stationary=nl.load(a), moving=nl.load(b))
    res = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=acc[:, 256:768])
    nl.store(out, res)
    return out


def test_a_matmul_result_across_a_bank_boundary_is_an_error():
    a = RNG.standard_normal((128, 128)).astype(np.float32)
    b = RNG.standard_normal((128, 512)).astype(np.float32)
    with pytest.raises(neuron.NeuronError) as info:
        neuron.kernel(across_banks)(a, b)
    assert info.value.rule == "psum-bank" and "bank boundary" in info.value.message
    assert info.value.line == line_of(across_banks, "nisa.nc_matmul")
