"""Simulates every calibration case (cases.py) in timing-only mode on its published target and
prints published vs modelled figures, their ratio, and whether each progression is ranked as
measured.

    PYTHONPATH=build/python python3 -m bench.calibration.calibrate            # full shapes
    PYTHONPATH=build/python python3 -m bench.calibration.calibrate --reduced --check   # CI

--check exits non-zero when a ranking is wrong (and, for the full set, when a figure is off by
more than --tolerance). --markdown prints the table for docs/profiling.md.
"""
import argparse
import functools
import inspect
import sys
import time

import neuron
from neuron import _C

from .cases import FLAT, full_cases, reduced_cases


def _bind(fn, kwargs):
    """The kernel with its keyword parameters (those with defaults) fixed to `kwargs` or their
    defaults, keeping only the tensor parameters in its signature (a kernel takes one tensor per
    parameter)."""
    sig = inspect.signature(fn)
    tensors = [p for p in sig.parameters.values() if p.default is inspect.Parameter.empty]
    if len(tensors) == len(sig.parameters):
        return fn

    @functools.wraps(fn)
    def bound(*args):
        return fn(*args, **kwargs)
    bound.__signature__ = sig.replace(parameters=tensors)
    return bound


def simulate(case):
    """Timing-only profile of the case's kernel on its target."""
    k = neuron.kernel(_bind(case.kernel, case.kwargs), mode="simulate", target=case.target)
    ir = k.trace(*case.args)
    compiled = _C.compile(ir, case.target)
    _, _, prof = _C.simulate_profiled(compiled, [], [1], False)
    return prof


def modelled_ns(case, prof):
    if case.measure == "total":
        return prof.total_ns + getattr(prof, "launch_ns", 0.0)
    return case.measure(prof)


def fmt_ns(ns):
    if ns >= 1e6:
        return f"{ns / 1e6:.3f} ms"
    if ns >= 1e3:
        return f"{ns / 1e3:.2f} us"
    return f"{ns:.0f} ns"


def run(cases, tolerance):
    rows, failures = [], []
    by_name = {}
    for c in cases:
        t0 = time.perf_counter()
        try:
            prof = simulate(c)
            got = modelled_ns(c, prof)
            verdict = ""
        except Exception as e:  # a case the toolkit cannot build is reported, not hidden
            got, verdict = float("nan"), f"error: {str(e).splitlines()[0][:120]}"
        secs = time.perf_counter() - t0
        by_name[c.name] = (c, got)
        rows.append([c, got, secs, verdict])
    for r in rows:
        c, got = r[0], r[1]
        if c.relative_to:  # relative figures: throughput as a percentage of the reference case
            ref = by_name[c.relative_to][1]
            r[1] = got = 100.0 * got / ref
        elif c.faster_than:  # a speedup: the slow variant's time over this one's
            r[1] = got = by_name[c.faster_than][1] / got
    out = []
    groups = {}
    for c, got, secs, err in rows:
        if c.reference:
            continue  # the reference point of relative figures
        ratio = got / c.published_ns if c.published_ns else float("nan")
        within = abs(ratio - 1) <= tolerance
        if err:
            failures.append(f"{c.name}: {err}")
        elif not within:
            failures.append(f"{c.name}: modelled/published = {ratio:.2f}")
        out.append(dict(case=c, got=got, ratio=ratio, within=within, secs=secs, err=err,
                        rank=""))
        if c.group:
            groups.setdefault(c.group, []).append(out[-1])
    for g, items in groups.items():
        for prev, cur in zip(items, items[1:]):
            pub = cur["case"].published_ns / prev["case"].published_ns
            mod = cur["got"] / prev["got"]
            if abs(pub - 1) <= FLAT:
                ok = abs(mod - 1) <= FLAT
                want = "flat"
            else:
                ok = (mod < 1) == (pub < 1) and abs(mod - 1) > FLAT / 2
                want = "faster" if pub < 1 else "slower"
            cur["rank"] = f"{want} {'ok' if ok else 'WRONG'} (x{pub:.2f} vs x{mod:.2f})"
            if not ok:
                failures.append(f"{g}: {prev['case'].name} -> {cur['case'].name} should be "
                                f"{want}: published x{pub:.2f}, modelled x{mod:.2f}")
    return out, failures


def print_table(out, markdown, reduced=False):
    def show(c, v):
        if c.faster_than:
            return f"{v:.2f}x"
        if c.relative_to or "%" in c.name:
            return f"{v:.0f}%" if v >= 10 else f"{v:.1f}%"
        return fmt_ns(v)
    if markdown:
        print("| case | target | published | modelled | ratio | ranking vs previous step | source |")
        print("| --- | --- | ---: | ---: | ---: | --- | --- |")
        for r in out:
            c = r["case"]
            label = f"{c.group}: {c.name}" if c.group else c.name
            print(f"| {label} | {c.target} | {show(c, c.published_ns)} | "
                  f"{r['err'] or show(c, r['got'])} | {r['ratio']:.2f} | {r['rank']} | "
                  f"{c.source} |")
        return
    if reduced:  # smaller shapes: only the steps' ranking is compared with the measurements,
        # and the instruction- and transfer-level figures (no group) with theirs
        print(f"{'case (progressions at reduced shapes)':58} {'target':6} {'published':>11} "
              f"{'modelled':>11} {'ratio':>6}  {'sim s':>5}  ranking")
        for r in out:
            c = r["case"]
            label = (f"{c.group}: {c.name}" if c.group else c.name)[:58]
            pub, ratio = ("", "") if c.group else (show(c, c.published_ns), f"{r['ratio']:.2f}")
            flag = "*" if not c.group and not r["within"] else " "
            print(f"{label:58} {c.target:6} {pub:>11} {r['err'] or show(c, r['got']):>11} "
                  f"{ratio:>6}{flag} {r['secs']:5.1f}  {r['rank']}")
        return
    print(f"{'case':58} {'target':6} {'published':>11} {'modelled':>11} {'ratio':>6}  "
          f"{'sim s':>5}  ranking")
    for r in out:
        c = r["case"]
        label = (f"{c.group}: {c.name}" if c.group else c.name)[:58]
        flag = " " if r["within"] else "*"
        print(f"{label:58} {c.target:6} {show(c, c.published_ns):>11} "
              f"{r['err'] or show(c, r['got']):>11} {r['ratio']:6.2f}{flag} {r['secs']:5.1f}  "
              f"{r['rank']}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reduced", action="store_true", help="CI shapes: rankings only")
    ap.add_argument("--check", action="store_true", help="exit 1 on a wrong ranking or figure")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--tolerance", type=float, default=0.25)
    ap.add_argument("--only", default="", help="substring of the case names to run")
    a = ap.parse_args(argv)
    cases = reduced_cases() if a.reduced else full_cases()
    if a.only:
        cases = [c for c in cases if a.only in f"{c.group}: {c.name}" or c.reference]
    out, failures = run(cases, a.tolerance)
    print_table(out, a.markdown, a.reduced)
    ranked = [r for r in out if r["rank"]]
    ranks = f"{sum('ok' in r['rank'] for r in ranked)} of {len(ranked)} steps ranked as measured"
    if a.reduced:  # smaller shapes: their absolute times are not published figures, except
        # the instruction- and transfer-level ones (no group), which run at their own shapes
        exact = {c.name for c in cases if not c.group}
        failures = [f for f in failures
                    if "should be" in f or "error" in f or any(f.startswith(n + ": ")
                                                                for n in exact)]
        fixed = [r for r in out if not r["case"].group]
        print(f"\n{ranks}; {sum(r['within'] for r in fixed)} of {len(fixed)} instruction- and "
              f"transfer-level figures within {a.tolerance:.0%}")
    else:
        within = sum(r["within"] for r in out)
        print(f"\n{within} of {len(out)} figures within {a.tolerance:.0%}; {ranks}")
    for f in failures:
        print("  " + f)
    return 1 if a.check and failures else 0


if __name__ == "__main__":
    sys.exit(main())
