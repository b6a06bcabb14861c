# The Vector and Scalar engines' accumulator registers (python/neuron/accumulators.py, NKI_API.md 5.3):
# instructions chained by reduce_cmd, natively and on the simulator (bit-identical), against
# NumPy references written from the documented register semantics.
import numpy as np
import pytest

import neuron
import neuron.isa as nisa
import neuron.language as nl
from helpers import line_of
from test_dynamic import three_ways

RNG = np.random.default_rng(53)
TRACED = ("native", "simulate")
cmd = nisa.reduce_cmd


def selects(x, lo, hi):
    """Three selections, one chain: max over all three (each on x + k, columns 32k + i)."""
    out = nl.ndarray((16, 2), nl.float32, buffer=nl.shared_hbm)
    sel = nl.ndarray((16, 96), nl.float32, buffer=nl.shared_hbm)
    t, b0, b1 = nl.load(x), nl.load(lo), nl.load(hi)
    d = nl.ndarray((16, 32), nl.float32)
    res = nl.ndarray((16, 2), nl.float32)
    nisa.range_select(d, t, nl.greater_equal, nl.less, b0, b1, reduce_cmd=cmd.reset_reduce)
    nl.store(sel[:, 0:32], d)
    nisa.tensor_scalar(t, t, nl.add, 1.0)
    nisa.range_select(d, t, nl.greater_equal, nl.less, b0, b1, reduce_cmd=cmd.reduce,
                      range_start=32)
    nl.store(sel[:, 32:64], d)
    nisa.tensor_scalar(t, t, nl.add, 1.0)
    pred = nl.ndarray((16, 32), nl.uint8)
    nisa.tensor_scalar(pred, t, nl.greater, 0.5)
    nisa.select_reduce(d, pred, t, -5.0, reduce_res=res[:, 0:1], reduce_cmd=cmd.reduce)
    nl.store(sel[:, 64:96], d)
    nisa.select_reduce(d, pred, t, -5.0, reduce_res=res[:, 1:2], reduce_cmd=cmd.reset)
    nl.store(out, res)
    return out, sel


def test_selections_chain_through_the_registers():
    x = RNG.uniform(0, 1, (16, 32)).astype(np.float32)
    lo = RNG.integers(0, 40, (16, 1)).astype(np.float32)
    hi = lo + RNG.integers(1, 40, (16, 1)).astype(np.float32)
    res, sel = three_ways(selects, x, lo, hi, modes=TRACED)
    fmin = np.float32(np.finfo(np.float32).min)
    cols = np.arange(32)
    want = []
    for k in range(2):
        i = cols + 32 * k
        want.append(np.where((i >= lo) & (i < hi), x + k, fmin))
    want.append(np.where(x + 2 > 0.5, x + 2, -5.0).astype(np.float32))
    np.testing.assert_allclose(sel, np.concatenate(want, axis=1), rtol=1e-6)
    np.testing.assert_allclose(res[:, 0], np.concatenate(want, axis=1).max(1), rtol=1e-6)
    np.testing.assert_array_equal(res[:, 1], np.full(16, -np.inf, np.float32))  # reset


def scans(x, y, init):
    a = nl.ndarray((8, 24), nl.bfloat16, buffer=nl.shared_hbm)
    s = nl.ndarray((8, 2), nl.float32, buffer=nl.shared_hbm)
    t, u, c = nl.load(x), nl.load(y), nl.load(init)
    d = nl.ndarray((8, 24), nl.bfloat16)
    nisa.tensor_scalar_cumulative(d[:, 0:12], t, nl.multiply, nl.add, 2.0, imm1=c,
                                  reduce_cmd=cmd.load_reduce)
    nisa.tensor_scalar_cumulative(d[:, 12:24], u, nl.add, nl.add, 0.0, reduce_cmd=cmd.reduce)
    nl.store(a, d)
    tmp = nl.ndarray((8, 12), nl.float32)
    r = nl.ndarray((8, 2), nl.float32)
    nisa.tensor_scalar_reduce(tmp, t, nl.add, 1.0, nl.maximum, reduce_cmd=cmd.reset_reduce)
    nisa.tensor_scalar_reduce(tmp, u, nl.add, 1.0, nl.maximum, r[:, 0:1],
                              reduce_cmd=cmd.reduce)
    e = nl.ndarray((8, 12), nl.float32)
    nisa.exponential(e, t, reduce_cmd=cmd.load_reduce, reduce_init=c)
    nisa.exponential(e, u, reduce_res=r[:, 1:2], reduce_cmd=cmd.reduce)
    nl.store(s, r)
    return a, s


def test_scans_and_reductions_chain_through_the_registers():
    import ml_dtypes
    x = RNG.uniform(-1, 1, (8, 12)).astype(np.float32)
    y = RNG.uniform(-1, 1, (8, 12)).astype(np.float32)
    init = RNG.uniform(-1, 1, (8, 1)).astype(np.float32)
    a, s = three_ways(scans, x, y, init, modes=TRACED)
    first = init + np.cumsum(2 * x.astype(np.float64), axis=1)  # from imm1
    second = first[:, -1:] + np.cumsum(y.astype(np.float64), axis=1)  # from the registers
    want = np.concatenate([first, second], 1).astype(np.float32).astype(ml_dtypes.bfloat16)
    np.testing.assert_allclose(a.astype(np.float32), want.astype(np.float32), rtol=1e-2)
    assert np.abs(a.astype(np.float64) - np.concatenate([first, second], 1)).max() < 0.05
    np.testing.assert_allclose(s[:, 0], np.maximum(x.max(1), y.max(1)) + 1, rtol=1e-6)
    np.testing.assert_allclose(s[:, 1], init[:, 0] + np.exp(x).sum(1) + np.exp(y).sum(1),
                               rtol=1e-5)


def running_max(x):
    """A chain started before a rolled loop and continued in it: each iteration reads the
    value its predecessor left (the loop is unrolled for it)."""
    out = nl.ndarray((16, 4), nl.float32, buffer=nl.shared_hbm)
    res = nl.ndarray((16, 4), nl.float32)
    d = nl.ndarray((16, 8), nl.float32)
    t0 = nl.load(x[:, 0:8])
    nisa.tensor_scalar_reduce(d, t0, nl.add, 0.0, nl.maximum, reduce_cmd=cmd.reset_reduce)
    for i in nl.sequential_range(4):
        t = nl.load(x[:, 8 + 8 * i:16 + 8 * i])
        nisa.tensor_scalar_reduce(d, t, nl.add, 0.0, nl.maximum, res[:, i:i + 1],
                                  reduce_cmd=cmd.reduce)
    nl.store(out, res)
    return out


def test_a_chain_across_a_rolled_loop_reads_each_iterations_value():
    x = RNG.uniform(-1, 1, (16, 40)).astype(np.float32)
    got = three_ways(running_max, x, modes=TRACED)
    want = np.stack([x[:, :16 + 8 * i].max(1) for i in range(4)], axis=1)
    np.testing.assert_array_equal(got, want)


def scalar_chains(x, y):
    """The Scalar engine's registers: activation and activate2 chained by reduce_cmd, with
    instructions between the steps that must not disturb them."""
    out = nl.ndarray((16, 6), nl.float32, buffer=nl.shared_hbm)
    a, b = nl.load(x), nl.load(y)
    e = nl.ndarray((16, 32), nl.float32)
    v = nl.ndarray((16, 32), nl.float32)
    res = nl.ndarray((16, 6), nl.float32)
    # sum exp(a) + sum exp(b): the start keeps no reduce_res; a Vector-engine chain and an
    # idle activation in between leave the Scalar engine's registers alone
    nisa.activation(e, nl.exp, a, reduce_op=nl.add, reduce_cmd=cmd.reset_reduce)
    nisa.tensor_scalar_reduce(v, a, nl.add, 1.0, nl.add, reduce_cmd=cmd.reset_reduce)
    nisa.activation(e, nl.tanh, b, reduce_res=res[:, 5:6], reduce_cmd=cmd.idle)
    nisa.activation(e, nl.exp, b, bias=-1.0, scale=2.0, reduce_op=nl.add,
                    reduce_res=res[:, 0:1], reduce_cmd=cmd.reduce)
    # the start writes reduce_res, which the kernel then overwrites: the chain goes on from
    # the registers, not from that tile
    nisa.activation(e, nl.copy, a, reduce_op=nl.add, reduce_res=res[:, 1:2],
                    reduce_cmd=cmd.reset_reduce)
    nisa.memset(res[:, 1:2], 100.0)
    nisa.activation(e, nl.copy, b, reduce_op=nl.add, reduce_res=res[:, 2:3],
                    reduce_cmd=cmd.reduce)
    # reset: this instruction's data not added
    nisa.activation(e, nl.copy, a, reduce_res=res[:, 3:4], reduce_cmd=cmd.reset)
    nisa.activation(e, nl.copy, b, reduce_op=nl.add, reduce_cmd=cmd.reduce)
    # activate2 shares the registers: max of (a * 2 + 1) then of (b * 2 + 1) on top of the sum
    nisa.activate2(e, nl.copy, a, 2.0, 1.0, nl.multiply, nl.add, reduce_op=nl.maximum,
                   reduce_cmd=cmd.reduce, reduce_res=res[:, 4:5])
    nl.store(out, res)
    return out


def test_scalar_engine_chains_through_its_registers():
    x = RNG.uniform(-1, 1, (16, 32)).astype(np.float32)
    y = RNG.uniform(-1, 1, (16, 32)).astype(np.float32)
    got = three_ways(scalar_chains, x, y, modes=TRACED)
    f64 = np.float64
    sum_b = y.astype(f64).sum(1)
    want = [np.exp(x.astype(f64)).sum(1) + np.exp(2 * y.astype(f64) - 1).sum(1),
            np.full(16, 100.0),                       # overwritten by the kernel
            x.astype(f64).sum(1) + sum_b,             # the registers, not the tile
            np.zeros(16),                             # reset
            np.maximum(sum_b, (2 * x.astype(f64) + 1).max(1))]
    np.testing.assert_allclose(got[:, :5], np.stack(want, 1), rtol=2e-6, atol=1e-5)


def scalar_running_sum(x):
    out = nl.ndarray((16, 4), nl.float32, buffer=nl.shared_hbm)
    res = nl.ndarray((16, 4), nl.float32)
    e = nl.ndarray((16, 8), nl.float32)
    nisa.activation(e, nl.copy, nl.load(x[:, 0:8]), reduce_op=nl.add, reduce_res=res[:, 0:1],
                    reduce_cmd=cmd.reset_reduce)
    for i in nl.affine_range(1, 4):
        nisa.activation(e, nl.copy, nl.load(x[:, 8 * i:8 * i + 8]), reduce_op=nl.add,
                        reduce_res=res[:, i:i + 1], reduce_cmd=cmd.reduce)
    nl.store(out, res)
    return out


def test_a_scalar_chain_across_a_rolled_loop_and_no_cost_without_one():
    x = RNG.uniform(-1, 1, (16, 32)).astype(np.float32)
    got = three_ways(scalar_running_sum, x, modes=TRACED)
    want = np.stack([x[:, :8 + 8 * i].astype(np.float64).sum(1) for i in range(4)], 1)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)

    def once(x):  # the common form: a reduce_res and no chain costs no extra instruction
        out = nl.ndarray((16, 1), nl.float32, buffer=nl.shared_hbm)
        e, s = nl.ndarray((16, 32), nl.float32), nl.ndarray((16, 1), nl.float32)
        nisa.activation(e, nl.exp, nl.load(x), reduce_op=nl.add, reduce_res=s,
                        reduce_cmd=cmd.reset_reduce)
        nl.store(out, s)
        return out
    text = str(neuron.kernel(once, mode="simulate").trace(x))
    assert text.count("activation(") == 1 and "tensor_copy" not in text


def unchained(x):
    t = nl.load(x)
    d = nl.ndarray((4, 6), nl.float32)
    nisa.tensor_scalar_reduce(d, t, nl.add, 1.0, nl.add, reduce_cmd=cmd.reduce)
    return x


def other_rows(x):
    t = nl.load(x)
    d = nl.ndarray((4, 6), nl.float32)
    nisa.tensor_scalar_reduce(d, t, nl.add, 1.0, nl.add, reduce_cmd=cmd.reset_reduce)
    nisa.tensor_scalar_reduce(d[0:2], t[0:2], nl.add, 1.0, nl.add, reduce_cmd=cmd.reduce)
    return x


def scalar_unchained(x):
    t = nl.load(x)
    d = nl.ndarray((4, 6), nl.float32)
    nisa.activation(d, nl.exp, t, reduce_op=nl.add, reduce_cmd=cmd.reduce)
    return x


@pytest.mark.parametrize("fn,rule,text", [
    (unchained, "reduce-cmd", "no earlier instruction of this kernel set them"),
    (scalar_unchained, "reduce-cmd", "adds onto the scalar engine's accumulator registers, and "
                                     "no earlier instruction"),
    (other_rows, "reduce-cmd", "on 2 partitions, but the vector engine's registers were set "
                               "by an instruction on 4"),
])
def test_a_chain_without_its_start_names_the_rule_and_line(fn, rule, text):
    with pytest.raises(neuron.NeuronError) as e:
        neuron.kernel(fn, mode="simulate")(np.zeros((4, 6), np.float32))
    assert e.value.rule == rule and text in e.value.message
    assert e.value.line == line_of(fn, "reduce_cmd=cmd.reduce)")


def test_eager_mode_keeps_no_registers_and_says_so():
    with pytest.raises(neuron.NeuronError) as e:
        neuron.kernel(other_rows, mode="eager")(np.zeros((4, 6), np.float32))
    assert e.value.rule == "unsupported" and "eager mode" in e.value.message
