#!/usr/bin/env python3
"""neuron.ops (the kernel library through the torch.ops.neuron operators, as a PyTorch user calls
it) against PyTorch's own functions, per op, in one process on the same thread count: forward,
and forward + backward. Prints median times and the ratio PyTorch / ours (above 1.00x ours is
faster) with the CPU model, and writes the table into docs/performance.md (its own section).
Each op is first checked against float64 by FLEX.md's judge.

    PYTHONPATH=build/python python3 bench/compare_ops.py [--threads 2] [--repeats 5]
        [--dtype fp32|bf16|both] [--only linear] [--no-backward] [--no-write]
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare  # noqa: E402  (machine description, timing helper)


def cases(torch, F, ops):
    """(name, ours, peer, make_inputs(dtype)) per op, at sizes of a small LLM layer."""
    def rand(*shape):
        return torch.randn(shape)

    def swiglu_torch(x):
        a, b = x.chunk(2, -1)
        return F.silu(a) * b

    def rope_torch(x, cos, sin):
        h = x.shape[-1] // 2
        x1, x2 = x[..., :h], x[..., h:]
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)

    L, D = 2048, 64
    ang = torch.arange(L)[:, None] * 10000.0 ** (-torch.arange(D // 2) / (D // 2))
    cos, sin = torch.cos(ang), torch.sin(ang)
    return [
        ("sdpa causal [1,8,2048,64]",
         lambda q, k, v: ops.scaled_dot_product_attention(q, k, v, is_causal=True),
         lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
         lambda: [rand(1, 8, L, D) for _ in range(3)]),
        ("sdpa [1,8,2048,64]", ops.scaled_dot_product_attention, F.scaled_dot_product_attention,
         lambda: [rand(1, 8, L, D) for _ in range(3)]),
        ("linear [2048,1024]x[1024,1024]+b", ops.linear, F.linear,
         lambda: [rand(2048, 1024), rand(1024, 1024) * 0.03, rand(1024)]),
        # A decode step's projection: one row against a large weight, the same weight each call.
        ("linear decode [1,4096]x[4096,4096]", ops.linear, F.linear,
         lambda: [rand(1, 4096), rand(4096, 4096) * 0.015]),
        ("rms_norm [4096,1024]", lambda x, w: ops.rms_norm(x, (1024,), w, 1e-6),
         lambda x, w: F.rms_norm(x, (1024,), w, 1e-6), lambda: [rand(4096, 1024), rand(1024)]),
        ("layer_norm [4096,1024]", lambda x, w, b: ops.layer_norm(x, (1024,), w, b),
         lambda x, w, b: F.layer_norm(x, (1024,), w, b),
         lambda: [rand(4096, 1024), rand(1024), rand(1024)]),
        ("softmax [4096,1024]", lambda x: ops.softmax(x, -1), lambda x: F.softmax(x, -1),
         lambda: [rand(4096, 1024) * 3]),
        # A language model head's softmax over its vocabulary, a few rows.
        ("softmax [16,32000]", lambda x: ops.softmax(x, -1), lambda x: F.softmax(x, -1),
         lambda: [rand(16, 32000) * 3]),
        ("swiglu [4096,2x1024]", ops.swiglu, swiglu_torch, lambda: [rand(4096, 2048)]),
        ("rope [1,8,2048,64]", lambda x: ops.rope(x, cos.to(x.dtype), sin.to(x.dtype)),
         lambda x: rope_torch(x, cos.to(x.dtype), sin.to(x.dtype)), lambda: [rand(1, 8, L, D)]),
    ]


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--repeats", type=int, default=5, help="timed runs per case (median)")
    ap.add_argument("--dtype", choices=("fp32", "bf16", "both"), default="both")
    ap.add_argument("--only", default="", help="run the cases whose name contains this")
    ap.add_argument("--no-backward", action="store_true", help="forward only")
    ap.add_argument("--no-write", action="store_true", help="do not update docs/performance.md")
    args = ap.parse_args()

    os.environ.setdefault("NEURON_THREADS", str(args.threads))
    import numpy  # noqa: E402
    import torch  # noqa: E402
    import torch.nn.functional as F  # noqa: E402
    import neuron  # noqa: E402, F401
    from neuron import ops  # noqa: E402
    compare.np, compare.torch = numpy, torch
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    dtypes = {"fp32": [torch.float32], "bf16": [torch.bfloat16],
              "both": [torch.float32, torch.bfloat16]}[args.dtype]
    rows, notes = [], []
    for name, ours, peer, make in cases(torch, F, ops):
        if args.only not in name:
            continue
        for dt in dtypes:
            label = f"{name} {'bf16' if dt == torch.bfloat16 else 'fp32'}"
            inputs = [t.to(dt) for t in make()]
            t0 = time.perf_counter()
            with ops.strict():
                y = ours(*inputs)  # traces and compiles (or loads from the compile cache)
            first = time.perf_counter() - t0
            golden = peer(*[t.double() for t in inputs])
            err = (y.double() - golden).abs().mean().item()
            err_peer = (peer(*inputs).double() - golden).abs().mean().item()
            fudge = 10.0 if dt == torch.float32 else 1.1
            ok = err <= fudge * max(err_peer, 1e-12)
            notes.append(f"{label}: mean error vs float64 ours {err:.2e}, PyTorch {err_peer:.2e} "
                         f"({'ok' if ok else 'FAILS'} the judge); first call {first:.1f} s")
            with torch.no_grad():
                t_ours = compare.median_time(lambda: ours(*inputs), args.repeats)
                t_peer = compare.median_time(lambda: peer(*inputs), args.repeats)
            rows.append((label + " forward", t_ours, t_peer))
            print(f"  {label} forward: ours {t_ours * 1e3:.2f} ms, PyTorch {t_peer * 1e3:.2f} ms "
                  f"(first call {first:.1f} s)", file=sys.stderr, flush=True)
            if args.no_backward:
                continue
            leaves = [t.detach().requires_grad_() for t in inputs]
            dy = torch.randn_like(y)

            def fwd_bwd(fn):
                def run():
                    for t in leaves:
                        t.grad = None
                    fn(*leaves).backward(dy)
                return run
            with ops.strict():
                fwd_bwd(ours)()  # compiles the backward kernels
                t_ours = compare.median_time(fwd_bwd(ours), args.repeats)
            t_peer = compare.median_time(fwd_bwd(peer), args.repeats)
            rows.append((label + " forward + backward", t_ours, t_peer))
            print(f"  {label} forward + backward: ours {t_ours * 1e3:.2f} ms, PyTorch "
                  f"{t_peer * 1e3:.2f} ms", file=sys.stderr, flush=True)

    lines = ["| case | neuron.ops (ms) | PyTorch (ms) | PyTorch / ours |",
             "| --- | ---: | ---: | ---: |"]
    for label, a, b in rows:
        lines.append(f"| {label} | {a * 1e3:.2f} | {b * 1e3:.2f} | {b / a:.2f}x |")
    table = "\n".join(lines)
    desc = compare.machine(args.threads)
    print(table)
    print("\n".join(desc + notes))
    if args.no_write or args.only:
        return
    cmd = (f"PYTHONPATH=build/python python3 bench/compare_ops.py --threads {args.threads} "
           f"--repeats {args.repeats} --dtype {args.dtype}" +
           (" --no-backward" if args.no_backward else ""))
    begin = f"<!-- BEGIN bench/compare_ops.py threads={args.threads} -->"
    end = f"<!-- END bench/compare_ops.py threads={args.threads} -->"
    section = "\n".join([
        begin,
        f"### neuron.ops vs PyTorch per op, {args.threads} thread(s) (written by "
        "bench/compare_ops.py)",
        "",
        f"Median of {args.repeats} timed runs after one warm-up (a run shorter than 20 ms is a "
        "loop of calls lasting about that long, timed per call), both in one process with "
        f"{args.threads} thread(s), called as a PyTorch user calls them (neuron.ops' functions "
        "through the torch.ops.neuron operators, against torch.nn.functional). \"PyTorch / "
        "ours\" above 1.00x: ours is faster. Forward runs under no_grad; forward + backward is "
        "one autograd step.",
        "",
        table,
        "",
        *[f"- {d}" for d in desc + notes],
        "",
        "Regenerate (from the repository root, after `ninja -C build neuron_python`):",
        "",
        "```",
        cmd,
        "```",
        end,
    ])
    compare.write_doc_section(begin, end, section)


if __name__ == "__main__":
    main()
