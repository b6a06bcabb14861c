#!/usr/bin/env python3
"""Random odd-shape `neuron.flex_attention` calls against a dense float64 reference (scores,
score_mod on broadcast index tensors, mask, softmax, @ v, written here), output, lse and
backward: batch and kv-batch broadcast, GQA, query and key lengths around the block size,
head dims E != Ev, a given or default scale, score mods (softcap, ALiBi, a relative bias and a
per-query bias read from captured tensors) and mask mods (causal, sliding window, documents,
prefix LM) as a block mask of several block sizes or folded into the score mod, in fp32, bf16
and fp16, on the default ("auto") and the native kernel backends. Not part of CI (about a
minute per twenty cases; docs/reliability.md).

    PYTHONPATH=build/python python3 tests/fuzz/flex_fuzz.py SEED [CASES]
"""

import math
import random
import sys
import warnings

import torch

from neuron.flex_attention import flex_attention, create_block_mask, AuxRequest

warnings.simplefilter("ignore")
torch.set_num_threads(2)
seed = int(sys.argv[1]) if len(sys.argv) > 1 else 0
N = int(sys.argv[2]) if len(sys.argv) > 2 else 30
rng = random.Random(seed)
torch.manual_seed(seed)
TOL = {torch.float32: 2e-3, torch.bfloat16: 6e-2, torch.float16: 1e-2}
fails = []


def size():
    return rng.choice([rng.randint(1, 300), rng.choice([1, 2, 17, 127, 128, 129, 255, 256, 257])])


def make_mods(B, H, L, S):
    """(name, score_mod, mask_mod)"""
    kind_s = rng.choice(["none", "softcap", "alibi", "relbias", "qbias"])
    kind_m = rng.choice(["none", "causal", "window", "document", "prefix", "causal+window"])
    score_mod = None
    if kind_s == "softcap":
        cap = rng.choice([5.0, 30.0])
        score_mod = lambda s, b, h, q, k: cap * torch.tanh(s / cap)
    elif kind_s == "alibi":
        slopes = torch.tensor([2.0 ** (-(i + 1)) for i in range(H)])
        score_mod = lambda s, b, h, q, k: s + slopes[h] * (k - q)
    elif kind_s == "relbias":
        bias = torch.randn(H, L + S)
        score_mod = lambda s, b, h, q, k: s + bias[h, q - k + S - 1 + 1]
    elif kind_s == "qbias":
        bias = torch.randn(B, H, L)
        score_mod = lambda s, b, h, q, k: s * 0.5 + bias[b, h, q]
    mask_mod = None
    w = rng.randint(1, 80)
    if kind_m == "causal":
        mask_mod = lambda b, h, q, k: q >= k
    elif kind_m == "window":
        mask_mod = lambda b, h, q, k: (q - k).abs() <= w
    elif kind_m == "causal+window":
        mask_mod = lambda b, h, q, k: (q >= k) & (q - k <= w)
    elif kind_m == "document":
        n = max(L, S)
        cuts = sorted(rng.sample(range(1, n + 1), min(rng.randint(1, 4), n)))
        doc = torch.zeros(n, dtype=torch.int32)
        for c in cuts[:-1]:
            doc[c:] += 1
        mask_mod = lambda b, h, q, k: doc[q] == doc[k]
    elif kind_m == "prefix":
        p = rng.randint(0, S)
        mask_mod = lambda b, h, q, k: (k < p) | (q >= k)
    return f"{kind_s}/{kind_m}", score_mod, mask_mod


def reference(q, k, v, score_mod, mask_mod, scale, H, Hkv):
    B, _, L, E = q.shape
    S = k.shape[2]
    g = H // Hkv
    k = k.expand(B, -1, -1, -1).repeat_interleave(g, dim=1)
    v = v.expand(B, -1, -1, -1).repeat_interleave(g, dim=1)
    s = (q @ k.transpose(-1, -2)) * scale
    b = torch.arange(B).view(B, 1, 1, 1)
    h = torch.arange(H).view(1, H, 1, 1)
    qi = torch.arange(L).view(1, 1, L, 1)
    ki = torch.arange(S).view(1, 1, 1, S)
    if score_mod is not None:
        s = score_mod(s, b, h, qi, ki)
    keep = torch.ones(B, H, L, S, dtype=torch.bool)
    if mask_mod is not None:
        keep = keep & mask_mod(b, h, qi, ki).expand(B, H, L, S)
    s = s.masked_fill(~keep, -math.inf)
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - lse.unsqueeze(-1)).nan_to_num(0.0)
    return p @ v, lse


def close(name, got, want, dt, extra):
    got = got.double()
    want = want.double()
    if got.shape != want.shape:
        fails.append(f"{name} shape {tuple(got.shape)} vs {tuple(want.shape)} {extra}")
        return
    both_inf = torch.isinf(got) & torch.isinf(want) & (got.sign() == want.sign())
    d = (got - want).abs().masked_fill(both_inf, 0.0)
    err = d.max().item() if d.numel() else 0.0
    scale = want.masked_fill(both_inf, 0.0).abs().max().item() + 1e-6 if d.numel() else 1
    if not math.isfinite(err) or err > TOL[dt] * max(1.0, scale) * 4:
        fails.append(f"{name} {dt} err {err:.3g} scale {scale:.3g} {extra}")


for it in range(N):
    dt = rng.choice([torch.float32, torch.bfloat16, torch.float16])
    B = rng.randint(1, 3)
    Hkv = rng.choice([1, 2, 3])
    g = rng.choice([1, 1, 2, 4])
    H = Hkv * g
    L, S = size(), size()
    if rng.random() < 0.4:
        S = L
    E = rng.choice([8, 16, 32, 48, 64, 80, 96, 128])
    Ev = E if rng.random() < 0.7 else rng.choice([16, 32, 64, 96])
    Bkv = B if rng.random() < 0.8 else 1
    scale = None if rng.random() < 0.6 else rng.uniform(0.05, 0.5)
    name, score_mod, mask_mod = make_mods(B, H, L, S)
    use_block = mask_mod is not None and rng.random() < 0.85
    bs = rng.choice([128, 128, 64, (128, 64), 256])
    backward = rng.random() < 0.5
    backend = rng.choice(["auto", "native", "native"])
    extra = (
        f"[it {it}] B={B} Bkv={Bkv} H={H} Hkv={Hkv} L={L} S={S} E={E} Ev={Ev} "
        f"scale={scale} mods={name} block={use_block and bs} bwd={backward} {backend}"
    )
    try:
        q = torch.randn(B, H, L, E).to(dt)
        k = torch.randn(Bkv, Hkv, S, E).to(dt)
        v = torch.randn(Bkv, Hkv, S, Ev).to(dt)
        bm = None
        sm = score_mod
        if use_block:
            bm = create_block_mask(mask_mod, None, None, L, S, BLOCK_SIZE=bs)
        elif mask_mod is not None:
            # no block mask: express the mask through the score mod
            inner = score_mod
            sm = lambda s, b, h, qq, kk: torch.where(
                mask_mod(b, h, qq, kk), inner(s, b, h, qq, kk) if inner else s, -float("inf")
            )
        qs, ks, vs = (t.detach().clone().requires_grad_(backward) for t in (q, k, v))
        out, aux = flex_attention(
            qs,
            ks,
            vs,
            score_mod=sm,
            block_mask=bm,
            scale=scale,
            enable_gqa=H != Hkv,
            return_aux=AuxRequest(lse=True),
            kernel_options={"BACKEND": backend},
        )
        qd, kd, vd = (t.detach().double().requires_grad_(backward) for t in (q, k, v))
        sc = scale if scale is not None else 1 / math.sqrt(E)
        ref, lse = reference(qd, kd, vd, score_mod, mask_mod, sc, H, Hkv)
        close("out", out, ref, dt, extra)
        close("lse", aux.lse, lse, torch.float32 if dt == torch.float32 else dt, extra)
        if backward:
            gr = torch.randn_like(ref)
            out.backward(gr.to(out.dtype))
            ref.backward(gr)
            for nm, a, b_ in (("dq", qs, qd), ("dk", ks, kd), ("dv", vs, vd)):
                if a.grad is None:
                    fails.append(f"{nm} missing {extra}")
                else:
                    close(nm, a.grad, b_.grad, dt, extra)
    except Exception as e:
        fails.append(f"EXC {type(e).__name__}: {str(e)[:300]} {extra}")
    print(".", end="", flush=True)

print()
print(f"{N} cases, {len(fails)} failures")
for f in fails:
    print(f)
