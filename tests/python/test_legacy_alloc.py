# Legacy block tensors and memory capacity (issue: nki-samples run unmodified): the modular
# reuse of ncc.sbuf.mod_alloc (block i shares the tile of block i % k), and PSUM block tensors
# too big for PSUM spilled to SBUF. Small kernels of our own against NumPy float64.
import warnings

import numpy as np
import pytest

import neuron
import neuron.compat

neuron.compat.install()
from neuronxcc import nki  # noqa: E402
import neuronxcc.nki.compiler as ncc  # noqa: E402
import neuronxcc.nki.isa as nisa  # noqa: E402
import neuronxcc.nki.language as nl  # noqa: E402
from helpers import line_of  # noqa: E402

RNG = np.random.default_rng(53)
f64 = np.float64
THIS = __file__
N, P, F = 16, 8, 4096  # 16 blocks of [8, 4096] fp32: 16 KiB per partition each, 256 KiB in all


@nki.jit(mode="simulation")
def window_sums(x, modular=True):
    """out block i = x block i-1 + x block i: each block is read in two iterations. mod_alloc
    with num_free_tiles=(2,) keeps two tiles (block i overwrites block i-2, which is no longer
    read); with one tile per block, each lives from its load to its last read, so two are live
    at a time too (256 KiB per partition for all 16, more than SBUF)."""
    out = nl.ndarray((N * P - P, F), dtype=x.dtype, buffer=nl.shared_hbm)
    buffer = ncc.sbuf.mod_alloc(base_addr=0, num_free_tiles=(2,)) if modular else nl.sbuf
    t = nl.ndarray((N, nl.par_dim(P), F), dtype=x.dtype, buffer=buffer)
    for i in nl.sequential_range(N):
        t[i] = nl.load(x[i * P:(i + 1) * P, :])
        if i >= 1:
            nl.store(out[(i - 1) * P:i * P, :], nl.add(t[i - 1], t[i]))
    return out


def test_mod_alloc_reuses_tiles_modulo_num_free_tiles():
    x = RNG.uniform(-1, 1, (N * P, F)).astype(np.float32)
    blocks = x.astype(f64).reshape(N, P, F)
    want = (blocks[:-1] + blocks[1:]).reshape(-1, F)
    np.testing.assert_allclose(window_sums(x), want, rtol=1e-6, atol=0)


def test_one_tile_per_block_fits_by_the_blocks_live_ranges():
    # The same kernel with plain nl.sbuf: each block is placed when first written and freed after
    # its last read, as NKI's allocator places blocks, so it fits as the modular one does.
    x = RNG.uniform(-1, 1, (N * P, F)).astype(np.float32)
    blocks = x.astype(f64).reshape(N, P, F)
    want = (blocks[:-1] + blocks[1:]).reshape(-1, F)
    np.testing.assert_allclose(window_sums(x, modular=False), want, rtol=1e-6, atol=0)


@nki.jit(mode="simulation")
def all_blocks_then_sum(x):
    """Every block loaded before any is read: all 16 live together (256 KiB per partition)."""
    out = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((N, nl.par_dim(P), F), dtype=x.dtype, buffer=nl.sbuf)
    for i in nl.sequential_range(N):
        t[i] = nl.load(x[i * P:(i + 1) * P, :])
    acc = nl.zeros((nl.par_dim(P), F), dtype=nl.float32, buffer=nl.sbuf)
    for i in nl.sequential_range(N):
        acc[...] = nl.add(acc, t[i])
    nl.store(out, acc)
    return out


def test_blocks_live_together_do_not_fit():
    with pytest.raises(neuron.NeuronError) as info:
        all_blocks_then_sum(np.zeros((N * P, F), np.float32))
    assert info.value.rule == "sbuf-capacity"


@nki.jit(mode="simulation")
def symbolic_block(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((4, nl.par_dim(128), x.shape[1]), dtype=x.dtype,
                   buffer=ncc.sbuf.mod_alloc(base_addr=0, num_free_tiles=(2,)))
    t[nl.program_id(0)] = nl.load(x)  # a program id is not an int at trace time
    nl.store(out, t[0])
    return out


def test_a_symbolic_index_on_a_modular_dim_names_the_rule_and_the_line():
    with pytest.raises(neuron.NeuronError) as info:
        symbolic_block[2](np.zeros((128, 64), np.float32))
    e = info.value
    assert e.rule == "mod-alloc", e.rule
    assert "allocated modulo 2" in e.message and "i % 2" in e.message, e.message
    assert e.file == THIS and e.line == line_of(symbolic_block, "t[nl.program_id(0)] =")


M, NB = 2, 5  # 2 x 5 full-bank [128, 512] fp32 blocks: 10 banks, PSUM has 8


@nki.jit(mode="simulation")
def all_products(a, b, c, m=M, nb=NB, p=128):
    """Every a_i.T @ b_j + a_i.T @ c_j into one PSUM block tensor, all kept live between the
    loops (attention v3's qk pattern): more banks than PSUM has, so it is spilled."""
    out = nl.ndarray((m * p, nb * 512), dtype=nl.float32, buffer=nl.shared_hbm)
    a_sb, b_sb, c_sb = nl.load(a), nl.load(b), nl.load(c)
    qk = nl.ndarray((m, nb, nl.par_dim(p), 512), dtype=nl.float32, buffer=nl.psum)
    for i in nl.affine_range(m):
        for j in nl.affine_range(nb):
            qk[i, j, :, :] = nisa.nc_matmul(a_sb[:, nl.ds(i * p, p)],
                                            b_sb[:, nl.ds(j * 512, 512)])
            qk[i, j, :, :] += nisa.nc_matmul(a_sb[:, nl.ds(i * p, p)],
                                             c_sb[:, nl.ds(j * 512, 512)])
    for i in nl.affine_range(m):
        for j in nl.affine_range(nb):
            nl.store(out[nl.ds(i * p, p), nl.ds(j * 512, 512)],
                     nisa.tensor_scalar(qk[i, j], np.multiply, 1.0))
    return out


def products_inputs(m, nb, p):
    a = RNG.uniform(-1, 1, (128, m * p)).astype(np.float32)
    b, c = (RNG.uniform(-1, 1, (128, nb * 512)).astype(np.float32) for _ in range(2))
    return a, b, c, a.astype(f64).T @ (b.astype(f64) + c.astype(f64))


def test_a_psum_block_tensor_too_big_for_psum_is_spilled_to_sbuf():
    a, b, c, want = products_inputs(M, NB, 128)
    with pytest.warns(UserWarning, match=r"'qk' \(10 blocks of \[128, 512\]\) needs 10 PSUM "
                      r"banks .* placed in SBUF instead"):
        got = all_products(a, b, c)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_a_spill_too_big_for_sbuf_goes_to_hbm():
    # 8 x 14 blocks of 2 KiB per partition: 224 KiB, more than SBUF's 208 KiB as well.
    a, b, c, want = products_inputs(8, 14, 8)
    with pytest.warns(UserWarning, match=r"'qk' \(112 blocks .* placed in HBM"):
        got = all_products(a, b, c, m=8, nb=14, p=8)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@nki.jit(mode="simulation")
def per_iteration_products(a, b):
    """The same block tensor used one block per iteration: it fits PSUM, so no spill."""
    out = nl.ndarray((M * 128, NB * 512), dtype=nl.float32, buffer=nl.shared_hbm)
    a_sb, b_sb = nl.load(a), nl.load(b)
    qk = nl.ndarray((M, NB, nl.par_dim(128), 512), dtype=nl.float32, buffer=nl.psum)
    for i in nl.affine_range(M):
        for j in nl.affine_range(NB):
            qk[i, j] = nisa.nc_matmul(a_sb[:, nl.ds(i * 128, 128)], b_sb[:, nl.ds(j * 512, 512)])
            nl.store(out[nl.ds(i * 128, 128), nl.ds(j * 512, 512)], nl.copy(qk[i, j]))
    return out


def test_a_psum_block_tensor_that_fits_where_it_is_used_stays_in_psum():
    a = RNG.uniform(-1, 1, (128, M * 128)).astype(np.float32)
    b = RNG.uniform(-1, 1, (128, NB * 512)).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a spill would warn
        got = per_iteration_products(a, b)
    np.testing.assert_allclose(got, a.astype(f64).T @ b.astype(f64), rtol=1e-5, atol=1e-5)
    ir = str(per_iteration_products.trace(a, b))
    assert "psum" in ir and ir.count("tensor_copy") <= M * NB, ir[:2000]


@nki.jit(mode="simulation")
def patched_products(a, b, c, m=M, nb=NB, p=128):
    """all_products, then each block rewritten in parts through views of it: the writes a kernel
    makes into a PSUM block, which must reach the block wherever the spill put it."""
    out = nl.ndarray((m * p, nb * 512), dtype=nl.float32, buffer=nl.shared_hbm)
    a_sb, b_sb, c_sb = nl.load(a), nl.load(b), nl.load(c)
    qk = nl.ndarray((m, nb, nl.par_dim(p), 512), dtype=nl.float32, buffer=nl.psum)
    for i in nl.affine_range(m):
        for j in nl.affine_range(nb):
            qk[i, j, :, :] = nisa.nc_matmul(a_sb[:, nl.ds(i * p, p)],
                                            b_sb[:, nl.ds(j * 512, 512)])
            qk[i, j, :, :] += nisa.nc_matmul(a_sb[:, nl.ds(i * p, p)],
                                             c_sb[:, nl.ds(j * 512, 512)])
    for i in nl.affine_range(m):
        for j in nl.affine_range(nb):
            qk[i, j][:, 0:64] = float(i * nb + j)  # a number into a view of the block
            qk[i, j][:, 64:128] = nisa.tensor_scalar(qk[i, j][:, 128:192], np.multiply, 2.0)
            nisa.activation(nl.copy, qk[i, j][:, 256:512], reduce_op=np.add,
                            reduce_res=qk[i, j][:, 192:193])  # a destination that is a view
            t = qk[i, j]
            t[:, 193:256] *= 3.0  # in place, through a view of a view
            nisa.dma_copy(dst=qk[i, j][:, 300:310], src=nl.copy(qk[i, j][:, 320:330]),
                          dst_rmw_op=np.add)  # a DMA read-modify-write into a view
    for i in nl.affine_range(m):
        for j in nl.affine_range(nb):
            nl.store(out[nl.ds(i * p, p), nl.ds(j * 512, 512)], nl.copy(qk[i, j]))
    return out


def patched_want(m, nb, p):
    a, b, c, want = products_inputs(m, nb, p)
    blocks = want.reshape(m, p, nb, 512).transpose(0, 2, 1, 3).copy()
    for i in range(m):
        for j in range(nb):
            q = blocks[i, j]
            q[:, 0:64] = i * nb + j
            q[:, 64:128] = 2.0 * q[:, 128:192]
            q[:, 192] = q[:, 256:512].sum(axis=1)
            q[:, 193:256] *= 3.0
            q[:, 300:310] += q[:, 320:330]
    return a, b, c, blocks.transpose(0, 2, 1, 3).reshape(m * p, nb * 512)


@pytest.mark.parametrize("m, nb, p, where", [(M, NB, 128, "SBUF"), (8, 14, 8, "HBM")])
def test_writes_through_views_of_a_spilled_block_reach_the_block(m, nb, p, where):
    # SBUF: the block is an SBUF tile, views of it are views of the block. HBM: `qk[i, j]` is an
    # SBUF copy, and every write into it is stored back to the block (spill.py).
    a, b, c, want = patched_want(m, nb, p)
    with pytest.warns(UserWarning, match=f"placed in {where}"):
        got = patched_products(a, b, c, m=m, nb=nb, p=p)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


@nki.jit(mode="simulation")
def column_write(a, b, m=8, nb=14, p=8):
    out = nl.ndarray((m * p, nb * 512), dtype=nl.float32, buffer=nl.shared_hbm)
    a_sb, b_sb = nl.load(a), nl.load(b)
    qk = nl.ndarray((m, nb, nl.par_dim(p), 512), dtype=nl.float32, buffer=nl.psum)
    for i in nl.affine_range(m):
        for j in nl.affine_range(nb):
            qk[i, j] = nisa.nc_matmul(a_sb[:, nl.ds(i * p, p)], b_sb[:, nl.ds(j * 512, 512)])
    for i in nl.affine_range(m):
        for j in nl.affine_range(nb):
            column = qk[i, j, :, 0]  # 1-D: its SBUF copy is [p, 1], not a view of the block
            column[...] = 1.0
    for i in nl.affine_range(m):
        for j in nl.affine_range(nb):
            nl.store(out[nl.ds(i * p, p), nl.ds(j * 512, 512)], nl.copy(qk[i, j]))
    return out


def test_a_write_into_an_hbm_spilled_block_that_cannot_reach_it_is_refused():
    a, b = np.ones((128, 64), np.float32), np.ones((128, 14 * 512), np.float32)
    with pytest.raises(neuron.NeuronError) as info:
        column_write(a, b)
    e = info.value
    assert e.rule == "psum-spill", e.rule
    assert "'qk' is a PSUM block tensor spilled to HBM" in e.message, e.message
    assert "would be lost" in e.message and "qk[i, j][:, a:b] = value" in e.message, e.message
    assert e.file == THIS and e.line == line_of(column_write, "column[...] = 1.0")
