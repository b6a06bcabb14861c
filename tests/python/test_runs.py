"""neuron.runs: the SQLite run history. Recording profiles and failures, listing, showing and
comparing runs (Python API and `neuron runs` command line), two processes writing at once, and
damaged database files."""
import os
import sqlite3
import subprocess
import sys
import textwrap

import pytest

import neuron
import neuron.isa as nisa
import neuron.language as nl
from neuron import runs

PYTHONPATH = os.pathsep.join(p for p in [os.path.dirname(os.path.dirname(neuron.__file__)),
                                         os.environ.get("PYTHONPATH", "")] if p)


def loads_per_k(lhsT, rhs):
    K, M = lhsT.shape
    out = nl.ndarray((M, rhs.shape[1]), nl.float32, buffer=nl.shared_hbm)
    acc = nl.ndarray((M, rhs.shape[1]), nl.float32, buffer=nl.psum)
    for k in nl.affine_range(K // 128):
        a = nl.load(lhsT[k * 128:(k + 1) * 128, :])
        b = nl.load(rhs[k * 128:(k + 1) * 128, :])
        nisa.nc_matmul(acc, a, b)
    nl.store(out, nl.copy(acc))
    return out


def loads_once(lhsT, rhs):
    K, M = lhsT.shape
    KT = K // 128
    out = nl.ndarray((M, rhs.shape[1]), nl.float32, buffer=nl.shared_hbm)
    a = nl.ndarray((128, KT, M), lhsT.dtype, buffer=nl.sbuf)
    b = nl.ndarray((128, KT, rhs.shape[1]), rhs.dtype, buffer=nl.sbuf)
    for k in nl.affine_range(KT):
        nisa.dma_copy(a[:, k, :], lhsT[k * 128:(k + 1) * 128, :])
        nisa.dma_copy(b[:, k, :], rhs[k * 128:(k + 1) * 128, :])
    acc = nl.ndarray((M, rhs.shape[1]), nl.float32, buffer=nl.psum)
    for k in nl.affine_range(KT):
        nisa.nc_matmul(acc, a[:, k, :], b[:, k, :])
    nl.store(out, nl.copy(acc))
    return out


ARGS = (((1024, 128), nl.bfloat16), ((1024, 512), nl.bfloat16))


def test_record_list_show_compare(tmp_path):
    db = tmp_path / "runs.sqlite"
    p1 = neuron.profile(loads_per_k, record=True, db=db)(*ARGS)
    p2 = neuron.profile(loads_once, record=True, db=db)(*ARGS)
    assert p1.run_id and p2.run_id and p2.run_id != p1.run_id
    listed = runs.list(db=db)
    assert [r.id for r in listed] == [p2.run_id, p1.run_id]  # newest first
    assert [r.kernel for r in runs.list(kernel="once", db=db)] == ["loads_once"]
    r = runs.get(p1.run_id, db=db)
    assert r.kernel == "loads_per_k" and r.target == "trn2" and r.status == "ok"
    assert r.device_ns == pytest.approx(p1.device_ns)
    assert r.verdict == p1.verdict
    assert r.shapes == [[[1024, 128], "bfloat16"], [[1024, 512], "bfloat16"]]
    assert len(r.ir_hash) == 16 and r.build_id and r.host
    assert {u["unit"] for u in r.units} >= {"TensorE", "VectorE"}
    assert r.lines and all(os.path.basename(l["file"]) == "test_runs.py" for l in r.lines)
    assert "TensorE" in r.text()
    c = runs.compare(p1.run_id, p2.run_id, db=db)
    assert c.speedup == pytest.approx(p1.device_ns / p2.device_ns)
    assert "by unit" in c.text() and "by source line" in c.text()
    assert "the kernel changed" in c.text()
    with pytest.raises(KeyError):
        runs.get(999, db=db)


def test_failed_runs_keep_their_error(tmp_path):
    db = tmp_path / "runs.sqlite"

    def too_big(x):
        out = nl.ndarray((256, 8), x.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.load(x))  # 256 partitions: breaks the partition rule
        return out

    with pytest.raises(neuron.NeuronError):
        neuron.profile(too_big, record=True, db=db)(((256, 8), nl.float32))
    [r] = runs.list(db=db)
    assert r.status == "failed" and r.kernel == "too_big"
    assert "256" in r.error
    assert "FAILED" in r.brief()


def test_recording_follows_neuron_runs_env(tmp_path, monkeypatch):
    db = tmp_path / "env.sqlite"
    monkeypatch.setenv("NEURON_RUNS", "1")
    monkeypatch.setenv("NEURON_RUNS_DB", str(db))
    neuron.profile(loads_per_k)(*ARGS)
    assert [r.kernel for r in runs.list()] == ["loads_per_k"]
    assert runs.default_path() == str(db)


def test_command_line(tmp_path):
    db = str(tmp_path / "runs.sqlite")
    a = neuron.profile(loads_per_k, record=True, db=db)(*ARGS).run_id
    b = neuron.profile(loads_once, record=True, db=db)(*ARGS).run_id
    env = dict(os.environ, PYTHONPATH=PYTHONPATH)

    def cli(*args):
        r = subprocess.run([sys.executable, "-m", "neuron", "runs", "--db", db, *args],
                           capture_output=True, text=True, env=env, timeout=120)
        assert r.returncode == 0, r.stderr
        return r.stdout
    out = cli("list")
    assert "loads_per_k" in out and "loads_once" in out
    assert "loads_per_k" in cli("show", str(a))
    html = tmp_path / "cmp.html"
    out = cli("compare", str(a), str(b), "--html", str(html))
    assert f"run {a} -> run {b}" in out and html.read_text().startswith("<!DOCTYPE html>")
    r = subprocess.run([sys.executable, "-m", "neuron", "runs", "--db", db, "show", "12345"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 1 and "no run 12345" in r.stderr


def test_two_processes_writing_at_once_lose_nothing(tmp_path):
    db = str(tmp_path / "runs.sqlite")
    script = textwrap.dedent(f"""
        import sys
        from neuron import runs
        for i in range(40):
            runs.record_benchmark("writer" + sys.argv[1], "trn2", 1000.0 + i, db={db!r})
    """)
    env = dict(os.environ, PYTHONPATH=PYTHONPATH)
    procs = [subprocess.Popen([sys.executable, "-c", script, str(w)], env=env,
                              stderr=subprocess.PIPE, text=True) for w in range(2)]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    got = runs.list(limit=0, db=db)
    assert len(got) == 80
    assert sorted(r.kernel for r in got).count("writer0") == 40


def test_a_damaged_file_is_set_aside_and_its_runs_recovered(tmp_path):
    db = tmp_path / "runs.sqlite"
    ids = [runs.record_benchmark("k", "trn2", 100.0 * i, db=db) for i in range(1, 4)]
    # A damaged header: SQLite no longer recognises the file.
    with open(db, "r+b") as f:
        f.write(b"this is not sql!")
    with pytest.warns(RuntimeWarning, match="damaged"):
        new = runs.record_benchmark("k", "trn2", 400.0, db=db)
    kept = [r.device_ns for r in runs.list(limit=0, db=db)]
    assert sorted(kept) == [100.0, 200.0, 300.0, 400.0]  # nothing lost
    assert new not in ids
    assert any(n.startswith("runs.sqlite.corrupt-") for n in os.listdir(tmp_path))


def test_garbage_file_becomes_a_fresh_history(tmp_path):
    db = tmp_path / "runs.sqlite"
    db.write_bytes(os.urandom(5000))
    with pytest.warns(RuntimeWarning, match="damaged"):
        rid = runs.record_benchmark("k", "trn1", 5.0, db=db)
    assert [r.id for r in runs.list(db=db)] == [rid]
    con = sqlite3.connect(db)
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
