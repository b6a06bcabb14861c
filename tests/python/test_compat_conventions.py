# Conventions published legacy NKI kernels use (issue: nki-samples run unmodified), each in a
# small kernel of our own against NumPy: the direct-allocation module neuronxcc.nki.compiler,
# loop directives, nl.nc(n) launch grids, nl.loop_reduce.
import numpy as np
import pytest

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


def test_a_zero_grid_dim_runs_one_program_with_a_warning():
    a, b = (RNG.uniform(-1, 1, (128, 64)).astype(np.float32) for _ in range(2))
    with pytest.warns(UserWarning, match="0-sized grid dimension"):
        k = add_rows[0, 1]
    got = k(a, b)
    np.testing.assert_array_equal(got, a + b)
    assert k.grid == (1, 1)


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


@nki.jit(mode="simulation")
def regroup(x, f1, f2):
    """Each row holds an f1 x f2 matrix; write its transpose (one dim, two grid axes)."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    i_p = nl.arange(x.shape[0])[:, None, None]
    i_1, i_2 = nl.arange(f1)[None, :, None], nl.arange(f2)[None, None, :]
    r = nl.ndarray((x.shape[0], f1 * f2), dtype=x.dtype)
    r[i_p, i_2 * f1 + i_1] = nl.copy(t[i_p, i_1 * f2 + i_2])
    nl.store(out, r)
    return out


def test_a_dim_walked_by_two_grid_axes_reads_and_writes():
    x = RNG.uniform(-1, 1, (16, 12)).astype(np.float32)
    want = x.reshape(16, 3, 4).transpose(0, 2, 1).reshape(16, 12)
    np.testing.assert_array_equal(regroup(x, 3, 4), want)


@nki.jit(mode="simulation")
def window_max(x, k):
    """Stride-1 k x k max pooling: overlapping rows loaded per window row (masked tail)."""
    h, w = x.shape
    out = nl.ndarray((h - k + 1, w - k + 1), dtype=x.dtype, buffer=nl.shared_hbm)
    i_h, i_kh, i_w = nl.mgrid[0:128, 0:k, 0:w]
    t = nl.load(x[i_h + i_kh, i_w], mask=(i_h < h - k + 1))
    j_h, j_kh, j_w, j_kw = nl.mgrid[0:128, 0:k, 0:w - k + 1, 0:k]
    m = nl.max(t[j_h, j_kh, j_w + j_kw], axis=[1, 3], mask=(j_h < h - k + 1))
    o_h, o_w = nl.mgrid[0:128, 0:w - k + 1]
    nl.store(out[o_h, o_w], value=m, mask=(o_h < h - k + 1))
    return out


def test_overlapping_windows_load_and_reduce():
    x = RNG.uniform(-1, 1, (100, 20)).astype(np.float32)
    want = np.lib.stride_tricks.sliding_window_view(x, (3, 3)).max(axis=(2, 3))
    np.testing.assert_array_equal(window_max(x, 3), want)


@nki.jit(mode="simulation")
def via_scratch(q, v):
    """Intermediates in a shared_hbm tensor the kernel does not return (NKI scratch), and
    nl.matmul of a PSUM operand (an nl.transpose result)."""
    out = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.shared_hbm)
    scratch = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(scratch, nl.exp(nl.load(q)))
    vt = nl.transpose(nl.load(v))  # PSUM
    nl.store(out, nl.matmul(nl.load(scratch), vt, transpose_x=False))
    return out


def test_unreturned_shared_hbm_is_scratch_and_psum_matmul_operands_are_copied():
    q, v = (RNG.uniform(-1, 1, (128, 128)).astype(np.float32) for _ in range(2))
    want = np.exp(q.astype(f64)) @ v.astype(f64).T
    np.testing.assert_allclose(via_scratch(q, v), want, rtol=1e-4, atol=1e-4)


@nki.jit(mode="simulation")
def blocks_of_products(q, k):
    """PSUM blocks written by value-returning nc_matmul / nc_transpose assignments."""
    out = nl.ndarray((2, 128, 128), dtype=nl.float32, buffer=nl.shared_hbm)
    qk = nl.ndarray((2, nl.par_dim(128), 128), dtype=nl.float32, buffer=nl.psum)
    qs, ks = nl.load(q), nl.load(k)
    qk[0, :, :] = nisa.nc_matmul(qs, ks)
    qk[1] = nisa.nc_transpose(ks)
    for i in nl.affine_range(2):
        nl.store(out[i], value=nl.copy(qk[i]))
    return out


def test_legacy_value_returning_psum_results_are_written_in_place():
    q, k = (RNG.uniform(-1, 1, (128, 128)).astype(np.float32) for _ in range(2))
    got = blocks_of_products(q, k)
    np.testing.assert_allclose(got[0], q.astype(f64).T @ k.astype(f64), rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(got[1], k.T)
    ir = str(blocks_of_products.trace(q, k))
    # Straight into the blocks: no fresh PSUM tile and no copy besides the two nl.copy calls.
    assert ir.count("alloc") == 2 + 2 + 2 and ir.count("copy(") == 2, ir


@nki.jit(mode="simulation")
def with_constants(x):
    """nl.shared_constant arrays (hidden inputs) and nc_matmul(is_transpose=True)."""
    out = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.shared_hbm)
    ident = nl.shared_constant(np.identity(128, dtype=np.int8), dtype=nl.float32)
    scale = nl.shared_constant(np.arange(128, dtype=np.float32).reshape(128, 1))
    t = nisa.nc_matmul(nl.load(x), nl.load(ident), is_transpose=True)
    nl.store(out, nl.multiply(nl.copy(t), nl.load(scale)))
    return out


def test_shared_constants_and_transposing_matmul():
    x = RNG.uniform(-1, 1, (128, 128)).astype(np.float32)
    want = x.T * np.arange(128, dtype=np.float32)[:, None]
    np.testing.assert_array_equal(with_constants(x), want)
    np.testing.assert_array_equal(with_constants(x), want)  # cached, constants passed again
