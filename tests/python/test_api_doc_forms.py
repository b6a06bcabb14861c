# Forms the current NKI API reference documents (the nki.isa / nki.language docstrings) that
# neuron refused or answered with a bare Python error: a number as tensor_copy_predicated's src,
# operand0=None for a unary tensor_scalar stage, activate2 reducing by magnitude, nl.var's
# keepdims, nl.full / zeros / zeros_like in HBM; natively, simulated and eagerly (bit-identical),
# each against NumPy.
import numpy as np
import pytest

import neuron
import neuron.isa as nisa
import neuron.language as nl
from helpers import line_of
from test_dynamic import three_ways

RNG = np.random.default_rng(67)


def scalar_src_and_unary_stage(x, p):
    out = nl.ndarray((16, 12), nl.float32, buffer=nl.shared_hbm)
    t = nl.load(x)
    d = nl.ndarray((16, 6), nl.float32)
    nisa.tensor_copy(d, t)
    nisa.tensor_copy_predicated(d, -7.5, nl.load(p))
    nl.store(out[:, 0:6], d)
    nisa.tensor_scalar(d, t, nl.abs, None, op1=nl.multiply, operand1=3.0)
    nl.store(out[:, 6:12], d)
    return out


def test_a_number_as_predicated_src_and_a_unary_stage_without_operand():
    x = RNG.standard_normal((16, 6)).astype(np.float32)
    p = (RNG.random((16, 6)) > 0.5).astype(np.uint8)
    got = three_ways(scalar_src_and_unary_stage, x, p)
    np.testing.assert_array_equal(got[:, 0:6], np.where(p != 0, np.float32(-7.5), x))
    np.testing.assert_array_equal(got[:, 6:12], np.abs(x) * np.float32(3.0))


def binary_stage_without_operand(x):
    t = nl.load(x)
    nisa.tensor_scalar(t, t, nl.add, None)
    return x


def test_a_binary_stage_without_operand_names_the_rule_and_line():
    with pytest.raises(neuron.NeuronError) as e:
        neuron.kernel(binary_stage_without_operand, mode="simulate")(np.zeros((4, 4), np.float32))
    assert e.value.rule == "operand" and "operand0 is None, but op0=add" in e.value.message
    assert e.value.line == line_of(binary_stage_without_operand, "nisa.tensor_scalar(")


def by_magnitude(x):
    out = nl.ndarray((16, 2), nl.float32, buffer=nl.shared_hbm)
    t = nl.load(x)
    d = nl.ndarray((16, 9), nl.float32)
    r = nl.ndarray((16, 2), nl.float32)
    for i, op in enumerate((nl.abs_max, nl.abs_min)):
        nisa.activate2(d, nl.copy, t, 2.0, 0.5, nl.multiply, nl.add, reduce_op=op,
                       reduce_res=r[:, i:i + 1], reduce_cmd=nisa.reduce_cmd.reset_reduce)
    nl.store(out, r)
    return out


def test_activate2_reduces_by_magnitude():
    x = RNG.uniform(-3, 3, (16, 9)).astype(np.float32)
    x[0] = [-5, 0.1, 3, 2, -2, 1, 1, 1, 1]  # the extremes by magnitude are neither max nor min
    x[1] = [4, -0.3, -3, 2, -2, 1, 1, 1, 1]
    got = three_ways(by_magnitude, x)
    y = x * np.float32(2.0) + np.float32(0.5)
    rows = np.arange(16)
    np.testing.assert_array_equal(got[:, 0], y[rows, np.abs(y).argmax(1)])
    np.testing.assert_array_equal(got[:, 1], y[rows, np.abs(y).argmin(1)])


def hbm_filled(x):
    t = nl.load(x)
    v = nl.var(t, axis=1, keepdims=True)  # keepdims: accepted and ignored, as NKI documents
    out = nl.full((200, 3), 2.5, nl.float32, buffer=nl.shared_hbm)
    nl.store(out[0:16, 0:1], v)
    ones = nl.ones((5,), nl.int32, buffer=nl.shared_hbm)
    zeros = nl.zeros_like(x, buffer=nl.shared_hbm)
    return out, ones, zeros


def test_full_ones_and_zeros_like_in_hbm():
    x = RNG.standard_normal((16, 7)).astype(np.float32)
    out, ones, zeros = three_ways(hbm_filled, x)
    np.testing.assert_allclose(out[0:16, 0], x.astype(np.float64).var(1), rtol=1e-5)
    assert (out[16:] == 2.5).all() and (out[0:16, 1:] == 2.5).all()
    assert ones.dtype == np.int32 and ones.shape == (5,) and (ones == 1).all()
    assert zeros.shape == x.shape and (zeros == 0).all()


def two_column_indices(src, idx):
    out = nl.ndarray((128, 256), src.dtype, buffer=nl.shared_hbm)
    rows = nl.load(idx)
    dst = nl.ndarray((128, 256), src.dtype, buffer=nl.sbuf)
    view = src.ap(pattern=[[128, 256], [1, 128]], vector_offset=rows, indirect_dim=0)
    nisa.dma_transpose(dst=dst, src=view, axes=(1, 0))
    nl.store(out, dst)
    return out


def test_two_column_vector_offsets_are_refused_with_the_way_round():
    src = np.zeros((256, 128), np.float16)
    idx = np.zeros((128, 2), np.uint32)
    with pytest.raises(neuron.NeuronError) as e:
        neuron.kernel(two_column_indices, mode="simulate")(src, idx)
    assert e.value.rule == "unsupported" and "vector_offset=t0[:, j:j + 1]" in e.value.message


def indirect_forms(a, idx, rows, targets):
    t = nl.load(idx)
    assert a.select(0, t).is_indirect() and a.ap([[8, 2], [1, 8]], scalar_offset=t).is_indirect()
    assert not a[0:2, :].is_indirect()
    picked = nl.ndarray((4, 3), a.dtype, buffer=nl.shared_hbm)  # HBM to HBM, free dim sliced
    nisa.dma_copy(dst=picked, src=a.vector_select(0, nl.load(rows))[:, 2:5])
    scattered = nl.ndarray((16, 8), a.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=scattered, src=a)
    nisa.dma_copy(dst=scattered.vector_select(0, nl.load(targets)), src=a[8:12, :])
    return picked, scattered


def test_indirect_views_as_the_language_guide_describes_them():
    a = RNG.standard_normal((16, 8)).astype(np.float32)
    rows = np.array([[5], [0], [9], [5]], np.int32)
    targets = np.array([[5], [0], [9], [2]], np.int32)
    picked, scattered = three_ways(indirect_forms, a, np.array([[3]], np.int32), rows, targets,
                                   modes=("native", "simulate"))
    np.testing.assert_array_equal(picked, a[[5, 0, 9, 5], 2:5])
    want = a.copy()
    want[[5, 0, 9, 2]] = a[8:12]
    np.testing.assert_array_equal(scattered, want)


def indirect_dim_sliced(a, rows):
    out = nl.ndarray((2, 8), a.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=a.vector_select(0, nl.load(rows))[0:2, :])
    return out


def test_the_indirected_dim_cannot_be_subscripted_again():
    with pytest.raises(neuron.NeuronError) as e:
        neuron.kernel(indirect_dim_sliced, mode="simulate")(np.zeros((16, 8), np.float32),
                                                           np.zeros((4, 1), np.int32))
    assert e.value.rule == "index" and "cannot be sliced or selected again" in e.value.message
    assert e.value.line == line_of(indirect_dim_sliced, "vector_select")


def test_platform_target_names(monkeypatch):
    from neuron.compat import platform_target
    assert [platform_target(n) for n in ("trn1", "gen3", "GEN4", "inf2")] == \
        ["trn1", "trn2", "trn3", "trn1"]
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "gen4")
    assert platform_target() == "trn3" and platform_target("trn2") == "trn2"
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn9")
    with pytest.raises(ValueError, match="NEURON_PLATFORM_TARGET_OVERRIDE='trn9'"):
        platform_target()
    monkeypatch.delenv("NEURON_PLATFORM_TARGET_OVERRIDE")
    assert platform_target() == "trn2"
