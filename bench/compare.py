#!/usr/bin/env python3
"""Ours (the native backend, via build/bench/libneuron_bench.so) against PyTorch's CPU kernels
and NumPy's matmul, in one process on the same thread count. Prints a table of median times,
GFLOP/s and ratios, and writes it with the machine description into docs/performance.md
(between the markers of its own section).

    python3 bench/compare.py --build build [--threads 2] [--repeats 5] [--no-4096] [--no-write]
"""
import argparse
import ctypes
import os
import platform
import statistics
import subprocess
import sys
import textwrap
import time

np = torch = None  # imported in main(), after the BLAS thread count is set

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_lib(build):
    lib = ctypes.CDLL(os.path.join(build, "bench", "libneuron_bench.so"))
    i64, c_int, vp = ctypes.c_int64, ctypes.c_int, ctypes.c_void_p
    lib.neuron_bench_matmul.argtypes = [i64, i64, i64, c_int, c_int, c_int, vp, vp, vp]
    lib.neuron_bench_matmul.restype = ctypes.c_double
    lib.neuron_bench_softmax.argtypes = [i64, i64, c_int, c_int, vp, vp]
    lib.neuron_bench_softmax.restype = ctypes.c_double
    lib.neuron_bench_rmsnorm.argtypes = [i64, i64, c_int, c_int, c_int, vp, vp, vp]
    lib.neuron_bench_rmsnorm.restype = ctypes.c_double
    lib.neuron_bench_matmul_blocks.argtypes = [i64, c_int]
    lib.neuron_bench_matmul_blocks.restype = i64
    lib.neuron_bench_error.restype = ctypes.c_char_p
    return lib


def checked(lib, seconds):
    if seconds < 0:
        raise RuntimeError("neuron: " + lib.neuron_bench_error().decode())
    return seconds


def settle(seconds=0.25):
    """Sleep before a contender is timed, so that the other contenders' worker threads have gone
    to sleep. NumPy's OpenBLAS threads busy-wait for tens of milliseconds after each call and
    take the cores from whatever runs next: on the 2-core Xeon of docs/performance.md, our 1024
    fp32 matmul ran at 136-202 GFLOP/s right after `a @ b` and at 314-358 once 0.1 s had passed
    (PyTorch's OpenMP team needs no wait: ours runs its programs on that team, native_run.cpp).
    """
    time.sleep(seconds)


def median_time(fn, repeats, warmup=1, min_sample_s=0.02):
    """Median seconds per call over `repeats` samples. A sample of a call shorter than
    min_sample_s times a loop of enough calls to last that long (the warm-up measures one),
    so a 1 ms op is not judged on single calls, which a shared machine's scheduling swings by
    2x. Settles first (settle())."""
    settle()
    t0 = time.perf_counter()
    for _ in range(warmup):
        fn()
    once = (time.perf_counter() - t0) / max(warmup, 1)
    calls = max(1, min(1000, int(min_sample_s / max(once, 1e-9))))
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - t0) / calls)
    return statistics.median(times)


def machine(threads):
    # "AMD EPYC" alone names no generation (Zen 4 and Zen 5 differ twofold in AVX-512 width),
    # so the family and model numbers go beside it.
    model, family, number = "unknown", "", ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                key, value = key.strip(), value.strip()
                if key == "model name" and model == "unknown":
                    model = value
                elif key == "cpu family" and not family:
                    family = value
                elif key == "model" and not number:
                    number = value
                if model != "unknown" and family and number:
                    break
    except OSError:
        pass
    if family and number:
        model += f" (family {family}, model {number})"

    flags = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    fl = line.split()
                    flags = ", ".join(x for x in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if x in fl)
                    break
    except OSError:
        pass
    load = os.getloadavg()
    blas = ""
    try:
        cfg = np.show_config(mode="dicts")
        blas = cfg["Build Dependencies"]["blas"]["name"] + " " + cfg["Build Dependencies"]["blas"].get("version", "")
    except Exception:  # noqa: BLE001 - only for the description
        pass
    env = ", ".join(f"{k}={os.environ[k]}" for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE",
                                                       "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")
                    if k in os.environ)
    return [
        f"CPU: {model} ({flags}), {os.cpu_count()} logical cores; threads used: {threads}",
        f"Python {platform.python_version()}, torch {torch.__version__}, numpy {np.__version__} "
        f"(BLAS: {blas.strip() or 'unknown'}{'; ' + env if env else ''})",
        f"Load average at the end of the run: {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} (1/5/15 min)",
    ]


CTX = {}  # what the cases share: args, lib, reps, rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"), help="CMake build dir")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--repeats", type=int, default=5, help="timed runs per case (median)")
    ap.add_argument("--no-4096", action="store_true", help="skip the 4096 fp32 matmul")
    ap.add_argument("--no-write", action="store_true", help="do not update docs/performance.md")
    ap.add_argument("--softmax", default="4096x1024", help="softmax shape ROWSxCOLS")
    ap.add_argument("--rmsnorm", default="4096x4096", help="RMSNorm shape ROWSxCOLS")
    ap.add_argument("--only", choices=("matmul", "softmax", "rmsnorm"), action="append",
                    help="run only these cases (repeatable); docs/performance.md is not written")
    args = ap.parse_args()

    # NumPy's OpenBLAS reads its thread count when it loads: same count as ours and torch's.
    # (OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE, when set, are left as they are and reported.)
    os.environ["OPENBLAS_NUM_THREADS"] = str(args.threads)
    global np, torch
    import numpy as np  # noqa: E402
    import torch  # noqa: E402

    lib = load_lib(os.path.abspath(args.build))
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    reps = args.repeats
    rows = []  # (case, peer, ours_s, peer_s, flops)
    CTX.update(args=args, lib=lib, reps=reps, rows=rows)

    def matmul_case(n, dtype, peers):
        case_start = time.perf_counter()
        a = torch.rand(n, n, dtype=torch.float32) - 0.5
        b = torch.rand(n, n, dtype=torch.float32) - 0.5
        if dtype == "bf16":
            a, b = a.to(torch.bfloat16), b.to(torch.bfloat16)
        lhsT = a.t().contiguous()  # our kernel's layout: K on partitions (a transposed)
        out = torch.zeros(n, n, dtype=a.dtype)
        bf16 = 1 if dtype == "bf16" else 0

        def ours(iters):
            return checked(lib, lib.neuron_bench_matmul(n, n, n, bf16, args.threads, iters,
                                                        lhsT.data_ptr(), b.data_ptr(), out.data_ptr()))

        ours(0)
        ref = torch.mm(a.double(), b.double())
        tol = 2e-2 if dtype == "bf16" else 1e-4
        if not torch.allclose(out.double(), ref, rtol=tol, atol=tol * n ** 0.5):
            raise SystemExit(f"matmul {dtype} {n}: ours disagrees with the reference "
                             f"(max abs err {(out.double() - ref).abs().max().item():.3g})")
        settle()
        t_ours = ours(reps)
        flops = 2.0 * n ** 3
        if "torch" in peers:
            t = median_time(lambda: torch.mm(a, b), reps)
            assert torch.allclose(torch.mm(a, b).double(), ref, rtol=tol, atol=tol * n ** 0.5)
            rows.append((f"matmul {dtype} {n}", f"torch.mm ({dtype})", t_ours, t, flops))
        if "numpy" in peers:
            an, bn = a.numpy(), b.numpy()
            t = median_time(lambda: an @ bn, reps)
            assert np.allclose(an @ bn, ref.numpy(), rtol=tol, atol=tol * n ** 0.5)
            rows.append((f"matmul {dtype} {n}", "numpy @ (OpenBLAS)", t_ours, t, flops))
        print(f"  done matmul {dtype} {n} ({time.perf_counter() - case_start:.1f} s)",
              file=sys.stderr, flush=True)

    want = set(args.only or ("matmul", "softmax", "rmsnorm"))
    if args.only:
        args.no_write = True
    note_4096 = ""
    if "matmul" in want:
        started = time.perf_counter()
        matmul_case(1024, "fp32", ("torch", "numpy"))
        matmul_case(2048, "fp32", ("torch", "numpy"))
        elapsed = time.perf_counter() - started
        if args.no_4096:
            note_4096 = "fp32 4096 skipped (--no-4096)."
        elif elapsed > 20:
            # 4096 costs ~8x the 2048 case (per run, three contenders).
            note_4096 = (f"fp32 4096 skipped: the 1024 and 2048 cases took {elapsed:.0f} s, so "
                         f"4096 would exceed about a minute on this machine; run with a quieter "
                         f"machine.")
        else:
            matmul_case(4096, "fp32", ("torch", "numpy"))
        matmul_case(2048, "bf16", ("torch",))
    if "softmax" in want:
        softmax_case()
    if "rmsnorm" in want:
        for dtype in ("fp32", "bf16"):
            rmsnorm_case(dtype)
    table_and_write(args, lib, rows, reps, note_4096)


def softmax_case():
    args, lib, reps, rows = CTX["args"], CTX["lib"], CTX["reps"], CTX["rows"]
    r, c = (int(v) for v in args.softmax.split("x"))
    x = torch.randn(r, c, dtype=torch.float32) * 4
    y = torch.zeros_like(x)
    checked(lib, lib.neuron_bench_softmax(r, c, args.threads, 0, x.data_ptr(), y.data_ptr()))
    if not torch.allclose(y, torch.softmax(x, dim=1), rtol=1e-5, atol=1e-6):
        raise SystemExit("softmax: ours disagrees with torch.softmax")
    settle()
    t_ours = checked(lib, lib.neuron_bench_softmax(r, c, args.threads, reps, x.data_ptr(), y.data_ptr()))
    t = median_time(lambda: torch.softmax(x, dim=1), reps)
    # Bytes moved (read x, write out) are the natural unit; GFLOP/s uses ~5 flops per element.
    rows.append((f"softmax fp32 {r}x{c}", "torch.softmax", t_ours, t, 5.0 * r * c))


def rmsnorm_case(dtype):
    args, lib, reps, rows = CTX["args"], CTX["lib"], CTX["reps"], CTX["rows"]
    r, c = (int(v) for v in args.rmsnorm.split("x"))
    tdt = torch.bfloat16 if dtype == "bf16" else torch.float32
    x = torch.randn(r, c, dtype=torch.float32).to(tdt)
    w = (torch.rand(1, c, dtype=torch.float32) + 0.5).to(tdt)
    y = torch.zeros_like(x)
    bf16 = 1 if dtype == "bf16" else 0

    def ours(iters):
        return checked(lib, lib.neuron_bench_rmsnorm(r, c, bf16, args.threads, iters, x.data_ptr(),
                                                     w.data_ptr(), y.data_ptr()))

    def peer():
        return torch.nn.functional.rms_norm(x, (c,), w[0], 1e-6)

    ours(0)
    xd = x.double()
    ref = xd / torch.sqrt((xd * xd).mean(dim=1, keepdim=True) + 1e-6) * w.double()
    tol = 1e-2 if dtype == "bf16" else 1e-5
    if not torch.allclose(y.double(), ref, rtol=tol, atol=tol):
        raise SystemExit(f"rmsnorm {dtype}: ours disagrees with the reference "
                         f"(max abs err {(y.double() - ref).abs().max().item():.3g})")
    assert torch.allclose(peer().double(), ref, rtol=tol, atol=tol)
    settle()
    t_ours = ours(reps)
    t = median_time(peer, reps)
    # ~4 flops per element (square, add, two multiplies).
    rows.append((f"rmsnorm {dtype} {r}x{c}", "F.rms_norm", t_ours, t, 4.0 * r * c))


def table_and_write(args, lib, rows, reps, note_4096):
    header = "| case | peer | ours (ms) | peer (ms) | ours GFLOP/s | peer GFLOP/s | ours / peer |"
    lines = [header, "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for case, peer, to, tp, fl in rows:
        lines.append(f"| {case} | {peer} | {to * 1e3:.2f} | {tp * 1e3:.2f} | {fl / to * 1e-9:.1f} "
                     f"| {fl / tp * 1e-9:.1f} | {tp / to:.2f}x |")
    table = "\n".join(lines)
    desc = machine(args.threads)
    print(table)
    print("\n".join(desc))
    if note_4096:
        print(note_4096)

    if args.no_write:
        return
    build = os.path.relpath(os.path.abspath(args.build), ROOT)
    if build.startswith(".."):
        build = "build"  # a build dir outside the tree: show the conventional one
    cmd = f"python3 bench/compare.py --build {build} --threads {args.threads} --repeats {reps}" + \
        (" --no-4096" if args.no_4096 else "")
    blocks = {n: lib.neuron_bench_matmul_blocks(n, args.threads) for n in (1024, 2048)}
    # One section per thread count, so a 1-thread and a 2-thread run both stay in the file.
    begin = f"<!-- BEGIN bench/compare.py threads={args.threads} -->"
    end = f"<!-- END bench/compare.py threads={args.threads} -->"
    section = "\n".join([
        begin,
        f"### Ours vs PyTorch and NumPy, {args.threads} thread(s) (written by bench/compare.py)",
        "",
        textwrap.fill(
            f"Median of {reps} timed runs after a warm-up (ours: runs for at least 20 ms; a peer's "
            "run shorter than 20 ms is a loop of calls lasting about that long, timed per call), "
            "all contenders in one process with "
            f"{args.threads} thread(s) (`torch.set_num_threads`, our `NativeOptions::threads`). "
            "\"ours / peer\" is peer time / our time: above 1.00x we are faster. GFLOP/s = "
            "2n^3 / time for matmul, 5 flops per element for softmax and 4 for RMSNorm. Ours is "
            f"the library's `kernels/matmul.hpp` (rows per program: {128 * blocks[1024]} at 1024, "
            f"{128 * blocks[2048]} at 2048), `kernels/softmax.hpp` and `bench/rmsnorm.hpp`.",
            width=100),
        "",
        table,
        "",
        *[f"- {d}" for d in desc],
        *([f"- {note_4096}"] if note_4096 else []),
        "",
        "Regenerate (from the repository root, after `ninja -C build neuron_bench`):",
        "",
        "```",
        cmd,
        "```",
        end,
    ])
    write_doc_section(begin, end, section)


def write_doc_section(begin, end, section):
    """Replaces the text between the markers `begin` and `end` in docs/performance.md with
    `section` (which starts with `begin` and ends with `end`), or appends it."""
    path = os.path.join(ROOT, "docs", "performance.md")
    with open(path) as f:
        text = f.read()
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        text = head + section + rest.split(end, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    with open(path, "w") as f:
        f.write(text)
    print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
