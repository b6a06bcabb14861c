"""neuron.profile: timing-only and executed profiles from Python, the tables as data, verdicts
that follow measured activity, hints at the user's line, the files it writes (Perfetto JSON
parsed, HTML driven in headless Chromium) and NEURON_PROFILE for every simulated run."""
import inspect
import json
import os
import shutil
import subprocess
import time

import numpy as np
import pytest

import neuron
import neuron.isa as nisa
import neuron.language as nl

RNG = np.random.default_rng(14)


def _line(fn, text):
    """The file line of `text` inside fn's source."""
    src, first = inspect.getsourcelines(fn)
    for i, l in enumerate(src):
        if text in l:
            return first + i
    raise AssertionError(text)


def tiled_matmul(lhsT, rhs):
    """Both operand tiles loaded for every matmul: DMA-bound."""
    K, M = lhsT.shape
    N = rhs.shape[1]
    out = nl.ndarray((M, N), lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // 128):
        for n in nl.affine_range(N // 512):
            acc = nl.ndarray((128, 512), nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // 128):
                a = nl.load(lhsT[k * 128:(k + 1) * 128, m * 128:(m + 1) * 128])
                b = nl.load(rhs[k * 128:(k + 1) * 128, n * 512:(n + 1) * 512])
                nisa.nc_matmul(acc, a, b)
            nl.store(out[m * 128:(m + 1) * 128, n * 512:(n + 1) * 512], nl.copy(acc, dtype=out.dtype))
    return out


def blocked_matmul(lhsT, rhs):
    """lhsT panel resident per 512-row block, four accumulators per moving tile: TensorE-bound."""
    K, M = lhsT.shape
    N = rhs.shape[1]
    KT = K // 128
    out = nl.ndarray((M, N), lhsT.dtype, buffer=nl.shared_hbm)
    for mb in nl.affine_range(M // 512):
        a = nl.ndarray((128, KT, 512), lhsT.dtype, buffer=nl.sbuf)
        for kt in nl.affine_range(KT):
            nisa.dma_copy(a[:, kt, :], lhsT[kt * 128:(kt + 1) * 128, mb * 512:(mb + 1) * 512])
        for nb in nl.affine_range(N // 512):
            b = nl.ndarray((128, KT, 512), rhs.dtype, buffer=nl.sbuf)
            for kt in nl.affine_range(KT):
                nisa.dma_copy(b[:, kt, :], rhs[kt * 128:(kt + 1) * 128, nb * 512:(nb + 1) * 512])
            acc = [nl.ndarray((128, 512), nl.float32, buffer=nl.psum) for _ in range(4)]
            for mi in range(4):
                nisa.nc_matmul(acc[mi], a[:, 0, mi * 128:(mi + 1) * 128], b[:, 0, :], accumulate=False)
            for kt in nl.affine_range(1, KT):
                for mi in range(4):
                    nisa.nc_matmul(acc[mi], a[:, kt, mi * 128:(mi + 1) * 128], b[:, kt, :],
                                   accumulate=True)
            for mi in range(4):
                nl.store(out[mb * 512 + mi * 128:mb * 512 + (mi + 1) * 128, nb * 512:(nb + 1) * 512],
                         nl.copy(acc[mi], dtype=out.dtype))
    return out


def vector_heavy(x):
    """Many two-input fp32 VectorE instructions on resident tiles: VectorE-bound."""
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    u = nl.load(x)
    for i in nl.affine_range(64):
        r = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(r, t, u, nl.multiply)
    nl.store(out, t)
    return out


def dependent_chain(x):
    """A chain of tiny dependent activations: each waits for the last one's result."""
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    for i in range(64):
        u = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
        nisa.activation(u, nl.copy, t)
        t = u
    nl.store(out, t)
    return out


def test_timing_only_full_size_profile_is_fast_and_tensor_bound():
    t0 = time.perf_counter()
    p = neuron.profile(blocked_matmul, target="trn2")(((4096, 4096), nl.bfloat16),
                                                      ((4096, 4096), nl.bfloat16))
    assert time.perf_counter() - t0 < 60
    assert p.outputs is None and p.summary["timing_only"]
    ideal_ns = 4096.0 ** 3 / (128 * 128) / 2.4  # columns streamed at one per cycle, 2.4 GHz
    assert p.summary["tensor_hfu"] == pytest.approx(ideal_ns / p.device_ns)
    assert p.summary["tensor_hfu"] > 0.85
    assert p.verdict == "compute-bound on TensorE"
    assert p.summary["launch_ns"] > 0 and p.total_ns == p.device_ns + p.summary["launch_ns"]
    units = {u["unit"]: u for u in p.units}
    assert units["TensorE"]["active"] > 0.9
    assert units["TensorE"]["instructions"] == 8 * 8 * 4 * 32  # blocks x 4 x K tiles


def test_verdicts_follow_measured_activity():
    bf = nl.bfloat16
    dma = neuron.profile(tiled_matmul, target="trn2")(((1024, 512), bf), ((1024, 1024), bf))
    assert dma.verdict.startswith("DMA-bound"), dma.text
    assert dma.summary["dma_engine_busy"] > 0.6
    vec = neuron.profile(vector_heavy, target="trn2")(((128, 2048), nl.float32))
    assert vec.verdict == "compute-bound on VectorE", vec.text
    lat = neuron.profile(dependent_chain, target="trn2")(((128, 1), nl.float32))
    assert lat.verdict == "latency/dependence-bound", lat.text


def test_tables_name_the_users_lines():
    p = neuron.profile(tiled_matmul)(((1024, 512), nl.bfloat16), ((1024, 1024), nl.bfloat16))
    load_b = _line(tiled_matmul, "b = nl.load(rhs")
    lines = {(os.path.basename(l["file"]), l["line"]): l for l in p.lines}
    assert ("test_profile.py", load_b) in lines
    assert lines[("test_profile.py", load_b)]["instructions"] == "dma_copy"
    assert lines[("test_profile.py", load_b)]["count"] == 4 * 2 * 8
    # TensorE waits for the loads: its top wait names a load line of this file.
    top = next(w for w in p.waits if w["waiter"] == "TensorE")
    assert top["for"] == "dma_copy"
    assert os.path.basename(top["file"]) == "test_profile.py"
    assert top["line"] in (load_b, _line(tiled_matmul, "a = nl.load(lhsT"))
    # Live data never exceeds what was allocated.
    assert p.summary["sbuf_live_peak"] <= p.summary["sbuf_alloc_bytes"]
    assert p.summary["psum_live_peak"] <= p.summary["psum_alloc_bytes"]


def psum_round_trip(lhsT, rhs):
    out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((128, 512), nl.float32, buffer=nl.psum)
    for k in nl.affine_range(lhsT.shape[0] // 128):
        a = nl.load(lhsT[k * 128:(k + 1) * 128, :])
        b = nl.load(rhs[k * 128:(k + 1) * 128, :])
        acc += nl.matmul(a, b, transpose_x=True)
    nl.store(out, nl.copy(acc))
    return out


def needs_transpose(lhs, rhs):
    out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
    a = nl.load(lhs)
    b = nl.load(rhs)
    nl.store(out, nl.copy(nl.matmul(a, b)))
    return out


def test_hints_point_at_the_line_with_the_cheaper_way():
    f32 = nl.float32
    p = neuron.profile(psum_round_trip)(((512, 128), f32), ((512, 512), f32))
    hints = [h for h in p.hints if h["pattern"] == "psum-round-trip"]
    assert hints, p.text
    assert hints[0]["line"] == _line(psum_round_trip, "acc += nl.matmul")
    assert "accumulate=True" in hints[0]["message"]
    assert hints[0]["count"] == 4 and hints[0]["cost_ns"] > 0
    assert "costly patterns the compiler inserted" in p.text
    q = neuron.profile(needs_transpose)(((128, 128), f32), ((128, 512), f32))
    hints = [h for h in q.hints if h["pattern"] == "transpose-for-matmul"]
    assert hints and hints[0]["line"] == _line(needs_transpose, "nl.matmul(a, b)")
    assert "transpose_x=True" in hints[0]["message"]
    # The efficient kernel has none.
    assert not neuron.profile(blocked_matmul)(((256, 512), nl.bfloat16),
                                              ((256, 512), nl.bfloat16)).hints


def test_executed_profile_computes_the_outputs():
    lhsT = RNG.standard_normal((256, 128)).astype(np.float32)
    rhs = RNG.standard_normal((256, 512)).astype(np.float32)
    p = neuron.profile(tiled_matmul, timing_only=False)(lhsT, rhs)
    ref = lhsT.astype(np.float64).T @ rhs.astype(np.float64)
    np.testing.assert_allclose(p.outputs, ref, rtol=1e-4, atol=1e-3)
    assert not p.summary["timing_only"]
    # Timing does not depend on data.
    t = neuron.profile(tiled_matmul)(lhsT, rhs)
    assert t.device_ns == p.device_ns
    with pytest.raises(TypeError):
        neuron.profile(tiled_matmul, timing_only=False)(((256, 128), "float32"), rhs)


def test_compare_two_versions():
    args = (((1024, 512), nl.bfloat16), ((1024, 1024), nl.bfloat16))
    slow = neuron.profile(tiled_matmul)(*args)
    fast = neuron.profile(blocked_matmul)(*args)
    c = fast.compare(slow, "tiled", "blocked")
    assert c.speedup == pytest.approx(slow.device_ns / fast.device_ns)
    assert c.speedup > 1.5
    units = {u: (a, b) for u, a, b in c.units}
    assert "TensorE" in units and "DMA engines (moving data)" in units
    assert "tiled" in c.text and "faster" in c.text
    html = fast.html(compare=slow, before_label="tiled", after_label="blocked")
    assert "Comparison: tiled &rarr; blocked" in html


def test_save_writes_perfetto_json_text_and_html(tmp_path):
    p = neuron.profile(tiled_matmul)(((256, 128), nl.bfloat16), ((256, 512), nl.bfloat16))
    paths = p.save(tmp_path, "tiled")
    assert [os.path.basename(x) for x in paths] == ["tiled.json", "tiled.txt", "tiled.html"]
    trace = json.load(open(paths[0]))
    slices = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert len(slices) == p.summary["executed_instructions"]
    assert open(paths[1]).read() == p.text
    assert "<iframe" in p._repr_html_() and "srcdoc" in p._repr_html_()


def _chromium():
    for b in ("chromium", "chromium-browser"):
        if shutil.which(b):
            return b
    return None


@pytest.mark.skipif(_chromium() is None, reason="chromium not installed")
def test_html_report_in_headless_chromium(tmp_path):
    p = neuron.profile(tiled_matmul)(((256, 128), nl.bfloat16), ((256, 512), nl.bfloat16))
    path = p.save(tmp_path, "tiled")[2]
    html = open(path).read()
    assert "http://" not in html and "https://" not in html  # nothing fetched
    # An instruction that waited: open the report on it (the URL fragment selects it).
    events = p._p.events
    waited = next(i for i, e in enumerate(events) if e[4] >= 0 and p._p.instrs[e[0]][0] == "nc_matmul")
    flags = ["--headless", "--disable-gpu", "--no-sandbox", "--enable-logging=stderr", "--v=0"]
    r = subprocess.run([_chromium(), *flags, "--dump-dom",
                        f"file://{path}#select={waited}&zoom=0,{int(p.device_ns)}"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    dom = r.stdout
    assert ":CONSOLE" not in r.stderr, r.stderr[-2000:]
    details = dom[dom.index('id="details"'):]
    assert "<b>nc_matmul</b>" in details[:3000]
    assert "waited" in details[:3000] and "dma_copy" in details[:3000]
    assert "verdict: " + p.verdict in dom
    assert 'id="view"' in dom and " us</span>" in dom
    # The source beside its per-line cost: this file's load line is in the source table.
    assert f"L{inspect.getsourcefile(tiled_matmul)}:{_line(tiled_matmul, 'b = nl.load(rhs')}" in dom
    shot = tmp_path / "shot.png"
    r = subprocess.run([_chromium(), *flags, f"--screenshot={shot}", "--window-size=1400,900",
                        f"file://{path}"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and shot.stat().st_size > 10000


def test_neuron_profile_env_is_honoured_by_simulate(tmp_path, monkeypatch):
    monkeypatch.setenv("NEURON_PROFILE", str(tmp_path))
    x = RNG.standard_normal((128, 64)).astype(np.float32)

    @neuron.kernel
    def double(x):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.load(x) * 2.0)
        return out

    out = neuron.simulate(double)(x)
    np.testing.assert_array_equal(out, x * np.float32(2))
    names = sorted(os.listdir(tmp_path))
    assert len(names) == 3 and all(n.startswith("double-") for n in names), names
    neuron.profile(double)(x)
    assert len(os.listdir(tmp_path)) == 6


def test_a_parsed_kernel_profiles_with_ir_text_lines():
    text = str(neuron.kernel(tiled_matmul).trace(((256, 128), nl.bfloat16),
                                                 ((256, 512), nl.bfloat16)))
    ir = neuron.parse_kernel(text, "tiled.ir")
    _, _, prof = neuron._C.simulate_profiled(neuron._C.compile(ir, "trn2"), [], [1], False)
    p = neuron.Profile(prof)
    assert p.lines and all(l["file"] == "tiled.ir" and l["line"] > 0 for l in p.lines)
    assert "<unknown>" not in p.text


def scaled(x, factor=2.0):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.load(x) * factor)
    return out


def test_compile_time_parameters_are_profiled_and_recorded(tmp_path):
    x = RNG.standard_normal((128, 64)).astype(np.float32)
    db = tmp_path / "runs.sqlite"
    p = neuron.profile(scaled, timing_only=False, record=True, db=db)(x, factor=3.0)
    np.testing.assert_array_equal(p.outputs, x * np.float32(3))
    assert p.shapes == [([128, 64], "float32")]
    assert p.options["params"] == {"factor": "3.0"}
    [r] = neuron.runs.list(db=db)
    assert r.options["params"] == {"factor": "3.0"}
