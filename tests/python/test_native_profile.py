# The native per-instruction profile (neuron.native_profile, neuron.ops.profiled): every
# instruction that ran is reported once with its opcode and source line, the timed variant
# computes the same bits, and bad arguments are refused.
import ctypes
import inspect

import numpy as np
import pytest

import neuron
import neuron.isa as nisa
import neuron.language as nl


def _kernel_and_lines():
    def k(x):
        out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
        t = nl.load(x)  # line +2
        e = nl.ndarray((128, 512), nl.float32)
        nisa.activation(e, nl.exp, t)  # line +4
        r = nl.ndarray((128, 512), nl.float32)
        nisa.tensor_tensor(r, e, t, nl.multiply)  # line +6
        nl.store(out, r)  # line +7
        return out

    first = inspect.getsourcelines(k)[1]
    return k, {"load": first + 2, "exp": first + 4, "mul": first + 6, "store": first + 7}


def test_every_instruction_is_reported_with_its_line_and_the_bits_are_unchanged(monkeypatch):
    k, lines = _kernel_and_lines()
    x = np.random.default_rng(3).uniform(-2, 2, (128, 512)).astype(np.float32)
    plain = neuron.kernel(k)(x)
    prof = neuron.native_profile(k)
    got = prof(x)
    np.testing.assert_array_equal(got, plain)
    np.testing.assert_allclose(got, np.exp(x.astype(np.float64)) * x, rtol=1e-6)
    p = prof.profile
    assert isinstance(p, neuron.runtime.NativeProfile)
    by_line = {int(r["line"].rsplit(":", 1)[1]): r for r in p.rows}
    # The load is forwarded to its readers (docs/native.md): it does not run, so has no row.
    # The multiply and the store are one fused chain, billed to its first instruction.
    assert set(by_line) == {lines["exp"], lines["mul"]}
    assert by_line[lines["mul"]]["op"] == "tensor_tensor"
    # Without chains each runs on its own and has its row.
    monkeypatch.setenv("NEURON_FUSED_CHAINS", "0")
    prof = neuron.native_profile(k)
    np.testing.assert_array_equal(prof(x), plain)
    p = prof.profile
    by_line = {int(r["line"].rsplit(":", 1)[1]): r for r in p.rows}
    assert set(by_line) == {lines["exp"], lines["mul"], lines["store"]}
    assert by_line[lines["exp"]]["op"] == "activation"
    assert by_line[lines["mul"]]["op"] == "tensor_tensor"
    assert by_line[lines["store"]]["op"] == "dma_copy"
    for r in p.rows:
        assert r["calls"] >= 1 and r["ms"] > 0
        assert r["line"].startswith(__file__)
    # Slowest first, and the table names every instruction.
    assert [r["ms"] for r in p.rows] == sorted((r["ms"] for r in p.rows), reverse=True)
    text = str(p)
    assert "native profile" in text and text.count("\n") == len(p.lines) + 1
    # One instruction per line here; an unrolled loop sums its instructions into its line.
    assert len(p.lines) == len(p.rows) and all(r["instructions"] == 1 for r in p.lines)
    # Without SBUF folding the load runs, and is reported on its line.
    monkeypatch.setenv("NEURON_SBUF_FOLDING", "0")
    prof = neuron.native_profile(k)
    np.testing.assert_array_equal(prof(x), plain)
    rows = {int(r["line"].rsplit(":", 1)[1]): r for r in prof.profile.rows}
    assert set(rows) == set(lines.values()) and rows[lines["load"]]["op"] == "dma_copy"


def test_an_unrolled_loop_is_one_line_of_the_table(monkeypatch):
    monkeypatch.setenv("NEURON_SBUF_FOLDING", "0")  # every load runs (none is forwarded)
    monkeypatch.setenv("NEURON_FUSED_CHAINS", "0")  # and each store on its own

    def k(x):
        out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
        for i in nl.static_range(4):
            t = nl.load(x[:, i * 128:(i + 1) * 128])
            nl.store(out[:, i * 128:(i + 1) * 128], t)
        return out

    x = np.arange(128 * 512, dtype=np.float32).reshape(128, 512)
    prof = neuron.native_profile(k)
    np.testing.assert_array_equal(prof(x), x)
    p = prof.profile
    assert len(p.rows) == 8 and len(p.lines) == 2
    assert sorted(r["instructions"] for r in p.lines) == [4, 4]
    assert abs(sum(r["ms"] for r in p.lines) - sum(r["ms"] for r in p.rows)) < 1e-9
    assert p.wall_ms > 0


def test_programs_of_a_grid_add_up():
    def per_program(x):
        out = nl.ndarray((512, 512), nl.float32, buffer=nl.shared_hbm)
        i = nl.program_id(0)
        t = nl.load(x[i * 128:(i + 1) * 128, :])
        nl.store(out[i * 128:(i + 1) * 128, :], t)
        return out

    x = np.arange(512 * 512, dtype=np.float32).reshape(512, 512)
    one = neuron.native_profile(neuron.kernel(per_program)[1])
    four = neuron.native_profile(neuron.kernel(per_program)[4])
    np.testing.assert_array_equal(four(x), x)
    one(x)
    # Four programs make four times the calls of one (whatever the partition blocking).
    calls1 = sorted(r["calls"] for r in one.profile.rows)
    calls4 = sorted(r["calls"] for r in four.profile.rows)
    assert calls4 == [4 * c for c in calls1]


def test_runs_must_be_positive():
    with pytest.raises(ValueError, match="runs=0 must be at least 1"):
        neuron.runtime.native_profile(None, [], (1,), runs=0)


def test_ops_profiled_names_the_library_kernel():
    torch = pytest.importorskip("torch")
    from neuron import ops

    x = torch.randn(256, 64)
    w, b = torch.randn(64), torch.randn(64)
    plain = ops.layer_norm(x, (64,), w, b)
    with ops.profiled() as runs:
        got = ops.layer_norm(x, (64,), w, b)
    assert torch.equal(got, plain)
    assert [name for name, _ in runs] == ["layer_norm_affine"]
    prof = runs[0][1]
    assert {r["op"] for r in prof.rows} >= {"dma_copy", "activation", "tensor_scalar"}
    assert all("norms.hpp" in r["line"] or "tiling.hpp" in r["line"] for r in prof.rows)
    # Outside the block nothing is recorded.
    ops.layer_norm(x, (64,), w, b)
    assert len(runs) == 1


def test_timed_runs_reuse_their_outputs():
    # A fresh 16 MiB output per timed run would fault in 4096 pages each time and bill them to
    # the store; the timed runs reuse the first run's outputs, as the torch operators' callers do.
    resource = pytest.importorskip("resource")

    def k(x):
        out = nl.ndarray((4096, 1024), nl.float32, buffer=nl.shared_hbm)
        for i in nl.affine_range(32):
            nl.store(out[i * 128:(i + 1) * 128, :], nl.load(x[i * 128:(i + 1) * 128, :]) * 2.0)
        return out

    x = np.ones((4096, 1024), np.float32)
    compiled = neuron.kernel(k)
    np.testing.assert_array_equal(compiled(x), 2 * x)
    host = neuron.runtime.host_tensors([x])
    # glibc would otherwise keep a freed 16 MiB block for the next allocation; this makes
    # every fresh output come from new pages, as in a process that has not run it yet.
    libc = ctypes.CDLL(None)
    M_MMAP_THRESHOLD = -3
    libc.mallopt(M_MMAP_THRESHOLD, 128 * 1024)
    try:
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        prof = neuron.runtime.native_profile(compiled.compile(x), host, (1,), runs=8)
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    finally:
        libc.mallopt(M_MMAP_THRESHOLD, 32 * 1024 * 1024)
    # One output's pages (4,096), not eight (32,768). The margin takes pages a loaded machine
    # reclaims from the process and faults back in (10,007 in all, once, beside other tests).
    assert prof.rows and faults < 4 * 4096, faults
