# Python operators and assignments on tiles in legacy kernels (NKI_API.md 4.5: operators map to
# the nl functions; `t[...] = expr` broadcasts the value to the destination), the reductions'
# shapes (4.8) and nc_transpose of a tile with several free dims (4.9), simulated and native,
# each against NumPy.
import numpy as np
import pytest

import neuron
import neuron.compat

neuron.compat.install()
from neuronxcc import nki  # noqa: E402
import neuronxcc.nki.isa as nisa  # noqa: E402
import neuronxcc.nki.language as nl  # noqa: E402

RNG = np.random.default_rng(5)


def both(kernel, *args):
    """The kernel's output simulated and natively (asserted bit-identical)."""
    sim = nki.simulate_kernel(kernel, *args)
    nat = nki.baremetal(kernel)(*args)
    np.testing.assert_array_equal(np.asarray(sim).view(np.uint8), np.asarray(nat).view(np.uint8))
    return sim


def stored(t):
    out = nl.ndarray(t.shape, dtype=t.dtype, buffer=nl.shared_hbm)
    nl.store(out, t)
    return out


def test_assignment_broadcasts_the_value_to_the_view():
    x = RNG.standard_normal((8, 5)).astype(np.float32)
    col = RNG.standard_normal((8, 1)).astype(np.float32)
    row = RNG.standard_normal((1, 5)).astype(np.float32)

    def column(a, c):
        t = nl.load(a)
        t[...] = nl.multiply(nl.load(c), 2.0)  # [8, 1] -> [8, 5]
        return stored(t)

    def partition_row(a, r):
        t = nl.load(a)
        t[...] = nl.load(r)  # [1, 5] -> [8, 5]
        return stored(t)

    def row_sum(a):
        t = nl.load(a)
        t[:, 1:4] = nl.sum(t, axis=1)  # a reduced tile into part of the row
        return stored(t)

    np.testing.assert_array_equal(both(column, x, col), np.broadcast_to(2 * col, (8, 5)))
    np.testing.assert_array_equal(both(partition_row, x, row), np.broadcast_to(row, (8, 5)))
    want = x.copy()
    want[:, 1:4] = x.sum(1, keepdims=True)
    np.testing.assert_allclose(both(row_sum, x), want, rtol=1e-6)


def test_the_reverse_broadcast_is_refused_with_the_users_line():
    x = RNG.standard_normal((8, 5)).astype(np.float32)

    def shrink(a):
        t = nl.load(a)
        c = nl.ndarray((8, 1), dtype=nl.float32)
        c[...] = t  # a [8, 5] value cannot go into [8, 1]
        return stored(c)

    with pytest.raises(neuron.NeuronError, match="c\\[\\.\\.\\.\\] = t"):
        nki.simulate_kernel(shrink, x)


def test_bitwise_shift_and_remainder_operators_on_integer_tiles():
    a = RNG.integers(-1000, 1000, (6, 9)).astype(np.int32)
    b = RNG.integers(1, 7, (6, 9)).astype(np.int32)
    cases = {
        "&": (lambda x, y: x & y, np.bitwise_and(a, b)),
        "|": (lambda x, y: x | y, np.bitwise_or(a, b)),
        "^": (lambda x, y: x ^ y, np.bitwise_xor(a, b)),
        "<<": (lambda x, y: x << y, np.left_shift(a, b)),
        ">> 1": (lambda x, y: x >> 1, (a.astype(np.int64) & 0xFFFFFFFF) >> 1),
        "6 & x": (lambda x, y: 6 & x, 6 & a),
        "%": (lambda x, y: x % y, np.mod(a, b)),
        "-": (lambda x, y: -x, -a),
        "abs": (lambda x, y: abs(x), np.abs(a)),
        "~": (lambda x, y: ~x, ~a),
    }
    for name, (fn, want) in cases.items():
        def kernel(x, y, fn=fn):
            return stored(fn(nl.load(x), nl.load(y)))
        got = both(kernel, a, b)
        assert got.dtype == np.int32, name
        np.testing.assert_array_equal(got.astype(np.int64), want.astype(np.int64), err_msg=name)


def test_invert_of_a_bool_tile_is_logical_not_and_float_bit_operators_are_refused():
    x = RNG.standard_normal((4, 6)).astype(np.float32)

    def flip(a):
        t = nl.load(a)
        return stored(~nl.greater(t, 0.0))  # a bool tile

    np.testing.assert_array_equal(both(flip, x), (x <= 0).astype(np.uint8))

    def float_and(a):
        t = nl.load(a)
        return stored(t & t)

    with pytest.raises(neuron.NeuronError, match="bitwise and takes integer tiles"):
        nki.simulate_kernel(float_and, x)


def test_var_drops_the_reduced_axes_as_sum_does():
    x = RNG.standard_normal((5, 3, 4, 2)).astype(np.float32)

    def kernel(a):
        t = nl.load(a)
        v, s = nl.var(t, axis=[2, 3]), nl.sum(t, axis=[2, 3])
        assert tuple(v.shape) == tuple(s.shape) == (5, 3)
        return stored(v)

    np.testing.assert_allclose(both(kernel, x), x.astype(np.float64).var(axis=(2, 3)),
                               rtol=1e-5, atol=1e-6)


def test_nc_transpose_flattens_the_free_dims_first():
    x = RNG.standard_normal((4, 3, 5)).astype(np.float32)

    def kernel(a):
        return stored(nl.copy(nisa.nc_transpose(nl.load(a))))

    np.testing.assert_array_equal(both(kernel, x), x.reshape(4, 15).T)


def test_a_masked_load_into_rows_no_engine_may_start_at():
    # Rows 100..127 (28 partitions) cannot start an engine instruction (TRAINIUM.md); the
    # masked load's rows are written by DMA, the other rows keep their values.
    x = RNG.standard_normal((128, 8)).astype(np.float32)
    y = RNG.standard_normal((128, 8)).astype(np.float32)

    def kernel(a, b):
        acc = nl.load(b)
        i_p, i_f = nl.mgrid[0:128, 0:8]
        acc[...] = nl.load(a, mask=(i_p >= 100))
        return stored(acc)

    want = y.copy()
    want[100:] = x[100:]
    np.testing.assert_array_equal(both(kernel, x, y), want)


def test_a_matmul_of_tiles_with_different_contraction_sizes_is_refused():
    # NKI_API.md 7: stationary [K, M] and moving [K, N], the same K (it contracted over the
    # common 12 rows and returned the partial product).
    @nki.jit
    def mm(x, y):
        return stored(nl.copy(nisa.nc_matmul(nl.load(x), nl.load(y))))

    @nki.jit
    def mm_t(x, y):
        return stored(nl.copy(nl.matmul(nl.load(x), nl.load(y), transpose_x=True)))

    x, y = np.ones((16, 8), np.float32), np.ones((12, 8), np.float32)
    for k in (mm, mm_t):
        with pytest.raises(neuron.NeuronError, match="contraction sizes differ") as e:
            nki.simulate_kernel(k, x, y)
        assert e.value.rule == "matmul-shape" and "test_legacy_operators.py" in str(e.value)
    np.testing.assert_array_equal(both(mm, x[:12], y), np.full((8, 8), 12, np.float32))
