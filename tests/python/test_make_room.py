# Kernels that fit SBUF or PSUM only the way neuronx-cc makes room (codegen/src/pipeline.cpp,
# step 5): a tile reloaded per block gives up its bytes between its last read and its reload
# (tile_versions), and PSUM tiles filled in one loop and drained in the next drain as each is
# complete (early_psum_reads). As written, each needs more memory than trn2 has. Checked
# against NumPy in float64 on the simulator and natively.
import numpy as np
import pytest

import neuron
import neuron.isa as nisa
import neuron.language as nl
from helpers import line_of

RNG = np.random.default_rng(71)
F = 16000  # [128, F] fp32: 64000 bytes per partition; trn2 has 212984


def reload_per_block(x, w):
    """nki-library's MoE blockwise matmul keeps its token tile across all blocks: loaded,
    consumed, then the block's weights need the bytes. Live as written: tok, y, wt, z = 256000
    bytes per partition; with tok's values apart, at most three tiles."""
    n = x.shape[0]
    out = nl.ndarray((n, 128, F), x.dtype, buffer=nl.shared_hbm)
    tok = nl.ndarray((128, F), x.dtype, buffer=nl.sbuf)
    for i in range(n):
        nisa.dma_copy(dst=tok, src=x[i])
        y = nl.ndarray((128, F), x.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=y, data=tok, op0=nl.multiply, operand0=2.0)
        wt = nl.ndarray((128, F), x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=wt, src=w[i])
        z = nl.ndarray((128, F), x.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=z, data1=y, data2=wt, op=nl.add)
        nisa.dma_copy(dst=out[i], src=z)
    return out


@pytest.mark.parametrize("mode", ("simulate", "native"))
def test_a_tile_reloaded_per_block_shares_its_bytes_between_blocks(mode):
    x = RNG.standard_normal((3, 128, F)).astype(np.float32)
    w = RNG.standard_normal((3, 128, F)).astype(np.float32)
    got = neuron.kernel(reload_per_block, mode=mode)(x, w)
    np.testing.assert_array_equal(got, (2 * x.astype(np.float64) + w).astype(np.float32))


def fill_then_drain(a, b):
    """Nine [128, 512] fp32 products in PSUM (one 2 KiB bank each, eight banks) before any is
    read, as nki-library's MoE gate/up projection sharded on I fills its list of PSUM tiles;
    each drains right after its matmul instead."""
    n = b.shape[0]
    out = nl.ndarray((n, 128, 512), nl.float32, buffer=nl.shared_hbm)
    at = nl.ndarray((128, 128), a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=at, src=a)
    acc = []
    for i in range(n):
        bt = nl.ndarray((128, 512), b.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=bt, src=b[i])
        p = nl.ndarray((128, 512), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=p, stationary=at, moving=bt)
        acc.append(p)
    for i in range(n):
        t = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=t, src=acc[i])
        nisa.dma_copy(dst=out[i], src=t)
    return out


@pytest.mark.parametrize("mode", ("simulate", "native"))
def test_psum_tiles_filled_in_one_loop_drain_as_each_is_complete(mode):
    a = RNG.standard_normal((128, 128)).astype(np.float32)
    b = RNG.standard_normal((9, 128, 512)).astype(np.float32)
    got = neuron.kernel(fill_then_drain, mode=mode)(a, b)
    want = np.einsum("km,ikn->imn", a.astype(np.float64), b.astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


def all_live(x):
    """Four [128, F] tiles whose values are all needed at the end: nothing makes room."""
    out = nl.ndarray((128, F), x.dtype, buffer=nl.shared_hbm)
    tiles = []
    for i in range(4):
        tile = nl.ndarray((128, F), x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=x[i])
        tiles.append(tile)
    for t in tiles[1:]:
        nisa.tensor_tensor(dst=tiles[0], data1=tiles[0], data2=t, op=nl.add)
    nisa.dma_copy(dst=out, src=tiles[0])
    return out


def test_a_kernel_whose_values_do_not_fit_still_names_the_tile_and_the_line():
    x = RNG.standard_normal((4, 128, F)).astype(np.float32)
    with pytest.raises(neuron.NeuronError) as info:
        neuron.kernel(all_live, mode="simulate")(x)
    assert info.value.rule == "sbuf-capacity"
    assert info.value.line == line_of(all_live, "tile = nl.ndarray(")
    assert "trn2 has 212984" in info.value.message
