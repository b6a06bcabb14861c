# Python threads and processes calling kernels at once: one Kernel object with several shapes,
# different kernels, native and neuron.simulate, against NumPy; two processes sharing one
# NEURON_CACHE_DIR; neuron.cache.info() consistent afterwards. docs/reliability.md.
import json
import os
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import neuron
import neuron.cache
import neuron.isa as nisa
import neuron.language as nl
from helpers import softmax

THREADS = 8


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    """A fresh compile-cache folder for this test; loaded kernels are forgotten so every
    signature compiles (and stores) again."""
    d = tmp_path / "cache"
    monkeypatch.setenv("NEURON_CACHE_DIR", str(d))
    monkeypatch.setenv("NEURON_CACHE", "on")
    monkeypatch.delenv("NEURON_CACHE_MAX_BYTES", raising=False)
    neuron.cache.clear()
    yield d
    neuron.cache.clear()


def run_threads(work, n=THREADS):
    """Runs work(t) on n threads started together; re-raises the first failure."""
    barrier = threading.Barrier(n)
    errors = []

    def body(t):
        try:
            barrier.wait(timeout=30)
            work(t)
        except BaseException as e:  # noqa: BLE001 (reported below, on the test's thread)
            errors.append((t, e))

    threads = [threading.Thread(target=body, args=(t,)) for t in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=120)
        assert not th.is_alive(), "a worker thread hung"
    if errors:
        t, e = errors[0]
        raise AssertionError(f"thread {t} failed ({len(errors)} failures): {e!r}") from e


# ---- kernels ----------------------------------------------------------------------------------

def scale_add(a, b):
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.load(a) * 3.0 + nl.load(b))
    return out


def matmul(lhsT, rhs):
    K, M = lhsT.shape
    N = rhs.shape[1]
    out = nl.ndarray((M, N), nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((M, N), nl.float32, buffer=nl.psum)
    for k in range(K // 128):  # unrolled at trace time
        nisa.nc_matmul(acc, nl.load(lhsT[k * 128:(k + 1) * 128, :]),
                       nl.load(rhs[k * 128:(k + 1) * 128, :]), accumulate=True)
    nl.store(out, nl.copy(acc))
    return out


def looped_double(a):
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[1] // 32):
        nl.store(out[:, i * 32:(i + 1) * 32], nl.load(a[:, i * 32:(i + 1) * 32]) * 2.0)
    return out


def softmax_ref(x):
    x = x.astype(np.float64)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def rand(rng, shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


# ---- tests -----------------------------------------------------------------------------------

def test_one_kernel_object_many_shapes_from_threads(cache_dir):
    k = neuron.kernel(scale_add)
    shapes = [(128, 8 * (1 + s)) for s in range(3)]  # 3 signatures

    def work(t):
        rng = np.random.default_rng(t)
        for rep in range(4):
            shape = shapes[(t + rep) % len(shapes)]
            a, b = rand(rng, shape), rand(rng, shape)
            out = k(a, b)
            # fp32 multiply then add, each rounded once: NumPy's float32 ops give the same bits.
            np.testing.assert_array_equal(out, a * np.float32(3.0) + b)

    before = neuron.cache.info()
    run_threads(work)
    after = neuron.cache.info()
    # One entry per signature, each compiled and stored once: every other miss waited for
    # the thread compiling its key.
    assert after["disk_entries"] == len(shapes)
    assert after["dir"] == str(cache_dir)
    assert after["misses"] - before["misses"] >= len(shapes)
    assert after["stores"] - before["stores"] == len(shapes)
    assert after["stores"] - before["stores"] == \
        (after["misses"] - before["misses"]) - (after["waited"] - before["waited"])
    assert len(k._cache) == len(shapes)


def test_different_kernels_native_and_simulated_from_threads(cache_dir):
    kernels = {
        "scale_add": neuron.kernel(scale_add),
        "softmax": neuron.kernel(softmax),
        "matmul": neuron.kernel(matmul),
    }
    sim = {name: neuron.simulate(k) for name, k in kernels.items()}

    def check(name, simulate, rng):
        if name == "scale_add":
            a, b = rand(rng, (128, 16)), rand(rng, (128, 16))
            f = sim[name] if simulate else kernels[name]
            np.testing.assert_array_equal(f(a, b), a * np.float32(3.0) + b)
        elif name == "softmax":
            x = rand(rng, (256, 64), 3.0)
            f = (sim[name] if simulate else kernels[name])[2]
            np.testing.assert_allclose(f(x), softmax_ref(x), rtol=1e-5, atol=1e-6)
        else:
            lhsT, rhs = rand(rng, (256, 128), 0.5), rand(rng, (256, 64), 0.5)
            f = sim[name] if simulate else kernels[name]
            ref = lhsT.astype(np.float64).T @ rhs.astype(np.float64)
            np.testing.assert_allclose(f(lhsT, rhs), ref, rtol=1e-5, atol=1e-4)

    def work(t):
        rng = np.random.default_rng(100 + t)
        names = list(kernels)
        for rep in range(3):
            name = names[(t + rep) % len(names)]
            check(name, simulate=(t + rep) // 3 % 2 == 1, rng=rng)  # both, for each name

    run_threads(work)
    # One entry per native kernel signature (the simulator compiles nothing to the cache).
    assert neuron.cache.info()["disk_entries"] == len(kernels)


def test_native_and_simulator_agree_bitwise_under_threads(cache_dir):
    k = neuron.kernel(softmax)
    x = rand(np.random.default_rng(7), (384, 48), 4.0)
    expect = neuron.simulate(k)[3](x)
    results = [None] * THREADS

    def work(t):
        results[t] = (k[3] if t % 2 else neuron.simulate(k)[3])(x)

    run_threads(work)
    for r in results:
        assert r.tobytes() == expect.tobytes()


def test_loop_kernels_trace_and_run_from_threads(cache_dir):
    # Rolled loops traced in several threads at once (each with its own shapes, so every call
    # traces), with a tiny switch interval so the threads interleave inside the traces.
    k = neuron.kernel(looped_double)
    shapes = [(128, 32 * (1 + t)) for t in range(4)]
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        def work(t):
            rng = np.random.default_rng(t)
            for rep in range(3):
                a = rand(rng, shapes[(t + rep) % len(shapes)])
                np.testing.assert_array_equal(k(a), a * np.float32(2.0))

        run_threads(work)
    finally:
        sys.setswitchinterval(old)


# Found by this file: the trace serial number was one process-wide counter (now per thread).
def test_tracing_rolled_loops_in_two_threads(cache_dir):
    inside, other_done = threading.Event(), threading.Event()

    def waits_in_loop(a):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        for i in nl.affine_range(a.shape[1] // 32):
            t = nl.load(a[:, i * 32:(i + 1) * 32])
            inside.set()
            other_done.wait(30)  # the other thread traces meanwhile
            nl.store(out[:, i * 32:(i + 1) * 32], t * 2.0)
        return out

    a = np.arange(128 * 64, dtype=np.float32).reshape(128, 64)
    result = {}

    def first():
        try:
            result["out"] = neuron.kernel(waits_in_loop)(a)
        except Exception as e:  # noqa: BLE001
            result["out"] = e

    th = threading.Thread(target=first)
    th.start()
    assert inside.wait(30)
    try:
        np.testing.assert_array_equal(neuron.kernel(scale_add)(a, a), a * np.float32(4.0))
    finally:
        other_done.set()
        th.join(60)
    out = result["out"]
    if isinstance(out, Exception):
        raise out
    np.testing.assert_array_equal(out, a * 2)


FIRST_CALLS = textwrap.dedent("""
    import sys, threading
    import numpy as np
    import neuron._C as C
    sys.setswitchinterval(1e-6)
    barrier = threading.Barrier(8)

    def work():
        barrier.wait()
        C.HostTensor.empty([4], C.DType.float32).to_numpy(np.dtype("float32"))

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads: t.start()
    for t in threads: t.join()
    print("ok")
""")


def test_first_numpy_calls_from_threads_do_not_deadlock():
    # Regression: pybind11's NumPy API table was built lazily in a C++ static whose initializer
    # imports numpy (dropping the GIL); eight threads making their first NumPy-typed call at
    # once deadlocked in about 9 runs of 10 (fixed in python/bindings/runtime.cpp). A fresh
    # process each time, since the table is built once per process.
    for _ in range(3):
        r = subprocess.run([sys.executable, "-c", FIRST_CALLS], capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 0 and "ok" in r.stdout, r.stderr


CHILD = textwrap.dedent("""
    import json, sys, threading
    import numpy as np
    import neuron, neuron.cache
    import neuron.language as nl

    def scale_add(a, b):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.load(a) * 3.0 + nl.load(b))
        return out

    def rowmax(x):
        out = nl.ndarray((x.shape[0], 1), x.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.max(nl.load(x), axis=1))
        return out

    k1, k2 = neuron.kernel(scale_add), neuron.kernel(rowmax)
    shapes = [(128, 16), (64, 24)]
    levels, errors = [], []

    def work(t):
        rng = np.random.default_rng(t)
        try:
            for s in shapes:
                a, b = rng.standard_normal(s).astype(np.float32), rng.standard_normal(s).astype(np.float32)
                np.testing.assert_array_equal(k1(a, b), a * np.float32(3.0) + b)
                levels.append(k1.last_report.split(":")[1].split()[0])
                np.testing.assert_array_equal(k2(a)[:, 0], a.max(axis=1))
        except Exception as e:
            errors.append(repr(e))

    threads = [threading.Thread(target=work, args=(t,)) for t in range(2)]
    for t in threads: t.start()
    for t in threads: t.join()
    info = neuron.cache.info()
    print(json.dumps({"errors": errors, "levels": sorted(set(levels)), "info": info}))
""")


def run_child(env):
    return subprocess.Popen([sys.executable, "-c", CHILD], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_two_processes_share_one_cache_dir(tmp_path):
    d = tmp_path / "shared"
    env = dict(os.environ, NEURON_CACHE_DIR=str(d), NEURON_CACHE="on")
    env.pop("NEURON_CACHE_MAX_BYTES", None)
    procs = [run_child(env) for _ in range(2)]
    results = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
        assert p.returncode == 0, err
        assert "warning" not in err, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    for r in results:
        assert r["errors"] == []
        assert r["info"]["dir"] == str(d)
    # 2 shapes x 2 kernels: one valid entry each, whoever wrote it; no temp files left.
    names = sorted(os.listdir(d))
    assert len([n for n in names if n.endswith(".neuronc")]) == 4
    assert not [n for n in names if n.startswith(".tmp.")]
    # A third process finds every kernel on disk (valid entries: a corrupt one would be
    # reported, removed and compiled cold).
    p = run_child(env)
    try:
        out, err = p.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        p.kill()
        raise
    third = json.loads(out.strip().splitlines()[-1])
    assert third["errors"] == [] and "warning" not in err, err
    # Nothing compiled: each of the 4 kernels came from disk (the memory level of a new process
    # is empty), so some call reported "disk" (`last_report` is per thread).
    assert "disk" in third["levels"] and set(third["levels"]) <= {"disk", "memory"}
    assert third["info"]["misses"] == 0
    assert third["info"]["disk_hits"] >= 4
    assert third["info"]["disk_entries"] == 4


def test_grids_on_pytorchs_openmp_team_from_threads_and_a_forked_child(cache_dir):
    # With PyTorch imported, launches run their grids on libgomp's team (docs/native.md
    # "Threads"): from several Python threads at once (each its own team), from inside a
    # PyTorch parallel region's aftermath, and in a forked child (its own workers, not the
    # team, whose threads the child lacks) the results stay the simulator's bits.
    torch = pytest.importorskip("torch")
    k = neuron.kernel(softmax)
    x = rand(np.random.default_rng(11), (512, 40), 4.0)
    expect = neuron.simulate(k)[4](x)
    torch.ones(1 << 20).sum()  # a parallel PyTorch operator: its team now spins
    results = [None] * THREADS

    def work(t):
        results[t] = k[4](x)

    run_threads(work)
    for r in results:
        assert r.tobytes() == expect.tobytes()
    pid = os.fork()
    if pid == 0:  # the child: exit status 0 only when its launch matches
        try:
            os._exit(0 if k[4](x).tobytes() == expect.tobytes() else 1)
        except BaseException:  # noqa: BLE001
            os._exit(2)
    deadline = time.monotonic() + 60
    while (done := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    if done[0] == 0:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        pytest.fail("the forked child's launch hung")
    assert os.WIFEXITED(done[1]) and os.WEXITSTATUS(done[1]) == 0
