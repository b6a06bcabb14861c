# Every nl function against a NumPy (float64) reference, run on the simulator.
import math

import numpy as np
import pytest

import neuron
import neuron.isa as nisa
import neuron.language as nl

RNG = np.random.default_rng(42)
X = RNG.uniform(-2, 2, (128, 64)).astype(np.float32)
POS = RNG.uniform(0.1, 2, (128, 64)).astype(np.float32)
Y = RNG.uniform(-2, 2, (128, 64)).astype(np.float32)
erf = np.vectorize(math.erf)


def unary_kernel(fn):
    @neuron.kernel
    def k(x):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        nl.store(out, fn(nl.load(x)))
        return out
    return k


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


UNARY = [
    (nl.exp, X, np.exp), (nl.log, POS, np.log), (nl.tanh, X, np.tanh), (nl.sqrt, POS, np.sqrt),
    (nl.rsqrt, POS, lambda x: 1 / np.sqrt(x)), (nl.sigmoid, X, sigmoid),
    (nl.silu, X, lambda x: x * sigmoid(x)),
    (nl.gelu, X, lambda x: 0.5 * x * (1 + erf(x / math.sqrt(2)))),
    (nl.gelu_apprx_tanh, X,
     lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))),
    (nl.relu, X, lambda x: np.maximum(x, 0)), (nl.abs, X, np.abs), (nl.negative, X, np.negative),
    (nl.reciprocal, POS, lambda x: 1 / x), (nl.square, X, np.square), (nl.sin, X, np.sin),
    (nl.cos, X, np.cos), (nl.erf, X, erf), (nl.softplus, X, lambda x: np.log1p(np.exp(x))),
    (nl.sign, X, np.sign), (nl.copy, X, lambda x: x),
    (nl.floor, 3 * X, np.floor), (nl.ceil, 3 * X, np.ceil), (nl.trunc, 3 * X, np.trunc),
    (nl.tan, X, np.tan), (nl.arctan, 4 * X, np.arctan),
    (nl.gelu_dx, 2 * X, lambda x: 0.5 * (1 + erf(x / math.sqrt(2)))
     + x * np.exp(-x * x / 2) / math.sqrt(2 * math.pi)),
    (nl.gelu_apprx_sigmoid, 2 * X, lambda x: x * sigmoid(1.702 * x)),
    (nl.gelu_apprx_sigmoid_dx, 2 * X, lambda x: sigmoid(1.702 * x)
     + 1.702 * x * sigmoid(1.702 * x) * sigmoid(-1.702 * x)),
    (nl.silu_dx, 2 * X, lambda x: sigmoid(x) * (1 + x * sigmoid(-x))),
    (nl.mish, 2 * X, lambda x: x * np.tanh(np.log1p(np.exp(x)))),
    (nl.erf_dx, X, lambda x: 2 / math.sqrt(math.pi) * np.exp(-x * x)),
]


@pytest.mark.parametrize("fn,x,ref", UNARY, ids=[f.name for f, _, _ in UNARY])
def test_unary(fn, x, ref):
    got = unary_kernel(fn)(x)
    np.testing.assert_allclose(got, ref(x.astype(np.float64)), rtol=2e-5, atol=2e-5)


def binary_kernel(fn):
    @neuron.kernel
    def k(x, y):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        nl.store(out, fn(nl.load(x), nl.load(y)))
        return out
    return k


A01 = RNG.integers(0, 2, (128, 64)).astype(np.float32)
B01 = RNG.integers(0, 2, (128, 64)).astype(np.float32)
I1 = RNG.integers(0, 1000, (128, 64)).astype(np.int32)
I2 = RNG.integers(0, 1000, (128, 64)).astype(np.int32)
SH = RNG.integers(0, 8, (128, 64)).astype(np.int32)
f64 = np.float64
BINARY = [
    (nl.add, X, Y, np.add), (nl.subtract, X, Y, np.subtract), (nl.multiply, X, Y, np.multiply),
    (nl.divide, X, POS, np.divide), (nl.maximum, X, Y, np.maximum),
    (nl.minimum, X, Y, np.minimum), (nl.power, POS, Y, np.power),
    (nl.equal, A01, B01, lambda a, b: (a == b).astype(f64)),
    (nl.not_equal, A01, B01, lambda a, b: (a != b).astype(f64)),
    (nl.greater, X, Y, lambda a, b: (a > b).astype(f64)),
    (nl.greater_equal, A01, B01, lambda a, b: (a >= b).astype(f64)),
    (nl.less, X, Y, lambda a, b: (a < b).astype(f64)),
    (nl.less_equal, A01, B01, lambda a, b: (a <= b).astype(f64)),
    (nl.logical_and, A01, B01, lambda a, b: np.logical_and(a, b).astype(f64)),
    (nl.logical_or, A01, B01, lambda a, b: np.logical_or(a, b).astype(f64)),
    (nl.logical_xor, A01, B01, lambda a, b: np.logical_xor(a, b).astype(f64)),
    (nl.bitwise_and, I1, I2, np.bitwise_and), (nl.bitwise_or, I1, I2, np.bitwise_or),
    (nl.bitwise_xor, I1, I2, np.bitwise_xor), (nl.left_shift, I1, SH, np.left_shift),
    (nl.right_shift, I1, SH, np.right_shift),
    (nl.mod, 3 * X, POS, np.mod), (nl.fmod, 3 * X, POS, np.fmod),
    (nl.mod, I1 - 500, I2 + 1, np.mod), (nl.fmod, I1 - 500, -I2 - 1, np.fmod),
]


@pytest.mark.parametrize("fn,x,y,ref", BINARY, ids=[b[0].name for b in BINARY])
def test_binary(fn, x, y, ref):
    got = binary_kernel(fn)(x, y)
    want = ref(x.astype(np.int64), y.astype(np.int64)) if x.dtype == np.int32 else \
        ref(x.astype(f64), y.astype(f64))
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)


def test_operators_with_scalars_and_broadcast_columns():
    @neuron.kernel
    def k(x, y):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        a, b = nl.load(x), nl.load(y)
        col = nl.load(y[:, 0:1])  # [128, 1] broadcasts along the free dim
        r = (2.0 * a - b / 4.0 + 1) * col
        r = -r + (a > b) - (1.0 - a)
        r += 3.0
        r *= b
        nl.store(out, r)
        return out

    a, b = X.astype(f64), POS.astype(f64)
    r = (2 * a - b / 4 + 1) * b[:, 0:1]
    r = -r + (a > b) - (1 - a)
    r = (r + 3) * b
    np.testing.assert_allclose(k(X, POS), r, rtol=1e-5, atol=1e-5)


def test_a_partition_broadcast_operand_keeps_its_dtype():
    """[1, F] against [P, F] into a narrower result: the broadcast row is compared / added in
    its own dtype, and only the result rounds (it was cast to the result's dtype first)."""
    import ml_dtypes

    def k(x, y, a, b):
        eq = nl.ndarray((8, 16), nl.uint8, buffer=nl.shared_hbm)
        s = nl.ndarray((8, 16), nl.bfloat16, buffer=nl.shared_hbm)
        nl.store(eq, nl.copy(nl.equal(nl.load(x), nl.load(y), dtype=nl.bool_), dtype=nl.uint8))
        nl.store(s, nl.add(nl.load(a), nl.load(b), dtype=nl.bfloat16))
        return eq, s

    x = RNG.integers(0, 5, (8, 16)).astype(np.int32)
    y = np.arange(16, dtype=np.int32).reshape(1, 16) % 5
    a = RNG.standard_normal((8, 16)).astype(np.float32)
    b = (RNG.standard_normal((1, 16)) * (1 + 2.0 ** -12)).astype(np.float32)
    for mode in ("native", "simulate"):
        eq, s = neuron.kernel(k, mode=mode)(x, y, a, b)
        np.testing.assert_array_equal(eq, (x == y).astype(np.uint8))
        want = (a.astype(f64) + b.astype(f64)).astype(np.float32).astype(ml_dtypes.bfloat16)
        np.testing.assert_array_equal(s.view(np.uint16), want.view(np.uint16))


def test_maximum_and_minimum_of_signed_zeros_and_nans_agree_everywhere():
    """maximum / minimum: the non-NaN operand, and the second one on a tie (+0 against -0, as
    NumPy's maximum): the same bits natively, simulated and eagerly (std::fmax chose per
    compiler, so the native tensor_tensor answered max(-0, +0) = -0 and the simulator +0)."""
    import neuron.isa as nisa

    def k(a, b):
        outs = [nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm) for _ in range(4)]
        x, y = nl.load(a), nl.load(b)
        for o, op in zip(outs[:2], (nl.maximum, nl.minimum)):
            d = nl.ndarray(a.shape, nl.float32)
            nisa.tensor_tensor(d, x, y, op)
            nl.store(o, d)
        r = nl.ndarray((a.shape[0], 2), nl.float32)
        nisa.tensor_reduce(r[:, 0:1], nl.maximum, x, axis=1)
        nisa.tensor_reduce(r[:, 1:2], nl.minimum, x, axis=1)
        nl.store(outs[2][:, 0:2], r)
        nl.store(outs[3], nl.copy(x))
        return tuple(outs)

    pairs = [(-0.0, 0.0), (0.0, -0.0), (np.nan, 1.0), (1.0, np.nan), (2.0, 3.0), (-3.0, -2.0)]
    a = np.tile(np.array([p[0] for p in pairs], np.float32), (128, 40))[:, :240]
    b = np.tile(np.array([p[1] for p in pairs], np.float32), (128, 40))[:, :240]
    a[0:4, :] = -0.0
    a[0:2, 7] = 0.0  # a row of zeros of both signs
    got = [neuron.kernel(k, mode=m)(a, b) for m in ("native", "simulate", "eager")]
    for g in got[1:]:
        for x, y in zip(got[0], g):
            np.testing.assert_array_equal(x.view(np.uint32), y.view(np.uint32))
    mx, mn, red, _ = got[0]
    want_max = np.where(np.isnan(b), a, np.where(a > b, a, b))
    want_min = np.where(np.isnan(b), a, np.where(a < b, a, b))
    np.testing.assert_array_equal(mx.view(np.uint32), want_max.view(np.uint32))
    np.testing.assert_array_equal(mn.view(np.uint32), want_min.view(np.uint32))
    np.testing.assert_array_equal(red[4:, 0], np.nanmax(a[4:], axis=1))  # NaNs ignored
    np.testing.assert_array_equal(red[4:, 1], np.nanmin(a[4:], axis=1))


def test_a_partition_step_on_chip_is_an_access_pattern_error():
    """t[0:128:2] of a tile: on chip an access walks consecutive partitions; every executor
    read partitions 0, 1, 2, ... (a silently wrong result) before this was refused."""
    def every_other_row(x):
        out = nl.ndarray((64, 4), nl.float32, buffer=nl.shared_hbm)
        t = nl.load(x)
        nl.store(out, nl.copy(t[0:128:2]))
        return out

    for mode in ("native", "simulate", "eager"):
        with pytest.raises(neuron.NeuronError) as e:
            neuron.kernel(every_other_row, mode=mode)(np.zeros((128, 4), np.float32))
        assert e.value.rule == "access-pattern" and "by 2 (64 of them from 0)" in \
            e.value.message


@pytest.mark.parametrize("fn,ref", [(nl.sum, np.sum), (nl.max, np.max), (nl.min, np.min),
                                    (nl.mean, np.mean)], ids=["sum", "max", "min", "mean"])
def test_reductions(fn, ref):
    @neuron.kernel
    def k(x):
        out = nl.ndarray((128, 1), x.dtype, buffer=nl.shared_hbm)
        nl.store(out, fn(nl.load(x), axis=1, keepdims=True))
        return out

    np.testing.assert_allclose(k(X), ref(X.astype(f64), axis=1, keepdims=True), rtol=1e-5,
                               atol=1e-5)


def test_allocation_where_broadcast_and_slicing():
    @neuron.kernel
    def k(x):
        out = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
        t = nl.load(x)
        z, o = nl.zeros((128, 64), nl.float32), nl.ones((128, 64), nl.float32)
        f = nl.full((128, 64), 2.5, nl.float32)
        zl = nl.zeros_like(t)
        w = nl.where(t > z, o, f)           # 1 where x > 0, else 2.5
        col = nl.broadcast_to(t[:, 3:4], (128, 64))
        s = nl.ndarray((128, 64), nl.float32)
        s[:, 0:32] = t[:, 32:64]             # tensor_copy into a view
        s[:, 32:] = 7.0                      # memset of a view
        nl.store(out, w + col + s + zl)
        return out

    x = X.astype(f64)
    s = np.concatenate([x[:, 32:64], np.full((128, 32), 7.0)], axis=1)
    want = np.where(x > 0, 1.0, 2.5) + x[:, 3:4] + s
    np.testing.assert_allclose(k(X), want, rtol=1e-6, atol=1e-6)


def test_matmul_and_transpose():
    @neuron.kernel
    def k(x, y):
        out = nl.ndarray((128, 256), nl.float32, buffer=nl.shared_hbm)
        outT = nl.ndarray((64, 128), nl.float32, buffer=nl.shared_hbm)
        a, b = nl.load(x), nl.load(y)
        nl.store(out, nl.copy(nl.matmul(a, b, transpose_x=True)))
        nl.store(outT, nl.copy(nl.transpose(a[:, 0:64])))
        return out, outT

    x = RNG.standard_normal((128, 128)).astype(np.float32)
    y = RNG.standard_normal((128, 256)).astype(np.float32)
    out, outT = k(x, y)
    np.testing.assert_allclose(out, x.astype(f64).T @ y, rtol=1e-4, atol=1e-3)
    np.testing.assert_array_equal(outT, x[:, 0:64].T)


def test_two_dimensional_grid_program_ids():
    @neuron.kernel
    def k(x):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        i, j = nl.program_id(0), nl.program_id(1)
        t = nl.load(x[i * 128:(i + 1) * 128, j * 32:(j + 1) * 32])
        nl.store(out[i * 128:(i + 1) * 128, j * 32:(j + 1) * 32], t + 1.0)
        return out

    x = RNG.standard_normal((256, 96)).astype(np.float32)
    np.testing.assert_array_equal(k[2, 3](x), x + np.float32(1))
    with pytest.raises(ValueError):
        k[0]


@pytest.mark.parametrize("mode", ["native", "simulate"])
def test_program_ids_and_loop_indices_as_numbers(mode):
    # NKI: program ids and loop indices are Python ints at trace time. Float arithmetic,
    # powers, a negation as a scalar operand and an iota offset take their values (the trace
    # restarts per program, or with the loop unrolled); they raised TypeError.
    @neuron.kernel(mode=mode)
    def k(x):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        i = nl.program_id(0)
        for j in nl.affine_range(2):
            rows = x[i * 4 + j * 2:i * 4 + j * 2 + 2, :]
            t = nl.add(nl.load(rows), i * 1.5 + j ** 2 + 0.25)
            t = nl.add(t, -i)
            io = nl.ndarray((2, 8), nl.float32)
            nisa.iota(io, [[0, 8]], offset=i * 100, channel_multiplier=1)
            nl.store(out[i * 4 + j * 2:i * 4 + j * 2 + 2, :], nl.add(t, io))
        return out

    x = RNG.standard_normal((8, 8)).astype(np.float32)
    want = x.copy()
    for i in range(2):
        for j in range(2):
            r = slice(i * 4 + j * 2, i * 4 + j * 2 + 2)
            want[r] = (x[r] + np.float32(i * 1.5 + j ** 2 + 0.25)) - np.float32(i) + \
                (i * 100 + np.arange(2)[:, None]).astype(np.float32)
    np.testing.assert_array_equal(k[2](x), want)


def test_bitwise_remainder_and_integer_operators_in_every_mode():
    # & | ^ << >> ~ % and integer -x / abs() on tiles (NKI_API.md 4.5: the nl functions),
    # natively, simulated and eagerly.
    def k(a, b):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        x, y = nl.load(a), nl.load(b)
        nl.store(out, (((x & y) | 3) ^ (x >> 1)) + abs(-x) + (6 & x) + (~x) + (y % 5) + (x << 2))
        return out

    a = np.arange(-8, 8, dtype=np.int32).reshape(2, 8)
    b = np.arange(16, dtype=np.int32).reshape(2, 8) * 3
    logical = (a.astype(np.int64) & 0xFFFFFFFF) >> 1  # >> is logical
    want = (((a & b) | 3) ^ logical) + np.abs(a) + (6 & a) + (~a) + (b % 5) + (a << 2)
    for mode in ("native", "simulate", "eager"):
        np.testing.assert_array_equal(neuron.kernel(k, mode=mode)(a, b), want.astype(np.int32))


def test_strided_slices_whose_start_is_a_loop_index():
    # t[:, i*3 : i*3+16 : 2] in a rolled loop (8 elements i*3, i*3+2, ...), also as t.slice()
    # and on HBM, in every mode; each a strided view, not a copy.
    def k(x):
        out = nl.ndarray((4, 64, 8), nl.float32, buffer=nl.shared_hbm)
        out2 = nl.ndarray((4, 64, 6), nl.float32, buffer=nl.shared_hbm)
        t = nl.load(x)
        for i in nl.affine_range(4):
            nl.store(out[i], nl.copy(t[:, i * 3:i * 3 + 16:2]))
            nl.store(out2[i], nl.load(x.slice(1, i * 5, i * 5 + 16, 3)))
        return out, out2

    x = RNG.standard_normal((64, 40)).astype(np.float32)
    for mode in ("native", "simulate", "eager"):
        out, out2 = neuron.kernel(k, mode=mode)(x)
        np.testing.assert_array_equal(out, np.stack([x[:, 3 * i:3 * i + 16:2] for i in range(4)]))
        np.testing.assert_array_equal(out2, np.stack([x[:, 5 * i:5 * i + 16:3]
                                                      for i in range(4)]))


def test_bfloat16_numpy_and_torch_round_trip():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    xb = X.astype(ml_dtypes.bfloat16)
    k = unary_kernel(nl.copy)
    got = k(xb)
    assert got.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(got.astype(np.float32), xb.astype(np.float32))
    torch = pytest.importorskip("torch")
    t = torch.from_numpy(X).to(torch.bfloat16)
    got = k(t)
    assert isinstance(got, torch.Tensor) and got.dtype == torch.bfloat16
    assert torch.equal(got, t)


def test_torch_float_tensors_in_and_out():
    torch = pytest.importorskip("torch")
    x, y = torch.from_numpy(X), torch.from_numpy(Y)
    got = binary_kernel(nl.add)(x, y)
    assert isinstance(got, torch.Tensor)
    torch.testing.assert_close(got, x + y)
    # non-contiguous torch input is copied to a contiguous one
    xt = torch.from_numpy(np.ascontiguousarray(X.T)).T
    torch.testing.assert_close(unary_kernel(nl.copy)(xt), xt.contiguous())


def test_empty_like_and_num_programs():
    # num_programs is a symbolic index: it prints as npid0 in the kernel's slices
    def uses_n(x):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        n = nl.num_programs(0)
        i = nl.program_id(0)
        # program i handles row block (n - 1 - i): the grid runs backwards
        t = nl.load(x[(n - 1 - i) * 128:(n - i) * 128, :])
        e = nl.empty_like(t)
        assert e.shape == t.shape and e.dtype == t.dtype and e.buffer == nl.sbuf
        e[:, :] = t
        nl.store(out[i * 128:(i + 1) * 128, :], e)
        return out

    rev = neuron.kernel(uses_n)
    assert "npid0" in str(rev.trace(((256, 8), nl.float32)))
    x = RNG.standard_normal((256, 8)).astype(np.float32)
    np.testing.assert_array_equal(rev[2](x), np.concatenate([x[128:], x[:128]]))


# ---- subscripts and assignment forms ----

def test_augmented_assignment_on_a_view_updates_in_place_without_a_copy():
    def k(a):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        t = nl.load(a)
        t[0:64, :] += 1.0
        t[...] *= 2.0
        nl.store(out, t)
        return out
    kern = neuron.kernel(k)
    ir = str(kern.trace(X))
    assert "tensor_copy" not in ir  # the C++ `t(ds(0, 64), all) += 1` records no copy either
    ref = X.astype(np.float64)
    ref[:64] += 1
    np.testing.assert_allclose(kern(X), ref * 2, rtol=1e-6)


def test_ellipsis_subscripts_and_tuple_shapes():
    @neuron.kernel
    def k(a):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        assert a.shape == (128, 64) and a[..., 0:8].shape == (128, 8)
        t = nl.load(a[...])
        nl.store(out[..., :], nl.exp(t[...]))
        return out
    np.testing.assert_allclose(k(X), np.exp(X.astype(np.float64)), rtol=2e-6)


def test_assigning_a_number_to_an_hbm_view_fills_it_in_row_chunks():
    @neuron.kernel
    def k(a):
        out = nl.ndarray((300, 8), nl.float32, buffer=nl.shared_hbm)
        out[...] = 3.5
        out[290:300, 0:4] = -1.0
        return out
    ref = np.full((300, 8), 3.5, np.float32)
    ref[290:, :4] = -1
    np.testing.assert_array_equal(k(X), ref)


def test_a_strided_store_starts_at_its_loop_index():
    # (Once refused: an earlier form dropped the start.) Columns i, i + 2, ..., i + 30.
    @neuron.kernel
    def k(a):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        for i in nl.affine_range(2):
            nl.store(out[:, i:i + 32:2], nl.load(a[:, 16 * i:16 * i + 16]))
        return out
    got = k(X)
    np.testing.assert_array_equal(got[:, 0:32:2], X[:, 0:16])
    np.testing.assert_array_equal(got[:, 1:32:2], X[:, 16:32])


def test_an_unrolled_loop_reuses_the_space_of_dead_tiles():
    # Nine [128, 512] fp32 PSUM results (one bank each; trn2 has 8), one per unrolled iteration.
    a = RNG.uniform(-1, 1, (128, 128)).astype(np.float32)
    b = RNG.uniform(-1, 1, (128, 512)).astype(np.float32)

    @neuron.kernel
    def k(x, y):
        out = nl.ndarray((9 * 128, 512), nl.float32, buffer=nl.shared_hbm)
        xt, yt = nl.load(x), nl.load(y)
        for i in range(9):
            ps = nl.matmul(xt, yt, transpose_x=True)
            nl.store(out[i * 128:(i + 1) * 128, :], nl.multiply(ps, float(i)))
        return out
    ref = (a.astype(np.float64).T @ b.astype(np.float64))
    got = k(a, b)
    for i in range(9):
        np.testing.assert_allclose(got[i * 128:(i + 1) * 128], ref * i, rtol=1e-4, atol=1e-4)


def test_bad_accumulate_flags_and_empty_views_name_their_rules():
    import neuron.isa as nisa

    def bad_flag(a):
        ps = nl.ndarray((4, 4), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(ps, nl.load(a), nl.load(a), accumulate=5)
        return a

    def empty_exp(a):
        nl.exp(nl.load(a)[:, 3:3])
        return a

    for fn, rule, text in ((bad_flag, "unknown-arg", "accumulate=5 is not a flag"),
                           (empty_exp, "shape", "the shape of an empty view")):
        with pytest.raises(neuron.NeuronError) as e:
            neuron.kernel(fn, mode="simulate")(np.zeros((4, 8), np.float32)[:, :4].copy())
        assert e.value.rule == rule and text in e.value.message, e.value.message
