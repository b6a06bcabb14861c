#!/usr/bin/env python3
"""The native cost of single engine instructions: each case is a kernel that runs one
instruction (or a short fixed pair) `--iterations` times in a rolled loop on a [128, 512] fp32
SBUF tile, run natively on one program; the time per run, divided by iterations and elements,
is the instruction's cost in ns per element (best of --repeats). This is how a kernel's native
time breaks down by instruction: multiply each instruction's cost by the elements it touches.
It found the two slow paths fixed in docs/performance.md ("Per-instruction native cost").

    PYTHONPATH=build/python python3 bench/instr_speed.py [--iterations 200] [--repeats 5]
        [--only exp] [--write]
"""
import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

P, F = 128, 512


def cases(nl, nisa):
    """(name, body(t, r)) or (name, body(t, r, s), setup(t)): t is the input tile, r the [P, F]
    result tile the case writes, s what setup made of t before the loop (not timed per
    instruction: it runs once)."""
    def col():
        return nl.ndarray((P, 1), nl.float32)

    def psum_copy(t, r):
        p = nl.ndarray((P, F), nl.float32, buffer=nl.psum)
        nisa.tensor_copy(p, t)
        nisa.tensor_copy(r, p)

    def sub_column(t, r):
        c = col()
        nisa.tensor_copy(c, t[:, 0:1])
        nisa.tensor_scalar(r, t, nl.subtract, c)

    def exp_reduce(t, r):
        nisa.activation(r, nl.exp, t, scale=0.5, reduce_op=nl.add, reduce_res=col())

    def reduce_max(t, r):
        c = col()
        nisa.tensor_reduce(c, nl.maximum, t, axis=1)
        nisa.tensor_copy(r[:, 0:1], c)

    def transpose(t, r):
        p = nl.ndarray((P, P), nl.float32, buffer=nl.psum)
        nisa.nc_transpose(p, t[:, 0:P])
        nisa.tensor_copy(r[:, 0:P], p)

    def matmul(t, r):
        p = nl.ndarray((P, F), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(p, t[:, 0:P], t)
        nisa.tensor_copy(r, p)

    def cast(dtype):
        def setup(t):
            s = nl.ndarray((P, F), dtype)
            nisa.tensor_copy(s, t)
            return s
        return setup

    def matmul_of(t, r, s):
        p = nl.ndarray((P, F), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(p, s[:, 0:P], s)
        nisa.tensor_copy(r, p)

    def matmul_mixed(t, r, s):
        p = nl.ndarray((P, F), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(p, t[:, 0:P], s)
        nisa.tensor_copy(r, p)

    def gather(t, r):
        ix = nl.ndarray((P, F), nl.int32)  # t in [-1, 1] -> indices in [0, 510]
        nisa.tensor_scalar(ix, t, nl.add, 1.0, op1=nl.multiply, operand1=255.0)
        nisa.nc_n_gather(r, t, ix)

    def top8_positions(t, r):
        nisa.max8(r[:, 0:8], t)
        ix = nl.ndarray((P, 8), nl.uint32)
        nisa.nc_find_index8(ix, t, r[:, 0:8])

    def top8_removed(t, r):
        nisa.max8(r[:, 0:8], t)
        nisa.nc_match_replace8(r, t, r[:, 0:8], -1e30)

    return [
        ("tensor_copy SBUF -> SBUF", lambda t, r: nisa.tensor_copy(r, t)),
        ("tensor_copy via PSUM (2 instructions)", psum_copy),
        ("tensor_tensor multiply", lambda t, r: nisa.tensor_tensor(r, t, t, nl.multiply)),
        ("tensor_scalar multiply by a constant", lambda t, r: nisa.tensor_scalar(r, t, nl.multiply, 2.0)),
        ("tensor_scalar subtract a column (+ its copy)", sub_column),
        ("activation exp", lambda t, r: nisa.activation(r, nl.exp, t)),
        ("activation exp with scale and row sum", exp_reduce),
        ("activation copy with row sum",
         lambda t, r: nisa.activation(r, nl.copy, t, reduce_op=nl.add, reduce_res=col())),
        ("tensor_reduce max (+ column copy)", reduce_max),
        ("nc_transpose 128x128 (+ copy; per 128 columns)", transpose),
        ("nc_matmul 128x128x512 (+ PSUM copy)", matmul),
        ("nc_matmul bf16 operands (+ PSUM copy)", matmul_of, cast(nl.bfloat16)),
        ("nc_matmul fp16 operands (+ PSUM copy)", matmul_of, cast(nl.float16)),
        ("nc_matmul fp8 e4m3 operands (+ PSUM copy)", matmul_of, cast(nl.float8_e4m3)),
        ("nc_matmul fp32 x bf16 (+ PSUM copy)", matmul_mixed, cast(nl.bfloat16)),
        ("nc_n_gather (+ int32 index tile)", gather),
        ("tensor_tensor_scan multiply then add",
         lambda t, r: nisa.tensor_tensor_scan(r, t, t, 0.0, nl.multiply, nl.add)),
        ("bn_stats (per 512 elements)", lambda t, r: nisa.bn_stats(r[:, 0:6], t)),
        ("max8", lambda t, r: nisa.max8(r[:, 0:8], t)),
        ("max8 + nc_find_index8 (top-8 positions)", top8_positions),
        ("max8 + nc_match_replace8 (top-8 removed)", top8_removed),
        ("tensor_partition_reduce add", lambda t, r: nisa.tensor_partition_reduce(r[0:1, :], nl.add, t)),
        ("affine_select (causal mask)", lambda t, r: nisa.affine_select(r, [[-1, F]], 1, t, -9984.0)),
        ("rand2", lambda t, r: nisa.rand2(r, 0.0, 1.0)),
        ("dropout 0.5", lambda t, r: nisa.dropout(r, t, 0.5)),
    ]


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iterations", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--only", default="", help="run the cases whose name contains this")
    ap.add_argument("--dtype", default="float32",
                    help="the tiles' dtype (float32, bfloat16, float16, float8_e4m3, ...)")
    ap.add_argument("--write", action="store_true", help="write the table into docs/performance.md")
    args = ap.parse_args()
    os.environ.setdefault("NEURON_THREADS", "1")

    import neuron  # noqa: E402
    import neuron.isa as nisa  # noqa: E402
    import neuron.language as nl  # noqa: E402
    import torch  # noqa: E402, F401  (compare.machine prints its version)
    import compare  # noqa: E402
    compare.np, compare.torch = np, torch

    n = args.iterations
    tile_dt = getattr(nl, args.dtype)
    rows = []
    for name, body, *setup in cases(nl, nisa):
        if args.only not in name:
            continue

        @neuron.kernel
        def k(x):
            out = nl.ndarray((P, F), nl.float32, buffer=nl.shared_hbm)
            t = nl.ndarray((P, F), nl.float32)
            nisa.dma_copy(t, x)
            if tile_dt != nl.float32:
                t32, t = t, nl.ndarray((P, F), tile_dt)
                nisa.tensor_copy(t, t32)
            r = nl.ndarray((P, F), tile_dt)
            nisa.memset(r, 0.0)
            made = [f(t) for f in setup]
            for _ in nl.sequential_range(n):
                body(t, r, *made)
            if tile_dt != nl.float32:
                r32 = nl.ndarray((P, F), nl.float32)
                nisa.tensor_copy(r32, r)
                r = r32
            nisa.dma_copy(out, r)
            return out

        x = np.random.default_rng(0).uniform(-1, 1, (P, F)).astype(np.float32)
        k(x)
        best = float("inf")
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            k(x)
            best = min(best, time.perf_counter() - t0)
        per = best / n
        rows.append((name, per / (P * F) * 1e9, per * 1e6))
        print(f"{name:48s} {rows[-1][1]:6.2f} ns/element  {rows[-1][2]:7.1f} us/instruction",
              flush=True)

    lines = [f"| instruction on a [128, 512] {args.dtype} tile | ns / element | us / instruction |",
             "| --- | ---: | ---: |"]
    lines += [f"| {a} | {b:.2f} | {c:.1f} |" for a, b, c in rows]
    lines += [""] + compare.machine(1)
    print("\n".join(lines[-3:]))
    if args.write:
        begin, end = "<!-- instr_speed begin -->", "<!-- instr_speed end -->"
        compare.write_doc_section(begin, end, begin + "\n" + "\n".join(lines) + "\n" + end)


if __name__ == "__main__":
    main()
