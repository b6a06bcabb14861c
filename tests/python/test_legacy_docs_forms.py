# Forms the NKI documentation's own API examples use with `neuronxcc.nki` (the AWS Neuron SDK
# docs' nki/test files): nki.trace kernels writing output arguments, kernels returning an
# nl.hbm tensor or an on-chip tile, neuronxcc.nki.isa.constants, tensor_scalar_cumulative with
# load_reduce and register chains, an in-place nc_stream_shuffle; simulated and native, each
# against NumPy.
import numpy as np
import pytest

import neuron
import neuron.compat

neuron.compat.install()
from neuronxcc import nki  # noqa: E402
import neuronxcc.nki.isa as nisa  # noqa: E402
import neuronxcc.nki.language as nl  # noqa: E402

RNG = np.random.default_rng(61)


def both(kernel, *args, **kwargs):
    """The kernel's outputs simulated and natively (asserted bit-identical)."""
    sim = nki.simulate_kernel(kernel, *args, **kwargs)
    nat = nki.baremetal(kernel)(*args, **kwargs)
    for s, n in zip(sim if isinstance(sim, tuple) else (sim,),
                    nat if isinstance(nat, tuple) else (nat,)):
        np.testing.assert_array_equal(np.asarray(s).view(np.uint8), np.asarray(n).view(np.uint8))
    return sim


def test_trace_kernels_write_their_output_arguments():
    @nki.trace
    def column_sums(a, out):
        nl.store(out, nisa.tensor_partition_reduce(np.add, nl.load(a)))

    a = RNG.standard_normal((96, 10)).astype(np.float32)
    for run in (nki.simulate_kernel, lambda k, *x: nki.baremetal(k)(*x)):
        out = np.zeros((1, 10), np.float32)
        run(column_sums, a, out)
        np.testing.assert_allclose(out, a.sum(0, keepdims=True), rtol=1e-5, atol=1e-5)


def test_isa_constants_module_and_load_reduce():
    from neuronxcc.nki.isa.constants import dge_mode, reduce_cmd
    assert dge_mode is nisa.dge_mode and reduce_cmd is nisa.reduce_cmd
    assert int(nisa.reduce_cmd.load_reduce) == 4


def test_a_returned_private_hbm_tensor_or_tile_is_an_output():
    def kernel(a):
        total = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.hbm)
        t = nl.load(a)
        doubled = nl.multiply(t, 2.0)
        nl.store(total, nl.add(t, 1.0))
        return total, doubled  # private HBM, and an SBUF tile

    a = RNG.standard_normal((32, 12)).astype(np.float32)
    total, doubled = both(kernel, a)
    np.testing.assert_array_equal(total, a + 1)
    np.testing.assert_array_equal(doubled, a * 2)
    # with several programs, whose copy would it be? The tracer's rule stands.
    with pytest.raises(neuron.NeuronError) as e:
        nki.jit(kernel, mode="simulation")[2](a)
    assert e.value.rule == "kernel-output" and "lives in hbm" in e.value.message


def test_tensor_scalar_cumulative_loads_and_chains_its_registers():
    def kernel(a, init):
        out = nl.ndarray((a.shape[0], 2 * a.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.load(a)
        dst = nl.ndarray(t.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar_cumulative(src=t, dst=dst, op0=nl.multiply, op1=nl.add, imm0=3.0,
                                      imm1=nl.load(init), reduce_cmd=nisa.reduce_cmd.load_reduce)
        nl.store(out[:, 0:a.shape[1]], dst)
        nisa.tensor_scalar_cumulative(src=t, dst=dst, op0=nl.add, op1=nl.maximum, imm0=0.0,
                                      reduce_cmd=nisa.reduce_cmd.reduce)
        nl.store(out[:, a.shape[1]:], dst)
        return out

    a = RNG.standard_normal((16, 9)).astype(np.float32)
    init = RNG.standard_normal((16, 1)).astype(np.float32)
    got = both(kernel, a, init)
    first = init + np.cumsum(3.0 * a.astype(np.float64), axis=1)
    second = np.maximum.accumulate(np.concatenate([first[:, -1:], a], axis=1), axis=1)[:, 1:]
    np.testing.assert_allclose(got, np.concatenate([first, second], axis=1), rtol=1e-5,
                               atol=1e-5)


def test_nc_stream_shuffle_in_place_reads_every_partition_first():
    def kernel(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.load(a)
        nisa.nc_stream_shuffle(src=t, dst=t, shuffle_mask=[(i - 1) % 32 for i in range(32)])
        nl.store(out, t)
        return out

    a = RNG.standard_normal((64, 16)).astype(np.float32)
    got = both(kernel, a)
    rows = [32 * (p // 32) + (p % 32 - 1) % 32 for p in range(64)]
    np.testing.assert_array_equal(got, a[rows])


def test_current_api_simulate_kernel_passes_keyword_arguments():
    import nki as cnki
    import nki.language as cnl

    def scaled(x, factor):
        out = cnl.ndarray(x.shape, x.dtype, buffer=cnl.shared_hbm)
        cnl.store(out, cnl.multiply(cnl.load(x), factor))
        return out

    x = RNG.standard_normal((8, 4)).astype(np.float32)
    np.testing.assert_array_equal(cnki.simulate_kernel(scaled, x, factor=3.0), x * 3)


def test_par_dim_in_an_hbm_shape_is_its_size():
    def kernel(a):
        B, N, M = a.shape
        out = nl.ndarray((B, nl.par_dim(N), M), dtype=a.dtype, buffer=nl.shared_hbm)
        for b in nl.affine_range(B):
            nl.store(out[b], value=nl.exp(nl.load(a[b])))
        return out

    a = RNG.standard_normal((3, 16, 8)).astype(np.float32)
    got = both(kernel, a)
    assert got.shape == (3, 16, 8)
    np.testing.assert_allclose(got, np.exp(a), rtol=1e-6)


def test_load_transpose2d_of_many_rows_is_one_dma_transpose():
    def kernel(a):
        out = nl.ndarray((a.shape[1], a.shape[0]), dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.load_transpose2d(a))
        return out

    a = RNG.standard_normal((700, 24)).astype(np.float32)
    np.testing.assert_array_equal(both(kernel, a), a.T)


def test_numbers_written_at_any_partition():
    def kernel():
        idx = nl.zeros((8, 5), dtype=nl.int32)
        for i in nl.static_range(8):
            for j in nl.static_range(5):
                idx[i, j] = i * 10 + j  # partitions 1..7: no engine starts there
        out = nl.ndarray((8, 5), dtype=nl.int32, buffer=nl.shared_hbm)
        nl.store(out, value=idx)
        return out

    want = np.arange(8)[:, None] * 10 + np.arange(5)
    np.testing.assert_array_equal(both(kernel), want)


def test_dma_transpose_takes_a_dge_mode():
    from neuronxcc.nki.isa.constants import dge_mode

    def kernel(a):
        t = nisa.dma_transpose(a, dge_mode=dge_mode.hwdge)
        out = nl.ndarray(t.shape, dtype=t.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=t)
        return out

    a = RNG.standard_normal((20, 12)).astype(np.float32)
    np.testing.assert_array_equal(both(kernel, a), a.T)
