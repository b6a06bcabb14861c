# The legacy NKI generation (neuronxcc.nki) through neuron.compat: published-style kernels in
# both API generations, each checked against an independent NumPy reference and against each
# other, plus every value-returning nisa form, typing, entry points and errors.
import inspect
import math
import os
import re
import subprocess
import sys
import textwrap

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
import neuronxcc.nki.typing as nt  # noqa: E402
from helpers import line_of

RNG = np.random.default_rng(11)
f64 = np.float64
THIS = __file__


def rand(*shape, lo=-1.0, hi=1.0):
    return RNG.uniform(lo, hi, shape).astype(np.float32)



def total_us(profile):  # the test's own reading of the simulator's profile summary
    return float(re.search(r"total time\s+([0-9.]+) us", profile).group(1))


def test_compat_install_resolves_both_generations():
    import neuronxcc.nki.language as l2
    import nki
    import nki.language as cur
    import neuron.legacy
    assert nki.language is cnl and cur is cnl
    assert l2 is neuron.legacy.language and nki is not neuron.legacy
    assert sys.modules["neuronxcc.nki"] is neuron.legacy
    assert neuron.legacy.language is nl and neuron.legacy.isa is nisa
    assert neuron.legacy.typing is nt and neuron.legacy.tensor is cnl.tensor


# ---- vector add: arange grids and a tail mask (300 rows is not a multiple of 128) -------------

def add_legacy(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    n, f = a.shape
    ix, iy = nl.arange(128)[:, None], nl.arange(f)[None, :]
    for i in nl.affine_range(math.ceil(n / 128)):
        rows = i * 128 + ix
        ta = nl.load(a[rows, iy], mask=(rows < n))
        tb = nl.load(b[rows, iy], mask=(rows < n))
        nl.store(out[rows, iy], value=nl.add(ta, tb), mask=(rows < n))
    return out


def add_current(a, b):
    out = cnl.ndarray(a.shape, a.dtype, buffer=cnl.shared_hbm)
    n = a.shape[0]
    for i in range(math.ceil(n / 128)):
        lo, hi = i * 128, min(n, (i + 1) * 128)
        cnl.store(out[lo:hi, :], cnl.add(cnl.load(a[lo:hi, :]), cnl.load(b[lo:hi, :])))
    return out


def test_vector_add_tail_mask_both_generations_and_modes(monkeypatch):
    a, b = rand(300, 64), rand(300, 64)
    want = a + b  # fp32 addition is exact in every implementation
    sim = nki.jit(add_legacy, mode="simulation")
    native = nki.jit(add_legacy)
    assert sim.mode == "simulate" and native.mode == "native"
    got_sim, got_native = sim(a, b), native(a, b)
    cur = neuron.kernel(add_current, mode="simulate")(a, b)
    for got in (got_sim, got_native, cur):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got_sim, cur)
    np.testing.assert_array_equal(nki.simulate_kernel(add_legacy, a, b), want)
    np.testing.assert_array_equal(nki.baremetal(add_legacy)(a, b), want)
    monkeypatch.setenv("NKI_SIMULATOR", "1")
    assert native.mode == "simulate"


def add_current_blocks(a, b):
    out = cnl.ndarray(a.shape, a.dtype, buffer=cnl.shared_hbm)
    for i in range(a.shape[0] // 128):
        for _ in cnl.affine_range(1):  # a block per iteration, as legacy loops are traced
            ta = cnl.load(a[i * 128:(i + 1) * 128, :])
            tb = cnl.load(b[i * 128:(i + 1) * 128, :])
            cnl.store(out[i * 128:(i + 1) * 128, :], cnl.add(ta, tb))
    return out


def test_same_ir_as_current_api_and_benchmark_estimate():
    a, b = rand(256, 32), rand(256, 32)
    legacy = nki.jit(add_legacy)
    current = neuron.kernel(add_current_blocks)
    # unmasked in-range grids become plain slices: the same IR as the current API
    ir_legacy = str(legacy.trace(a, b)).replace("add_legacy", "k")
    assert ir_legacy == str(current.trace(a, b)).replace("add_current_blocks", "k")
    bench = nki.benchmark(warmup=2, iters=5)(add_legacy)
    np.testing.assert_array_equal(bench(a, b), a + b)
    lat = bench.benchmark_result.nc_latency
    sim = neuron.simulate(current)
    sim(a, b)
    assert lat.get_latency_percentile(50) == lat.get_latency_percentile(99) == \
        pytest.approx(total_us(sim.profile), abs=0.01)


def test_profile_writes_the_simulator_summary(tmp_path):
    a, b = rand(128, 16), rand(128, 16)
    k = nki.profile(working_directory=str(tmp_path), save_trace_name="add.ntff")(add_legacy)
    np.testing.assert_array_equal(k(a, b), a + b)
    text = (tmp_path / "add.txt").read_text()
    assert "total time" in text and total_us(text) > 0


# ---- tiled matmul: psum += nisa.nc_matmul / nl.matmul -----------------------------------------

@nki.jit(mode="simulation")
def matmul_legacy(lhsT, rhs):
    K, M = lhsT.shape
    N = rhs.shape[1]
    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    out2 = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    i_k, i_m, i_n = nl.arange(128)[:, None], nl.arange(M)[None, :], nl.arange(N)[None, :]
    acc = nl.zeros((M, N), nl.float32, buffer=nl.psum)
    acc2 = nl.zeros((M, N), nl.float32, buffer=nl.psum)
    for k in nl.affine_range(K // 128):
        st = nl.load(lhsT[k * 128 + i_k, i_m])
        mv = nl.load(rhs[k * 128 + i_k, i_n])
        acc += nisa.nc_matmul(st, mv)
        acc2 += nl.matmul(st, mv, transpose_x=True)
    nl.store(out, value=acc)  # a PSUM value: legacy stores insert the copy
    nl.store(out2, value=nl.copy(acc2))
    return out, out2


@neuron.kernel(mode="simulate")
def matmul_current(lhsT, rhs):
    K, M = lhsT.shape
    N = rhs.shape[1]
    out = cnl.ndarray((M, N), cnl.float32, buffer=cnl.shared_hbm)
    acc = cnl.zeros((M, N), cnl.float32, buffer=cnl.psum)
    for k in cnl.affine_range(K // 128):
        st = cnl.load(lhsT[k * 128:(k + 1) * 128, :])
        mv = cnl.load(rhs[k * 128:(k + 1) * 128, :])
        cisa.nc_matmul(acc, st, mv, accumulate=True)
    res = cnl.ndarray((M, N), cnl.float32)
    cisa.tensor_copy(res, acc)
    cnl.store(out, res)
    return out


def test_tiled_matmul_psum_accumulation():
    lhsT, rhs = rand(384, 128), rand(384, 256)
    want = lhsT.astype(f64).T @ rhs
    out, out2 = matmul_legacy(lhsT, rhs)
    cur = matmul_current(lhsT, rhs)
    for got in (out, out2, cur):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(out, cur, rtol=1e-5, atol=1e-5)


# As nki-samples' flash attention backward writes its dQ: the stationary operands are views of a
# block tile (subscripted inside the `+=` statement, after the PSUM view), the moving ones
# nc_transpose results (in PSUM), and lazy_initialization= is passed to nl.full.
@nki.jit(mode="simulation")
def accumulate_from_views(a, b):
    out = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.shared_hbm)
    st = nl.full((4, 1, nl.par_dim(128), 128), fill_value=0.0, dtype=nl.float32,
                 lazy_initialization=False)
    for j in nl.affine_range(4):
        st[j, 0, :, :] = nl.load(a[j])
    bt = nl.load(b)  # [128, 512]
    ps = nl.zeros((nl.par_dim(128), 128), dtype=nl.float32, buffer=nl.psum)
    for j in nl.affine_range(4):
        mv = nisa.nc_transpose(bt[:, nl.ds(j * 128, 128)], mask=True)  # [128, 128] in PSUM
        ps[:, :] += nisa.nc_matmul(st[j, 0, :, :], mv)
    nl.store(out, value=nl.copy(ps))
    return out


def test_psum_accumulates_across_subscripted_operands():
    # Each `ps[:, :] += ...` used to end in a copy of ps onto itself (the stationary's
    # subscript came between ps's and the store, so the update in place went unrecognised),
    # which cleared the PSUM matmul marks: each matmul overwrote the last, leaving a quarter.
    a, b = rand(4, 128, 128), rand(128, 512)
    want = sum(a[j].astype(f64).T @ b[:, j * 128:(j + 1) * 128].T for j in range(4))
    np.testing.assert_allclose(accumulate_from_views(a, b), want, rtol=1e-4, atol=1e-4)
    ir = str(accumulate_from_views.trace(a, b))
    assert not re.search(r"tensor_copy\(dst=(\w+)\[[^]]*\], src=\1\[", ir)  # no self-copy


# ---- rmsnorm as in the published NKI tutorial ---------------------------------------------------

@nki.jit(mode="simulation")
def rmsnorm_legacy(a_tensor, g_tensor):
    out_tensor = nl.ndarray(a_tensor.shape, dtype=a_tensor.dtype, buffer=nl.shared_hbm)
    ix = nl.arange(128)[:, None]
    iw = nl.arange(1)[:, None]
    iy = nl.arange(a_tensor.shape[1])[None, :]
    num_rows = a_tensor.shape[0]
    g_tile = nl.load(g_tensor.reshape((1, g_tensor.shape[0]))[iw, iy])
    for i in nl.affine_range(math.ceil(a_tensor.shape[0] / 128)):
        a_tile = nl.load(a_tensor[i * 128 + ix, iy], mask=(i * 128 + ix < num_rows))
        in_square = nl.square(a_tile)
        square_sum = nl.sum(in_square, axis=[1])
        mean = square_sum / a_tensor.shape[1]
        rms_reciprocal = nl.rsqrt(mean)
        out_tile = nl.multiply(a_tile, rms_reciprocal)
        g_bcast = g_tile.broadcast_to((128, g_tensor.shape[0]))
        out_tile[...] = nl.multiply(out_tile, g_bcast, mask=(i * 128 + ix < num_rows))
        nl.store(out_tensor[i * 128 + ix, iy], value=out_tile, mask=(i * 128 + ix < num_rows))
    return out_tensor


@neuron.kernel(mode="simulate")
def rmsnorm_current(a, g_row):
    out = cnl.ndarray(a.shape, a.dtype, buffer=cnl.shared_hbm)
    n, f = a.shape
    g = cnl.load(g_row)
    for i in range(math.ceil(n / 128)):
        lo, hi = i * 128, min(n, (i + 1) * 128)
        t = cnl.load(a[lo:hi, :])
        r = cnl.rsqrt(cnl.sum(cnl.square(t), axis=1) / f)
        gb = cnl.broadcast_to(g, (hi - lo, f))
        cnl.store(out[lo:hi, :], cnl.multiply(cnl.multiply(t, r), gb))
    return out


def test_rmsnorm_tutorial():
    a, g = rand(300, 64), rand(64, lo=0.5, hi=1.5)
    want = a / np.sqrt((a.astype(f64) ** 2).mean(axis=1, keepdims=True)) * g
    got = rmsnorm_legacy(a, g)
    cur = rmsnorm_current(a, g.reshape(1, 64))
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(cur, want, rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(got, cur, rtol=1e-6, atol=1e-6)


@nki.jit(mode="simulation")
def layernorm_legacy(input_tensor, epsilon, gamma_vector, beta_vector):
    # the published layernorm tutorial (v1): a 3-D nl.mgrid whose first axis the gamma/beta
    # loads do not use, and a float argument (a compile-time constant)
    output_tensor = nl.ndarray(input_tensor.shape, dtype=input_tensor.dtype,
                               buffer=nl.shared_hbm)
    i_p_io, i_f_io, i_p_param = nl.mgrid[0:nl.tile_size.pmax, 0:input_tensor.shape[1], 0:1]
    num_rows = input_tensor.shape[0]
    gamma_sb = nl.load(gamma_vector.reshape((1, gamma_vector.shape[0]))[i_p_param, i_f_io])
    beta_sb = nl.load(beta_vector.reshape((1, beta_vector.shape[0]))[i_p_param, i_f_io])
    gamma_sb_bcast = gamma_sb.broadcast_to((nl.tile_size.pmax, gamma_vector.shape[0]))
    beta_sb_bcast = beta_sb.broadcast_to((nl.tile_size.pmax, beta_vector.shape[0]))
    for i in nl.affine_range(math.ceil(input_tensor.shape[0] / nl.tile_size.pmax)):
        input_sb = nl.load(input_tensor[i * nl.tile_size.pmax + i_p_io, i_f_io],
                           mask=(i * nl.tile_size.pmax + i_p_io < num_rows))
        mean = nl.mean(input_sb, axis=1)
        var = nl.mean(nl.square(input_sb), axis=1) - mean * mean
        shift_scale_tensor = (input_sb - mean) * nl.rsqrt(var + epsilon)
        output_sb = shift_scale_tensor * gamma_sb_bcast + beta_sb_bcast
        nl.store(output_tensor[i * nl.tile_size.pmax + i_p_io, i_f_io], value=output_sb,
                 mask=(i * nl.tile_size.pmax + i_p_io < num_rows))
    return output_tensor


def test_layernorm_tutorial():
    x, g, b = rand(200, 48), rand(48, lo=0.5, hi=1.5), rand(48)
    X = x.astype(f64)
    mu = X.mean(axis=1, keepdims=True)
    want = (X - mu) / np.sqrt(((X - mu) ** 2).mean(axis=1, keepdims=True) + 1e-5) * g + b
    np.testing.assert_allclose(layernorm_legacy(x, 1e-5, g, b), want, rtol=1e-4, atol=1e-4)


# ---- causal mask: nc_matmul, affine_select on a grid predicate, nc_transpose, iota ------------

S = 128


@nki.jit(mode="simulation")
def causal_legacy(q, k):
    scores_out = nl.ndarray((S, S), nl.float32, buffer=nl.shared_hbm)
    trans_out = nl.ndarray((S, S), nl.float32, buffer=nl.shared_hbm)
    ids_out = nl.ndarray((S, S), nl.int32, buffer=nl.shared_hbm)
    i_q, i_k = nl.arange(S)[:, None], nl.arange(S)[None, :]
    scores = nl.copy(nisa.nc_matmul(nl.load(q), nl.load(k)))
    masked = nisa.affine_select(pred=(i_q >= i_k), on_true_tile=scores, on_false_value=-1e4)
    nl.store(scores_out, value=masked)
    nl.store(trans_out, value=nisa.nc_transpose(masked))
    nl.store(ids_out, value=nisa.iota(i_q * 1000 + i_k + 7, dtype=nl.int32))
    return scores_out, trans_out, ids_out


@neuron.kernel(mode="simulate")
def causal_current(q, k):
    scores_out = cnl.ndarray((S, S), cnl.float32, buffer=cnl.shared_hbm)
    trans_out = cnl.ndarray((S, S), cnl.float32, buffer=cnl.shared_hbm)
    ids_out = cnl.ndarray((S, S), cnl.int32, buffer=cnl.shared_hbm)
    ps = cnl.ndarray((S, S), cnl.float32, buffer=cnl.psum)
    cisa.nc_matmul(ps, cnl.load(q), cnl.load(k))
    scores = cnl.copy(ps)
    masked = cnl.ndarray((S, S), cnl.float32)
    cisa.affine_select(masked, [[-1, S]], 1, scores, -1e4, cmp_op=cnl.greater_equal)
    cnl.store(scores_out, masked)
    tp = cnl.ndarray((S, S), cnl.float32, buffer=cnl.psum)
    cisa.nc_transpose(tp, masked)
    cnl.store(trans_out, tp)
    ids = cnl.ndarray((S, S), cnl.int32)
    cisa.iota(ids, [[1, S]], offset=7, channel_multiplier=1000)
    cnl.store(ids_out, ids)
    return scores_out, trans_out, ids_out


def test_causal_mask_transpose_iota():
    q, k = rand(64, S), rand(64, S)
    p, f = np.meshgrid(np.arange(S), np.arange(S), indexing="ij")
    want = np.where(p >= f, q.astype(f64).T @ k, -1e4)
    legacy, current = causal_legacy(q, k), causal_current(q, k)
    for scores, trans, ids in (legacy, current):
        np.testing.assert_allclose(scores, want, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(trans, want.T, rtol=1e-4, atol=1e-4)
        np.testing.assert_array_equal(ids, p * 1000 + f + 7)
    for x, y in zip(legacy, current):
        np.testing.assert_array_equal(x, y)


# ---- nl.par_dim block tiles ------------------------------------------------------------------

@nki.jit(mode="simulation")
def blocks_legacy(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    total = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.shared_hbm)
    i_p, i_f = nl.mgrid[0:128, 0:x.shape[1]]
    buf = nl.ndarray((4, nl.par_dim(128), x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
    acc = nl.zeros((nl.par_dim(128), x.shape[1]), nl.float32)
    for b in nl.affine_range(4):
        buf[b] = nl.load(x[b * 128 + i_p, i_f])
    for b in nl.affine_range(4):
        acc[...] = nl.add(acc, buf[b])
        nl.store(out[b * 128 + i_p, i_f], value=nl.multiply(buf[b, i_p, i_f], float(b + 1)))
    nl.store(total, value=acc.astype(nl.float32).assert_shape((128, x.shape[1])))
    assert len(nl.empty_like(buf)) == 4 and nl.empty_like(buf)[3].shape == (128, x.shape[1])
    assert x.shape == (512, 32) and buf.shape == (4, 128, 32)  # tuples, as in NKI
    return out, total


def test_par_dim_blocks():
    x = rand(512, 32)
    out, total = blocks_legacy(x)
    want = x.reshape(4, 128, 32) * np.arange(1, 5, dtype=np.float32)[:, None, None]
    np.testing.assert_array_equal(out, want.reshape(512, 32))
    np.testing.assert_allclose(total, x.astype(f64).reshape(4, 128, 32).sum(0), rtol=1e-6,
                               atol=1e-6)


@nki.jit(mode="simulation")
def blocks_accumulate(x, a):
    # the fused-mamba tutorial's pattern: block tiles updated in place with +=, and a column
    # a[rows, s] loaded as a [128, 1] tile used as activation's per-partition scale
    out = nl.ndarray(x.shape[1:], dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((2, nl.par_dim(128), x.shape[2]), dtype=nl.float32)
    for s in nl.affine_range(x.shape[0]):
        for c in nl.affine_range(2):
            a_i = nl.load(a[c * 128:(c + 1) * 128, s])
            xt = nl.load(x[s, c * 128:(c + 1) * 128, 0:x.shape[2]])
            acc[c, 0:128, 0:x.shape[2]] += nisa.activation(op=nl.copy, data=xt, scale=a_i)
    for c in nl.affine_range(2):
        tile = nl.copy(acc[c])
        tile[0:128, 0:x.shape[2]] += 1.0  # a plain tile's view, updated in place too
        nl.store(out[c * 128:(c + 1) * 128, 0:x.shape[2]], tile)
    return out


def test_block_tiles_accumulate_in_place():
    x, a = rand(3, 256, 16), rand(256, 3)
    want = np.einsum("srf,rs->rf", x.astype(f64), a.astype(f64)) + 1
    np.testing.assert_allclose(blocks_accumulate(x, a), want, rtol=1e-5, atol=1e-5)
    ir = str(blocks_accumulate.trace(x, a))
    assert "tensor_copy" not in ir  # `+=` on a block view updates it in place, no copy back


# ---- masks: only the rectangle is computed, other elements stay; false masks drop the op ------

@nki.jit(mode="simulation")
def masked_updates(x, y):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    mm = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    ix, iy = nl.arange(128)[:, None], nl.arange(x.shape[1])[None, :]
    acc = nl.load(x)
    acc[...] = nl.multiply(acc, 10.0, mask=(ix < 64) & (iy >= 16))
    acc[...] = nl.exp(acc, mask=(ix >= 200))  # holds nowhere: dropped
    acc += nl.add(acc, 1.0, mask=(ix >= 96) & (iy < 8))
    nl.store(out, value=acc)
    i_k, i_m, i_n = nl.arange(128)[:, None], nl.arange(128)[None, :], nl.arange(512)[None, :]
    lhsT, rhs = nl.load(y[i_k, i_m]), nl.load(y[i_k, i_n])
    ps = nl.zeros((128, 512), nl.float32, buffer=nl.psum)
    ps += nl.matmul(lhsT[i_m < 64], rhs[i_n < 256], transpose_x=True)
    ps += nisa.nc_matmul(lhsT, rhs, mask=(i_k >= 96))
    nl.store(mm, value=ps)
    return out, mm


def test_masks_touch_only_their_rectangle_and_operand_masking():
    x, y = rand(128, 32), rand(128, 512)
    out, mm = masked_updates(x, y)
    want = x.astype(f64).copy()
    want[:64, 16:] *= 10
    want[96:, :8] += want[96:, :8] + 1
    np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6)
    prod = y[:, :128].astype(f64).T @ y
    want_mm = np.zeros((128, 512))
    want_mm[:64, :256] = prod[:64, :256]
    want_mm[96:, :] += prod[96:, :]
    np.testing.assert_allclose(mm, want_mm, rtol=1e-4, atol=1e-4)


# ---- every value-returning nisa form ------------------------------------------------------------

@nki.jit(mode="simulation")
def isa_forms(x, y, col):
    outs = [nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm) for _ in range(9)]
    red = nl.ndarray((128, 1), nl.float32, buffer=nl.shared_hbm)
    red2 = nl.ndarray((128, 1), nl.float32, buffer=nl.shared_hbm)
    tx, ty, c = nl.load(x), nl.load(y), nl.load(col)
    rr = nl.ndarray((128, 1), nl.float32)
    rr2 = nl.ndarray((128, 1), nl.float32)
    results = [
        nisa.activation(op=nl.exp, data=tx, bias=c, scale=0.5),
        nisa.activation_reduce(op=np.tanh, data=tx, reduce_op=np.add, reduce_res=rr),
        nisa.tensor_tensor(tx, ty, op=np.maximum),
        nisa.tensor_scalar(tx, np.multiply, 3.0, op1=nl.subtract, operand1=c, reverse1=True),
        nisa.tensor_copy(tx, dtype=nl.bfloat16),
        nisa.memset((128, 64), 2.5, nl.float32),
        nisa.scalar_tensor_tensor(data=tx, op0=nl.add, operand0=c, op1=nl.multiply, operand1=ty),
        nisa.tensor_scalar_reduce(data=tx, op0=np.subtract, operand0=1.0, reduce_op=nl.max,
                                  reduce_res=rr2),
        nisa.reciprocal(ty),
    ]
    for o, r in zip(outs, results):
        nl.store(o, value=r)
    nl.store(red, value=rr)
    nl.store(red2, value=rr2)
    keep = nl.ndarray((128, 1), nl.float32, buffer=nl.shared_hbm)
    neg = nl.ndarray((128, 1), nl.float32, buffer=nl.shared_hbm)
    nl.store(keep, value=nisa.tensor_reduce(np.add, tx, axis=1, keepdims=True))
    nl.store(neg, value=nisa.tensor_reduce(nl.max, tx, axis=[1], negate=True))
    sel = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
    dst = nisa.memset((128, 64), -1.0, nl.float32)
    nisa.tensor_copy_predicated(src=tx, dst=dst, predicate=nl.greater(ty, 0.0))
    nisa.tensor_copy_predicated(src=ty, dst=dst, predicate=nl.greater(tx, 0.5),
                                reverse_pred=True)
    nl.store(sel, value=dst)
    dcopy = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=dcopy, src=tx)
    return tuple(outs) + (red, red2, keep, neg, sel, dcopy)


@nki.jit(mode="simulation")
def scalar_register_chain(x, y):
    # The Scalar engine's registers through the legacy API's reduce_cmd ints: reset_reduce (3)
    # with no reduce_res, then reduce (2) into reduce_res.
    out = nl.ndarray((128, 1), nl.float32, buffer=nl.shared_hbm)
    rr = nl.ndarray((128, 1), nl.float32)
    nisa.activation(op=np.exp, data=nl.load(x), reduce_op=np.add, reduce_cmd=3)
    nisa.activation(op=nl.copy, data=nl.load(y), reduce_op=np.add, reduce_res=rr,
                    reduce_cmd=nisa.reduce_cmd.reduce)
    nl.store(out, value=rr)
    return out


def test_scalar_register_chain_in_the_legacy_api():
    x, y = rand(128, 64), rand(128, 64)
    want = np.exp(x.astype(f64)).sum(1) + y.astype(f64).sum(1)
    np.testing.assert_allclose(scalar_register_chain(x, y)[:, 0], want, rtol=1e-6)


def test_value_returning_isa_forms():
    x, y, col = rand(128, 64), rand(128, 64, lo=0.5, hi=2.0), rand(128, 1)
    got = isa_forms(x, y, col)
    X, Y, C = x.astype(f64), y.astype(f64), col.astype(f64)
    sel = np.where(Y > 0, X, -1.0)
    sel = np.where(~(X > 0.5), Y, sel)
    want = [np.exp(X * 0.5 + C), np.tanh(X), np.maximum(X, Y), C - 3 * X,
            X, np.full((128, 64), 2.5), (X + C) * Y, X - 1, 1 / Y,
            np.tanh(X).sum(1, keepdims=True), (X - 1).max(1, keepdims=True),
            X.sum(1, keepdims=True), -X.max(1, keepdims=True), sel, X]
    tols = [1e-5] * len(want)
    tols[4] = 1e-2  # the bf16 copy
    for i, (g, w, t) in enumerate(zip(got, want, tols)):
        np.testing.assert_allclose(g, w, rtol=t, atol=t, err_msg=f"output {i}")


@nki.jit(mode="simulation")
def masked_isa(x):
    a = nl.ndarray((128, 64), nl.int32, buffer=nl.shared_hbm)
    b = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
    i_p, i_f = nl.mgrid[0:128, 0:64]
    base = nisa.memset((128, 64), 0, nl.int32)
    base[...] = nisa.iota(2 * i_f + i_p * 64, nl.int32, mask=(i_p >= 64) & (i_f < 40))
    nl.store(a, value=base)
    t = nl.load(x)
    sel = nisa.affine_select(i_p - i_f > 3, t, -5.0)
    out = nl.zeros((128, 64), nl.float32)
    out[...] = nisa.tensor_scalar(sel, nl.add, 1.0, mask=(i_f >= 8))
    nl.store(b, value=out)
    return a, b


def test_masked_iota_and_affine_select_offsets():
    x = rand(128, 64)
    a, b = masked_isa(x)
    p, f = np.meshgrid(np.arange(128), np.arange(64), indexing="ij")
    want_a = np.where((p >= 64) & (f < 40), 2 * f + 64 * p, 0)
    np.testing.assert_array_equal(a, want_a)
    want_b = np.where(f >= 8, np.where(p - f > 3, x, np.float32(-5.0)) + np.float32(1), 0)
    np.testing.assert_array_equal(b, want_b.astype(np.float32))


# ---- program ids where a value is needed; index tiles into reshaped HBM tensors ---------------

def pid_values(x):
    """A mask and an iota that depend on the program id (vLLM's paged attention takes
    nisa.iota(nl.program_id(1)) as its kv head): each program is traced with its ids as ints."""
    out = nl.ndarray(x.shape, nl.float32, buffer=nl.shared_hbm)
    ids = nl.ndarray((x.shape[0], 4), nl.int32, buffer=nl.shared_hbm)
    ix, iy = nl.arange(128)[:, None], nl.arange(64)[None, :]
    rows = nl.program_id(0) * 128 + ix
    nl.store(out[rows, iy], value=nl.load(x[rows, iy], mask=(rows < 200)) * 2.0,
             mask=(rows < 200))
    j = nl.arange(4)[None, :]
    nl.store(ids[rows, j], value=nisa.iota(rows * 4 + j + nl.program_id(0) * 1000,
                                           dtype=nl.int32))
    return out, ids


@pytest.mark.parametrize("mode", ["simulation", "auto"])
def test_program_ids_in_masks_and_iota(mode):
    x = rand(256, 64)
    out, ids = nki.jit(pid_values, mode=mode)[2](x)
    np.testing.assert_array_equal(out[:200], x[:200] * np.float32(2))
    r, j = np.meshgrid(np.arange(256), np.arange(4), indexing="ij")
    np.testing.assert_array_equal(ids, r * 4 + j + (r // 128) * 1000)


def paged_rows(cache, table):
    """vLLM's KV-cache read: cache [2, blocks, heads, block_size, d] reshaped to
    [2, blocks * heads, block_size * d], rows picked by an index tile after a leading int."""
    flat = cache.reshape((2, cache.shape[1] * cache.shape[2], cache.shape[3] * cache.shape[4]))
    n, width = table.shape[0], flat.shape[2]
    out = nl.ndarray((2, n, width), cache.dtype, buffer=nl.shared_hbm)
    i_p, i_f = nl.arange(n)[:, None], nl.arange(width)[None, :]
    idx = nl.load(table[i_p, nl.arange(1)[None, :]])
    zero = nl.zeros((n, width), cache.dtype, buffer=nl.sbuf, lazy_initialization=True)
    for kv in nl.affine_range(2):
        nl.store(out[kv, i_p, i_f], value=nl.add(nl.load(flat[kv, idx[i_p, 0], i_f]), zero))
    return out


@pytest.mark.parametrize("mode", ["simulation", "auto"])
def test_index_tile_rows_of_a_reshaped_tensor(mode):
    cache = rand(2, 6, 2, 4, 8)
    table = np.array([[11], [0], [5], [7], [2]], np.int32)
    got = nki.jit(paged_rows, mode=mode)(cache, table)
    flat = cache.reshape(2, 12, 32)
    np.testing.assert_array_equal(got, flat[:, table[:, 0]])


# ---- nl legacy keywords: dtype defaults, reductions broadcast, composites --------------------

@nki.jit(mode="simulation")
def nl_forms(x, y, z):
    o = [nl.ndarray((128, 32), nl.float32, buffer=nl.shared_hbm) for _ in range(5)]
    t, u = nl.load(x), nl.load(y)
    gt = nl.greater(t, u)
    assert gt.dtype == nl.bool_  # legacy comparisons default to bool
    nl.store(o[0], value=nl.where(gt, t, u))
    nl.store(o[1], value=nl.subtract(t, nl.max(t, axis=1)))  # [P, 1] broadcasts
    nl.store(o[2], value=nl.softmax(t, axis=1))
    nl.store(o[3], value=nl.load_transpose2d(z))
    nl.store(o[4], value=nl.logical_not(gt, dtype=nl.float32))
    return tuple(o)


def test_nl_legacy_keywords():
    x, y, z = rand(128, 32), rand(128, 32), rand(32, 128)
    got = nl_forms(x, y, z)
    X, Y = x.astype(f64), y.astype(f64)
    e = np.exp(X - X.max(1, keepdims=True))
    want = [np.maximum(X, Y), X - X.max(1, keepdims=True), e / e.sum(1, keepdims=True), z.T,
            (X <= Y).astype(f64)]
    for i, (g, w) in enumerate(zip(got, want)):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5, err_msg=f"output {i}")


# ---- grid subscripts: strides, int subscripts, 1-D and 3-D HBM, 3-D grids, program ids --------

@nki.jit(mode="simulation")
def grid_patterns(x, v, x3, x4):
    o = [nl.ndarray(s, nl.float32, buffer=nl.shared_hbm)
         for s in ((128, 32), (128, 1), (1, 64), (128, 16), (128, 4, 8), (128, 64))]
    g = nl.mgrid[0:128, 0:32]
    nl.store(o[0], value=nl.load(x[g.p, 2 * g.x + 1]))  # a strided free dim
    tile = nl.load(x[nl.arange(128)[:, None], nl.arange(64)[None, :]])
    nl.store(o[1], value=nl.copy(tile[nl.arange(128)[:, None], 5]))  # keeps a size-1 dim
    iy = nl.arange(64)[None, :]
    nl.store(o[2], value=nl.load(v[iy]))  # a 1-D tensor read as a [1, 64] tile
    nl.store(o[3], value=nl.load(x3[1, nl.arange(128)[:, None], nl.arange(16)[None, :]]))
    i0, i1, i2 = (nl.arange(128)[:, None, None], nl.arange(4)[None, :, None],
                  nl.arange(8)[None, None, :])
    nl.store(o[4][i0, i1, i2], value=nl.exp(nl.load(x4[i0, i1, i2])))
    ix = nl.arange(64)[:, None]
    half = nl.load(x[ix + 64, iy])  # a [64, 64] tile, rows 64..127
    nl.store(o[5][ix, iy], value=half)
    nl.store(o[5][ix + 64, iy], value=nl.load(x[ix, iy]))
    return tuple(o)


def test_grid_subscript_patterns():
    x, v, x3, x4 = rand(128, 64), rand(64), rand(2, 128, 16), rand(128, 4, 8)
    got = grid_patterns(x, v, x3, x4)
    want = [x[:, 1::2], x[:, 5:6], v[None, :], x3[1], np.exp(x4.astype(f64)),
            np.concatenate([x[64:], x[:64]])]
    for i, (g, w) in enumerate(zip(got, want)):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6, err_msg=f"output {i}")


@nki.jit(mode="simulation")
def spmd_rows(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    ix, iy = nl.arange(128)[:, None], nl.arange(x.shape[1])[None, :]
    rows = nl.program_id(0) * 128 + ix
    scale = float(nl.num_programs() * 10 + nl.program_ndim())
    nl.store(out[rows, iy], value=nl.multiply(nl.load(x[rows, iy]), scale))
    return out


def test_program_ids_in_grids_and_static_num_programs():
    x = rand(384, 16)
    np.testing.assert_allclose(spmd_rows[3](x), x * 31.0, rtol=1e-6)


# ---- typing, mutable parameters, compile-time arguments, sub-kernels -------------------------

@nki.jit(mode="simulation")
def typed(a: nt.tensor[[128, 8], nl.float32], b: nt.tensor[128, 8], scale: nt.scalar = 2.0):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.add(nl.multiply(nl.load(a), scale), nl.load(b)))
    return out


@nki.jit(mode="simulation")
def inplace(a: nt.mutable_tensor, b):
    nl.store(a, value=nl.add(nl.load(a), nl.load(b)))
    return a


@nki.jit
def helper(t):
    return nl.multiply(t, 3.0)


@nki.jit(mode="simulation")
def calls_helper(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=helper(nl.load(a)))  # a kernel called from a kernel is inlined
    return out


def test_typing_mutable_constants_and_subkernels():
    a, b = rand(128, 8), rand(128, 8)
    np.testing.assert_allclose(typed(a, b), 2 * a + b, rtol=1e-6)
    np.testing.assert_allclose(typed(a, b, scale=-1.0), b - a, rtol=1e-6)
    with pytest.raises(neuron.NeuronError) as info:
        typed(rand(128, 4), rand(128, 4))
    e = info.value
    assert e.rule == "typing" and "argument 'a' has shape [128, 4]" in e.message
    assert e.line == inspect.getsourcelines(typed.__wrapped__)[1]
    typed(a, b.view(np.int32))  # b's annotation has no dtype
    with pytest.raises(neuron.NeuronError) as info:
        typed(a.view(np.int32), b)
    assert info.value.message == "argument 'a' is int32 but is annotated nt.tensor[[128, 8], " \
        "float32]"
    acc = a.copy()
    got = inplace(acc, b)
    np.testing.assert_allclose(acc, a + b, rtol=1e-6)  # written in place and returned
    assert np.shares_memory(got, acc)
    np.testing.assert_allclose(calls_helper(a), 3 * a, rtol=1e-6)


# ---- errors: rule, message and the user's line ------------------------------------------------

def permuted(x):
    out = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
    i_p, i1, i2 = nl.arange(128)[:, None, None], nl.arange(8)[None, :, None], \
        nl.arange(8)[None, None, :]
    t = nl.load(x)
    nl.store(out[i_p, i2 * 8 + i1], value=t)
    return out


def transposed(x):
    # A tile's dims walked out of the grid's order (an HBM tensor's are: a DMA walks any order)
    out = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
    ix, iy = nl.arange(128)[:, None], nl.arange(64)[None, :]
    t = nl.load(x)
    nl.store(out, value=nl.copy(t[iy, ix]))
    return out


def strided_partition(x):
    out = nl.ndarray((64, 64), nl.float32, buffer=nl.shared_hbm)
    t = nl.load(x)
    ix, iy = nl.arange(64)[:, None], nl.arange(64)[None, :]
    nl.store(out, value=nl.copy(t[2 * ix, iy]))
    return out


def or_mask(x):
    out = nl.ndarray(x.shape, nl.float32, buffer=nl.shared_hbm)
    ix, iy = nl.arange(128)[:, None], nl.arange(64)[None, :]
    nl.store(out, value=nl.exp(nl.load(x), mask=(ix < 64) | (iy < 8)))
    return out


def diagonal_mask(x):
    out = nl.ndarray(x.shape, nl.float32, buffer=nl.shared_hbm)
    ix, iy = nl.arange(128)[:, None], nl.arange(64)[None, :]
    nl.store(out, value=nl.exp(nl.load(x), mask=(ix + iy < 100)))
    return out


def unmasked_tail(x):
    out = nl.ndarray(x.shape, nl.float32, buffer=nl.shared_hbm)
    ix, iy = nl.arange(128)[:, None], nl.arange(64)[None, :]
    for i in nl.affine_range(2):
        t = nl.load(x[i * 128 + ix, iy])
        nl.store(out[i * 128 + ix, iy], value=t, mask=(i * 128 + ix < x.shape[0]))
    return out


def current_api_dst(x):  # the current API's destination-first form in a legacy kernel
    out = nl.ndarray(x.shape, nl.float32, buffer=nl.shared_hbm)
    act = nl.ndarray(x.shape, nl.float32)
    nisa.activation(dst=act, op=nl.silu_dx, data=nl.load(x))
    nl.store(out, value=act)
    return out


def unknown_nl_keyword(x):
    out = nl.ndarray(x.shape, nl.float32, buffer=nl.shared_hbm)
    nl.store(out, value=nl.add(nl.load(x), 1.0, out=out))
    return out


def unknown_loop_keyword(x):
    out = nl.ndarray(x.shape, nl.float32, buffer=nl.shared_hbm)
    for i in nl.affine_range(1, unroll=2):
        nl.store(out, value=nl.load(x))
    return out


ERRORS = [
    (permuted, (128, 64), "shape", "i2 * 8 + i1", "assigning a value of shape [128, 64]"),
    (transposed, (64, 128), "index", "t[iy, ix]", "transposed placement"),
    (strided_partition, (128, 64), "index", "t[2 * ix, iy]", "must be indexed with unit stride"),
    (or_mask, (128, 64), "mask", "(ix < 64) | (iy < 8)", "joined with & only"),
    (diagonal_mask, (128, 64), "mask", "ix + iy < 100", "may involve one grid axis"),
    (unmasked_tail, (200, 64), "index", "t = nl.load", "only where a mask= excludes"),
    (current_api_dst, (128, 64), "unknown-arg", "nisa.activation(dst=",
     "nisa.activation got an unexpected keyword argument 'dst'"),
    (unknown_nl_keyword, (128, 64), "unknown-arg", "out=out",
     "nl.add got an unexpected keyword argument 'out'"),
    (unknown_loop_keyword, (128, 64), "unknown-arg", "unroll=2",
     "nl.affine_range got an unexpected keyword argument 'unroll'"),
]


@pytest.mark.parametrize("fn,shape,rule,text,message", ERRORS,
                         ids=[e[0].__name__ for e in ERRORS])
def test_errors_name_the_rule_and_the_user_line(fn, shape, rule, text, message):
    with pytest.raises(neuron.NeuronError) as info:
        nki.jit(fn, mode="simulation")(rand(*shape))
    e = info.value
    assert e.rule == rule and message in e.message, (e.rule, e.message)
    assert e.file == THIS and e.line == line_of(fn, text)


def test_ignored_keywords_are_accepted():
    """name= (any legacy call), engine= (any nisa call) and precise_schedule= (loops) are NKI
    hints neuron accepts and ignores (legacy/keywords.py): the results are unchanged."""
    @nki.jit(mode="simulation")
    def k(x):
        out = nl.ndarray(x.shape, nl.float32, buffer=nl.shared_hbm)
        for i in nl.affine_range(1, precise_schedule=True):
            t = nl.load(x, name="ld")
            e = nisa.activation(op=nl.exp, data=t, name="e", engine=nisa.scalar_engine)
            c = nisa.tensor_copy(e, name="cp", engine=nisa.vector_engine)
            s = nl.sum(nl.add(c, 1.0, name="a"), axis=1, keepdims=True, name="s")
            nl.store(out, value=nl.multiply(c, s, name="m"), name="st")
        return out

    x = rand(128, 64)
    e = np.exp(x.astype(np.float64))
    np.testing.assert_allclose(k(x), e * (e + 1).sum(axis=1, keepdims=True), rtol=1e-5)
    assert "engine= and name= are accepted and ignored" in _refusal(nisa.tensor_copy, bogus=1)
    assert "name= is accepted and ignored" in _refusal(nl.load, bogus=1)


def _refusal(fn, **kwargs):
    @nki.jit(mode="simulation")
    def k(x):
        out = nl.ndarray(x.shape, nl.float32, buffer=nl.shared_hbm)
        nl.store(out, value=fn(nl.load(x), **kwargs))
        return out

    with pytest.raises(neuron.NeuronError) as info:
        k(rand(128, 64))
    assert info.value.rule == "unknown-arg"
    return info.value.message


def test_current_api_subscripts_unchanged():
    @neuron.kernel(mode="simulate")
    def k(x):
        out = cnl.ndarray(x.shape, x.dtype, buffer=cnl.shared_hbm)
        t = cnl.load(x[0:128, :])
        cnl.store(out[0:128, 0:32], t[:, 0:32])
        cnl.store(out[0:128, 32:64], t[...][:, 32:64])
        return out

    x = rand(128, 64)
    np.testing.assert_array_equal(k(x), x)
    with pytest.raises(neuron.NeuronError) as info:
        neuron.kernel(lambda x: cnl.load(x["rows"]))(x)
    assert "unsupported subscript" in info.value.message


LEGACY_SCRIPT = textwrap.dedent("""
    import numpy as np
    from neuronxcc import nki
    import neuronxcc.nki.language as nl
    import neuronxcc.nki.isa as nisa

    @nki.jit
    def exp_kernel(in_tensor):
        out_tensor = nl.ndarray(in_tensor.shape, dtype=in_tensor.dtype, buffer=nl.shared_hbm)
        sz_p, sz_f = in_tensor.shape
        i_f = nl.arange(sz_f)[None, :]
        for p in nl.affine_range((sz_p + 127) // 128):
            i_p = p * nl.tile_size.pmax + nl.arange(nl.tile_size.pmax)[:, None]
            in_tile = nl.load(in_tensor[i_p, i_f], mask=(i_p < sz_p))
            out_tile = nisa.activation(op=nl.exp, data=in_tile, mask=(i_p < sz_p))
            nl.store(out_tensor[i_p, i_f], value=out_tile, mask=(i_p < sz_p))
        return out_tensor

    x = np.linspace(-1, 1, 200 * 8, dtype=np.float32).reshape(200, 8)
    got = exp_kernel(x)
    assert np.allclose(got, np.exp(x.astype(np.float64)), rtol=1e-5), got
    print("legacy ok")
""")


def test_python_m_neuron_compat_runs_a_legacy_script(tmp_path):
    path = tmp_path / "legacy_script.py"
    path.write_text(LEGACY_SCRIPT)
    r = subprocess.run([sys.executable, "-m", "neuron.compat", str(path)], capture_output=True,
                       text=True, env=dict(os.environ), timeout=120)
    assert r.returncode == 0, r.stderr
    assert "legacy ok" in r.stdout


@nki.jit(mode="simulation")
def misc_forms(x, y, z, w):
    o = [nl.ndarray(s, d, buffer=nl.shared_hbm) for s, d in
         (((128, 96), nl.float32), ((64, 128), nl.float32), ((64, 128), nl.bfloat16),
          ((128, 64), nl.bfloat16), ((128, 4), nl.float32), ((128, 8), nl.float32),
          ((3, 1), nl.int32), ((128, 16), nl.float32), ((128, 1), nl.float32),
          ((128, 8), nl.float32))]
    t = nl.load(x)
    nl.store(o[0], value=nl.copy(nl.matmul(t, nl.load(y))))  # x @ y (transpose_x=False)
    ia, ix = nl.arange(64)[:, None], nl.arange(128)[:, None]
    nl.store(o[1], value=nl.transpose(t, mask=(ia < 32)), mask=(ia < 32))
    nl.store(o[2], value=nisa.nc_transpose(t, dtype=nl.bfloat16))
    nl.store(o[3], value=nl.load(x, mask=(ix < 100), dtype=nl.bfloat16), mask=(ix < 100))
    nl.store(o[4], value=nisa.tensor_reduce(np.add, nl.load(z), axis=2))
    nl.store(o[5], value=3.0)
    for i in nl.affine_range(3):
        nl.store(o[6][i:i + 1, 0:1], value=nisa.iota(i, nl.int32))
    nl.store(o[7], value=nl.load(w.reshape((128, 16))))
    col = nl.ndarray((128, 1), nl.float32)
    col[ix] = nl.copy(t[ix, 63])  # one grid subscript (the size-1 dim is implied)
    nl.store(o[8], value=col)
    nl.store(o[9], value=nl.broadcast_to(col[0:1, 0:1], shape=(128, 8)))
    nl.device_print("row0=", t[0:1, 0:4], mask=(nl.arange(4)[None, :] < 2))
    assert nisa.get_nc_version() == nisa.nc_version.gen3 and nisa.vector_engine == 5
    return tuple(o)


def test_misc_forms(capsys):
    x, y, z, w = rand(128, 64), rand(64, 96), rand(128, 4, 16), rand(1, 128, 16)
    got = misc_forms(x, y, z, w)
    printed = capsys.readouterr().out  # the mask keeps columns 0 and 1 of the printed row
    assert "row0= [1, 2] float32" in printed
    vals = re.findall(r"[-+]?\d*\.\d+(?:[eE][-+]?\d+)?", printed.split("float32", 1)[1])
    np.testing.assert_allclose([float(v) for v in vals], x[0, :2], rtol=1e-6)
    X = x.astype(f64)
    np.testing.assert_allclose(got[0], X @ y, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(got[1][:32], x[:, :32].T)
    np.testing.assert_allclose(got[2].astype(f64), X.T, rtol=1e-2, atol=1e-2)
    np.testing.assert_allclose(got[3][:100].astype(f64), X[:100], rtol=1e-2, atol=1e-2)
    np.testing.assert_allclose(got[4], z.astype(f64).sum(axis=2), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(got[5], np.full((128, 8), 3.0, np.float32))
    np.testing.assert_array_equal(got[6], [[0], [1], [2]])
    np.testing.assert_array_equal(got[7], w[0])
    np.testing.assert_array_equal(got[8], x[:, 63:])
    np.testing.assert_array_equal(got[9], np.full((128, 8), x[0, 63]))
    assert nl.static_cast(np.ones(3), nl.bfloat16).dtype.name == "bfloat16"


def test_dtype_promotion_of_dropped_results_follows_the_nki_table():
    from neuron.legacy.ops import promote
    table = [(nl.int32, nl.float16, nl.float16), (nl.float32, nl.bfloat16, nl.float32),
             (nl.float16, nl.bfloat16, nl.float32), (nl.float8_e4m3, nl.float16, nl.float16),
             (nl.float8_e4m3, nl.float8_e5m2, nl.bfloat16), (nl.int16, nl.int32, nl.int32),
             (nl.uint8, nl.uint16, nl.uint16), (nl.uint16, nl.int32, nl.int32),
             (nl.int8, nl.uint8, nl.int16), (nl.int8, nl.uint16, nl.int32),
             (nl.int32, nl.uint32, nl.float32)]  # NKI_API.md section 3.3
    for a, b, want in table:
        assert promote(a, b) == want and promote(b, a) == want, (a, b)


def test_constants_are_keyed_by_type_and_exact_value():
    @nki.jit
    def add_const(a, c):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        # The kernel looks at the sign of a zero and at the type: every call traces differently.
        v = (math.copysign(1.0, c) if isinstance(c, float) else 10.0 * c)
        nl.store(out, nl.add(nl.load(a), v))
        return out
    a = np.zeros((128, 4), np.float32)
    assert add_const(a, 0.0)[0, 0] == 1.0
    assert add_const(a, -0.0)[0, 0] == -1.0  # 0.0 == -0.0, yet a different constant
    assert add_const(a, 1)[0, 0] == 10.0
    assert add_const(a, True)[0, 0] == 10.0
    assert len(add_const._kernels) == 4


@nki.jit
def through_scratch(a):
    """Attention v3's habit: intermediate results in a shared_hbm tensor it does not return."""
    tmp = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(tmp, nl.multiply(nl.load(a), 2.0))
    nl.store(out, nl.add(nl.load(tmp), 1.0))
    return out


def test_a_shared_hbm_tensor_not_returned_is_scratch_and_not_copied_back():
    a = RNG.standard_normal((64, 32)).astype(np.float32)
    out = through_scratch(a)
    assert isinstance(out, np.ndarray)
    np.testing.assert_allclose(out, 2 * a + 1, rtol=1e-6)
    np.testing.assert_allclose(nki.simulate_kernel(through_scratch, a), 2 * a + 1, rtol=1e-6)


def tile_reshape_and_view(x):
    """A loaded tile regrouped per partition ([128, 64] -> [128, 4, 16]) and read as int32."""
    out = nl.ndarray((128, 4, 16), nl.float32, buffer=nl.shared_hbm)
    bits = nl.ndarray((128, 64), nl.int32, buffer=nl.shared_hbm)
    t = nl.load(x)
    nl.store(out, t.reshape((128, 4, 16)))
    nl.store(bits, t.view(nl.int32))
    return out, bits


@pytest.mark.parametrize("mode", ("simulate", "native"))
def test_legacy_tiles_reshape_per_partition_and_view_as_another_dtype(mode):
    x = rand(128, 64)
    out, bits = neuron.kernel(tile_reshape_and_view, mode=mode)(x)
    np.testing.assert_array_equal(out, x.reshape(128, 4, 16))
    np.testing.assert_array_equal(bits, x.view(np.int32))
