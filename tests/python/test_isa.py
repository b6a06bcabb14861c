# Every nisa instruction (dst first, nothing returned) against a NumPy reference.
import ml_dtypes
import numpy as np
import pytest

import neuron
import neuron.isa as nisa
import neuron.language as nl

RNG = np.random.default_rng(7)
X = RNG.uniform(-2, 2, (128, 64)).astype(np.float32)
Y = RNG.uniform(-2, 2, (128, 64)).astype(np.float32)
f64 = np.float64


def test_nc_matmul_accumulates_over_rolled_loop():
    @neuron.kernel
    def k(x, y):
        out = nl.ndarray((128, 256), nl.float32, buffer=nl.shared_hbm)
        acc = nl.zeros((128, 256), nl.float32, buffer=nl.psum)
        for i in nl.affine_range(3):
            a = nl.load(x[i * 128:(i + 1) * 128, :])
            b = nl.load(y[i * 128:(i + 1) * 128, :])
            nisa.nc_matmul(acc, a, b, accumulate=True)
        r = nl.ndarray((128, 256), nl.float32)
        nisa.tensor_copy(r, acc)
        nl.store(out, r)
        return out

    x = RNG.standard_normal((384, 128)).astype(np.float32)
    y = RNG.standard_normal((384, 256)).astype(np.float32)
    np.testing.assert_allclose(k(x, y), x.astype(f64).T @ y, rtol=1e-4, atol=1e-3)


def test_nc_transpose_and_dma_copy():
    @neuron.kernel
    def k(x):
        out = nl.ndarray((64, 128), nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((128, 64), nl.float32)
        nisa.dma_copy(t, x)
        p = nl.ndarray((64, 128), nl.float32, buffer=nl.psum)
        nisa.nc_transpose(p, t)
        s = nl.ndarray((64, 128), nl.float32)
        nisa.tensor_copy(s, p)
        nisa.dma_copy(out, s)
        return out

    np.testing.assert_array_equal(k(X), X.T)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int8"])
@pytest.mark.parametrize("mode", ["native", "simulate"])
def test_nc_transpose_layouts(dtype, mode):
    # Whole tiles, a strided column slice, a partition range, a 3-D free axis and odd sizes
    # (matrix-shaped views take the blocked copy, SIMD for 32-bit contiguous rows; the 3-D one
    # whose free dims do not merge takes the general path): each equals NumPy's transpose.
    import ml_dtypes
    npdt = {"float32": np.float32, "bfloat16": ml_dtypes.bfloat16, "int8": np.int8}[dtype]
    ndt = getattr(nl, dtype)

    @neuron.kernel(mode=mode)
    def k(x, y):
        a = nl.ndarray((96, 128), ndt, buffer=nl.shared_hbm)
        b = nl.ndarray((40, 50), ndt, buffer=nl.shared_hbm)
        c = nl.ndarray((12, 30), ndt, buffer=nl.shared_hbm)
        e = nl.ndarray((21, 13), ndt, buffer=nl.shared_hbm)
        t = nl.ndarray((128, 96), ndt)
        nisa.dma_copy(t, x)
        pa = nl.ndarray((96, 128), ndt, buffer=nl.psum)
        nisa.nc_transpose(pa, t)
        sa = nl.ndarray((96, 128), ndt)
        nisa.tensor_copy(sa, pa)
        nisa.dma_copy(a, sa)
        pb = nl.ndarray((40, 50), ndt, buffer=nl.psum)
        nisa.nc_transpose(pb, t[64:114, 0:80:2])
        sb = nl.ndarray((40, 50), ndt)
        nisa.tensor_copy(sb, pb)
        nisa.dma_copy(b, sb)
        t3 = nl.ndarray((30, 2, 12), ndt)
        nisa.dma_copy(t3, y)
        pc = nl.ndarray((12, 30), ndt, buffer=nl.psum)
        nisa.nc_transpose(pc, t3[:, :, 0:6])
        sc = nl.ndarray((12, 30), ndt)
        nisa.tensor_copy(sc, pc)
        nisa.dma_copy(c, sc)
        pe = nl.ndarray((21, 13), ndt, buffer=nl.psum)
        nisa.nc_transpose(pe, t[0:13, 3:24])
        se = nl.ndarray((21, 13), ndt)
        nisa.tensor_copy(se, pe)
        nisa.dma_copy(e, se)
        return a, b, c, e

    x = (RNG.uniform(-100, 100, (128, 96))).astype(npdt)
    y = (RNG.uniform(-100, 100, (30, 2, 12))).astype(npdt)
    a, b, c, e = k(x, y)
    np.testing.assert_array_equal(a, x.T)
    np.testing.assert_array_equal(b, x[64:114, 0:80:2].T)
    np.testing.assert_array_equal(c, y[:, :, 0:6].reshape(30, 12).T)
    np.testing.assert_array_equal(e, x[0:13, 3:24].T)  # edges of the 8 x 8 blocks


def vector_transposes(x):
    """nc_transpose on the Vector engine: by default for a dst in SBUF, or asked for with
    engine=vector (into PSUM too); a direct dma_copy takes oob_mode (nothing to skip)."""
    t = nl.load(x)                                    # [16, 24]
    a = nl.ndarray((24, 16), nl.float32, buffer=nl.sbuf)
    nisa.nc_transpose(a, t)
    b = nl.ndarray((24, 16), nl.float32, buffer=nl.psum)
    nisa.nc_transpose(b, t, engine=nisa.engine.vector)
    out = nl.ndarray((2, 24, 16), nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(out[0], a, oob_mode=nisa.oob_mode.skip)
    nl.store(out[1], b)
    return out


@pytest.mark.parametrize("mode", ["native", "simulate", "eager"])
def test_nc_transpose_on_the_vector_engine(mode):
    x = RNG.uniform(-2, 2, (16, 24)).astype(np.float32)
    out = neuron.kernel(vector_transposes, mode=mode)(x)
    np.testing.assert_array_equal(out[0], x.T)
    np.testing.assert_array_equal(out[1], x.T)
    if mode == "native":  # both on the Vector engine's instruction
        assert str(neuron.kernel(vector_transposes).compile(x).kernel).count(
            "nc_transpose_vector(") == 2

    def too_big(x):
        a = nl.ndarray((64, 32), nl.float32, buffer=nl.sbuf)
        nisa.nc_transpose(a, nl.load(x))  # 32 x 64: more than the Vector engine's 32 x 32
        out = nl.ndarray((64, 32), nl.float32, buffer=nl.shared_hbm)
        nl.store(out, a)
        return out

    with pytest.raises(neuron.NeuronError) as e:
        neuron.kernel(too_big, mode=mode)(np.zeros((32, 64), np.float32))
    assert e.value.rule == "shape-mismatch" and "at most 32 x 32" in str(e.value)


def test_activation_with_scale_bias_and_reduce():
    @neuron.kernel
    def k(x, b):
        out = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
        red = nl.ndarray((128, 1), nl.float32, buffer=nl.shared_hbm)
        t, bias = nl.load(x), nl.load(b)
        r = nl.ndarray((128, 64), nl.float32)
        s = nl.ndarray((128, 1), nl.float32)
        nisa.activation(r, nl.exp, t, bias=bias, scale=0.5, reduce_op=nl.add, reduce_res=s)
        nl.store(out, r)
        nl.store(red, s)
        return out, red

    b = RNG.uniform(-1, 1, (128, 1)).astype(np.float32)
    out, red = k(X, b)
    want = np.exp(X.astype(f64) * 0.5 + b)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(red, want.sum(axis=1, keepdims=True), rtol=1e-5)


def test_activation_takes_every_function_of_the_table():
    # The derivative / gated forms as activation ops, with scale and a bias column, native and
    # simulated, against float64 references.
    sig = lambda w: 1 / (1 + np.exp(-w))  # noqa: E731
    refs = {"mish": lambda v: v * np.tanh(np.log1p(np.exp(v))),
            "silu_dx": lambda v: sig(v) * (1 + v * sig(-v)),
            "arctan": np.arctan, "floor": np.floor}
    b = RNG.uniform(-1, 1, (128, 1)).astype(np.float32)
    for name, ref in refs.items():
        def k(x, bias):
            out = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
            r = nl.ndarray((128, 64), nl.float32)
            nisa.activation(r, getattr(nl, name), nl.load(x), bias=nl.load(bias), scale=3.0)
            nl.store(out, r)
            return out
        want = ref(X.astype(f64) * 3.0 + b)
        for mode in ("native", "simulate"):
            got = neuron.kernel(k, mode=mode)(X, b)
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("op,ref", [(nl.add, np.add), (nl.multiply, np.multiply),
                                    (nl.maximum, np.maximum), (nl.subtract, np.subtract)],
                         ids=["add", "multiply", "maximum", "subtract"])
def test_tensor_tensor(op, ref):
    @neuron.kernel
    def k(x, y):
        out = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
        r = nl.ndarray((128, 64), nl.float32)
        nisa.tensor_tensor(r, nl.load(x), nl.load(y), op)
        nl.store(out, r)
        return out

    np.testing.assert_allclose(k(X, Y), ref(X.astype(f64), Y), rtol=1e-6, atol=1e-6)


def test_tensor_scalar_two_stages_reverse_and_tile_operand():
    @neuron.kernel
    def k(x, c):
        out = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
        out2 = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
        t = nl.load(x)
        r = nl.ndarray((128, 64), nl.float32)
        nisa.tensor_scalar(r, t, nl.multiply, 3.0, op1=nl.subtract, operand1=1.0, reverse1=True)
        nl.store(out, r)
        r2 = nl.ndarray((128, 64), nl.float32)
        nisa.tensor_scalar(r2, t, nl.add, nl.load(c))
        nl.store(out2, r2)
        return out, out2

    c = RNG.uniform(-1, 1, (128, 1)).astype(np.float32)
    out, out2 = k(X, c)
    np.testing.assert_allclose(out, 1.0 - X.astype(f64) * 3.0, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(out2, X.astype(f64) + c, rtol=1e-6, atol=1e-6)


def test_magnitude_operators_abs_max_and_abs_min():
    # NKI_API.md 5.1 (NeuronCore-v4): the signed operand with the larger / smaller magnitude,
    # the second on ties; as tensor_tensor's op and as tensor_scalar's op0 / op1 (reversed).
    def k(x, y, c):
        outs = [nl.ndarray((4, 6), nl.float32, buffer=nl.shared_hbm) for _ in range(4)]
        a, b = nl.load(x), nl.load(y)
        for out, op in zip(outs[:2], (nl.abs_max, nl.abs_min)):
            r = nl.ndarray((4, 6), nl.float32)
            nisa.tensor_tensor(r, a, b, op)
            nl.store(out, r)
        r = nl.ndarray((4, 6), nl.float32)
        nisa.tensor_scalar(r, a, nl.abs_max, -2.0, op1=nl.multiply, operand1=3.0)
        nl.store(outs[2], r)
        r = nl.ndarray((4, 6), nl.float32)
        nisa.tensor_scalar(r, a, nl.add, 1.0, op1=nl.abs_min, operand1=nl.load(c), reverse1=True)
        nl.store(outs[3], r)
        return tuple(outs)

    rows = np.arange(1, 5, dtype=np.float32)[:, None]
    x = np.array([[2, -3, 1, 0, -2, 5]] * 4, np.float32) * rows
    y = np.array([[-2, 1, -4, 0, 2, -5]] * 4, np.float32) * rows
    c = np.array([[-3], [1], [0.5], [-9]], np.float32)

    def by_magnitude(a, b, larger):  # b on ties
        pick_a = np.abs(a) > np.abs(b) if larger else np.abs(a) < np.abs(b)
        return np.where(pick_a, a, b)

    for mode in ("native", "simulate", "eager"):
        amax, amin, ts0, ts1 = neuron.kernel(k, mode=mode)(x, y, c)
        np.testing.assert_array_equal(amax, by_magnitude(x, y, True))
        np.testing.assert_array_equal(amin, by_magnitude(x, y, False))
        np.testing.assert_array_equal(ts0, by_magnitude(x, np.float32(-2), True) * 3)
        np.testing.assert_array_equal(ts1, by_magnitude(np.broadcast_to(c, x.shape), x + 1,
                                                        False))


@pytest.mark.parametrize("op,ref,negate", [(nl.add, np.sum, False), (nl.maximum, np.max, True),
                                           (nl.minimum, np.min, False)],
                         ids=["add", "max-negated", "min"])
def test_tensor_reduce(op, ref, negate):
    @neuron.kernel
    def k(x):
        out = nl.ndarray((128, 1), nl.float32, buffer=nl.shared_hbm)
        r = nl.ndarray((128, 1), nl.float32)
        nisa.tensor_reduce(r, op, nl.load(x), axis=1, negate=negate)
        nl.store(out, r)
        return out

    want = ref(X.astype(f64), axis=1, keepdims=True) * (-1 if negate else 1)
    np.testing.assert_allclose(k(X), want, rtol=1e-5, atol=1e-5)


def test_memset_iota_and_copy_predicated():
    @neuron.kernel
    def k(x):
        out = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
        ids = nl.ndarray((128, 64), nl.int32, buffer=nl.shared_hbm)
        m = nl.ndarray((128, 64), nl.float32)
        nisa.memset(m, 4.0)
        io = nl.ndarray((128, 64), nl.int32)
        nisa.iota(io, [[1, 64]], offset=5, channel_multiplier=100)
        nl.store(ids, io)
        t = nl.load(x)
        pred = nl.greater(t, 0.0)
        nisa.tensor_copy_predicated(m, t, pred)
        nl.store(out, m)
        return out, ids

    out, ids = k(X)
    np.testing.assert_array_equal(out, np.where(X > 0, X, np.float32(4.0)))
    p, f = np.meshgrid(np.arange(128), np.arange(64), indexing="ij")
    np.testing.assert_array_equal(ids, 5 + 100 * p + f)


def test_affine_select_lower_triangle():
    @neuron.kernel
    def k(x):
        out = nl.ndarray((128, 128), nl.float32, buffer=nl.shared_hbm)
        r = nl.ndarray((128, 128), nl.float32)
        # value = p - f; keep x where p - f >= 0 (on and below the diagonal), else -9
        nisa.affine_select(r, [[-1, 128]], 1, nl.load(x), -9.0, cmp_op=nl.greater_equal)
        nl.store(out, r)
        return out

    x = RNG.standard_normal((128, 128)).astype(np.float32)
    p, f = np.meshgrid(np.arange(128), np.arange(128), indexing="ij")
    np.testing.assert_array_equal(k(x), np.where(p - f >= 0, x, np.float32(-9.0)))


@pytest.mark.parametrize("mode", ["native", "simulate"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_affine_select_every_comparison_over_a_3d_tile(mode, dtype):
    # value = -5 + 2 p - 3 a + j over a [128, 4, 32] tile: rows of the fast path (one compare
    # per innermost element), every comparison, 4- and 2-byte elements.
    cmps = {"equal": np.equal, "not_equal": np.not_equal, "greater": np.greater,
            "greater_equal": np.greater_equal, "less": np.less, "less_equal": np.less_equal}
    dt = getattr(nl, dtype)
    x = RNG.standard_normal((128, 4, 32)).astype(np.float32)
    p, a, j = np.meshgrid(np.arange(128), np.arange(4), np.arange(32), indexing="ij")
    value = -5 + 2 * p - 3 * a + j
    for name, ref in cmps.items():
        @neuron.kernel(mode=mode)
        def k(x):
            out = nl.ndarray((128, 4, 32), dt, buffer=nl.shared_hbm)
            r = nl.ndarray((128, 4, 32), dt)
            nisa.affine_select(r, [[-3, 4], [1, 32]], 2, nl.load(x, dtype=dt), 7.0,
                               cmp_op=getattr(nl, name), offset=-5)
            nl.store(out, r)
            return out

        got = np.asarray(k(x)).astype(np.float32)
        xr = x if dtype == "float32" else x.astype(ml_dtypes.bfloat16).astype(np.float32)
        np.testing.assert_array_equal(got, np.where(ref(value, 0), xr, np.float32(7.0)),
                                      err_msg=name)


def test_nki_keyword_forms_and_accumulate_overwrite():
    @neuron.kernel
    def k(x, y):
        out = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
        acc = nl.ndarray((128, 64), nl.float32, buffer=nl.psum)
        a, b = nl.load(x), nl.load(y)
        nisa.nc_matmul(dst=acc, stationary=a, moving=b, accumulate=False, name="mm0")
        nisa.nc_matmul(dst=acc, stationary=a, moving=b, accumulate=False)  # overwrites again
        r = nl.ndarray((128, 64), nl.float32)
        nisa.activation(dst=r, op=nl.copy, data=acc, name="evict")
        s = nl.ndarray((128, 1), nl.float32)
        nisa.tensor_reduce(dst=s, op=nl.add, data=r, axis=1, keepdims=True)
        nisa.tensor_tensor(dst=r, data1=r, data2=r, op=nl.add, engine=None)
        nl.store(out, r)
        return out

    x = RNG.standard_normal((128, 128)).astype(np.float32)
    y = RNG.standard_normal((128, 64)).astype(np.float32)
    np.testing.assert_allclose(k(x, y), 2 * (x.astype(f64).T @ y), rtol=1e-4, atol=1e-3)


def test_reverse_pred_copies_where_the_predicate_is_zero():
    def k(x, p):
        out = nl.ndarray((128, 8), nl.float32, buffer=nl.shared_hbm)
        t = nl.zeros((128, 8), nl.float32)
        nisa.tensor_copy_predicated(t, nl.load(x), nl.load(p), reverse_pred=True)
        nl.store(out, t)
        return out

    x = RNG.standard_normal((128, 8)).astype(np.float32)
    p = RNG.integers(0, 2, (128, 8)).astype(np.uint8)
    np.testing.assert_array_equal(neuron.kernel(k)(x, p), np.where(p == 0, x, 0.0))


def copies_between_free_shapes(x):
    # [P, 4, 6] -> [P, 24]; a strided [P, 2, 6] view -> [P, 3, 4] into a bf16 tile (a cast);
    # [P, 24] -> [P, 2, 3, 4].
    a = nl.ndarray((128, 4, 6), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(a, x)
    flat = nl.ndarray((128, 24), nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(flat, a)
    odd = nl.ndarray((128, 3, 4), nl.bfloat16, buffer=nl.sbuf)
    nisa.tensor_copy(odd, a[:, 1:4:2, :])
    deep = nl.ndarray((128, 2, 3, 4), nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(deep, flat)
    outs = [nl.ndarray(t.shape, t.dtype, buffer=nl.shared_hbm) for t in (flat, odd, deep)]
    for o, t in zip(outs, (flat, odd, deep)):
        nisa.dma_copy(o, t)
    return tuple(outs)


@pytest.mark.parametrize("mode", ["native", "simulate", "eager"])
def test_tensor_copy_reshapes_the_free_dims(mode):
    # NKI: dst has src's partition count and elements per partition; the free dims may differ.
    x = RNG.uniform(-2, 2, (128, 4, 6)).astype(np.float32)
    flat, odd, deep = neuron.kernel(copies_between_free_shapes, mode=mode)(x)
    np.testing.assert_array_equal(flat, x.reshape(128, 24))
    np.testing.assert_array_equal(odd.astype(np.float32),
                                  x[:, 1:4:2, :].astype(ml_dtypes.bfloat16).astype(np.float32)
                                  .reshape(128, 3, 4))
    np.testing.assert_array_equal(deep, x.reshape(128, 2, 3, 4))

    def too_many(x):
        a = nl.load(x)
        b = nl.ndarray((128, 5, 5), nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(b, a)
        out = nl.ndarray((128, 25), nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(out, b)
        return out

    with pytest.raises(neuron.NeuronError) as e:
        neuron.kernel(too_many, mode=mode)(x)
    assert e.value.rule == "shape-mismatch" and "elements per partition" in str(e.value)
