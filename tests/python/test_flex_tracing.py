# Mod tracing and codegen of neuron.flex_attention: every traced operation evaluates like the
# mod called directly on torch tensors (torch is the independent reference), the cache key
# ignores captured values, and what cannot be traced is named with the mod's line.
import warnings

import pytest
import torch
import torch.nn.attention.flex_attention as tfa

import neuron.flex_attention as nfa
from neuron.flex_attention import UnsupportedModError, flex_attention
from neuron.flex_attention import codegen, tracing
from neuron.flex_attention.fallback import FlexFallbackWarning

import flex_helpers as fh

IDX = dict(b=torch.arange(2).view(2, 1, 1, 1), h=torch.arange(3).view(1, 3, 1, 1),
           q_idx=torch.arange(37).view(1, 1, 37, 1), kv_idx=torch.arange(41).view(1, 1, 1, 41))
table = torch.randn(3, 37)
doc = torch.randint(0, 4, (41,)).sort().values
lut = torch.randn(80)
dist = torch.randint(0, 80, (2, 37, 41))
flag = torch.rand(41) > 0.5

SCORE_MODS = {
    "arith": lambda s, b, h, q, kv: (s * 2 - q / 3 + kv * 0.5) / 1.5 + b - h,
    "where": lambda s, b, h, q, kv: torch.where(q >= kv, s, -s),
    "unary": lambda s, b, h, q, kv: (torch.exp(s / 8) + torch.log(torch.abs(s) + 1)
                                     + torch.tanh(s) + torch.sin(s) + torch.cos(s)
                                     + torch.sigmoid(s) + torch.sqrt(torch.abs(s))),
    "methods": lambda s, b, h, q, kv: s.exp().abs() + (q - kv).abs().float() * 0.1,
    "intdiv": lambda s, b, h, q, kv: s + (q // 4) % 3 - (kv % 5) // 2,
    "casts": lambda s, b, h, q, kv: s + (q > kv).to(torch.float32) + (q * 0.7).int(),
    "gather": lambda s, b, h, q, kv: s + table[h, q],
    "nested": lambda s, b, h, q, kv: s + lut[dist[b, q, kv]],
    "bool_ops": lambda s, b, h, q, kv: torch.where((q > 3) & ~(kv < 2) | (q == kv), s, 0.0),
    "scalar": lambda s, b, h, q, kv: s * 0.25 + 1,
    "minmax": lambda s, b, h, q, kv: torch.clamp(s, min=-0.5, max=0.5) + torch.maximum(q, kv),
}
MASK_MODS = {
    "causal": fh.causal,
    "doc": lambda b, h, q, kv: doc[q % 41] == doc[kv],
    "flag": lambda b, h, q, kv: flag[kv] | (q == kv),
    "headdep": lambda b, h, q, kv: (q - kv).abs() <= h * 3 + b,
    "not": lambda b, h, q, kv: ~(q < kv),
    # attention-gym's Morton-order neighbourhoods: shifts by constants (negative values too)
    "shifts": lambda b, h, q, kv: (((q - 20) >> 2) == (kv >> 2)) |
                                  (torch.bitwise_left_shift(q, 1) - kv > 3),
}


@pytest.mark.parametrize("name", sorted(SCORE_MODS))
def test_score_mod_graph_evaluates_like_the_mod(name):
    mod = SCORE_MODS[name]
    g = tracing.trace(mod, tracing.ARGS_SCORE)
    s = torch.randn(2, 3, 37, 41)
    ours = codegen.compile_graph(g)(s, IDX["b"], IDX["h"], IDX["q_idx"], IDX["kv_idx"],
                                    *g.inputs)
    ref = mod(s, IDX["b"], IDX["h"], IDX["q_idx"], IDX["kv_idx"])
    torch.testing.assert_close(torch.broadcast_to(ours, ref.shape).to(ref.dtype), ref)


@pytest.mark.parametrize("name", sorted(MASK_MODS))
def test_mask_mod_graph_evaluates_like_the_mod(name):
    mod = MASK_MODS[name]
    g = tracing.trace(mod, tracing.ARGS_MASK)
    ours = codegen.compile_graph(g)(IDX["b"], IDX["h"], IDX["q_idx"], IDX["kv_idx"], *g.inputs)
    ref = mod(IDX["b"], IDX["h"], IDX["q_idx"], IDX["kv_idx"])
    assert torch.equal(torch.broadcast_to(ours, ref.shape), ref)


def test_cache_key_holds_graph_shapes_and_dtypes_not_values():
    bias = torch.randn(4, 16)

    def mod(s, b, h, q, kv):
        return s + bias[h, q]
    g1 = tracing.trace(mod, tracing.ARGS_SCORE)
    bias = torch.randn(4, 16)  # new values, same shape: same key, same compiled function
    g2 = tracing.trace(mod, tracing.ARGS_SCORE)
    assert g1.key() == g2.key()
    assert codegen.compile_graph(g1) is codegen.compile_graph(g2)
    assert g2.inputs[0] is bias
    bias = torch.randn(4, 32)
    assert tracing.trace(mod, tracing.ARGS_SCORE).key() != g1.key()
    bias = torch.randn(4, 16, dtype=torch.float64)
    assert tracing.trace(mod, tracing.ARGS_SCORE).key() != g1.key()


def test_new_captured_values_and_block_masks_do_not_compile():
    from neuron.flex_attention import create_block_mask
    q = torch.randn(1, 2, 64, 16)
    bias = torch.randn(64)

    def mod(s, b, h, qi, kv):
        return s + bias[kv]
    flex_attention(q, q, q, score_mod=mod,
                   block_mask=create_block_mask(fh.causal, 1, 1, 64, 64, BLOCK_SIZE=16))
    n = codegen.cache_size()
    for w in (4, 9, 20):
        bias = torch.randn(64)
        flex_attention(q, q, q, score_mod=mod, block_mask=create_block_mask(
            fh.sliding_window(w), 1, 1, 64, 64, BLOCK_SIZE=16))
    # sliding_window(w) traces to graphs differing in the constant w: one compile each for
    # its mask; the score_mod with new bias values compiles nothing.
    assert codegen.cache_size() == n + 3


def _line_of(fn, text):
    import inspect
    src, start = inspect.getsourcelines(fn)
    return start + next(i for i, s in enumerate(src) if text in s)


def test_unsupported_op_names_the_op_and_the_line():
    def mod(b, h, q_idx, kv_idx):
        return torch.erf(q_idx) > 0
    with pytest.raises(UnsupportedModError) as e:
        tracing.trace(mod, tracing.ARGS_MASK)
    msg = str(e.value)
    assert "torch.erf" in msg
    assert f"test_flex_tracing.py:{_line_of(mod, 'torch.erf')}:" in msg
    assert "return torch.erf(q_idx) > 0" in msg


def test_shifts_trace_as_divisions_and_other_shifts_are_named():
    shifts = MASK_MODS["shifts"]
    bm = nfa.create_block_mask(shifts, 1, 1, 300, 260, BLOCK_SIZE=64)
    tbm = tfa.create_block_mask(shifts, 1, 1, 300, 260, device="cpu", BLOCK_SIZE=64)
    for f in ("kv_num_blocks", "kv_indices", "full_kv_num_blocks", "full_kv_indices"):
        assert torch.equal(getattr(bm, f), getattr(tbm, f)), f
    for mod, what in ((lambda b, h, q, kv: (q >> kv) > 0, "shift >> by"),
                      (lambda b, h, q, kv: (q * 0.5).float() << 1 > 0, "floating-point")):
        with pytest.raises(UnsupportedModError, match=what):
            tracing.trace(mod, tracing.ARGS_MASK)


def test_python_control_flow_is_named():
    def mod(b, h, q_idx, kv_idx):
        if q_idx > kv_idx:
            return True
        return False
    with pytest.raises(UnsupportedModError, match=r"Python control flow .* torch.where") as e:
        tracing.trace(mod, tracing.ARGS_MASK)
    assert f":{_line_of(mod, 'if q_idx')}: if q_idx > kv_idx:" in str(e.value)


def _erf_score(score, b, h, q_idx, kv_idx):
    return score + torch.special.erf(score)


def test_untraceable_mod_falls_back_with_one_warning(monkeypatch):
    monkeypatch.delenv("NEURON_STRICT", raising=False)
    q = torch.randn(1, 2, 20, 8, dtype=torch.float64)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        out = flex_attention(q, q, q, score_mod=_erf_score)
        flex_attention(q, q, q, score_mod=_erf_score)
    msgs = [x for x in w if issubclass(x.category, FlexFallbackWarning)]
    assert len(msgs) == 1 and "erf" in str(msgs[0].message)
    golden, _ = fh.dense_reference(q, q, q, _erf_score)
    torch.testing.assert_close(out, golden)


def test_the_fallback_calls_mods_per_element_as_pytorch_does(monkeypatch):
    # attention-gym's mods that the tracer cannot express but PyTorch's eager path runs (it
    # vmaps the mods over kv_idx, q_idx, h, b): torch.dot of captured rows (latent
    # attention's RoPE), and `interval = intervals[i]; interval[0]` (flamingo's mask) beside an
    # untraceable op. Called on broadcast index tensors they raised. The warning names the
    # caller's line, not torch.compiler.disable's wrapper.
    monkeypatch.delenv("NEURON_STRICT", raising=False)
    g = torch.Generator().manual_seed(5)
    qr, kr = torch.rand(1, 2, 3, 8, generator=g), torch.rand(1, 1, 16, 8, generator=g)

    def rope_dot(score, b, h, q_idx, kv_idx):
        return score + 0.1 * torch.dot(qr[b, h, q_idx], kr[b, 0, kv_idx])
    boundaries = torch.tensor([0, 0, 0, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2])
    intervals = torch.tensor([[0, 2], [1, 3], [0, 3]])

    def flamingo(b, h, q_idx, kv_idx):
        interval = intervals[boundaries[kv_idx]]
        return (q_idx >= interval[0]) & (q_idx < interval[1]) & (torch.erf(q_idx * 1.0) > -1)
    q = torch.randn(1, 2, 3, 16, generator=g)
    k, v = torch.randn(1, 1, 16, 16, generator=g), torch.randn(1, 1, 16, 16, generator=g)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        ours = flex_attention(q, k, v, score_mod=rope_dot, enable_gqa=True)
        mask = nfa.create_mask(flamingo, 1, 1, 3, 16)
        bm = nfa.create_block_mask(flamingo, 1, 1, 3, 16)
        masked = flex_attention(q, k, v, block_mask=bm, enable_gqa=True)
    torch.testing.assert_close(ours, tfa.flex_attention(q, k, v, score_mod=rope_dot,
                                                        enable_gqa=True))
    assert torch.equal(mask, tfa.create_mask(flamingo, 1, 1, 3, 16, device="cpu"))
    tbm = tfa.create_block_mask(flamingo, 1, 1, 3, 16, device="cpu")
    torch.testing.assert_close(masked, tfa.flex_attention(q, k, v, block_mask=tbm,
                                                          enable_gqa=True))
    fell = [x for x in w if issubclass(x.category, FlexFallbackWarning)]
    assert fell and all(x.filename == __file__ for x in fell)


def test_strict_mode_raises_instead_of_falling_back(monkeypatch):
    monkeypatch.setenv("NEURON_STRICT", "1")
    q = torch.randn(1, 2, 20, 8)
    with pytest.raises(UnsupportedModError, match="erf"):
        flex_attention(q, q, q, score_mod=_erf_score)
