"""Differential fuzz driver: neuron-fuzz generates and executes kernels, reference.py checks them.

    python3 tests/fuzz/run_fuzz.py --fuzz-bin build/neuron-fuzz (--seconds 60 | --kernels N)
        [--seed S] [--native] [--save-regressions] [--keep DIR]

First replays every tests/fuzz/regressions/*.ir, then fuzzes seeds S, S+1, ... until the time
budget is spent, or for exactly N seeds with --kernels (what CI runs: the same seeds on every
machine, so a verdict never depends on how fast the machine is). A failing case is shrunk (instructions dropped one at a time while it still
fails) and printed; with --save-regressions it is written to tests/fuzz/regressions/. Exit
status 1 when anything failed. docs/reliability.md describes the pieces.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import reference  # noqa: E402

REGRESSIONS = os.path.join(HERE, "regressions")


def replay(bin_path, ir_text, seed, grid, out, native):
    path = out + ".ir"
    with open(path, "w") as f:
        f.write(ir_text)
    shutil.rmtree(out, ignore_errors=True)
    cmd = [bin_path, "--replay", path, "--seed", str(seed), "--grid", str(grid), "--out", out]
    if native:
        cmd.append("--native")
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        return False, f"neuron-fuzz failed: {r.stderr.strip()}", 0
    return reference.check_case(out)


def still_fails(bin_path, text, seed, grid, work, native):
    ok, msg, _ = replay(bin_path, text, seed, grid, work, native)
    rejected = os.path.exists(os.path.join(work, "rejected.txt"))
    return not ok and not rejected and not msg.startswith("reference error")


OP_LINE = re.compile(r"^\s*([a-z_.]+)\((.*)\)\s*$")
ALLOC_LINE = re.compile(r"^\s*alloc (\w+):")


def removable_lines(lines):
    """Op lines that are not the first (initialising) write of their destination tile."""
    first_write = set()
    seen = set()
    for i, line in enumerate(lines):
        m = OP_LINE.match(line)
        if not m:
            continue
        d = re.match(r"dst=(\w+)\[", m.group(2))
        if d and d.group(1) not in seen:
            seen.add(d.group(1))
            first_write.add(i)
    return [i for i, line in enumerate(lines) if OP_LINE.match(line) and i not in first_write]


def drop_unused_allocs(lines):
    out = list(lines)
    changed = True
    while changed:
        changed = False
        for i, line in enumerate(out):
            m = ALLOC_LINE.match(line)
            if not m:
                continue
            name = m.group(1)
            uses = [j for j, ln in enumerate(out) if j != i and re.search(rf"\b{name}\[", ln)]
            # Only written (by its initialising op), never read: drop both.
            if len(uses) == 1 and re.search(rf"dst={name}\[", out[uses[0]]) and \
                    not re.search(rf"(?<!dst=){name}\[", out[uses[0]].replace(f"dst={name}[", "")):
                del out[max(i, uses[0])]
                del out[min(i, uses[0])]
                changed = True
                break
    return out


def shrink(bin_path, text, seed, grid, work, native, budget_s=60):
    """Greedy: drop one instruction at a time while the kernel still fails."""
    deadline = time.time() + budget_s
    lines = text.splitlines()
    progress = True
    while progress and time.time() < deadline:
        progress = False
        for i in reversed(removable_lines(lines)):
            if time.time() > deadline:
                break
            cand = drop_unused_allocs(lines[:i] + lines[i + 1:])
            if still_fails(bin_path, "\n".join(cand) + "\n", seed, grid, work, native):
                lines, progress = cand, True
                break
    return "\n".join(lines) + "\n"


def replay_regressions(args, work):
    failures = 0
    files = sorted(f for f in os.listdir(REGRESSIONS) if f.endswith(".ir")) \
        if os.path.isdir(REGRESSIONS) else []
    for name in files:
        with open(os.path.join(REGRESSIONS, name)) as f:
            text = f.read()
        m = re.search(r"#\s*seed (\d+) grid (\d+)", text)
        seed, grid = (int(m.group(1)), int(m.group(2))) if m else (1, 1)
        ok, msg, _ = replay(args.fuzz_bin, text, seed, grid, os.path.join(work, "regr"),
                            args.native)
        if not ok:
            failures += 1
            print(f"REGRESSION FAIL {name}: {msg}")
    return len(files), failures


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fuzz-bin", required=True)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--kernels", type=int, help="fuzz exactly this many seeds (no time budget)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--batch", type=int, default=20)
    ap.add_argument("--native", action="store_true")
    ap.add_argument("--save-regressions", action="store_true")
    ap.add_argument("--keep", help="keep the case folders here")
    args = ap.parse_args()
    start = time.time()
    work = args.keep or tempfile.mkdtemp(prefix="neuron-fuzz-")
    os.makedirs(work, exist_ok=True)
    n_regr, regr_fail = replay_regressions(args, work)
    kernels = rejected = gen_instrs = ref_instrs = 0
    failed = []
    seed = args.seed
    def more():
        if args.kernels is not None:
            return seed < args.seed + args.kernels
        return time.time() - start < args.seconds

    while more():
        out = os.path.join(work, f"batch_{seed}")
        batch = args.batch
        if args.kernels is not None:
            batch = min(batch, args.seed + args.kernels - seed)
        cmd = [args.fuzz_bin, "--seed", str(seed), "--count", str(batch), "--out", out]
        if args.native:
            cmd.append("--native")
        subprocess.run(cmd, check=True, capture_output=True, timeout=600)
        for s in range(seed, seed + batch):
            case = os.path.join(out, f"case_{s}")
            meta = reference.load_meta(case)
            kernels += 1
            gen_instrs += int(meta.get("instructions", ["0"])[0])
            if os.path.exists(os.path.join(case, "rejected.txt")):
                rejected += 1
                continue
            ok, msg, count = reference.check_case(case)
            ref_instrs += count
            if not ok:
                failed.append(s)
                print(f"FAIL seed {s}: {msg}")
                with open(os.path.join(case, "kernel.ir")) as f:
                    text = f.read()
                grid = meta["grid"][0]
                small = shrink(args.fuzz_bin, text, s, grid, os.path.join(work, "shrink"),
                               args.native)
                print(f"shrunk kernel (replay: neuron-fuzz --replay FILE --seed {s} --grid {grid}):")
                print(small)
                if args.save_regressions:
                    path = os.path.join(REGRESSIONS, f"seed_{s}.ir")
                    with open(path, "w") as f:
                        f.write(f"# seed {s} grid {grid}\n" + small)
                    print(f"saved {path}")
        shutil.rmtree(out, ignore_errors=True)
        seed += batch
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    print(f"fuzz: {kernels} kernels ({rejected} rejected by the compiler), {gen_instrs} "
          f"instructions generated, {ref_instrs} instruction executions checked by the reference, "
          f"{len(failed)} failures; {n_regr} regressions replayed, {regr_fail} failed; "
          f"seeds {args.seed}..{seed - 1}, {time.time() - start:.0f} s")
    return 1 if failed or regr_fail else 0


if __name__ == "__main__":
    sys.exit(main())
