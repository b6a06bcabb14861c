# neuron.compat: a kernel written against the current NKI API (import nki) runs unmodified.
import os
import subprocess
import sys
import textwrap

import numpy as np

import neuron.compat

NKI_SCRIPT = textwrap.dedent("""
    import numpy as np
    import nki
    import nki.isa as nisa
    import nki.language as nl

    @nki.jit
    def scale_add(a, b):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        ta = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        tb = nl.ndarray(b.shape, dtype=b.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=ta, src=a)
        nisa.dma_copy(dst=tb, src=b)
        r = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=r, data=ta, op0=nl.multiply, operand0=2.0)
        nisa.tensor_tensor(dst=r, data1=r, data2=tb, op=nl.add)
        nisa.dma_copy(dst=out, src=r)
        return out

    a = np.arange(128 * 8, dtype=np.float32).reshape(128, 8)
    b = np.ones((128, 8), np.float32)
    native = scale_add(a, b)
    simulated = nki.simulate(scale_add)(a, b)
    legacy = nki.simulate_kernel(scale_add, a, b)
    assert np.array_equal(native, 2 * a + b), native
    assert np.array_equal(simulated, native) and np.array_equal(legacy, native)
    print("nki ok")
""")


def test_install_aliases_nki_modules(tmp_path):
    neuron.compat.install()
    import nki
    import nki.language as nl

    assert nl is neuron.language and nki.isa is neuron.isa
    path = tmp_path / "nki_kernel.py"
    path.write_text(NKI_SCRIPT)
    ns = {}
    exec(compile(NKI_SCRIPT, str(path), "exec"), ns)
    a = np.ones((128, 8), np.float32)
    np.testing.assert_array_equal(ns["scale_add"](a, a), 3 * a)


def test_python_m_neuron_compat_runs_a_script(tmp_path):
    path = tmp_path / "nki_script.py"
    path.write_text(NKI_SCRIPT)
    r = subprocess.run([sys.executable, "-m", "neuron.compat", str(path)], capture_output=True,
                       text=True, env=dict(os.environ), timeout=120)
    assert r.returncode == 0, r.stderr
    assert "nki ok" in r.stdout


def test_nki_jit_kernels_follow_neuron_eager(monkeypatch):
    neuron.compat.install()
    import nki
    import nki.language as nl

    def double(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.load(a) * 2.0)
        return out
    a = np.arange(16, dtype=np.float32).reshape(2, 8)
    monkeypatch.setenv("NEURON_EAGER", "1")
    k = nki.jit(double)
    assert k.mode == "eager"
    np.testing.assert_array_equal(k(a), a * 2)
    monkeypatch.delenv("NEURON_EAGER")
    assert nki.jit(double).mode == "native"
