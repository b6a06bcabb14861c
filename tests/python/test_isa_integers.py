# Integer semantics of the ISA (docs/numerics.md, NKI_API.md 3.2 and 5.1), natively, on the
# simulator and eagerly, bit for bit, each against NumPy: tensor_tensor of two integer tiles
# computed on the integers (exact; 32-bit wrap where an operand is 32-bit), bitwise reductions
# of integer tiles on their bit patterns, right_shift logical on an element's own width, and
# nc_match_replace8's dst_idx order for repeated values.
import numpy as np
import pytest

import neuron
import neuron.isa as nisa
import neuron.language as nl
from test_dynamic import three_ways

RNG = np.random.default_rng(42)
OPS = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply,
       "maximum": np.maximum, "minimum": np.minimum, "equal": np.equal,
       "greater": np.greater, "less_equal": np.less_equal}


def tt(dtype, out_dtype):
    def kernel(a, b):
        outs = [nl.ndarray(a.shape, out_dtype, buffer=nl.shared_hbm) for _ in OPS]
        x, y = nl.load(a), nl.load(b)
        for out, name in zip(outs, OPS):
            r = nl.ndarray(a.shape, out_dtype)
            nisa.tensor_tensor(r, x, y, getattr(nl, name))
            nl.store(out, r)
        return tuple(outs)
    return kernel


def wrap32(v, unsigned):
    v = v.astype(np.int64) & 0xFFFFFFFF
    return v if unsigned else np.where(v >= 1 << 31, v - (1 << 32), v)


@pytest.mark.parametrize("dtype", [np.int32, np.uint32])
def test_tensor_tensor_on_32_bit_integers_is_exact(dtype):
    info = np.iinfo(dtype)
    a = RNG.integers(info.min, info.max, (7, 33), dtype=np.int64, endpoint=True)
    b = RNG.integers(info.min, info.max, (7, 33), dtype=np.int64, endpoint=True)
    a[0, :3] = [16777217, 123456789, 2**30 + 1]  # through fp32: 16777216, 123456792, 2**30
    b[0, :3] = [1, 1, 2]
    a, b = a.astype(dtype), b.astype(dtype)
    outs = three_ways(tt(dtype, getattr(nl, np.dtype(dtype).name)), a, b)
    unsigned = dtype == np.uint32
    for (name, fn), got in zip(OPS.items(), outs):
        want = fn(a.astype(np.int64), b.astype(np.int64)).astype(np.int64)
        if name in ("add", "subtract", "multiply"):
            want = wrap32(want if name != "multiply" else
                          (a.astype(np.uint64) * b.astype(np.uint64)).astype(np.int64), unsigned)
        np.testing.assert_array_equal(got.astype(np.int64), want, err_msg=name)
    assert outs[0][0, 0] == 16777218 and outs[0][0, 1] == 123456790


def test_integer_results_convert_once_to_the_destination():
    # int16 * int16 products pass 2**24 (exact now); int8 and fp32 destinations convert once.
    a = RNG.integers(-32768, 32767, (5, 40), endpoint=True).astype(np.int16)
    b = RNG.integers(-32768, 32767, (5, 40), endpoint=True).astype(np.int16)
    prod = a.astype(np.int64) * b.astype(np.int64)
    got32 = three_ways(tt(np.int16, nl.int32), a, b)[2]
    np.testing.assert_array_equal(got32, prod)
    got8 = three_ways(tt(np.int16, nl.int8), a, b)[2]
    np.testing.assert_array_equal(got8, np.clip(prod, -128, 127))
    gotf = three_ways(tt(np.int16, nl.float32), a, b)[2]
    np.testing.assert_array_equal(gotf, prod.astype(np.float32))


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16])
def test_narrow_unsigned_results_are_exact_before_the_store_saturates(dtype):
    # NKI's fp32 rule on narrow operands: uint8 1 - 3 = -2, stored as 0 in a uint8 tile and as
    # -2 in an int16 or int32 one (a 32-bit unsigned wrap gave 255, 32767 and 2**31 - 1).
    info = np.iinfo(dtype)
    a = RNG.integers(0, info.max, (4, 20), endpoint=True).astype(dtype)
    b = RNG.integers(0, info.max, (4, 20), endpoint=True).astype(dtype)
    a[0, :2], b[0, :2] = [1, info.max], [3, info.max]
    exact = {"add": a.astype(np.int64) + b, "subtract": a.astype(np.int64) - b,
             "multiply": a.astype(np.int64) * b}
    for out, lo, hi in ((dtype, 0, info.max), (np.int16, -2**15, 2**15 - 1),
                        (np.int32, -2**31, 2**31 - 1)):
        got = three_ways(tt(dtype, getattr(nl, np.dtype(out).name)), a, b)
        for i, name in enumerate(exact):
            np.testing.assert_array_equal(got[i], np.clip(exact[name], lo, hi),
                                          err_msg=f"{name} into {np.dtype(out).name}")
    assert three_ways(tt(dtype, nl.int16), a, b)[1][0, 0] == -2


def bit_reduce(x):
    outs = [nl.ndarray((x.shape[0], 1), nl.int32, buffer=nl.shared_hbm) for _ in range(3)]
    t = nl.load(x)
    for out, op in zip(outs, (nl.bitwise_or, nl.bitwise_xor, nl.bitwise_and)):
        r = nl.ndarray((x.shape[0], 1), nl.int32)
        nisa.tensor_reduce(r, op, t, 1)
        nl.store(out, r)
    return tuple(outs)


def test_bitwise_reductions_of_integer_tiles_keep_every_bit():
    x = RNG.integers(-2**31, 2**31 - 1, (9, 37), endpoint=True).astype(np.int32)
    x[0, :3] = [0x40000001, 2, 0]
    got = three_ways(bit_reduce, x)
    for fn, g in zip((np.bitwise_or, np.bitwise_xor, np.bitwise_and), got):
        np.testing.assert_array_equal(g[:, 0], fn.reduce(x, axis=1))
    assert got[0][0, 0] == 0x40000003 | np.bitwise_or.reduce(x[0, 3:])


def shifts(x):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    by_tile = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    r = nl.ndarray(x.shape, x.dtype)
    nisa.tensor_scalar(r, t, nl.right_shift, 2)
    nl.store(out, r)
    two = nl.ndarray(x.shape, x.dtype)
    nisa.memset(two, 1)
    r2 = nl.ndarray(x.shape, x.dtype)
    nisa.tensor_tensor(r2, t, two, nl.right_shift)
    nl.store(by_tile, r2)
    return out, by_tile


@pytest.mark.parametrize("dtype,bits", [(np.int8, 8), (np.int16, 16), (np.int32, 32)])
def test_right_shift_is_logical_on_the_elements_own_bits(dtype, bits):
    info = np.iinfo(dtype)
    x = RNG.integers(info.min, info.max, (4, 20), endpoint=True).astype(dtype)
    x[0, :3] = [-128, -1, -2]
    by_imm, by_tile = three_ways(shifts, x)
    raw = x.astype(np.int64) & ((1 << bits) - 1)  # the element's own bits, zero extended
    np.testing.assert_array_equal(by_imm.astype(np.int64), raw >> 2)
    np.testing.assert_array_equal(by_tile.astype(np.int64), raw >> 1)
    if bits == 8:
        assert list(by_imm[0, :3]) == [32, 63, 63] and list(by_tile[0, :3]) == [64, 127, 127]


def replace_with_indices(x, vals):
    out = nl.ndarray(x.shape, nl.float32, buffer=nl.shared_hbm)
    idx = nl.ndarray((x.shape[0], 8), nl.uint32, buffer=nl.shared_hbm)
    found = nl.ndarray((x.shape[0], 8), nl.uint32, buffer=nl.shared_hbm)
    t, v = nl.load(x), nl.load(vals)
    f = nl.ndarray((x.shape[0], 8), nl.uint32)
    nisa.nc_find_index8(f, t, v)
    nl.store(found, f)
    i = nl.ndarray((x.shape[0], 8), nl.uint32)
    nisa.nc_match_replace8(t, t, v, -1.0, dst_idx=i)  # in place
    nl.store(out, t)
    nl.store(idx, i)
    return out, idx, found


def test_match_replace8_pairs_repeated_values_from_the_last_slot():
    # NKI's example: vals [3, 8 x 7] in [1, 2, 3, 4, 8 x 7] -> dst_idx [2, 10, 9, ..., 4];
    # nc_find_index8 pairs them the other way; a value with too few occurrences leaves its
    # first slots (match_replace) or last slots (find) all ones.
    x = np.array([[1, 2, 3, 4] + [8] * 7, [5, 9, 5, 9, 5, 0, 0, 0, 0, 0, 0]], np.float32)
    vals = np.array([[3] + [8] * 7, [9, 9, 9, 5, 5, 7, 0, 0]], np.float32)
    out, idx, found = three_ways(replace_with_indices, x, vals)
    none = 0xFFFFFFFF
    np.testing.assert_array_equal(idx[0], [2, 10, 9, 8, 7, 6, 5, 4])
    np.testing.assert_array_equal(found[0], [2, 4, 5, 6, 7, 8, 9, 10])
    np.testing.assert_array_equal(idx[1], [none, 3, 1, 2, 0, none, 6, 5])
    np.testing.assert_array_equal(found[1], [1, 3, none, 0, 2, none, 5, 6])
    np.testing.assert_array_equal(out[0], [1, 2, -1, 4] + [-1] * 7)
    np.testing.assert_array_equal(out[1], [-1, -1, -1, -1, 5, -1, -1, 0, 0, 0, 0])


def copies(x):
    exact = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    scalar = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    for out, engine in ((exact, nisa.engine.vector), (scalar, nisa.engine.scalar)):
        r = nl.ndarray(x.shape, x.dtype)
        nisa.tensor_copy(r, t, engine=engine)
        nl.store(out, r)
    return exact, scalar


def test_a_scalar_engine_copy_goes_through_fp32():
    # NKI_API.md 3.2: same-dtype copies on Vector / GpSimd are bit-exact; the Scalar engine's
    # always go through fp32 (int32 above 2**24 rounds).
    x = np.array([[16777217, 2**31 - 1, -2**31, 123456789, 7]], np.int32)
    exact, scalar = three_ways(copies, x)
    np.testing.assert_array_equal(exact, x)
    via_f32 = np.clip(x.astype(np.float32).astype(np.float64), -2**31, 2**31 - 1).astype(np.int32)
    np.testing.assert_array_equal(scalar, via_f32)
    assert scalar[0, 0] == 16777216 and scalar[0, 3] == 123456792


def test_tensor_scalar_stages_are_both_bitwise_or_both_arithmetic():
    # NKI_API.md 5.1: a bitwise and an arithmetic stage in one tensor_scalar is an error (rule
    # alu-op, at the call's line); two bitwise stages run exactly.
    def shift_then(op1, operand1):
        def kernel(x):
            out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
            r = nl.ndarray(x.shape, x.dtype)
            nisa.tensor_scalar(r, nl.load(x), nl.right_shift, 4, op1=op1, operand1=operand1)
            nl.store(out, r)
            return out
        return kernel

    x = RNG.integers(0, 2**20, (4, 16)).astype(np.int32)
    with pytest.raises(neuron.NeuronError, match=r"\[alu-op\].*mix a bitwise and an arithmetic"):
        neuron.kernel(shift_then(nl.add, 1))(x)
    np.testing.assert_array_equal(three_ways(shift_then(nl.bitwise_and, 0xF), x), (x >> 4) & 0xF)
