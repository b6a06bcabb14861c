# Legacy (neuronxcc.nki) kernels whose data layout needs more than one view per tensor: reshapes
# that merge or split HBM dims, grid subscripts that walk small axes backwards or out of order
# (the interpolation samples), PSUM tiles that share banks or live in one unrolled iteration, and
# `psum += nisa.nc_matmul(...)` as one accumulating matmul. Each is checked against NumPy.
import numpy as np
import pytest

import neuron
import neuron.compat

neuron.compat.install()
from neuronxcc import nki  # noqa: E402
import neuronxcc.nki.isa as nisa  # noqa: E402
import neuronxcc.nki.language as nl  # noqa: E402

RNG = np.random.default_rng(5)
f64 = np.float64


def rand(*shape):
    return RNG.uniform(-1, 1, shape).astype(np.float32)


# ---- reshape across dims ----------------------------------------------------------------------

@nki.jit(mode="simulation")
def merged_rows(x):
    n, c, h, w = x.shape
    flat = x.reshape((n * c, h, w))  # [2, 64, H, W] -> [128, H, W], as the interpolation samples
    out = nl.ndarray((n * c, h, w), dtype=x.dtype, buffer=nl.shared_hbm)
    i_p, i_h, i_w = nl.mgrid[0:128, 0:h, 0:w]
    t = nl.load(flat[i_p, i_h, i_w], mask=(i_p < n * c))
    nl.store(out[i_p, i_h, i_w], value=nl.multiply(t, 2.0), mask=(i_p < n * c))
    return out.reshape((n, c, h, w))  # split again: the caller gets [n, c, h, w]


@nki.jit(mode="simulation")
def merged_slices(x, lo, hi):
    flat = x.reshape((-1, x.shape[2]))
    out = nl.ndarray((hi - lo, x.shape[2]), dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.load(flat[lo:hi, :]))
    return out


def test_reshape_merges_and_splits_hbm_dims():
    x = rand(2, 64, 4, 8)
    got = merged_rows(x)
    assert got.shape == x.shape
    np.testing.assert_array_equal(got, x * 2)
    y = rand(4, 32, 16)
    flat = y.reshape(128, 16)
    # one block, two whole blocks, inside one, and rows 16..47, which cross a block boundary
    # half-way (no box of y's dims: a view of its storage, y being a whole tensor)
    for lo, hi in ((32, 64), (0, 64), (40, 50), (16, 48)):
        np.testing.assert_array_equal(merged_slices(y, lo, hi), flat[lo:hi])


# ---- grid subscripts with small axes reversed or out of order ----------------------------------

@nki.jit(mode="simulation")
def upsample_rows(x):
    # Linear 2x upsampling of the interior, as the bilinear sample writes it: out[2y + 1 + s]
    # mixes in[y + s] (weight 3/4) and in[y + 1 - s] (1/4); s walks a size-2 axis backwards.
    p, w = x.shape
    out = nl.ndarray((p, 2 * w), dtype=x.dtype, buffer=nl.shared_hbm)
    src = nl.load(x)
    res = nl.zeros((p, 2 * w), dtype=x.dtype)
    i_p, i_s, i_y = nl.mgrid[0:p, 0:2, 0:w - 1]
    res[i_p, 2 * i_y + 1 + i_s] = 0.75 * src[i_p, i_y + i_s] + 0.25 * src[i_p, i_y + (-1 * i_s + 1)]
    nl.store(out, value=res)
    return out


@nki.jit(mode="simulation")
def corners(x):
    # the four corners of each [H, W] plane: the grid's axes are [P, W, H], the dims [P, H, W]
    p, h, w = x.shape
    out = nl.ndarray((p, 2, 2), dtype=x.dtype, buffer=nl.shared_hbm)
    src = nl.load(x)
    res = nl.ndarray((p, 2, 2), dtype=x.dtype)
    i_p, i_w, i_h = nl.mgrid[0:p, 0:2, 0:2]
    res[i_p, i_h, i_w] = src[i_p, (h - 1) * i_h, (w - 1) * i_w]
    nl.store(out, value=res)
    return out


def test_split_subscripts_with_reversed_and_reordered_small_axes():
    x = rand(128, 9)
    want = np.zeros((128, 18), f64)
    for s in (0, 1):
        for y in range(8):
            want[:, 2 * y + 1 + s] = 0.75 * x[:, y + s] + 0.25 * x[:, y + 1 - s]
    np.testing.assert_allclose(upsample_rows(x), want, rtol=1e-6, atol=1e-6)
    z = rand(16, 5, 7)
    np.testing.assert_array_equal(corners(z), z[:, ::4, ::6])


# ---- PSUM: small tiles share a bank; blocks live in their iteration; += is one matmul ---------

@nki.jit(mode="simulation", platform_target="trn1")
def nine_psum_tiles(a, b):
    # nine [128, 128] fp32 PSUM tiles live at once: 4.5 KiB, three of trn1's eight 2 KiB banks
    out = nl.ndarray((9, 128, 128), dtype=nl.float32, buffer=nl.shared_hbm)
    st, mv = nl.load(a), nl.load(b)
    tiles = [nisa.nc_matmul(st, nl.multiply(mv, float(i + 1))) for i in range(9)]
    for i, t in enumerate(tiles):
        nl.store(out[i], value=t)
    return out


@nki.jit(mode="simulation", platform_target="trn1")
def psum_blocks(a, b):
    # nine full-bank blocks declared up front, each used in one iteration of an unrolled loop
    k = a.shape[0] // 128
    out = nl.ndarray((9, 128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.ndarray((9, nl.par_dim(128), 512), dtype=nl.float32, buffer=nl.psum)
    for i in nl.affine_range(9):
        for j in nl.affine_range(k):
            acc[i] += nisa.nc_matmul(nl.load(a[j * 128:(j + 1) * 128, :]),
                                     nl.multiply(nl.load(b[j * 128:(j + 1) * 128, :]),
                                                 float(i + 1)))
        nl.store(out[i], value=acc[i])
    return out


def test_psum_tiles_share_banks_and_blocks_live_in_their_iteration():
    a, b = rand(128, 128), rand(128, 128)
    prod = a.astype(f64).T @ b
    want = np.stack([prod * (i + 1) for i in range(9)])
    np.testing.assert_allclose(nine_psum_tiles(a, b), want, rtol=1e-4, atol=1e-4)
    a2, b2 = rand(256, 128), rand(256, 512)
    prod = a2.astype(f64).T @ b2
    got = psum_blocks(a2, b2)
    np.testing.assert_allclose(got, np.stack([prod * (i + 1) for i in range(9)]), rtol=1e-4,
                               atol=1e-4)
    # `acc[i] += nisa.nc_matmul(...)` is one accumulating matmul into the block: no fresh tile
    # and no add (NKI's accumulation group)
    ir = str(psum_blocks.trace(a2, b2))
    assert ir.count("nc_matmul") == 18 and "tensor_tensor" not in ir


# ---- `dst[...] = nisa.f(...)` writes dst directly ---------------------------------------------

@nki.jit(mode="simulation")
def direct_writes(x, y):
    out = nl.ndarray((128, 4 * 64 + 1), dtype=nl.float32, buffer=nl.shared_hbm)
    a, b = nl.load(x), nl.load(y)
    res = nl.ndarray((128, 4 * 64 + 1), dtype=nl.float32)
    res[:, 0:64] = nisa.activation(op=nl.exp, data=a)
    res[:, 64:128] = nisa.tensor_tensor(a, b, nl.multiply)
    res[:, 128:192] = nisa.tensor_scalar(data=a, op0=nl.multiply, operand0=2.0, op1=nl.add,
                                         operand1=1.0)
    res[:, 192:256] = nisa.tensor_copy(b)
    res[:, 256:257] = nisa.tensor_reduce(op=nl.max, data=a, axis=1, keepdims=True)
    nl.store(out, value=res)
    return out


def test_value_returning_calls_write_their_destination():
    x, y = rand(128, 64), rand(128, 64)
    want = np.concatenate([np.exp(x.astype(f64)), x.astype(f64) * y, 2.0 * x + 1.0, y,
                           x.max(axis=1, keepdims=True)], axis=1)
    np.testing.assert_allclose(direct_writes(x, y), want, rtol=1e-5, atol=1e-5)
    ir = str(direct_writes.trace(x, y))
    assert "tensor_copy(" in ir and ir.count("tensor_copy(") == 1  # the kernel's own only
