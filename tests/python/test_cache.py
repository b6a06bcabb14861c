# neuron.cache: the C++ compile cache seen from Python (run in a subprocess with its own cache
# directory, so the user's cache is left alone).
import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import numpy as np
    import neuron, neuron.cache
    import neuron.language as nl

    def double(x):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.load(x) * 2.0)
        return out

    x = np.ones((128, 4), np.float32)
    assert neuron.cache.info()["disk_entries"] == 0
    neuron.kernel(double)(x)
    first = neuron.cache.info()
    assert first["misses"] == 1 and first["disk_entries"] == 1, first
    neuron.kernel(double)(x)   # a new Kernel object, the same IR: no new compile
    second = neuron.cache.info()
    assert second["misses"] == 1 and second["disk_entries"] == 1, second
    neuron.cache.clear()
    assert neuron.cache.info()["disk_entries"] == 0
    print("cache ok")
""")


def test_cache_info_and_clear(tmp_path):
    env = dict(os.environ, NEURON_CACHE_DIR=str(tmp_path / "cache"))
    r = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert "cache ok" in r.stdout
