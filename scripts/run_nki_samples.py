#!/usr/bin/env python3
"""Runs the published NKI sample kernels (a local checkout of aws-neuron/nki-samples) unmodified
through neuron's compatibility layer (neuron.compat), each against a NumPy float64 reference,
and prints PASS / FAIL with the first error. Not part of CI: the samples are not ours to ship,
and the tests in tests/python never depend on them (docs/nki-compat.md, "Published kernels").

    PYTHONPATH=build/python python3 scripts/run_nki_samples.py /path/to/nki-samples [names...]

Each kernel runs in its own process (a fresh import of the samples, a timeout: --timeout S).
The inputs are the samples' own sizes (their test harnesses' or __main__ blocks'), seeded;
NKI_SAMPLES_ATTENTION_SEQLEN=1024 runs the tiled attention tutorials (v3 on) at another
sequence length than their harness's 4096 (a quicker check on a loaded machine)."""
import argparse
import importlib
import os
import subprocess
import sys
import time
import traceback

import numpy as np

T = "src/nki_samples/tutorials"
f64 = np.float64


def rng():
    return np.random.default_rng(0)


def bf16(x):
    import ml_dtypes
    return np.asarray(x, np.float32).astype(ml_dtypes.bfloat16)


# ---- references (float64) ----------------------------------------------------------------------

def ref_attention(q, k, v):
    qk = q.astype(f64).T @ k.astype(f64)
    e = np.exp(qk - qk.max(axis=1, keepdims=True))
    return (e / e.sum(axis=1, keepdims=True)) @ v.astype(f64).T


def ref_mamba(delta, u, A, B, C):
    delta, u, A, B, C = (x.astype(f64) for x in (delta, u, A, B, C))
    out = np.zeros_like(delta)
    for b in range(delta.shape[0]):
        for s in range(A.shape[1]):
            dA = np.exp(delta[b] * A[:, s:s + 1])
            dBu = delta[b] * u[b] * B[b, s]
            h = np.zeros(delta.shape[1])
            for t in range(delta.shape[2]):
                h = dA[:, t] * h + dBu[:, t]
                out[b, :, t] += h * C[b, s, t]
    return out


def ref_interpolate(x, mode):
    import torch
    return torch.nn.functional.interpolate(torch.from_numpy(x.astype(f64)), scale_factor=2,
                                           mode=mode).numpy()


def ref_maxpool(x, k):
    return np.lib.stride_tricks.sliding_window_view(x.astype(f64), (k, k)).max(axis=(2, 3))


# ---- the kernels: (name, file, callable, make inputs, reference, rtol, atol) -------------------

def attention(version, seqlen):
    def inputs():
        n = int(os.environ.get("NKI_SAMPLES_ATTENTION_SEQLEN", seqlen)) if seqlen > 128 else seqlen
        r = rng()
        return [((r.random((128, n)) - 0.5) * 2).astype(np.float32) for _ in range(3)]
    return (f"attention {version}", f"{T}/attention_fwd_performance/attention_kernels.py",
            f"attn_fwd_{version}", inputs, ref_attention, 0, 1e-2)


def mamba(version):
    def inputs():
        r = rng()
        b, c, s, n = 1, 256, 2048, 16
        return [r.uniform(0.01, 0.1, (b, c, s)).astype(np.float32),
                r.uniform(-1, 1, (b, c, s)).astype(np.float32),
                -r.uniform(0.5, 1.5, (c, n)).astype(np.float32),
                r.uniform(-1, 1, (b, n, s)).astype(np.float32),
                r.uniform(-1, 1, (b, n, s)).astype(np.float32)]
    return (f"fused mamba {version}", f"{T}/fused_mamba/mamba_nki_kernels.py", f"mamba_{version}",
            inputs, ref_mamba, 1e-3, 1e-3)


def matmul(fn, m, k, n):
    def inputs():
        r = rng()
        return [bf16(r.random((k, m))), bf16(r.random((k, n)))]
    return (f"matmul {fn}", f"{T}/matrix_multiplication/matrix_multiplication_nki_kernels.py",
            f"nki_matmul_{fn}_", inputs, lambda a, b: a.astype(f64).T @ b.astype(f64), 1e-2,
            1e-2)


def add(name, file, fn, shape):
    def inputs():
        r = rng()
        return [r.random(shape).astype(np.float16) for _ in range(2)]
    return (name, f"{T}/tensor_addition/{file}", fn, inputs,
            lambda a, b: a.astype(f64) + b.astype(f64), 1e-2, 1e-3)


def transpose_inputs():
    return [np.arange(5 * 3 * 4, dtype=np.int8).reshape(5, 12), (3, 4)]


def avgpool_inputs():
    return [rng().random((2, 6, 6)).astype(np.float16), 2]


KERNELS = [
    add("tensor addition", "tensor_addition_nki_kernels.py", "nki_tensor_add", (256, 1024)),
    add("SPMD tensor addition", "spmd_tensor_addition_nki_kernels.py", "nki_tensor_add",
        (256, 1024)),
    add("SPMD multiple-core tensor addition", "spmd_multiple_nc_tensor_addition_nki_kernels.py",
        "nki_tensor_add_nc2", (512, 2048)),
    ("transpose2d", f"{T}/transpose2d/transpose2d_nki_kernels.py", "tensor_transpose2D_kernel_",
     transpose_inputs, lambda a, s: a.reshape(5, 3, 4).transpose(0, 2, 1).reshape(5, 12), 0, 0),
    ("average pool", f"{T}/average_pool2d/average_pool2d_nki_kernels.py",
     "tensor_avgpool_kernel", avgpool_inputs,
     lambda x, p: x.astype(f64).reshape(2, 3, 2, 3, 2).mean(axis=(2, 4)), 1e-2, 1e-3),
    matmul("basic", 64, 128, 512),
    matmul("tiled", 4096, 1024, 2048),
    matmul("hoist_load", 4096, 1024, 2048),
    matmul("block_free_dimension", 4096, 1024, 2048),
    matmul("fully_optimized", 4096, 1024, 2048),
    mamba("v1"), mamba("v2"), mamba("v3"),
    attention("v1", 128), attention("v2", 128),
    *[attention(v, 4096) for v in ("v3", "v4", "v5", "v6", "v7", "v8", "v8a", "v9", "v10",
                                  "v11")],
    ("contributed bilinear interpolation", "contributed/interpolate_bilinear_fwd.py",
     "interpolate_bilinear_2x_fwd", lambda: [rng().random((2, 64, 128, 128)).astype(np.float32)],
     lambda x: ref_interpolate(x, "bilinear"), 1e-4, 1e-4),
    ("contributed trilinear interpolation", "contributed/interpolate_trilinear_fwd.py",
     "interpolate_trilinear_2x_fwd",
     lambda: [rng().random((2, 64, 23, 23, 23)).astype(np.float32)],
     lambda x: ref_interpolate(x, "trilinear"), 1e-4, 1e-4),
    ("contributed matmul", "contributed/matmul.py", "matmul",
     lambda: [rng().random((1024, 4096)).astype(np.float16),
              rng().random((1024, 2048)).astype(np.float16)],
     lambda a, b: a.astype(f64).T @ b.astype(f64), 1e-2, 1e-2),
    ("contributed max pooling", "contributed/maxpooling.py", "max_pooling_2d_stride_1",
     lambda: [rng().random((448, 448)).astype(np.float32), 3], ref_maxpool, 0, 0),
    # Runs (and checks with its own bfloat16 reference) at import, seqlen 16k.
    ("contributed pipelined attention", "contributed/pipelined_attention.py", None, None, None,
     0, 0),
]
# The Trn3 MX tutorial: its six tests need the MX dtypes and instructions (a stretch goal).
MX = [("MX " + t, f"{T}/mxfp-matmul/mx_toplevel.py", t, None, None, 0, 0) for t in (
    "offline quantized fp8", "offline quantized fp4", "on-device quantize fp4 x fp8",
    "on-device quantize fp8 x fp8", "copy strided (tensor_copy)", "copy strided (dma)")]


def first_error(e):
    """The exception's first line, with the innermost frame in the sample's code."""
    tb = traceback.extract_tb(e.__traceback__)
    where = next((f"{os.path.basename(f.filename)}:{f.lineno}" for f in reversed(tb)
                  if "nki-samples" in f.filename or "nki_samples" in f.filename), "")
    msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {msg}" + (f" (at {where})" if where else "")


def stub_torch_xla():
    """Some samples import torch_xla's device module at the top (for their own benchmarks);
    the kernels never use it, so an empty stand-in lets them import here."""
    import types
    try:
        import torch_xla  # noqa: F401
    except ImportError:
        for name in ("torch_xla", "torch_xla.core", "torch_xla.core.xla_model"):
            sys.modules[name] = types.ModuleType(name)
        sys.modules["torch_xla"].core = sys.modules["torch_xla.core"]
        sys.modules["torch_xla.core"].xla_model = sys.modules["torch_xla.core.xla_model"]


def run_one(samples, entry):
    name, rel, fn, inputs, ref, rtol, atol = entry
    path = os.path.join(samples, rel)
    import neuron.compat
    neuron.compat.install()
    stub_torch_xla()
    sys.path.insert(0, os.path.dirname(path))
    sys.argv = [path]
    if name.startswith("MX "):
        importlib.import_module("mx_kernels")
        raise NotImplementedError("the MX dtypes and instructions are not attempted")
    mod = importlib.import_module(os.path.splitext(os.path.basename(path))[0])
    if fn is None:
        return  # checked by the sample itself at import
    args = inputs()
    kernel = getattr(mod, fn)
    if rel.startswith("contributed/"):  # their own checks call nki.baremetal()(kernel)
        from neuronxcc import nki
        kernel = nki.baremetal()(kernel)
    out = kernel(*args)
    want = ref(*args)
    got = np.asarray(out).astype(f64)
    if got.shape != want.shape:
        raise AssertionError(f"shape {got.shape}, want {want.shape}")
    bad = ~np.isclose(got, want, rtol=rtol, atol=atol)
    if bad.any():
        i = tuple(int(v) for v in np.argwhere(bad)[0])
        raise AssertionError(f"{int(bad.sum())} of {bad.size} elements differ; first at {i}: "
                             f"{got[i]} vs {want[i]} (rtol {rtol}, atol {atol})")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("samples", help="a checkout of aws-neuron/nki-samples")
    p.add_argument("names", nargs="*", help="run only kernels whose name contains one of these")
    p.add_argument("--timeout", type=float, default=900)
    p.add_argument("--one", help=argparse.SUPPRESS)  # the child process: one kernel by name
    a = p.parse_args()
    entries = KERNELS + MX
    if a.one:
        entry = next(e for e in entries if e[0] == a.one)
        try:
            run_one(a.samples, entry)
        except BaseException as e:  # noqa: B902 (any failure of the sample is a result)
            print("FIRST-ERROR " + first_error(e))
            return 1
        return 0
    chosen = [e for e in entries if not a.names or any(n in e[0] for n in a.names)]
    passed = 0
    for e in chosen:
        t0 = time.time()
        try:
            r = subprocess.run([sys.executable, __file__, a.samples, "--one", e[0]],
                               capture_output=True, text=True, timeout=a.timeout)
            ok = r.returncode == 0
            err = next((ln[len("FIRST-ERROR "):] for ln in r.stdout.splitlines()
                        if ln.startswith("FIRST-ERROR ")),
                       (r.stderr.strip().splitlines() or ["?"])[-1])
        except subprocess.TimeoutExpired:
            ok, err = False, f"timed out after {a.timeout:.0f} s"
        passed += ok
        print(f"{'PASS' if ok else 'FAIL'} {e[0]} ({time.time() - t0:.1f} s)"
              + ("" if ok else f": {err}"), flush=True)
    n_mx = sum(1 for e in chosen if e[0].startswith("MX "))
    print(f"{passed} of {len(chosen)} pass ({len(chosen) - n_mx} non-MX, {n_mx} MX)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
