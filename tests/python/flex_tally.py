# The FlexAttention conformance tally (issue 12: "a tally by category; skipped cases print
# their reason"): every test of tests/python/test_flex_*.py is counted under each category its
# id names (a test may name several) and under the executor it ran on: "native" or "simulator"
# for the neuron kernels (the id says which), else "host" (the host path, block masks, tracing).
# conftest.py feeds it pytest's reports and prints the table after the run.
import re

CATEGORIES = [
    ("no mod (plain attention)", r"\[plain-"),
    ("score mods", r"alibi|softcap|rel_bias|rel\[|steep|bias\[|slopes|score_mod|tanh|columns"),
    ("mask mods, combinators", r"causal|sliding|document|doc mask|prefix|and_or|mask_mod|"
                               r"test_flex_block_mask|create_mask|full_blocks|block_mask"),
    ("captured tensors", r"bias\[|table\[|rel\[|captured|doc|slopes|learnable|gate\["),
    ("GQA", r"gqa"),
    ("K/V batch broadcast", r"broadcast"),
    ("odd lengths, L != S", r"odd|s % 128|rel\[kv - q\]"),
    ("head dims (E != Ev, > 128)", r"head dims|odd_lengths"),
    ("block sizes", r"tuple|256 blocks|block_size|whole blocks"),
    ("fully masked rows", r"fully"),
    ("lse, aux outputs", r"lse|aux|max_scores|return_conventions|test_backward\b|test_kernel_case"),
    ("backward", r"backward|gradient|learnable"),
    ("learnable captured tensors", r"learnable"),
    ("errors, fallbacks", r"error|refuse|warn|says_why|cannot|unsupported|strict|fallback|"
                          r"named|host_path"),
    ("random (fuzz)", r"test_flex_fuzz"),
    ("torch.compile, patch", r"torch_compile|patch"),
    ("kernel machinery", r"auto_backend|transposes|profile|subnormal|cache_key|one_compile"),
]

_results = {}  # nodeid -> (outcome, skip reason)


def record(report):
    if "test_flex_" not in report.nodeid:
        return
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        reason = ""
        if report.skipped and isinstance(report.longrepr, tuple):
            reason = report.longrepr[2]
        _results[report.nodeid] = (report.outcome, reason)
    elif report.when == "teardown" and report.outcome == "failed":
        _results[report.nodeid] = ("failed", "")


def _executor(nodeid):
    low = nodeid.lower()
    for name in ("simulator", "native"):
        if re.search(rf"\b{name}\b", low):
            return name
    if "through_the_neuron_kernels" in low:  # the fuzzer's kernel cases run simulated
        return "simulator"
    return "host"


def summary(terminalreporter):
    if not _results:
        return
    rows = {}
    for nodeid, (outcome, _) in _results.items():
        low = nodeid.lower()
        names = [n for n, pat in CATEGORIES if re.search(pat, low)] or ["other"]
        for name in names:
            counts = rows.setdefault((name, _executor(nodeid)), {"passed": 0, "failed": 0,
                                                                 "skipped": 0})
            counts[outcome] = counts.get(outcome, 0) + 1
    order = [n for n, _ in CATEGORIES] + ["other"]
    w = terminalreporter.write_line
    w("")
    w("FlexAttention conformance by category (a test counts in every category its id names):")
    w(f"{'category':30s} {'executor':10s} {'passed':>7s} {'failed':>7s} {'skipped':>8s}")
    for (name, ex), c in sorted(rows.items(), key=lambda kv: (order.index(kv[0][0]), kv[0][1])):
        w(f"{name:30s} {ex:10s} {c['passed']:7d} {c['failed']:7d} {c['skipped']:8d}")
    skipped = [(n, r) for n, (o, r) in _results.items() if o == "skipped"]
    for nodeid, reason in skipped:
        w(f"skipped {nodeid}: {reason}")
