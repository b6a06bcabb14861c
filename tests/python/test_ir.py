# The Python front end records the same Kernel IR as the C++ DSL: the same kernels written in
# both languages (examples/*.hpp, traced in C++ through the binding) compare equal.
import numpy as np

import neuron
import neuron.isa as nisa
import neuron.language as nl


@neuron.kernel
def vector_add(a, b):
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm, name="out")
    i = nl.program_id(0)
    ta = nl.load(a[i * 128:(i + 1) * 128, :])
    tb = nl.load(b[i * nl.tile_size.pmax:(i + 1) * nl.tile_size.pmax])
    nl.store(out[nl.ds(i * 128, 128), :], ta + tb)
    return out


@neuron.kernel
def row_softmax(x):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm, name="out")
    rows = nl.ds(nl.program_id(0) * nl.tile_size.pmax, nl.tile_size.pmax)
    t = nl.load(x[rows], dtype=nl.float32)
    row_max = nl.max(t, 1)
    e = nl.exp(t - row_max)
    inv = nl.reciprocal(nl.sum(e, 1))
    nl.store(out[rows], nl.multiply(e, inv, dtype=x.dtype))
    return out


@neuron.kernel
def matmul_naive(lhsT, rhs):
    K, M = lhsT.shape
    N = rhs.shape[1]
    TM, TK = nl.tile_size.gemm_stationary_fmax, nl.tile_size.pmax
    TN = 512 if N % nl.tile_size.gemm_moving_fmax == 0 else 128
    out = nl.ndarray((M, N), lhsT.dtype, buffer=nl.shared_hbm, name="out")
    for m in nl.affine_range(M // TM):
        for n in nl.affine_range(N // TN):
            acc = nl.zeros((TM, TN), nl.float32, buffer=nl.psum, name="acc")
            for k in nl.affine_range(K // TK):
                a = nl.load(lhsT[k * TK:(k + 1) * TK, m * TM:(m + 1) * TM])
                b = nl.load(rhs[nl.ds(k * TK, TK), nl.ds(n * TN, TN)])
                nisa.nc_matmul(acc, a, b, accumulate=True)
            nl.store(out[nl.ds(m * TM, TM), nl.ds(n * TN, TN)], nl.copy(acc, lhsT.dtype))
    return out


def test_vector_add_ir_equals_cpp():
    py = vector_add.trace(((512, 256), nl.float32), ((512, 256), nl.float32))
    cpp = neuron.trace_example("vector_add", [((512, 256), "float32", "a"),
                                              ((512, 256), "float32", "b")])
    assert str(py) == str(cpp)
    assert py == cpp


def test_softmax_ir_equals_cpp():
    py = row_softmax.trace(((256, 64), nl.bfloat16))
    cpp = neuron.trace_example("row_softmax", [((256, 64), "bfloat16", "x")])
    assert str(py) == str(cpp)


def test_matmul_ir_equals_cpp_with_nested_rolled_loops():
    py = matmul_naive.trace(((256, 256), nl.bfloat16), ((256, 1024), nl.bfloat16))
    cpp = neuron.trace_example("matmul_naive", [((256, 256), "bfloat16", "lhsT"),
                                          ((256, 1024), "bfloat16", "rhs")])
    assert str(py) == str(cpp)
    text = str(py)
    # Traced once: three rolled loops, one nc_matmul.
    assert text.count("affine_range") == 3
    assert text.count("nc_matmul(") == 1


def test_print_parse_round_trip():
    k = matmul_naive.trace(((128, 128), nl.float32), ((128, 512), nl.float32))
    assert neuron.parse_kernel(str(k)) == k


def test_ir_from_python_runs_like_numpy():
    rng = np.random.default_rng(0)
    lhsT = rng.standard_normal((256, 128)).astype(np.float32)
    rhs = rng.standard_normal((256, 512)).astype(np.float32)
    ref = lhsT.astype(np.float64).T @ rhs.astype(np.float64)
    np.testing.assert_allclose(matmul_naive(lhsT, rhs), ref, rtol=1e-4, atol=1e-3)
    x = rng.standard_normal((256, 64)).astype(np.float32)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(row_softmax[2](x), e / e.sum(axis=1, keepdims=True), rtol=1e-5,
                               atol=1e-6)


def test_static_range_and_python_range_unroll():
    @neuron.kernel
    def unrolled(a):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        for i in range(2):
            for j in nl.static_range(2):
                t = nl.load(a[i * 128:(i + 1) * 128, j * 32:(j + 1) * 32])
                nl.store(out[i * 128:(i + 1) * 128, j * 32:(j + 1) * 32], t * 2.0)
        return out

    text = str(unrolled.trace(((256, 64), nl.float32)))
    assert "for " not in text
    assert text.count("nl.store(") == 4
    x = np.arange(256 * 64, dtype=np.float32).reshape(256, 64)
    np.testing.assert_array_equal(unrolled(x), x * 2)


def test_sequential_range_is_a_sequential_loop():
    @neuron.kernel
    def prefix(a):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        acc = nl.zeros((128, 64), nl.float32)
        for i in nl.sequential_range(4):
            t = nl.load(a[i * 128:(i + 1) * 128, :])
            acc += t
            nl.store(out[i * 128:(i + 1) * 128, :], acc)
        return out

    assert "sequential_range(4)" in str(prefix.trace(((512, 64), nl.float32)))
    x = np.random.default_rng(1).standard_normal((512, 64)).astype(np.float32)
    ref = np.cumsum(x.reshape(4, 128, 64).astype(np.float64), axis=0).reshape(512, 64)
    np.testing.assert_allclose(prefix(x), ref, rtol=1e-5, atol=1e-5)
