"""Coverage of neuron.ops: every op over its matrix (dtype fp32 / bf16, shape classes with the
odd sizes 1, 7, 127, 129, 1000, causal / GQA / bias / weight flags, forward and backward, on the
native executor and on the simulator), each case judged against a float64 PyTorch reference by
FLEX.md's rule (mean |golden - ours| within a fudge factor of PyTorch's own error in the same
dtype: 10 for fp32, 1.1 for bf16; gradients from torch autograd on the float64 reference).
Writes docs/coverage.md: passed, failed, fell back, skipped, each fallback, failure and skip
with its reason. Not part of CI (minutes); run it after changing a kernel:

    PYTHONPATH=build/python python3 scripts/op_coverage.py [--out docs/coverage.md] [--only sdpa]

A case "falls back" when neuron.ops ran PyTorch instead of a kernel (the reason is the
FallbackWarning's); it is "skipped" when the matrix leaves it out on purpose (the reason says
why, e.g. the simulator at sizes it would take minutes on). Attention in bf16 is judged
with the same 1.1: the kernels round what PyTorch's flash kernel rounds, and compute in fp32
where PyTorch takes its math path (head dims E != Ev, inputs not 4-D).
"""
import argparse
import itertools
import os
import platform
import sys
import time
import traceback
import warnings

import torch

import neuron  # noqa: F401 (registers torch.ops.neuron)
from neuron import ops
from neuron import torch as nt
from neuron.ops import _kernels

F = torch.nn.functional
FUDGE = {torch.float32: 10.0, torch.bfloat16: 1.1}
FLOOR = {torch.float32: 1e-7, torch.bfloat16: 1e-4}
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
SIM_MAX_ELEMENTS = 4_000_000  # the simulator runs cases whose largest tensor is at most this


def rand(shape, seed, scale=1.0):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed),
                       dtype=torch.float64) * scale


class Case:
    def __init__(self, op, params, inputs, ref, ours, fudge=None, skip=None):
        self.op, self.params, self.inputs = op, params, inputs
        self.ref, self.ours, self.fudge, self.skip = ref, ours, fudge, skip


# ---- the matrix ---------------------------------------------------------------------------

def linear_cases():
    for (m, k, n), bias in itertools.product(
            [(1, 7, 1), (7, 127, 129), (129, 129, 7), (127, 1000, 129), (1000, 129, 127)],
            [False, True]):
        inputs = [rand((m, k), 1), rand((n, k), 2, 0.1), rand((n,), 3) if bias else None]
        yield Case("linear", f"M={m} K={k} N={n} bias={bias}", inputs, F.linear, ops.linear)
    yield Case("linear", "x [3, 129] @ 1-D weight [129]",
               [rand((3, 129), 1), rand((129,), 2)], F.linear, ops.linear)


def sdpa_cases():
    shapes = [(1, 1, 64, 64), (7, 129, 64, 64), (127, 127, 128, 128), (129, 7, 64, 32),
              (1000, 1000, 64, 64)]
    for (L, S, E, Ev), causal, gqa in itertools.product(shapes, [False, True], [False, True]):
        hq, hkv = (4, 2) if gqa else (2, 2)
        inputs = [rand((1, hq, L, E), 4), rand((1, hkv, S, E), 5), rand((1, hkv, S, Ev), 6)]
        kw = {"is_causal": causal, "enable_gqa": gqa}
        yield Case("scaled_dot_product_attention",
                   f"L={L} S={S} E={E} Ev={Ev} Hq={hq} Hkv={hkv} causal={causal}", inputs,
                   lambda q, k, v, kw=kw: F.scaled_dot_product_attention(q, k, v, **kw),
                   lambda q, k, v, kw=kw: ops.scaled_dot_product_attention(q, k, v, **kw))
    # A head dim over 128: the scores contract in two chunks (128 + 64).
    q, k, v = rand((1, 2, 7, 192), 4), rand((1, 2, 9, 192), 5), rand((1, 2, 9, 64), 6)
    yield Case("scaled_dot_product_attention", "L=7 S=9 E=192 Ev=64 (head dim > 128)",
               [q, k, v], F.scaled_dot_product_attention, ops.scaled_dot_product_attention)
    # Masks (the masked kernels): a boolean [L, S], a float [B, H, L, S], a key padding row
    # [B, 1, 1, S] that hides the first 600 keys of S = 1000 (a whole key block) in batch 1.
    mask = rand((7, 9), 7) > 0
    bias = rand((2, 4, 7, 9), 8)
    pad = torch.zeros(2, 1, 1, 1000)
    pad[1, ..., :600] = float("-inf")
    for what, m, (q_, k_, v_) in (
            ("boolean attn_mask [7, 9]", mask, (q[..., :64], k[..., :64], v)),
            ("float attn_mask [2, 4, 7, 9]", bias,
             (rand((2, 4, 7, 64), 4), rand((2, 4, 9, 64), 5), rand((2, 4, 9, 64), 6))),
            ("key padding attn_mask [2, 1, 1, 1000]", pad,
             (rand((2, 4, 7, 64), 4), rand((2, 4, 1000, 64), 5), rand((2, 4, 1000, 64), 6)))):
        yield Case("scaled_dot_product_attention", f"L=7 S={k_.shape[2]} E=64 {what}",
                   [q_, k_, v_],
                   lambda q, k, v, m=m: F.scaled_dot_product_attention(q, k, v, m.to(
                       q.dtype) if m.dtype != torch.bool else m),
                   lambda q, k, v, m=m: ops.scaled_dot_product_attention(q, k, v, m.to(
                       q.dtype) if m.dtype != torch.bool else m))
    # Arguments the kernels do not take: neuron.ops falls back to PyTorch (and says why).
    yield Case("scaled_dot_product_attention", "L=7 S=9 E=520 Ev=64 (head dim > 512)",
               [rand((1, 2, 7, 520), 4), rand((1, 2, 9, 520), 5), v],
               F.scaled_dot_product_attention, ops.scaled_dot_product_attention)


ROWS_COLS = [(1, 7), (7, 127), (127, 129), (129, 1000), (1000, 129)]


def softmax_cases():
    for r, c in ROWS_COLS:
        yield Case("softmax", f"[{r}, {c}] dim=-1", [rand((r, c), 7, 3.0)],
                   lambda x: F.softmax(x, -1), lambda x: ops.softmax(x, -1))
    yield Case("softmax", "[7, 129, 5] dim=1", [rand((7, 129, 5), 8, 3.0)],
               lambda x: F.softmax(x, 1), lambda x: ops.softmax(x, 1))


def norm_cases():
    for (r, d), weight in itertools.product(ROWS_COLS, [False, True]):
        x, w, b = rand((r, d), 9), rand((d,), 10, 0.2) + 1, rand((d,), 11, 0.2)
        yield Case("rms_norm", f"[{r}, {d}] weight={weight}", [x, w if weight else None],
                   lambda x, w, d=d: F.rms_norm(x, (d,), w, 1e-5),
                   lambda x, w, d=d: ops.rms_norm(x, (d,), w, 1e-5))
        yield Case("layer_norm", f"[{r}, {d}] weight+bias={weight}",
                   [x, w if weight else None, b if weight else None],
                   lambda x, w, b, d=d: F.layer_norm(x, (d,), w, b),
                   lambda x, w, b, d=d: ops.layer_norm(x, (d,), w, b))


def _swiglu_ref(x):
    a, b = x.chunk(2, -1)
    return F.silu(a) * b


def swiglu_cases():
    for r, h in [(1, 7), (7, 127), (127, 129), (129, 1000), (1000, 129)]:
        yield Case("swiglu", f"[{r}, 2*{h}]", [rand((r, 2 * h), 12)], _swiglu_ref, ops.swiglu)


def _rope_ref(x, cos, sin):
    h = x.shape[-1] // 2
    x1, x2 = x[..., :h], x[..., h:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)


def rope_cases():
    for L, D in [(1, 8), (7, 64), (127, 128), (129, 64), (1000, 128)]:
        ang = torch.arange(L, dtype=torch.float64)[:, None] * \
            (10000.0 ** (-torch.arange(D // 2, dtype=torch.float64) / (D // 2)))[None]
        cos, sin = ang.cos(), ang.sin()
        # cos and sin are constants (no gradient): the case closes over them.
        yield Case("rope", f"x [2, 3, {L}, {D}]", [rand((2, 3, L, D), 13)],
                   lambda x, c=cos, s=sin: _rope_ref(x, c.to(x.dtype), s.to(x.dtype)),
                   lambda x, c=cos, s=sin: ops.rope(x, c.to(x.dtype), s.to(x.dtype)))


FAMILIES = {"linear": linear_cases, "sdpa": sdpa_cases, "softmax": softmax_cases,
            "norms": norm_cases, "swiglu": swiglu_cases, "rope": rope_cases}


# ---- running one case --------------------------------------------------------------------

def judge(ours, peer, golden, fudge):
    if ours.dtype != peer.dtype or ours.shape != golden.shape:
        return f"dtype/shape {ours.dtype} {tuple(ours.shape)}, want {peer.dtype} " \
               f"{tuple(golden.shape)}"
    if torch.isnan(ours).any():
        return "NaN in the result"
    err = (ours.double() - golden).abs().mean().item()
    err_peer = (peer.double() - golden).abs().mean().item()
    bound = fudge * max(err_peer, FLOOR[ours.dtype] * golden.abs().mean().item())
    return None if err <= bound else \
        f"mean error {err:.3g} > {bound:.3g} (PyTorch's {err_peer:.3g})"


def run_case(case, dtype, backward):
    """(status, reason): passed, failed or fell back."""
    fudge = (case.fudge or FUDGE)[dtype]

    def prepared(dt):
        return [None if t is None else t.detach().to(dt).requires_grad_(backward)
                for t in case.inputs]
    g64, peer, ours = prepared(torch.float64), prepared(dtype), prepared(dtype)
    before = nt.fallback_counts()
    nt._warned.clear()  # the warning (it holds the reason) comes once per op otherwise
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        y64, yp, yo = case.ref(*g64), case.ref(*peer), case.ours(*ours)
        bad = judge(yo, yp, y64, fudge)
        if bad is None and backward:
            dy = rand(y64.shape, 99)
            y64.backward(dy)
            yp.backward(dy.to(dtype))
            yo.backward(dy.to(dtype))
            for i, (a, b, c) in enumerate(zip(ours, peer, g64)):
                if a is not None:
                    bad = judge(a.grad, b.grad, c.grad, fudge)
                    if bad:
                        bad = f"gradient of input {i}: {bad}"
                        break
    after = nt.fallback_counts()
    fell = sorted(k for k in after if after[k] != before.get(k, 0))
    if fell:
        msgs = sorted({str(w.message) for w in caught
                       if issubclass(w.category, nt.FallbackWarning)})
        why = "; ".join(msgs) or ", ".join(f"{op} ({kind})" for op, kind in fell)
        return ("failed", f"fell back and {bad}") if bad else ("fell back", why)
    return ("failed", bad) if bad else ("passed", "")


# ---- the report --------------------------------------------------------------------------

def progress(done, total, label, start):
    width = 30
    filled = width * done // max(total, 1)
    elapsed = time.time() - start
    sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} "
                     f"{elapsed:5.0f}s {label[:60]:<60}")
    sys.stderr.flush()


def cpu_name():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def write_doc(path, rows, seconds, argv):
    statuses = ["passed", "failed", "fell back", "skipped"]
    ops_seen = sorted({r[0] for r in rows})
    lines = ["# Coverage of neuron.ops", "",
             "Generated by `scripts/op_coverage.py` (do not edit): every op of `neuron.ops` over "
             "its matrix, each case judged against a float64 PyTorch reference by FLEX.md's "
             "rule (mean error within a fudge factor of PyTorch's own error in the same dtype: "
             "10 for fp32, 1.1 for bf16; gradients against torch "
             "autograd on the float64 reference). *Fell back*: neuron.ops ran PyTorch instead "
             "of a kernel (DESIGN.md's rule); *skipped*: left out of the matrix on purpose.", "",
             f"Run: `{' '.join(argv)}`, {seconds:.0f} s, torch {torch.__version__}, "
             f"{cpu_name()}, {os.cpu_count()} CPUs, {torch.get_num_threads()} torch threads; "
             f"simulator cases up to {SIM_MAX_ELEMENTS} elements per tensor.", "",
             "## Summary", "",
             "| op | " + " | ".join(statuses) + " |", "| --- |" + " ---: |" * len(statuses)]
    for op in ops_seen + ["all"]:
        mine = [r for r in rows if op in ("all", r[0])]
        counts = [sum(r[5] == s for r in mine) for s in statuses]
        lines.append(f"| {'**all**' if op == 'all' else op} | " +
                     " | ".join(str(c) for c in counts) + " |")
    for status in ("failed", "fell back", "skipped"):
        mine = [r for r in rows if r[5] == status]
        lines += ["", f"## {status.capitalize()} ({len(mine)})", ""]
        if not mine:
            lines.append("None.")
            continue
        # Cases sharing a reason are listed once with the reason.
        by_reason = {}
        for r in mine:
            by_reason.setdefault(r[6], []).append(r)
        for reason, rs in by_reason.items():
            lines.append(f"- {reason}")
            for r in rs:
                lines.append(f"  - {r[0]} {r[1]}, {r[2]}, {r[3]}, {r[4]}")
    lines += ["", "## Notes", "",
              "- Where the exact result is 0 (the gradient of the query when there is one key: "
              "the softmax of one score is 1 whatever the query) the judge's error floor is "
              "about 0 too, so any rounding fails it. The attention backward computes "
              "D = rowsum(dO * O) in the arithmetic of dP = dO @ V^T (the diagonal of a "
              "Tensor-engine product), so there dP - D and the gradient are exactly 0.",
              "- *Fell back* cases compute PyTorch's result (correct by construction); they show "
              "which arguments the kernels do not take, with the reason neuron.ops gives.",
              "- The simulator and the native executor run the same compiled program; the tests "
              "hold them to bit-identical results, so their rows agree."]
    lines += ["", "## Every case", "",
              "| op | case | dtype | pass | executor | result |",
              "| --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} | {r[4]} | {r[5]} |")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="docs/coverage.md")
    ap.add_argument("--only", nargs="*", choices=sorted(FAMILIES), help="op families to run")
    ap.add_argument("--executors", nargs="*", default=["native", "simulate"],
                    choices=["native", "simulate"])
    a = ap.parse_args()
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    cases = [c for name, fam in FAMILIES.items() if not a.only or name in a.only for c in fam()]
    matrix = [(c, dn, bw, ex) for c in cases for dn in DTYPES for bw in (False, True)
              for ex in a.executors]
    rows, start = [], time.time()
    for i, (case, dn, backward, executor) in enumerate(matrix):
        label = f"{case.op} {case.params} {dn} {'bwd' if backward else 'fwd'} {executor}"
        progress(i, len(matrix), label, start)
        biggest = max(t.numel() for t in case.inputs if t is not None)
        if executor == "simulate" and biggest > SIM_MAX_ELEMENTS:
            status, reason = "skipped", (f"simulator: a tensor of more than {SIM_MAX_ELEMENTS} "
                                         "elements (minutes per case there; native covers it)")
        else:
            _kernels.mode = executor
            try:
                status, reason = run_case(case, DTYPES[dn], backward)
            except Exception as e:  # noqa: BLE001 (a crash is a failure with its message)
                status = "failed"
                reason = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                traceback.print_exc(file=sys.stderr)
            finally:
                _kernels.mode = "native"
        rows.append((case.op, case.params, dn, "backward" if backward else "forward",
                     executor, status, reason))
    progress(len(matrix), len(matrix), "done", start)
    sys.stderr.write("\n")
    write_doc(a.out, rows, time.time() - start, ["python3", "scripts/op_coverage.py"] +
              sys.argv[1:])
    counts = {s: sum(r[5] == s for r in rows) for s in ("passed", "failed", "fell back",
                                                         "skipped")}
    print(f"{a.out}: {counts}")
    return 1 if counts["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
