# nki.isa instructions composed from others (python/neuron/isa_composed.py), current API:
# natively and on the simulator (bit-identical), each against a NumPy float64 reference
# written here, plus one bad input per family.
import numpy as np
import pytest

import neuron
import neuron.isa as nisa
import neuron.language as nl
from helpers import line_of
from test_dynamic import three_ways

RNG = np.random.default_rng(23)
TWO = ("native", "simulate", "eager")
f64 = np.float64


def arith(x, y, col):
    a = nl.ndarray((32, 20), nl.float32, buffer=nl.shared_hbm)
    b = nl.ndarray((32, 20), nl.bfloat16, buffer=nl.shared_hbm)
    r = nl.ndarray((32, 4), nl.float32, buffer=nl.shared_hbm)
    t, u, c = nl.load(x), nl.load(y), nl.load(col)
    s = nl.ndarray((32, 20), nl.float32)
    nisa.scalar_tensor_tensor(s, t, nl.multiply, c, nl.subtract, u)  # x * c - y
    nl.store(a, s)
    s2 = nl.ndarray((32, 20), nl.bfloat16)
    nisa.scalar_tensor_tensor(dst=s2, data=t, op0=nl.add, operand0=1.5, op1=nl.maximum,
                              operand1=u, reverse1=True)
    nl.store(b, s2)
    red = nl.ndarray((32, 4), nl.float32)
    tmp = nl.ndarray((32, 20), nl.float32)
    nisa.tensor_scalar_reduce(tmp, t, nl.subtract, 2.0, nl.add, red[:, 0:1], reverse0=True)
    nisa.tensor_scalar_reduce(tmp, t, nl.multiply, c, nl.maximum, red[:, 1:2],
                              reduce_res_negate=True)
    nisa.tensor_scalar_reduce(tmp, t, nl.add, 0.0, nl.add, red[:, 2:3],
                              reduce_cmd=nisa.reduce_cmd.load_reduce, reduce_init=c)
    nisa.activation_reduce(tmp, nl.exp, t, nl.maximum, red[:, 3:4], bias=c, scale=0.5)
    nl.store(r, red)
    return a, b, r


def test_scalar_tensor_tensor_and_reductions():
    import ml_dtypes
    x = RNG.uniform(-2, 2, (32, 20)).astype(np.float32)
    y = RNG.uniform(-2, 2, (32, 20)).astype(np.float32)
    col = RNG.uniform(-1, 1, (32, 1)).astype(np.float32)
    a, b, r = three_ways(arith, x, y, col, modes=TWO)
    X, Y, C = x.astype(f64), y.astype(f64), col.astype(f64)
    np.testing.assert_allclose(a, X * C - Y, rtol=1e-6, atol=1e-6)
    want = np.maximum(Y, X + 1.5).astype(np.float32).astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(b, want)
    np.testing.assert_allclose(r[:, 0], (2.0 - X).sum(1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(r[:, 1], -(X * C).max(1), rtol=1e-6)
    np.testing.assert_allclose(r[:, 2], C[:, 0] + X.sum(1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(r[:, 3], np.exp(X * 0.5 + C).max(1), rtol=1e-5)


def exps(x, m):
    e = nl.ndarray((16, 40), nl.float32, buffer=nl.shared_hbm)
    q = nl.ndarray((16, 40), nl.float32, buffer=nl.shared_hbm)
    s = nl.ndarray((16, 2), nl.float32, buffer=nl.shared_hbm)
    t, mt = nl.load(x), nl.load(m)
    out = nl.ndarray((16, 40), nl.float32)
    sums = nl.ndarray((16, 2), nl.float32)
    nisa.exponential(out, t, max_value=mt, reduce_res=sums[:, 0:1],
                     reduce_cmd=nisa.reduce_cmd.reset_reduce)
    nl.store(e, out)
    nisa.exponential(out, t, max_value=1.0, reduce_res=sums[:, 1:2],
                     reduce_cmd=nisa.reduce_cmd.load_reduce, reduce_init=10.0)
    nl.store(s, sums)
    nisa.reciprocal(out, t)
    nl.store(q, out)
    return e, q, s


def test_exponential_and_reciprocal():
    x = RNG.uniform(-3, 3, (16, 40)).astype(np.float32)
    x[x == 0] = 0.5
    m = x.max(1, keepdims=True)
    e, q, s = three_ways(exps, x, m, modes=TWO)
    X = x.astype(f64)
    np.testing.assert_allclose(e, np.exp(X - m), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(s[:, 0], np.exp(X - m).sum(1), rtol=1e-5)
    np.testing.assert_allclose(s[:, 1], 10.0 + np.exp(X - 1.0).sum(1), rtol=1e-5)
    np.testing.assert_allclose(q, 1.0 / X, rtol=1e-6)


def selects(x, pred, lo, hi, dst0):
    sel = nl.ndarray((24, 30), nl.float32, buffer=nl.shared_hbm)
    rng_ = nl.ndarray((24, 30), nl.bfloat16, buffer=nl.shared_hbm)
    red = nl.ndarray((24, 3), nl.float32, buffer=nl.shared_hbm)
    cp = nl.ndarray((24, 30), nl.float32, buffer=nl.shared_hbm)
    t, p, b0, b1 = nl.load(x), nl.load(pred), nl.load(lo), nl.load(hi)
    r = nl.ndarray((24, 3), nl.float32)
    o = nl.ndarray((24, 30), nl.float32)
    nisa.select_reduce(o, p, t, b0, reduce_res=r[:, 0:1])  # on_false a [P, 1] tile
    nl.store(sel, o)
    o2 = nl.ndarray((24, 30), nl.bfloat16)
    nisa.range_select(o2, t, nl.greater_equal, nl.less, b0, b1, reduce_res=r[:, 1:2],
                      range_start=3)
    nl.store(rng_, o2)
    o3 = nl.ndarray((24, 30), nl.float32)
    nisa.select_reduce(o3, p, t, -7.0, reduce_res=r[:, 2:3], reverse_pred=True)
    nl.store(red, r)
    d = nl.load(dst0)
    nisa.tensor_copy_predicated(d, t, p, reverse_pred=True)
    nl.store(cp, d)
    return sel, rng_, red, cp


def test_select_reduce_range_select_and_reverse_predicated_copy():
    import ml_dtypes
    x = RNG.uniform(-5, 5, (24, 30)).astype(np.float32)
    pred = RNG.integers(0, 3, (24, 30)).astype(np.uint8)  # 2 is true too
    lo = RNG.integers(0, 15, (24, 1)).astype(np.float32)
    hi = lo + RNG.integers(0, 12, (24, 1)).astype(np.float32)
    dst0 = RNG.uniform(-1, 1, (24, 30)).astype(np.float32)
    sel, rs, red, cp = three_ways(selects, x, pred, lo, hi, dst0, modes=TWO)
    X = x.astype(f64)
    want = np.where(pred != 0, X, lo)
    np.testing.assert_array_equal(sel, want)
    np.testing.assert_array_equal(red[:, 0], want.max(1))
    idx = 3 + np.arange(30)[None, :]
    keep = (idx >= lo) & (idx < hi)
    fmin = float(np.finfo(np.float32).min)
    want = np.where(keep, X, fmin)
    np.testing.assert_array_equal(rs, want.astype(np.float32).astype(ml_dtypes.bfloat16))
    np.testing.assert_array_equal(red[:, 1], want.max(1))  # fp32, not the bf16 -inf
    want = np.where(pred == 0, X, -7.0)
    np.testing.assert_array_equal(red[:, 2], want.max(1))
    np.testing.assert_array_equal(cp, np.where(pred == 0, x, dst0))


def transposes(a, b, c):
    oa = nl.ndarray((20, 48), nl.float32, buffer=nl.shared_hbm)
    ob = nl.ndarray((4, 3, 2), nl.bfloat16, buffer=nl.shared_hbm)
    oc = nl.ndarray((5, 3, 4, 2), nl.int32, buffer=nl.shared_hbm)
    ta = nl.ndarray((20, 48), nl.float32)
    nisa.dma_transpose(ta, a)  # HBM source
    nl.store(oa, ta)
    sb = nl.load(b)
    tb = nl.ndarray((4, 3, 2), nl.bfloat16)
    nisa.dma_transpose(tb, sb, axes=(2, 1, 0))  # SBUF source
    nl.store(ob, tb)
    tc = nl.ndarray((5, 3, 4, 2), nl.int32)
    nisa.dma_transpose(tc, c)
    nl.store(oc, tc)
    return oa, ob, oc


def test_dma_transpose():
    import ml_dtypes
    a = RNG.uniform(-1, 1, (48, 20)).astype(np.float32)
    b = RNG.uniform(-1, 1, (2, 3, 4)).astype(ml_dtypes.bfloat16)
    c = RNG.integers(-1000, 1000, (2, 3, 4, 5)).astype(np.int32)
    oa, ob, oc = three_ways(transposes, a, b, c, modes=TWO)
    np.testing.assert_array_equal(oa, a.T)
    np.testing.assert_array_equal(ob, np.transpose(b, (2, 1, 0)))
    np.testing.assert_array_equal(oc, np.transpose(c, (3, 1, 2, 0)))


def gathered_transpose(k, blocks):
    """nki-library's attention_tkg: blocks of a paged K cache chosen per partition by an index
    tile, transposed by one DMA: dst[d, 0, j, p] = k[blocks[p], 0, j, d]."""
    n, _, bl, d = k.shape
    out = nl.ndarray((d, 1, bl, 128), k.dtype, buffer=nl.shared_hbm)
    idx = nl.ndarray((128, 1), nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=idx, src=blocks)
    t = nl.ndarray((d, 1, bl, 128), k.dtype, buffer=nl.sbuf)
    nisa.dma_transpose(dst=t, src=k.ap([[bl * d, 128], [1, 1], [d, bl], [1, d]], offset=0,
                                       vector_offset=idx, indirect_dim=0))
    nisa.dma_copy(dst=out, src=t)
    return out


def test_dma_transpose_of_rows_chosen_at_run_time():
    k = RNG.uniform(-1, 1, (40, 1, 4, 16)).astype(np.float32)
    blocks = RNG.integers(0, 40, (128, 1)).astype(np.int32)
    want = np.transpose(k[blocks[:, 0]], (3, 1, 2, 0))
    np.testing.assert_array_equal(three_ways(gathered_transpose, k, blocks, modes=TWO), want)
    # a transpose from HBM is one DMA (a transposing view), not a copy per row
    a = RNG.uniform(-1, 1, (48, 20)).astype(np.float32)
    b = RNG.uniform(-1, 1, (2, 3, 4)).astype(np.float32)
    c = RNG.integers(-9, 9, (2, 3, 4, 5)).astype(np.int32)
    text = str(neuron.kernel(transposes).compile(a, b.astype(nl.bfloat16), c).kernel)
    # 3 transposes, the SBUF source's bounce through HBM, 3 stores and 1 load
    assert text.count("dma_copy(") == 3 + 1 + 3 + 1, text


def act2(x, col):
    a = nl.ndarray((16, 24), nl.float32, buffer=nl.shared_hbm)
    b = nl.ndarray((16, 24), nl.bfloat16, buffer=nl.shared_hbm)
    c = nl.ndarray((16, 24), nl.float32, buffer=nl.shared_hbm)
    r = nl.ndarray((16, 2), nl.float32, buffer=nl.shared_hbm)
    t, cl = nl.load(x), nl.load(col)
    red = nl.ndarray((16, 2), nl.float32)
    o = nl.ndarray((16, 24), nl.float32)
    nisa.activate2(o, nl.exp, t, cl, 0.25, nl.multiply, nl.subtract, reduce_op=nl.maximum,
                   reduce_res=red[:, 0:1], reduce_cmd=nisa.reduce_cmd.reset_reduce)
    nl.store(a, o)
    o2 = nl.ndarray((16, 24), nl.bfloat16)
    nisa.activate2(o2, nl.tanh, t, 1.5, 0.0, nl.subtract, nl.bypass, reverse0=True,
                   reduce_res=red[:, 1:2], reduce_cmd=nisa.reduce_cmd.reset_reduce)
    nl.store(b, o2)
    nl.store(r, red)
    o3 = nl.ndarray((16, 24), nl.float32)
    nisa.activate2(o3, nl.prelu, t, 2.0, -1.0, nl.multiply, nl.add, relu_param=0.1)
    nl.store(c, o3)
    return a, b, c, r


def test_activate2():
    import ml_dtypes
    x = RNG.uniform(-2, 2, (16, 24)).astype(np.float32)
    col = RNG.uniform(-1, 1, (16, 1)).astype(np.float32)
    a, b, c, r = three_ways(act2, x, col, modes=TWO)
    X, C = x.astype(f64), col.astype(f64)
    want = np.exp(X * C - 0.25)
    np.testing.assert_allclose(a, want, rtol=1e-5)
    np.testing.assert_allclose(r[:, 0], want.max(1), rtol=1e-5)
    t = np.tanh(1.5 - X)
    np.testing.assert_allclose(b.astype(f64), t, rtol=1e-2, atol=1e-2)
    np.testing.assert_allclose(r[:, 1], t.sum(1), rtol=1e-5, atol=1e-5)
    y = 2.0 * X - 1.0
    np.testing.assert_allclose(c, np.maximum(y, 0) + 0.1 * np.minimum(y, 0), rtol=1e-6,
                               atol=1e-6)
    assert b.dtype == ml_dtypes.bfloat16


# ---- bad inputs: the rule, the values and the user's line ------------------------------------

def bad_reduce_cmd(x):
    t = nl.load(x)
    o = nl.ndarray((4, 6), nl.float32)
    r = nl.ndarray((4, 1), nl.float32)
    nisa.tensor_scalar_reduce(o, t, nl.add, 1.0, nl.add, r, reduce_cmd=nisa.reduce_cmd.reduce)
    return x


def bad_reduce_op(x):
    t = nl.load(x)
    o = nl.ndarray((4, 6), nl.float32)
    r = nl.ndarray((4, 1), nl.float32)
    nisa.select_reduce(o, t, t, 0.0, reduce_res=r, reduce_op=nl.exp)
    return x


def bad_axes(x):
    t = nl.ndarray((6, 4), nl.float32)
    nisa.dma_transpose(t, x, axes=(0, 1))
    return x


def bad_pair(x):
    o = nl.ndarray((4, 6), nl.float32)
    nisa.activate2(o, nl.exp, nl.load(x), 1.0, 2.0, nl.add, nl.add)
    return x


def bad_false_value(x):
    o = nl.ndarray((4, 6), nl.float32)
    nisa.range_select(o, nl.load(x), nl.greater, nl.less, 0.0, 3.0, on_false_value=-5.0)
    return x


def bad_cmp(x):
    t = nl.load(x)
    o = nl.ndarray((4, 6), nl.float32)
    nisa.range_select(o, t, nl.add, nl.less, 0.0, 3.0)
    return x


@pytest.mark.parametrize("fn,rule,text,line", [
    (bad_reduce_cmd, "reduce-cmd", "reduce_cmd=reduce_cmd.reduce adds onto",
     "tensor_scalar_reduce("),
    (bad_reduce_op, "reduce-op", "reduce_op='exp'", "select_reduce("),
    (bad_axes, "unsupported", "axes=(0, 1)", "dma_transpose("),
    (bad_cmp, "unknown-arg", "comp_op0='add'", "range_select("),
    # NKI 0.3: "Due to hardware constraints, this must be FP32_MIN"
    (bad_false_value, "operand", "on_false_value=-5.0", "range_select("),
    (bad_pair, "unsupported", "(op0, op1) = (add, add)", "activate2("),
])
def test_bad_inputs_name_rule_values_and_line(fn, rule, text, line):
    with pytest.raises(neuron.NeuronError) as e:
        neuron.kernel(fn, mode="simulate")(np.zeros((4, 6), np.float32))
    assert e.value.rule == rule and text in e.value.message
    assert e.value.line == line_of(fn, line)


def partition_average(x):
    out = nl.ndarray((1, 12), nl.bfloat16, buffer=nl.shared_hbm)
    r = nl.ndarray((1, 12), nl.bfloat16)
    nisa.tensor_partition_reduce(r, nl.average, nl.load(x))
    nl.store(out, r)
    return out


def test_tensor_partition_reduce_average():
    import ml_dtypes
    x = RNG.uniform(-2, 2, (96, 12)).astype(np.float32)
    got = three_ways(partition_average, x, modes=TWO)
    want = (x.astype(f64).sum(0) / 96).astype(np.float32).astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(got[0], want)


def cumulative(x, y, init):
    a = nl.ndarray((8, 3, 5), nl.float32, buffer=nl.shared_hbm)
    m = nl.ndarray((8, 15), nl.float32, buffer=nl.shared_hbm)
    s = nl.ndarray((8, 15), nl.float32, buffer=nl.shared_hbm)
    r = nl.ndarray((8, 1), nl.float32, buffer=nl.shared_hbm)
    t, u, c = nl.load(x), nl.load(y), nl.load(init)
    o = nl.ndarray((8, 3, 5), nl.float32)
    nisa.tensor_scalar_cumulative(o, t, nl.multiply, nl.add, 2.0)
    nl.store(a, o)
    o2 = nl.ndarray((8, 15), nl.float32)
    nisa.tensor_scalar_cumulative(o2, u, nl.subtract, nl.maximum, 1.0, imm1=c,
                                  reduce_cmd=nisa.reduce_cmd.load_reduce)
    nl.store(m, o2)
    o3 = nl.ndarray((8, 15), nl.float32)
    red = nl.ndarray((8, 1), nl.float32)
    nisa.scalar_tensor_tensor(o3, u, nl.multiply, c, nl.add, u, reduce_op=nl.add,
                              reduce_res=red)
    nl.store(s, o3)
    nl.store(r, red)
    return a, m, s, r


def test_tensor_scalar_cumulative_and_scalar_tensor_tensor_reduce():
    x = RNG.uniform(-1, 1, (8, 3, 5)).astype(np.float32)
    y = RNG.uniform(-3, 3, (8, 15)).astype(np.float32)
    init = RNG.uniform(-1, 1, (8, 1)).astype(np.float32)
    a, m, s, r = three_ways(cumulative, x, y, init, modes=TWO)
    X, Y, C = x.astype(f64).reshape(8, 15), y.astype(f64), init.astype(f64)
    np.testing.assert_allclose(a.reshape(8, 15), np.cumsum(2 * X, axis=1), rtol=1e-5,
                               atol=1e-6)
    # y - 1 rounded to fp32 as the engine does; a running max adds no rounding
    want = np.maximum.accumulate(np.concatenate([init, y - np.float32(1.0)], axis=1),
                                 axis=1)[:, 1:]
    np.testing.assert_array_equal(m, want)
    np.testing.assert_allclose(s, Y * C + Y, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(r[:, 0], (Y * C + Y).sum(1), rtol=1e-5, atol=1e-5)


def range_3d_with(x, on_false):
    out = nl.ndarray((4, 3, 5), nl.float32, buffer=nl.shared_hbm)
    o = nl.ndarray((4, 3, 5), nl.float32)
    nisa.range_select(o, nl.load(x), nl.greater, nl.less_equal, 3.0, 11.0, range_start=0.5,
                      on_false_value=on_false)
    nl.store(out, o)
    return out


def range_3d(x):
    return range_3d_with(x, nl.fp32.min)


def range_3d_decimal_min(x):
    # fp32 min as published kernels write it (nki-library's attention: -3.4028235e38, a double
    # a little below it that rounds to it in float32).
    return range_3d_with(x, -3.4028235e38)


@pytest.mark.parametrize("kernel", [range_3d, range_3d_decimal_min])
def test_range_select_counts_the_flattened_free_index(kernel):
    x = RNG.uniform(-1, 1, (4, 3, 5)).astype(np.float32)
    got = three_ways(kernel, x, modes=TWO)
    idx = 0.5 + np.arange(15).reshape(1, 3, 5)
    np.testing.assert_array_equal(got, np.where((idx > 3) & (idx <= 11), x,
                                                np.finfo(np.float32).min))


def act_bias_number(x):
    out = nl.ndarray((8, 7), nl.float32, buffer=nl.shared_hbm)
    mn = nl.ndarray((8, 1), nl.float32, buffer=nl.shared_hbm)
    o = nl.ndarray((8, 7), nl.float32)
    r = nl.ndarray((8, 1), nl.float32)
    nisa.activation(o, nl.exp, nl.load(x), bias=-0.5, scale=2.0, reduce_op=nl.minimum,
                    reduce_res=r)
    nl.store(out, o)
    nl.store(mn, r)
    return out, mn


def test_activation_takes_a_number_as_bias_and_a_min_reduction():
    x = RNG.uniform(-1, 1, (8, 7)).astype(np.float32)
    o, mn = three_ways(act_bias_number, x, modes=TWO)
    want = np.exp(2.0 * x.astype(f64) - 0.5)
    np.testing.assert_allclose(o, want, rtol=1e-5)
    np.testing.assert_array_equal(mn[:, 0], o.min(1))
