# MX (NeuronCore-v4 microscaling, docs/mx.md): the x4 dtypes, `.ap(dtype=...)` reinterpreting
# DMA views, nisa.quantize_mx and nisa.nc_matmul_mx, natively, on the simulator and in eager mode
# (bit-identical), against NumPy float64 implementations of the documented rules, plus errors.
import ml_dtypes
import numpy as np
import pytest

import neuron
import neuron.isa as nisa
import neuron.language as nl
from helpers import line_of

MODES = ("native", "simulate", "eager")
FP8 = {nl.float8_e5m2_x4: ml_dtypes.float8_e5m2, nl.float8_e4m3fn_x4: ml_dtypes.float8_e4m3fn}
EMAX = {nl.float8_e5m2_x4: 15, nl.float8_e4m3fn_x4: 8}


def all_modes(fn, *args):
    outs = [neuron.kernel(fn, target="trn3", mode=m)(*args) for m in MODES]
    for o in outs[1:]:
        for a, b in zip(outs[0] if isinstance(o, tuple) else [outs[0]],
                        o if isinstance(o, tuple) else [o]):
            np.testing.assert_array_equal(np.asarray(a).view(np.uint8),
                                          np.asarray(b).view(np.uint8))
    return outs[0]


def scale_row(g):
    """The scale tile's partition for block g (partitions 8g .. 8g+7) of the data."""
    return (g // 4) * 32 + g % 4


def spread(scales):
    """[K/8, X] scales placed on the partitions the instructions read ([K, X] for K > 32)."""
    rows = scales.shape[0]
    out = np.zeros((max(scale_row(rows - 1) + 1, rows), scales.shape[1]), np.uint8)
    for g in range(rows):
        out[scale_row(g)] = scales[g]
    return out


def values(fmt, shape, rng, big=4.0):
    v = rng.uniform(-big, big, shape).astype(np.float32)
    return v.astype(ml_dtypes.float4_e2m1fn if fmt == "fp4" else FP8[fmt])


def pack(v):
    """Four fp8 codes per uint32 (value i in byte i), four fp4 codes per uint16 (nibble i)."""
    b = v.view(np.uint8)
    if v.dtype == ml_dtypes.float4_e2m1fn:
        return ((b[:, 0::2] & 0xF) | ((b[:, 1::2] & 0xF) << 4)).astype(np.uint8).view(np.uint16)
    return b.view(np.uint32)


def dequant(v, scales):
    """[K, 4X] values times 2^(s - 127) of their block (NaN for code 255) as [K, X, 4]."""
    s = np.repeat(2.0 ** (scales.astype(np.float64) - 127), 8, axis=0)
    return v.astype(np.float64).reshape(v.shape[0], -1, 4) * s[:, :, None]


def quantize_ref(x, x4):
    """quantize_mx as NKI documents it: per block of 8 partitions x 4 values the scale is the
    largest fp32 exponent field - emax + 1 (clamped at 0), the values are divided by
    2^(scale - 127), clamped to the format's largest and rounded to nearest even."""
    K, F = x.shape
    e = (x.astype(np.float32).view(np.uint32) >> 23) & 0xff
    s = np.maximum(e.reshape(K // 8, 8, F // 4, 4).max(axis=(1, 3)).astype(np.int64)
                   - EMAX[x4] + 1, 0)
    q = x.astype(np.float64) / np.repeat(np.repeat(2.0 ** (s - 127), 8, axis=0), 4, axis=1)
    big = float(ml_dtypes.finfo(FP8[x4]).max)
    return np.clip(q, -big, big).astype(FP8[x4]), s.astype(np.uint8)


def matmul_kernel(st_p, st_s, mv_p, mv_s, st_dt, mv_dt, out_dt):
    """Packed HBM inputs read through .ap(dtype=...), scales already spread."""
    K, M = st_p.shape
    N = mv_p.shape[1]
    st = nl.ndarray((K, M), st_dt, buffer=nl.sbuf)
    nisa.dma_copy(st, st_p.ap([[M, K], [1, M]], dtype=st_dt))
    mv = nl.ndarray((K, N), mv_dt, buffer=nl.sbuf)
    nisa.dma_copy(mv, mv_p.ap([[N, K], [1, N]], dtype=mv_dt))
    ss = nl.ndarray(st_s.shape, st_s.dtype, buffer=nl.sbuf)
    nisa.dma_copy(ss, st_s)
    ms = nl.ndarray(mv_s.shape, mv_s.dtype, buffer=nl.sbuf)
    nisa.dma_copy(ms, mv_s)
    ps = nl.ndarray((M, N), out_dt, buffer=nl.psum)
    nisa.nc_matmul_mx(ps, st, mv, ss, ms)
    sb = nl.ndarray((M, N), nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(sb, ps)
    out = nl.ndarray((M, N), nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(out, sb)
    return out


@pytest.mark.parametrize("st_fmt, mv_fmt, K, M, N, out_dt", [
    (nl.float8_e5m2_x4, nl.float8_e5m2_x4, 128, 128, 512, nl.float32),
    (nl.float8_e4m3fn_x4, nl.float8_e5m2_x4, 64, 6, 37, nl.float32),
    ("fp4", nl.float8_e4m3fn_x4, 32, 10, 24, nl.float32),
    ("fp4", "fp4", 96, 16, 40, nl.bfloat16),
])
def test_nc_matmul_mx(st_fmt, mv_fmt, K, M, N, out_dt):
    rng = np.random.default_rng(K + M + N)
    x4 = {"fp4": nl.float4_e2m1fn_x4}
    st, mv = values(st_fmt, (K, 4 * M), rng), values(mv_fmt, (K, 4 * N), rng)
    st_s = rng.integers(118, 137, (K // 8, M)).astype(np.uint8)
    mv_s = rng.integers(118, 137, (K // 8, N)).astype(np.uint8)
    st_sp, mv_sp = spread(st_s), spread(mv_s)
    if out_dt == nl.bfloat16:  # scales as OCP E8M0 (float8_e8m0fnu) tiles: the same bytes
        st_sp, mv_sp = (x.view(ml_dtypes.float8_e8m0fnu) for x in (st_sp, mv_sp))
    out = all_modes(matmul_kernel, pack(st), st_sp, pack(mv), mv_sp,
                    x4.get(st_fmt, st_fmt), x4.get(mv_fmt, mv_fmt), out_dt)
    want = np.einsum("kiq,kjq->ij", dequant(st, st_s), dequant(mv, mv_s))
    tol = 2e-6 if out_dt == nl.float32 else 8e-3
    np.testing.assert_allclose(out, want, rtol=tol, atol=tol * np.abs(want).max())


def quantize_kernel(x, x4):
    P, F = x.shape
    t = nl.load(x)
    q = nl.ndarray((P, F // 4), x4, buffer=nl.sbuf)
    s = nl.ndarray((P if P > 32 else P // 8, F // 4), nl.uint8, buffer=nl.sbuf)
    nisa.memset(s, 0)
    nisa.quantize_mx(q, t, s)
    # The packed data leaves as raw uint32 words through a reinterpreting view of the output.
    qo = nl.ndarray((P, F // 4), nl.uint32, buffer=nl.shared_hbm)
    nisa.dma_copy(qo.ap([[F // 4, P], [1, F // 4]], dtype=x4), q)
    so = nl.ndarray(s.shape, nl.uint8, buffer=nl.shared_hbm)
    nisa.dma_copy(so, s)
    return qo, so


@pytest.mark.parametrize("x4", [nl.float8_e5m2_x4, nl.float8_e4m3fn_x4])
@pytest.mark.parametrize("P, F, dt", [(32, 64, ml_dtypes.bfloat16), (128, 24, np.float16)])
def test_quantize_mx(x4, P, F, dt):
    rng = np.random.default_rng(P + F)
    # Blocks of very different magnitudes, an all-zero block and subnormal-sized values.
    x = rng.standard_normal((P // 8, 8, F // 4, 4)) * \
        2.0 ** rng.integers(-12, 12, (P // 8, 1, F // 4, 1))
    x = x.reshape(P, F)
    x[:8, :4] = 0
    x[8:16, 4:8] *= 1e-3
    x = x.astype(dt)
    q, s = all_modes(quantize_kernel, x, x4)
    want_q, want_s = quantize_ref(x, x4)
    got_s = s[[scale_row(g) for g in range(P // 8)]] if P > 32 else s
    np.testing.assert_array_equal(got_s, want_s)
    np.testing.assert_array_equal(q.view(np.uint8), want_q.view(np.uint8))
    # Round trip: dequantized values are the inputs to fp8 precision.
    back = dequant(want_q.astype(np.float64), want_s).reshape(P, F)
    np.testing.assert_allclose(back, x.astype(np.float64), rtol=0.13,
                               atol=2.0 ** -6 * np.abs(x.astype(np.float64)).max())


def quantize_then_matmul(w, x):
    """A bf16 weight and activation quantized on the device and multiplied (the tutorial's
    pattern): [K, 4M] x [K, 4N] -> [M, N]."""
    K, F = w.shape
    N4 = x.shape[1]
    wt, xt = nl.load(w), nl.load(x)
    wq = nl.ndarray((K, F // 4), nl.float8_e4m3fn_x4, buffer=nl.sbuf)
    ws = nl.ndarray((K, F // 4), nl.uint8, buffer=nl.sbuf)
    xq = nl.ndarray((K, N4 // 4), nl.float8_e4m3fn_x4, buffer=nl.sbuf)
    xs = nl.ndarray((K, N4 // 4), nl.uint8, buffer=nl.sbuf)
    nisa.quantize_mx(wq, wt, ws)
    nisa.quantize_mx(xq, xt, xs)
    ps = nl.ndarray((F // 4, N4 // 4), nl.float32, buffer=nl.psum)
    nisa.nc_matmul_mx(ps, wq, xq, ws, xs)
    return _stored(ps)


def _stored(ps):
    out = nl.ndarray(ps.shape, nl.float32, buffer=nl.shared_hbm)
    nl.store(out, ps)
    return out


def test_quantize_then_matmul_matches_float_matmul():
    rng = np.random.default_rng(7)
    w = rng.standard_normal((64, 32)).astype(ml_dtypes.bfloat16)
    x = rng.standard_normal((64, 48)).astype(ml_dtypes.bfloat16)
    out = all_modes(quantize_then_matmul, w, x)
    qw, sw = quantize_ref(w, nl.float8_e4m3fn_x4)
    qx, sx = quantize_ref(x, nl.float8_e4m3fn_x4)
    want = np.einsum("kiq,kjq->ij", dequant(qw, sw), dequant(qx, sx))
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    # and, to MXFP8's precision, the unquantized product
    exact = np.einsum("kiq,kjq->ij", w.astype(np.float64).reshape(64, 8, 4),
                      x.astype(np.float64).reshape(64, 12, 4))
    assert np.abs(out - exact).max() < 0.1 * np.abs(exact).max()


def packed_scales(w, x, offset):
    """quantize_then_matmul with both operands' scales in one tile, the weight's at each
    quadrant's top and the activation's `offset` partitions below (docs/mx.md: 4, 8 or 12)."""
    K, F = w.shape
    N4 = x.shape[1]
    wt, xt = nl.load(w), nl.load(x)
    wq = nl.ndarray((K, F // 4), nl.float8_e4m3fn_x4, buffer=nl.sbuf)
    xq = nl.ndarray((K, N4 // 4), nl.float8_e4m3fn_x4, buffer=nl.sbuf)
    scales = nl.ndarray((128, max(F, N4) // 4), nl.uint8, buffer=nl.sbuf)
    ws, xs = scales[0:K, 0:F // 4], scales[offset:offset + K, 0:N4 // 4]
    nisa.quantize_mx(wq, wt, ws)
    nisa.quantize_mx(xq, xt, xs)
    ps = nl.ndarray((F // 4, N4 // 4), nl.float32, buffer=nl.psum)
    nisa.nc_matmul_mx(ps, wq, xq, ws, xs)
    return _stored(ps)


@pytest.mark.parametrize("offset", [4, 8, 12])
def test_scales_packed_into_one_tile_at_a_quadrant_offset(offset):
    rng = np.random.default_rng(offset)
    w = rng.standard_normal((64, 32)).astype(ml_dtypes.bfloat16)
    x = rng.standard_normal((64, 48)).astype(ml_dtypes.bfloat16)
    out = all_modes(lambda w, x: packed_scales(w, x, offset), w, x)
    qw, sw = quantize_ref(w, nl.float8_e4m3fn_x4)
    qx, sx = quantize_ref(x, nl.float8_e4m3fn_x4)
    want = np.einsum("kiq,kjq->ij", dequant(qw, sw), dequant(qx, sx))
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def test_scales_at_another_offset_name_the_rule():
    w = np.zeros((64, 32), ml_dtypes.bfloat16)
    with pytest.raises(neuron.NeuronError) as e:
        neuron.kernel(lambda w, x: packed_scales(w, x, 6), target="trn3")(w, w)
    assert e.value.rule == "start-partition" and "or 4, 8 or 12" in e.value.message


def mx_operands(st_p, st_s, mv_p, mv_s):
    """The packed float8_e5m2 x4 operands read into SBUF (ap(dtype=)), and their scales."""
    st = nl.ndarray(st_p.shape, nl.float8_e5m2_x4, buffer=nl.sbuf)
    nisa.dma_copy(st, st_p.ap([[st_p.shape[1], 32], [1, st_p.shape[1]]],
                              dtype=nl.float8_e5m2_x4))
    mv = nl.ndarray(mv_p.shape, nl.float8_e5m2_x4, buffer=nl.sbuf)
    nisa.dma_copy(mv, mv_p.ap([[mv_p.shape[1], 32], [1, mv_p.shape[1]]],
                              dtype=nl.float8_e5m2_x4))
    return st, mv, nl.load(st_s), nl.load(mv_s)


def accumulate_twice(st_p, st_s, mv_p, mv_s):
    st, mv, ss, ms = mx_operands(st_p, st_s, mv_p, mv_s)
    ps = nl.ndarray((st_p.shape[1], mv_p.shape[1]), nl.float32, buffer=nl.psum)
    nisa.nc_matmul_mx(ps, st, mv, ss, ms)
    nisa.nc_matmul_mx(ps, st, mv, ss, ms, accumulate=True)
    return _stored(ps)


def accumulate_auto(st_p, st_s, mv_p, mv_s):
    """nc_matmul_mx's default accumulate (auto): the first matmul into each (rotating) PSUM tile
    overwrites, the second adds; every iteration stores the same sum. The native backend keeps
    PSUM flags only for programs that read them: an auto-accumulating nc_matmul_mx is one (it
    once overwrote twice there), and its loop tile starts fresh."""
    st, mv, ss, ms = mx_operands(st_p, st_s, mv_p, mv_s)
    M, N = st_p.shape[1], mv_p.shape[1]
    out = nl.ndarray((3, M, N), nl.float32, buffer=nl.shared_hbm)
    for i in nl.affine_range(3):
        ps = nl.ndarray((M, N), nl.float32, buffer=nl.psum)
        nisa.nc_matmul_mx(ps, st, mv, ss, ms)
        nisa.nc_matmul_mx(ps, st, mv, ss, ms)
        nl.store(out[i], nl.copy(ps))
    return out


@pytest.mark.parametrize("kernel", [accumulate_twice, accumulate_auto])
def test_nc_matmul_mx_accumulates(kernel):
    rng = np.random.default_rng(3)
    st, mv = values(nl.float8_e5m2_x4, (32, 16), rng), values(nl.float8_e5m2_x4, (32, 20), rng)
    st_s = rng.integers(125, 130, (4, 4)).astype(np.uint8)
    mv_s = rng.integers(125, 130, (4, 5)).astype(np.uint8)
    out = all_modes(kernel, pack(st), st_s, pack(mv), mv_s)
    want = 2 * np.einsum("kiq,kjq->ij", dequant(st, st_s), dequant(mv, mv_s))
    for each in (out if out.ndim == 3 else [out]):  # accumulate_auto: one per loop tile
        np.testing.assert_allclose(each, want, rtol=1e-6)


def bitcast_round_trip(words):
    """uint8 bytes read as fp4 x4 (two bytes each) into SBUF and written back as uint32."""
    P, B = words.shape
    t = nl.ndarray((P, B // 2), nl.float4_e2m1fn_x4, buffer=nl.sbuf)
    nisa.dma_copy(t, words.ap([[B // 2, P], [1, B // 2]], dtype=nl.float4_e2m1fn_x4))
    out = nl.ndarray((P, B // 4), nl.uint32, buffer=nl.shared_hbm)
    nisa.dma_copy(out.ap([[B // 2, P], [1, B // 2]], dtype=nl.float4_e2m1fn_x4), t)
    return out


def test_ap_dtype_moves_bytes_unchanged():
    words = np.random.default_rng(1).integers(0, 256, (16, 24)).astype(np.uint8)
    out = all_modes(bitcast_round_trip, words)
    np.testing.assert_array_equal(out.view(np.uint8), words)


def viewed(words):
    """t.view(dtype): uint8 [16, 24] as float4_e2m1fn_x4 [16, 12], back out as uint32 [16, 6]."""
    v = words.view(nl.float4_e2m1fn_x4)
    assert v.shape == (16, 12)
    t = nl.load(v)
    out = nl.ndarray((16, 6), nl.uint32, buffer=nl.shared_hbm)
    nl.store(out.reinterpret_cast(nl.float4_e2m1fn_x4), t)
    return out


def test_view_dtype_of_hbm_tensors():
    words = np.random.default_rng(2).integers(0, 256, (16, 24)).astype(np.uint8)
    out = all_modes(viewed, words)
    np.testing.assert_array_equal(out.view(np.uint8), words)


def test_errors_name_the_rule():
    rng = np.random.default_rng(0)
    st = pack(values(nl.float8_e5m2_x4, (32, 8), rng))
    s = np.full((4, 2), 127, np.uint8)

    def on_trn2(st_p, st_s):
        return matmul_kernel(st_p, st_s, st_p, st_s, nl.float8_e5m2_x4, nl.float8_e5m2_x4,
                             nl.float32)
    with pytest.raises(neuron.NeuronError) as e:
        neuron.kernel(on_trn2)(st, s)
    assert e.value.rule == "target" and "trn3" in e.value.message

    def arithmetic(st_p):
        t = nl.ndarray(st_p.shape, nl.float8_e5m2_x4, buffer=nl.sbuf)
        nisa.dma_copy(t, st_p.ap([[2, 32], [1, 2]], dtype=nl.float8_e5m2_x4))
        nisa.tensor_tensor(t, t, t, nl.add)
        return _stored(nl.ndarray((1, 1), nl.float32, buffer=nl.psum))
    with pytest.raises(neuron.NeuronError) as e:
        neuron.kernel(arithmetic, target="trn3")(st)
    assert e.value.rule == "dtype" and "packed MX data" in e.value.message
    assert e.value.line == line_of(arithmetic, "nisa.tensor_tensor(")

    def fp32_source(x):
        q = nl.ndarray((32, 2), nl.float8_e5m2_x4, buffer=nl.sbuf)
        sc = nl.ndarray((4, 2), nl.uint8, buffer=nl.sbuf)
        nisa.quantize_mx(q, nl.load(x), sc)
        return _stored(nl.ndarray((1, 1), nl.float32, buffer=nl.psum))
    with pytest.raises(neuron.NeuronError) as e:
        neuron.kernel(fp32_source, target="trn3")(np.zeros((32, 8), np.float32))
    assert e.value.rule == "dtype" and "bfloat16 or float16" in e.value.message

    def too_few_partitions(st_p, st_s):
        return matmul_kernel(st_p[:16], st_s, st_p[:16], st_s, nl.float8_e5m2_x4,
                             nl.float8_e5m2_x4, nl.float32)
    with pytest.raises(neuron.NeuronError) as e:
        neuron.kernel(too_few_partitions, target="trn3")(st, s)
    assert e.value.rule == "mx-shape" and "multiple of 32" in e.value.message

    def strided_reinterpret(words):
        t = nl.ndarray((4, 2), nl.float8_e5m2_x4, buffer=nl.sbuf)
        nisa.dma_copy(t, words.ap([[16, 4], [2, 2]], dtype=nl.float8_e5m2_x4))
        return _stored(nl.ndarray((1, 1), nl.float32, buffer=nl.psum))
    with pytest.raises(neuron.NeuronError) as e:
        neuron.kernel(strided_reinterpret, target="trn3")(np.zeros((4, 16), np.uint8))
    assert e.value.rule == "access-pattern" and "innermost step" in e.value.message


def transposing_copies(x):
    """[32, 16] seen as [4, 8, 16], walked [8, 4, 16] by a DMA, then [8, 16, 4] by an engine
    copy: patterns whose entries are out of storage order (copied part by part)."""
    a = nl.ndarray((8, 4, 16), x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(a, x.reshape((4, 8, 16)).ap([[16, 8], [128, 4], [1, 16]], offset=0))
    b = nl.ndarray((8, 16, 4), x.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(b, a.ap([[64, 8], [1, 16], [16, 4]], offset=0))
    out = nl.ndarray((8, 16, 4), x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(out, b)
    return out


@pytest.mark.parametrize("mode", ["native", "simulate"])
def test_transposing_ap_patterns(mode):
    x = np.arange(512, dtype=np.float32).reshape(32, 16)
    out = neuron.kernel(transposing_copies, mode=mode)(x)
    np.testing.assert_array_equal(out, x.reshape(4, 8, 16).transpose(1, 2, 0))


def quantize_regrouped(x):
    """quantize_mx of a [32, 8, 4] tile seen as [32, 32]: a whole tile's free dims regrouped."""
    t = nl.load(x)
    q = nl.ndarray((32, 8), nl.float8_e4m3fn_x4, buffer=nl.sbuf)
    s = nl.ndarray((4, 8), nl.uint8, buffer=nl.sbuf)
    nisa.quantize_mx(q, t.reshape((32, 32)), s)
    qo = nl.ndarray((32, 8), nl.uint32, buffer=nl.shared_hbm)
    nisa.dma_copy(qo.ap([[8, 32], [1, 8]], dtype=nl.float8_e4m3fn_x4), q)
    return qo


def test_quantize_mx_of_a_regrouped_tile():
    x = np.random.default_rng(5).standard_normal((32, 8, 4)).astype(ml_dtypes.bfloat16)
    q = all_modes(quantize_regrouped, x)
    want, _ = quantize_ref(x.reshape(32, 32), nl.float8_e4m3fn_x4)
    np.testing.assert_array_equal(q.view(np.uint8), want.view(np.uint8))


def quantize_to_x4_output(x):
    """An x4 kernel output: it reaches the caller as its raw bits (uint32 for fp8 x4)."""
    t = nl.load(x)
    q = nl.ndarray((32, 4), nl.float8_e5m2_x4, buffer=nl.sbuf)
    s = nl.ndarray((4, 4), nl.float8_e8m0fnu, buffer=nl.sbuf)
    nisa.quantize_mx(q, t, s)
    out = nl.ndarray((32, 4), nl.float8_e5m2_x4, buffer=nl.shared_hbm)
    nisa.dma_copy(out, q)
    so = nl.ndarray((4, 4), nl.float8_e8m0fnu, buffer=nl.shared_hbm)
    nisa.dma_copy(so, s)
    return out, so


def test_x4_outputs_are_raw_bits_for_numpy_and_torch():
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(4).standard_normal((32, 16)).astype(ml_dtypes.bfloat16)
    q, s = all_modes(quantize_to_x4_output, x)
    want_q, want_s = quantize_ref(x, nl.float8_e5m2_x4)
    assert q.dtype == np.uint32 and s.dtype == ml_dtypes.float8_e8m0fnu
    np.testing.assert_array_equal(q.view(np.uint8), want_q.view(np.uint8))
    np.testing.assert_array_equal(s.view(np.uint8), want_s)
    tq, ts = neuron.kernel(quantize_to_x4_output, target="trn3")(
        torch.from_numpy(x.astype(np.float32)).to(torch.bfloat16))  # exact: x is bf16
    assert tq.dtype == torch.uint32 and ts.dtype == torch.float8_e8m0fnu
    np.testing.assert_array_equal(tq.numpy(), q)
