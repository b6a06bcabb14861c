"""neuron.flex_attention against PyTorch's flex_attention, measured in the same process.

    PYTHONPATH=build/python python3 bench/flex_attention.py [--L 2048] [--H 8] [--D 64]
        [--dtypes fp32,bf16] [--cases causal,sliding_window,document,alibi,softcap]
        [--compile] [--eager] [--kernel] [--train] [--mask-len 131072] [--threads 1]
        [--clock cpu]

Prints the CPU, then per case the median time of ours, of PyTorch's eager flex_attention and
(with --compile) of torch.compile(flex_attention), and the ratios peer / ours (> 1: ours is
faster). --kernel also times the neuron-kernel path (kernel_options={"BACKEND": "native"}:
kernel.py natively compiled; its first call, which traces and compiles, separately).
--train times forward+backward against SDPA's (PyTorch refuses flex backward on CPU), and
causal attention with learnable score_mod tensors (ALiBi slopes[h]; a relative-position bias
rel[q - kv]) on the host path and through the kernels.
--mask-len times create_block_mask(causal) at that length and its peak memory (a child
process, so the figure is not mixed with this one's).
"""
import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
import warnings

import torch
import torch.nn.attention.flex_attention as tfa

import neuron.flex_attention as nfa

warnings.filterwarnings("ignore")
tfa._FLEX_ATTENTION_DISABLE_COMPILE_DEBUG = True  # eager peer without an inner compile


def cpu_model():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def timeit(fn, reps):
    """Median seconds of one call after two warm-up calls (the default BACKEND compiles its
    kernel at a signature's second call): CPU time of this process (--clock cpu, the default:
    robust on a shared machine where wall time includes waiting for a core) or wall time."""
    clock = time.process_time if CLOCK == "cpu" else time.perf_counter
    fn()
    fn()
    ts = []
    for _ in range(reps):
        t0 = clock()
        fn()
        ts.append(clock() - t0)
    return statistics.median(ts)


CLOCK = "cpu"


def cases(L, H):
    doc = torch.repeat_interleave(torch.arange(8), L // 8)
    slopes = torch.exp2(-8.0 * (torch.arange(H) + 1) / H)

    def causal(b, h, q, kv):
        return q >= kv

    def window(b, h, q, kv):
        return (q >= kv) & (q - kv <= 256)

    def document(b, h, q, kv):
        return (doc[q] == doc[kv]) & (q >= kv)

    def alibi(s, b, h, q, kv):
        return s + slopes[h] * (kv - q)

    def softcap(s, b, h, q, kv):
        return 30 * torch.tanh(s / 30)
    return {"causal": (None, causal), "sliding_window": (None, window),
            "document": (None, document), "alibi": (alibi, causal),
            "softcap": (softcap, causal), "dense": (None, None)}


def learnable(L, H):
    """(name, score_mod, its learnable tensors) for the --train lines."""
    slopes = torch.exp2(-8.0 * (torch.arange(H) + 1) / H).requires_grad_()
    rel = (0.1 * torch.randn(2 * L)).requires_grad_()

    def alibi(s, b, h, q, kv):
        return s + slopes[h] * (kv - q)

    def relative(s, b, h, q, kv):
        return s + rel[q - kv + L]
    return [("learnable ALiBi slopes[h]", alibi, [slopes]),
            ("learnable bias rel[q - kv]", relative, [rel])]


def mask_child(n):
    """Runs in a child: create_block_mask(causal) at n x n; prints seconds and peak RSS MiB."""
    def status(field):
        for line in open("/proc/self/status"):
            if line.startswith(field):
                return int(line.split()[1])  # kB
    before = status("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:  # resets the peak (VmHWM) to the current RSS
        f.write("5")
    t0 = time.perf_counter()
    bm = nfa.create_block_mask(lambda b, h, q, kv: q >= kv, 1, 1, n, n)
    took = time.perf_counter() - t0
    print(f"{took:.2f} {(status('VmHWM') - before) / 1024:.0f} {bm.sparsity():.3f}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--L", type=int, default=2048)
    ap.add_argument("--H", type=int, default=8)
    ap.add_argument("--D", type=int, default=64)
    ap.add_argument("--dtypes", default="fp32,bf16")
    ap.add_argument("--cases", default="causal,sliding_window,document,alibi,softcap")
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--eager", action="store_true", help="also time PyTorch's eager path")
    ap.add_argument("--kernel", action="store_true", help="also time the native neuron kernel")
    ap.add_argument("--train", action="store_true")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--clock", choices=["cpu", "wall"], default="cpu")
    ap.add_argument("--mask-len", type=int, default=0)
    ap.add_argument("--mask-child", type=int, default=0, help=argparse.SUPPRESS)
    a = ap.parse_args()
    global CLOCK
    CLOCK = a.clock
    torch.set_num_threads(a.threads)
    if a.mask_child:
        mask_child(a.mask_child)
        return
    print(f"CPU: {cpu_model()}, {os.cpu_count()} cores, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads, B=1 H={a.H} L={a.L} D={a.D}, {a.clock} time, "
          f"median of {a.reps}")
    dts = {"fp32": torch.float32, "bf16": torch.bfloat16}
    all_cases = cases(a.L, a.H)
    for dn in a.dtypes.split(","):
        dt = dts[dn]
        q, k, v = (torch.randn(1, a.H, a.L, a.D, dtype=dt) for _ in range(3))
        for name in a.cases.split(","):
            score_mod, mask_mod = all_cases[name]
            bm = nfa.create_block_mask(mask_mod, 1, 1, a.L, a.L) if mask_mod else None
            tbm = tfa.create_block_mask(mask_mod, 1, 1, a.L, a.L, device="cpu") \
                if mask_mod else None
            ours = timeit(lambda: nfa.flex_attention(q, k, v, score_mod, bm), a.reps)
            line = f"{name:15s} {dn}: ours {ours * 1e3:8.1f} ms"
            kern = None
            if a.kernel:
                opts = {"BACKEND": "native"}
                t0 = time.perf_counter()
                nfa.flex_attention(q, k, v, score_mod, bm, kernel_options=opts)
                first = time.perf_counter() - t0
                kern = timeit(lambda: nfa.flex_attention(q, k, v, score_mod, bm,
                                                         kernel_options=opts), a.reps)
                line += (f" | kernel {kern * 1e3:8.1f} ms ({ours / kern:5.2f}x of ours; first "
                         f"call {first:.1f} s)")
            if a.eager:
                eager = timeit(lambda: tfa.flex_attention(q, k, v, score_mod, tbm), 1)
                line += f" | eager {eager * 1e3:8.1f} ms ({eager / ours:5.2f}x)"
            if a.compile:
                # A fresh compile per case: one function recompiled for every mod would hit
                # dynamo's recompile limit and silently run eagerly.
                torch._dynamo.reset()
                compiled = torch.compile(tfa.flex_attention)
                t0 = time.perf_counter()
                compiled(q, k, v, score_mod, tbm)
                first = time.perf_counter() - t0
                comp = timeit(lambda: compiled(q, k, v, score_mod, tbm), a.reps)
                line += (f" | compiled {comp * 1e3:8.1f} ms ({comp / ours:5.2f}x; first call "
                         f"{first:.1f} s)")
                if kern is not None:
                    line += f" | compiled / kernel {comp / kern:5.2f}x"
            print(line, flush=True)
    # A new mod: trace + codegen, cold (a constant nobody used before).
    c = 1.0 + (time.time() % 1)
    t0 = time.perf_counter()
    g = nfa.tracing.trace(lambda s, b, h, qi, kv: torch.tanh(s / c) * c + (qi - kv) * 0.01,
                          nfa.tracing.ARGS_SCORE)
    nfa.codegen.compile_graph(g)
    print(f"new score_mod trace + compile: {(time.perf_counter() - t0) * 1e3:.2f} ms")
    if a.train:
        q, k, v = (torch.randn(1, a.H, a.L, a.D, requires_grad=True) for _ in range(3))
        bm = nfa.create_block_mask(all_cases["causal"][1], 1, 1, a.L, a.L)

        def ours_fb():
            nfa.flex_attention(q, k, v, block_mask=bm).sum().backward()

        def sdpa_fb():
            torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True) \
                .sum().backward()
        t_o, t_s = timeit(ours_fb, a.reps), timeit(sdpa_fb, a.reps)
        line = (f"train causal fp32 fwd+bwd: ours {t_o * 1e3:.1f} ms | SDPA {t_s * 1e3:.1f} ms "
                f"(ours / SDPA = {t_o / t_s:.2f})")
        if a.kernel:
            def kernel_fb():
                nfa.flex_attention(q, k, v, block_mask=bm,
                                   kernel_options={"BACKEND": "native"}).sum().backward()
            t0 = time.perf_counter()
            kernel_fb()
            first = time.perf_counter() - t0
            t_k = timeit(kernel_fb, a.reps)
            line += (f" | kernel {t_k * 1e3:.1f} ms (kernel / SDPA = {t_k / t_s:.2f}; first "
                     f"call {first:.1f} s)")
        print(line)
        for name, mod, params in learnable(a.L, a.H):
            def fb(backend):
                nfa.flex_attention(q, k, v, mod, bm, kernel_options={"BACKEND": backend}) \
                    .sum().backward()
            t0 = time.perf_counter()
            fb("native")
            first = time.perf_counter() - t0
            t_h, t_k = timeit(lambda: fb("host"), a.reps), timeit(lambda: fb("native"), a.reps)
            print(f"train causal + {name} fp32 fwd+bwd: host path {t_h * 1e3:.1f} ms | kernel "
                  f"{t_k * 1e3:.1f} ms (host / kernel = {t_h / t_k:.2f}; kernel / SDPA = "
                  f"{t_k / t_s:.2f}; first call {first:.1f} s)")
    if a.mask_len:
        r = subprocess.run([sys.executable, __file__, "--mask-child", str(a.mask_len),
                            "--threads", str(a.threads)], capture_output=True, text=True,
                           env=dict(os.environ))
        took, mib, sp = r.stdout.split()
        print(f"create_block_mask(causal) {a.mask_len}x{a.mask_len}: {took} s, peak memory "
              f"+{mib} MiB, sparsity {sp}%")


if __name__ == "__main__":
    main()
