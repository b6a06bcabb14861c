#!/usr/bin/env python3
"""Random odd-shape calls of the PyTorch drop-ins (`neuron.ops.functional`: linear, softmax,
rms_norm, layer_norm, scaled_dot_product_attention, swiglu, rope) in fp32, bf16 and fp16,
forward and backward, against PyTorch's own functions in fp32 on the same inputs: sizes
around the 128-partition and 512-column tiles (1, 127, 129, 255, 257, 511, 513, ...), leading
batch dims, GQA, causal and scaled attention, head dims that are not powers of two. Not part
of CI (a few minutes per hundred cases; docs/reliability.md). Prints each mismatch or exception
with the case that made it.

    PYTHONPATH=build/python python3 tests/fuzz/ops_odd_shapes_fuzz.py SEED [CASES]
"""

import math
import random
import sys
import warnings

import torch
import torch.nn.functional as F

import neuron.ops.functional as NF

warnings.simplefilter("ignore")
torch.set_num_threads(2)
seed = int(sys.argv[1]) if len(sys.argv) > 1 else 0
N = int(sys.argv[2]) if len(sys.argv) > 2 else 100
rng = random.Random(seed)
torch.manual_seed(seed)
DT = [torch.float32, torch.bfloat16, torch.float16]
TOL = {torch.float32: 2e-4, torch.bfloat16: 3e-2, torch.float16: 5e-3}
fails = []


def size(lo=1, hi=300):
    return rng.choice(
        [rng.randint(lo, hi), rng.choice([1, 2, 3, 127, 128, 129, 255, 256, 257, 511, 513])]
    )


def lead():
    return [rng.randint(1, 5) for _ in range(rng.randint(0, 2))]


def close(name, got, want, dt, extra=""):
    got = got.float()
    want = want.float()
    if got.shape != want.shape:
        fails.append(f"{name} shape {tuple(got.shape)} vs {tuple(want.shape)} {extra}")
        return
    scale = want.abs().max().item() + 1e-6
    err = (got - want).abs().max().item()
    if not math.isfinite(err) or err > TOL[dt] * max(1.0, scale) * 4:
        fails.append(f"{name} {dt} err {err:.3g} scale {scale:.3g} {extra}")


def with_grad(fn_ours, fn_ref, inputs, dt, name, extra):
    xs = [t.detach().clone().requires_grad_(True) for t in inputs]
    ys = [t.detach().clone().float().requires_grad_(True) for t in inputs]
    out = fn_ours(*xs)
    ref = fn_ref(*ys)
    close(name + " fwd", out, ref, dt, extra)
    g = torch.randn_like(ref)
    out.backward(g.to(out.dtype))
    ref.backward(g)
    for i, (x, y) in enumerate(zip(xs, ys)):
        if y.grad is None:
            continue
        if x.grad is None:
            fails.append(f"{name} grad {i} missing {extra}")
            continue
        close(f"{name} grad{i}", x.grad, y.grad, dt, extra)


for it in range(N):
    op = rng.choice(["linear", "softmax", "rms", "ln", "sdpa", "swiglu", "rope"])
    dt = rng.choice(DT)
    try:
        if op == "linear":
            L = lead() + [size()]
            i, o = size(1, 600), size(1, 600)
            x = torch.randn(*L, i).to(dt)
            w = (torch.randn(o, i) / math.sqrt(i)).to(dt)
            b = torch.randn(o).to(dt) if rng.random() < 0.5 else None
            extra = f"x{tuple(x.shape)} w{tuple(w.shape)} bias={b is not None}"
            if b is None:
                with_grad(
                    lambda x, w: NF.linear(x, w), lambda x, w: F.linear(x, w), [x, w], dt, op, extra
                )
            else:
                with_grad(NF.linear, F.linear, [x, w, b], dt, op, extra)
        elif op == "softmax":
            shp = lead() + [size(), size(1, 2000)]
            x = torch.randn(*shp).to(dt) * 3
            d = rng.randrange(-len(shp), len(shp))
            extra = f"x{tuple(x.shape)} dim={d}"
            with_grad(lambda x: NF.softmax(x, d), lambda x: F.softmax(x, d), [x], dt, op, extra)
        elif op in ("rms", "ln"):
            shp = lead() + [size(), size(1, 1500)]
            nd = rng.choice([1, 1, 2]) if len(shp) >= 2 else 1
            ns = shp[-nd:]
            x = torch.randn(*shp).to(dt)
            w = (torch.rand(*ns) + 0.5).to(dt) if rng.random() < 0.7 else None
            if op == "rms":
                eps = rng.choice([None, 1e-6, 1e-3])
                extra = f"x{tuple(x.shape)} ns={ns} w={w is not None} eps={eps}"
                ins = [x] + ([w] if w is not None else [])
                with_grad(
                    lambda x, *w: NF.rms_norm(x, ns, w[0] if w else None, eps),
                    lambda x, *w: F.rms_norm(x, ns, w[0] if w else None, eps),
                    ins,
                    dt,
                    op,
                    extra,
                )
            else:
                bb = torch.randn(*ns).to(dt) if (w is not None and rng.random() < 0.7) else None
                extra = f"x{tuple(x.shape)} ns={ns} w={w is not None} b={bb is not None}"
                ins = [x] + ([w] if w is not None else []) + ([bb] if bb is not None else [])

                def mk(f):
                    def g(x, *p):
                        ww = p[0] if w is not None else None
                        b2 = p[1] if bb is not None else None
                        return f(x, ns, ww, b2, 1e-5)

                    return g

                with_grad(mk(NF.layer_norm), mk(F.layer_norm), ins, dt, op, extra)
        elif op == "sdpa":
            B = lead()
            hk = rng.randint(1, 4)
            g = rng.choice([1, 1, 2, 3])
            hq = hk * g
            L, S = size(1, 400), size(1, 400)
            E = rng.choice([8, 16, 32, 33, 64, 80, 128, 5])
            Ev = rng.choice([E, E, 16, 64, 7])
            q = torch.randn(*B, hq, L, E).to(dt)
            k = torch.randn(*B, hk, S, E).to(dt)
            v = torch.randn(*B, hk, S, Ev).to(dt)
            causal = rng.random() < 0.5
            scale = rng.choice([None, 0.1, 1.0])
            gqa = g > 1
            extra = (
                f"q{tuple(q.shape)} k{tuple(k.shape)} v{tuple(v.shape)} causal={causal} "
                f"scale={scale}"
            )
            with_grad(
                lambda q, k, v: NF.scaled_dot_product_attention(
                    q, k, v, is_causal=causal, scale=scale, enable_gqa=gqa
                ),
                lambda q, k, v: F.scaled_dot_product_attention(
                    q, k, v, is_causal=causal, scale=scale, enable_gqa=gqa
                ),
                [q, k, v],
                dt,
                op,
                extra,
            )
        elif op == "swiglu":
            shp = lead() + [size(), 2 * size(1, 800)]
            x = torch.randn(*shp).to(dt)

            def ref(x):
                a, b = x.chunk(2, -1)
                return F.silu(a) * b

            with_grad(NF.swiglu, ref, [x], dt, op, f"x{tuple(x.shape)}")
        elif op == "rope":
            Lq = size(1, 300)
            d = 2 * rng.randint(1, 64)
            x = torch.randn(*lead(), Lq, d).to(dt)
            ang = torch.rand(Lq, d // 2) * 6
            cos, sin = ang.cos().to(dt), ang.sin().to(dt)

            def ref(x, cos=cos, sin=sin):
                x1, x2 = x.chunk(2, -1)
                c, s = cos.float(), sin.float()
                return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], -1)

            with_grad(lambda x: NF.rope(x, cos, sin), ref, [x], dt, op, f"x{tuple(x.shape)}")
    except Exception as e:
        fails.append(f"{op} {dt} EXC {type(e).__name__}: {str(e)[:300]} {locals().get('extra','')}")
print(f"seed {seed}: {N} cases, {len(fails)} failures")
for f in fails[:40]:
    print(" ", f)
