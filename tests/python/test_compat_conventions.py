# Conventions published legacy NKI kernels use (issue: nki-samples run unmodified), each in a
# small kernel of our own against NumPy: the direct-allocation module neuronxcc.nki.compiler,
# loop directives, nl.nc(n) launch grids, nl.loop_reduce.
import numpy as np

import neuron.compat

neuron.compat.install()
from neuronxcc import nki  # noqa: E402
import neuronxcc.nki.compiler as ncc  # noqa: E402
import neuronxcc.nki.isa as nisa  # noqa: E402
import neuronxcc.nki.language as nl  # noqa: E402

RNG = np.random.default_rng(41)
f64 = np.float64


@ncc.skip_middle_end_transformations
@nki.jit(mode="simulation", additional_compile_opt="--ignored")
def allocated_double(x):
    """Tiles placed with the direct-allocation API (neuron places them itself)."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    n = x.shape[0] // 128
    t = nl.ndarray((n, nl.par_dim(128), x.shape[1]), dtype=x.dtype,
                   buffer=ncc.sbuf.mod_alloc(base_addr=0, num_free_tiles=(2,)))
    p = nl.ndarray((n, nl.par_dim(128), x.shape[1]), dtype=nl.float32,
                   buffer=ncc.psum.mod_alloc(base_bank=0, num_bank_tiles=(2,)))
    for i in nl.sequential_range(n, directives=ncc.no_reorder()):
        t[i] = nl.load(x[i * 128:(i + 1) * 128, :])
        p[i] = nisa.tensor_scalar(t[i], np.multiply, 2.0)
        nl.store(out[i * 128:(i + 1) * 128, :], nl.copy(p[i], dtype=x.dtype))
    return out


def test_direct_allocation_and_directives_are_accepted():
    x = RNG.uniform(-1, 1, (384, 64)).astype(np.float32)
    np.testing.assert_array_equal(allocated_double(x), x * 2)
    assert repr(ncc.sbuf.mod_alloc(base_addr=8)).startswith("ncc.sbuf.mod_alloc(")


@nki.jit(mode="simulation")
def add_rows(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    rows = nl.program_id(0) * 128 + nl.arange(128)[:, None]
    cols = nl.program_id(1) * 64 + nl.arange(64)[None, :]
    nl.store(out[rows, cols], nl.load(a[rows, cols]) + nl.load(b[rows, cols]))
    return out


def test_spmd_dim_with_nc_grids_cover_every_program():
    a, b = (RNG.uniform(-1, 1, (512, 128)).astype(np.float32) for _ in range(2))
    got = add_rows[nl.spmd_dim(2, nl.nc(2)), 2](a, b)
    np.testing.assert_array_equal(got, a + b)
    assert nl.spmd_dim(3, nl.nc(2)) == 6 and repr(nl.nc(2)) == "nl.nc(2)"


@nki.jit(mode="simulation")
def loop_reduced_matmul(a, b):
    """z = a.T @ b with k split in two blocks, accumulated by nl.loop_reduce."""
    out = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.shared_hbm)
    z = nl.zeros((128, 128), dtype=nl.float32, buffer=nl.sbuf)
    for k2 in nl.affine_range(2):
        zp = nl.zeros((128, 128), dtype=nl.float32, buffer=nl.psum)
        zp += nisa.nc_matmul(nl.load(a[k2 * 128:(k2 + 1) * 128, :]),
                             nl.load(b[k2 * 128:(k2 + 1) * 128, :]))
        z[...] = nl.loop_reduce(zp, op=np.add, loop_indices=[k2], dtype=nl.float32)
    nl.store(out, z)
    return out


def test_loop_reduce_accumulates_into_the_assigned_view():
    a, b = (RNG.uniform(-1, 1, (256, 128)).astype(np.float32) for _ in range(2))
    np.testing.assert_allclose(loop_reduced_matmul(a, b), a.astype(f64).T @ b.astype(f64),
                               rtol=1e-4, atol=1e-4)
