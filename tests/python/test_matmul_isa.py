# bf16 nc_matmul follows one rule (docs/numerics.md "Matmul", the rule of AMX's TDPBF16PS) on
# every executor: the simulator, and native code with each nc_matmul kernel variant this CPU
# runs (NEURON_MATMUL_ISA picks one per process). All must give the same bits, and those bits
# must be the NumPy model's (tests/fuzz/reference.py, written independently of the kernels).
import os
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "fuzz"))
import reference  # noqa: E402

KERNEL = '''
import sys
import ml_dtypes
import numpy as np
import neuron
import neuron.isa as nisa
import neuron.language as nl


def matmul(x, y):
    # Columns 0, 2, 4, ... of y: a strided moving operand takes the kernels' generic path.
    out = nl.ndarray((2, 96, 200), nl.float32, buffer=nl.shared_hbm)
    a = nl.load(x)
    b = nl.load(y)
    for i, moving in enumerate((b[:, 0:200], b[:, 0:400:2])):
        acc = nl.ndarray((96, 200), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(acc, a, moving, accumulate=False)
        r = nl.ndarray((96, 200), nl.float32)
        nisa.tensor_copy(r, acc)
        nl.store(out[i], r)
    return out


def inputs():
    rng = np.random.default_rng(5)
    # A wide exponent range (so the order of the sums shows) and some subnormal bf16 inputs.
    x = rng.standard_normal((100, 96)) * np.exp2(rng.integers(-20, 20, (100, 96)))
    y = rng.standard_normal((100, 400)) * np.exp2(rng.integers(-20, 20, (100, 400)))
    x[rng.random(x.shape) < 0.05] = 2.0 ** -130
    y[rng.random(y.shape) < 0.05] = -(2.0 ** -131)
    return x.astype(ml_dtypes.bfloat16), y.astype(ml_dtypes.bfloat16)


if __name__ == "__main__":
    x, y = inputs()
    got = neuron.kernel(matmul, mode=sys.argv[1])(x, y)
    sys.stdout.write(neuron._C.matmul_isa() + " " + np.ascontiguousarray(got).tobytes().hex())
'''


def run_in_subprocess(tmp_path, mode, isa):
    script = tmp_path / "bf16_matmul.py"
    script.write_text(KERNEL)
    env = dict(os.environ, NEURON_MATMUL_ISA=isa, NEURON_CACHE_DIR=str(tmp_path / "cache"))
    r = subprocess.run([sys.executable, str(script), mode], capture_output=True, text=True,
                       env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    used, data = r.stdout.split()
    return used, np.frombuffer(bytes.fromhex(data), np.float32).reshape(2, 96, 200)


def test_every_matmul_variant_computes_the_rules_bits(tmp_path):
    ns = {}
    exec(compile(KERNEL, "bf16_matmul", "exec"), ns)
    x, y = ns["inputs"]()
    want = np.stack([reference.bf16_matmul(x.astype(np.float64), m.astype(np.float64),
                                           np.zeros((96, 200), np.float32))
                     for m in (y[:, 0:200], y[:, 0:400:2])])
    # The rule differs from a sequential fma chain on these inputs (else this test proves little).
    seq = np.zeros((96, 200), np.float32)
    xs, ys = reference.daz(x.astype(np.float32)), reference.daz(y[:, 0:200].astype(np.float32))
    for k in range(100):
        seq = reference.fma_f32(np.outer(xs[k], ys[k]).astype(np.float64), seq)
    assert (seq.view(np.uint32) != want[0].view(np.uint32)).sum() > 100

    ran = []
    for isa in ("amx", "avx512bf16", "avx512", "avx2", "portable"):
        for mode in ("native", "simulate"):
            try:
                used, got = run_in_subprocess(tmp_path, mode, isa)
            except AssertionError as e:
                assert "is not a matmul variant this CPU runs" in str(e)
                break
            assert used == isa
            np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32),
                                          err_msg=f"{mode} with NEURON_MATMUL_ISA={isa}")
            ran.append((isa, mode))
    assert ("portable", "native") in ran and ("portable", "simulate") in ran
    print("ran:", ran)


def test_an_unknown_matmul_variant_is_a_config_error_naming_the_ones_this_cpu_runs(tmp_path):
    with pytest.raises(AssertionError) as e:
        run_in_subprocess(tmp_path, "native", "sse9")
    msg = str(e.value)
    assert "NEURON_MATMUL_ISA='sse9' is not a matmul variant this CPU runs" in msg
    assert "portable" in msg and "unset it" in msg
