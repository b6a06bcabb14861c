# A bounded fuzzer for neuron.flex_attention: random mask_mod / score_mod expressions over every
# traced operation (arithmetic, // and %, comparisons, &, |, ~, where, unary math, captured
# tensors indexed by index arguments and by traced expressions), random lengths and block
# sizes; the float captured tensor LUT is learnable (its gradient is compared too, read at
# indices of q, kv, b, h, both or none). Block masks are compared field by field with
# PyTorch's create_block_mask (this checks the interval classification is sound); attention
# forward and backward against the float64 dense reference, on the host path and through the
# neuron kernels (simulator).
# NEURON_FLEX_FUZZ=<n> / NEURON_FLEX_FUZZ_KERNEL=<n> run n cases of each instead of the CI's few.
import math
import os
import random
import warnings

import pytest
import torch
import torch.nn.attention.flex_attention as tfa

from neuron.flex_attention import create_block_mask, flex_attention

import flex_helpers as fh

N = int(os.environ.get("NEURON_FLEX_FUZZ", "12"))
NK = int(os.environ.get("NEURON_FLEX_FUZZ_KERNEL", "6"))  # cases through the neuron kernels
DOC = torch.sort(torch.randint(0, 5, (400,), generator=torch.Generator().manual_seed(7))).values
TBL = torch.randint(-20, 20, (4, 400), generator=torch.Generator().manual_seed(8))
LUT = torch.randn(64, generator=torch.Generator().manual_seed(9))
ENV = {"torch": torch, "DOC": DOC, "TBL": TBL, "LUT": LUT}


def int_expr(r, depth):
    """A traced integer expression of b, h, q, kv (all in range for the captured tensors)."""
    if depth == 0 or r.random() < 0.3:
        return r.choice(["q", "kv", "q", "kv", "b", "h", str(r.randint(-5, 40))])
    a, c = int_expr(r, depth - 1), int_expr(r, depth - 1)
    k = r.randint(0, 9)
    if k == 0:
        return f"({a} + {c})"
    if k == 1:
        return f"({a} - {c})"
    if k == 2:
        return f"({a} * {r.randint(-3, 3)})"
    if k == 3:
        return f"({a} // {r.randint(1, 70)})"
    if k == 4:
        return f"({a} % {r.randint(1, 70)})"
    if k == 5:
        return f"torch.abs({a} + 0 * kv)"
    if k == 6:
        return f"DOC[{r.choice(['q', 'kv'])}]"
    if k == 7:
        return f"TBL[h, {r.choice(['q', 'kv'])}]"
    if k == 8:
        return f"torch.where({bool_expr(r, depth - 1)}, {a}, {c})"
    return f"torch.maximum({a} + 0 * q, {r.choice(['q', 'kv'])})"  # tensors, as torch wants


def bool_expr(r, depth):
    if depth == 0 or r.random() < 0.25:
        op = r.choice(["<", "<=", ">", ">=", "==", "!="])
        # A variable on one side: a comparison of two constants is a Python bool.
        return f"({int_expr(r, 1)} {op} {r.choice(['q', 'kv', 'q + h', 'kv - b'])})"
    k = r.randint(0, 3)
    a, c = bool_expr(r, depth - 1), bool_expr(r, depth - 1)
    if k == 0:
        return f"({a} & {c})"
    if k == 1:
        return f"({a} | {c})"
    if k == 2:
        return f"(~{a})"
    return f"({a} ^ {c})"


def float_expr(r, depth):
    if depth == 0 or r.random() < 0.25:
        return r.choice(["s", "s", f"(0 * s + {r.uniform(-2, 2):.3f})", "(q - kv) * 0.01",
                         "LUT[(q * 7 + kv) % 64]", "h * 0.1", f"LUT[{int_expr(r, 1)} % 64]",
                         f"s * LUT[{int_expr(r, 1)} % 64]"])
    a, c = float_expr(r, depth - 1), float_expr(r, depth - 1)
    k = r.randint(0, 9)
    return [f"({a} + {c})", f"({a} - {c})", f"({a} * {c})", f"torch.tanh({a})",
            f"torch.sin({a})", f"torch.sigmoid({a}) * 3", f"torch.exp(-torch.abs({a}))",
            f"torch.log(1 + torch.abs({a}))", f"torch.sqrt(torch.abs({a}))",
            f"torch.where({bool_expr(r, 1)}, {a}, {c})"][k]


def _fn(args, body, **env):
    return eval(f"lambda {args}: {body}", {**ENV, **env})


@pytest.mark.parametrize("seed", range(N))
def test_random_mask_mod_block_masks_equal_pytorchs(seed):
    r = random.Random(seed)
    body = bool_expr(r, 3)
    mod = _fn("b, h, q, kv", body)
    B, H = r.randint(1, 2), r.randint(1, 3)
    Q, KV = r.randint(20, 400), r.randint(20, 400)
    bs = r.choice([16, 32, 64, (32, 16), (16, 64)])
    ours = create_block_mask(mod, B, H, Q, KV, BLOCK_SIZE=bs)
    ref = tfa.create_block_mask(mod, B, H, Q, KV, device="cpu", BLOCK_SIZE=bs)
    for f in ours._TENSOR_ATTRS:
        assert torch.equal(getattr(ours, f), getattr(ref, f)), (body, f)


@pytest.mark.parametrize("seed", range(N))
def test_random_mods_attention_forward_backward(seed):
    attention_case(seed, None)


@pytest.mark.parametrize("seed", range(NK))
def test_random_mods_through_the_neuron_kernels(seed):
    # The same cases through kernel.py / kernel_bwd.py on the simulator (no silent fallback).
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        attention_case(seed, {"BACKEND": "simulator"})


def attention_case(seed, kernel_options):
    r = random.Random(1000 + seed)
    sbody = float_expr(r, 3)
    lut = LUT.clone().requires_grad_()
    smod = _fn("s, b, h, q, kv", sbody, LUT=lut)
    mmod = _fn("b, h, q, kv", f"({bool_expr(r, 2)}) | (q == kv)") if r.random() < 0.8 else None
    B, Hkv, G = r.randint(1, 2), r.randint(1, 2), r.choice([1, 2])
    L, S = r.randint(10, 200), r.randint(10, 200)
    if mmod is not None and L > S:  # q == kv keeps every row alive only for q < S
        L = S
    E, Ev = r.choice([8, 16, 24]), r.choice([8, 16])
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, Hkv * G, L, E, generator=g, requires_grad=True)
    k = torch.randn(B, Hkv, S, E, generator=g, requires_grad=True)
    v = torch.randn(B, Hkv, S, Ev, generator=g, requires_grad=True)
    bm = create_block_mask(mmod, B, Hkv * G, L, S, BLOCK_SIZE=r.choice([16, 32, 64])) \
        if mmod is not None else None
    out = flex_attention(q, k, v, score_mod=smod, block_mask=bm, enable_gqa=G > 1,
                         kernel_options=kernel_options)
    dout = torch.randn(out.shape, generator=g, dtype=torch.float64)
    ours = torch.autograd.grad((out.double() * dout).sum(), (q, k, v, lut), allow_unused=True)
    ours = [torch.zeros_like(t) if g_ is None else g_ for g_, t in zip(ours, (q, k, v, lut))]
    q64, k64, v64, lut64 = (t.detach().double().requires_grad_() for t in (q, k, v, lut))
    gold_out, _ = fh.dense_reference(q64, k64, v64, _fn("s, b, h, q, kv", sbody, LUT=lut64),
                                     mmod)
    gold = torch.autograd.grad((gold_out * dout).sum(), (q64, k64, v64, lut64),
                               allow_unused=True)
    gold = [torch.zeros_like(t) if g_ is None else g_
            for g_, t in zip(gold, (q64, k64, v64, lut64))]
    torch.testing.assert_close(out.double(), gold_out, rtol=1e-4, atol=1e-4)
    if kernel_options and any(t.isnan().any() for t in gold[:3]):
        # The kernels derive d score_mod / d score in forward mode and zero it where p = 0;
        # at a singular point (sqrt(|0|)) their NaN pattern is not the reverse-mode one.
        pytest.skip("the reference's gradient is NaN (a mod singular on valid positions)")
    # Against float64, elementwise: a fixed tolerance plus 10x the fp32 dense reference's own
    # error there (sqrt(|x|) near 0 makes a mod's derivative ill-conditioned, so no fixed
    # tolerance fits every random mod).
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v, lut)]
    ref_out, _ = fh.dense_reference(*leaves[:3], _fn("s, b, h, q, kv", sbody, LUT=leaves[3]),
                                    mmod)
    ref = torch.autograd.grad((ref_out.double() * dout).sum(), leaves, allow_unused=True)
    ref = [torch.zeros_like(t) if g_ is None else g_ for g_, t in zip(ref, leaves)]
    for name, a, b, r in zip(("dq", "dk", "dv", "dLUT"), ours, gold, ref):
        nan = b.isnan()
        if nan.any():
            if name == "dLUT":
                # The dense reference evaluates the mod on masked positions too, where the
                # where()'s zero gradient times an infinite derivative is NaN: not comparable.
                continue
            # A mod singular on valid positions (sqrt(|0 * x|) at h == 0) has NaN gradients
            # in the reference too: NaN must then appear exactly where the reference has it.
            assert torch.equal(a.isnan(), nan), f"seed {seed} {name}: NaN pattern"
        a, b, r = a[~nan].double(), b[~nan], torch.nan_to_num(r[~nan].double(), nan=math.inf)
        bad = (a - b).abs() > 1e-3 + 1e-3 * b.abs() + 10 * (r - b).abs()
        assert not bad.any(), (f"seed {seed} {name}: {int(bad.sum())} of {bad.numel()} "
                               f"differ, worst {(a - b).abs().max().item():.3g}")
