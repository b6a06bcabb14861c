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
# ---- the Trn3 MX tutorial (mxfp-matmul/mx_kernels.py), inputs and references of our own --------
# Data: float8_e5m2 / float4_e2m1fn values (ml_dtypes) with per-block uint8 scales near 127, so
# the float64 reference dequantizes exactly; packed as the tutorial passes them (four fp8 codes
# per uint32, two fp4 codes per uint8, value i in byte / nibble i).

def mx_values(fmt, shape):
    import ml_dtypes
    big = 6.0 if fmt == "fp4" else 4.0
    v = rng().uniform(-big, big, shape).astype(np.float32)
    return v.astype(ml_dtypes.float4_e2m1fn if fmt == "fp4" else ml_dtypes.float8_e5m2)


def mx_pack(v):
    b = v.view(np.uint8)
    if v.dtype.itemsize == 1 and v.dtype.name.startswith("float4"):
        return (b[:, 0::2] & 0xF) | ((b[:, 1::2] & 0xF) << 4)
    return b.reshape(v.shape[0], -1).view(np.uint32)


def mx_dequant(v, scale):
    """[K, 4X] values times 2^(scale - 127) per block of 8 rows x 4 values, as [K, X, 4]."""
    K = v.shape[0]
    s = np.repeat(2.0 ** (scale.astype(f64) - 127), 8, axis=0)[:K]
    return v.astype(f64).reshape(K, -1, 4) * s[:, :, None]


def mx_quantize_ref(x):
    """NKI's quantize_mx on [K, 4X] (float64 emulation): scale = largest fp32 exponent field of
    the block - 15 + 1 (e5m2), values divided by 2^(scale - 127), as float8_e5m2."""
    import ml_dtypes
    K, F = x.shape
    e = (x.astype(np.float32).view(np.uint32) >> 23) & 0xff
    s = np.maximum(e.reshape(K // 8, 8, F // 4, 4).max(axis=(1, 3)).astype(np.int64) - 14, 0)
    q = x.astype(f64) / np.repeat(np.repeat(2.0 ** (s - 127), 8, axis=0), 4, axis=1)
    return np.clip(q, -57344, 57344).astype(ml_dtypes.float8_e5m2), s.astype(np.uint8)


def mx_scales(rows, cols):
    return rng().integers(124, 131, (rows // 8, cols)).astype(np.uint8)


def mx_offline(fmt):
    def inputs():
        import neuron.language as nl
        st, mv = mx_values(fmt, (128, 512)), mx_values(fmt, (128, 2048))
        x4 = nl.float4_e2m1fn_x4 if fmt == "fp4" else nl.float8_e5m2_x4
        return [mx_pack(st), mx_scales(128, 128), mx_pack(mv), mx_scales(128, 512), x4, st, mv]

    def ref(st_p, st_s, mv_p, mv_s, x4, st, mv):
        return np.einsum("kiq,kjq->ij", mx_dequant(st, st_s), mx_dequant(mv, mv_s))
    return inputs, ref


def mx_on_device(st_fmt):
    def inputs():
        import ml_dtypes
        import neuron.language as nl
        st = mx_values(st_fmt, (128, 512))
        mv = mx_values("fp8", (128, 2048)).astype(ml_dtypes.bfloat16)
        x4 = nl.float4_e2m1fn_x4 if st_fmt == "fp4" else nl.float8_e5m2_x4
        return [mx_pack(st), mx_scales(128, 128), mv, x4, nl.float8_e5m2_x4, st]

    def ref(st_p, st_s, mv, st_x4, mv_x4, st):
        q, s = mx_quantize_ref(mv)
        return np.einsum("kiq,kjq->ij", mx_dequant(st, st_s), mx_dequant(q, s))
    return inputs, ref


def mx_strided(use_tensor_copy):
    def inputs():
        import ml_dtypes
        import neuron.language as nl
        st = mx_values("fp8", (512, 128)).astype(ml_dtypes.bfloat16)
        mv = mx_values("fp8", (512, 512)).astype(ml_dtypes.bfloat16)
        return [st, mv, nl.float8_e5m2_x4, use_tensor_copy]
    return inputs, lambda st, mv, x4, c: st.astype(f64).T @ mv.astype(f64)


MXK = "mxfp-matmul/mx_kernels.py"
MX = [("MX offline quantized fp8", f"{T}/{MXK}", "kernel_offline_quantized_mx_matmul",
       *mx_offline("fp8"), 1e-2, 0.5),
      ("MX offline quantized fp4", f"{T}/{MXK}", "kernel_offline_quantized_mx_matmul",
       *mx_offline("fp4"), 1e-2, 0.5),
      ("MX on-device quantize fp4 x fp8", f"{T}/{MXK}", "kernel_on_device_quantize_matmul_mx",
       *mx_on_device("fp4"), 1e-2, 0.5),
      ("MX on-device quantize fp8 x fp8", f"{T}/{MXK}", "kernel_on_device_quantize_matmul_mx",
       *mx_on_device("fp8"), 1e-2, 0.5),
      ("MX copy strided (tensor_copy)", f"{T}/{MXK}", "kernel_copy_strided_quantize_matmul_mx",
       *mx_strided(True), 1e-2, 0.5),
      ("MX copy strided (dma)", f"{T}/{MXK}", "kernel_copy_strided_quantize_matmul_mx",
       *mx_strided(False), 1e-2, 0.5)]


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
    mod = importlib.import_module(os.path.splitext(os.path.basename(path))[0])
    if fn is None:
        return  # checked by the sample itself at import
    args = inputs()
    kernel = getattr(mod, fn)
    if name.startswith("MX "):  # the reference also gets the unpacked values
        want = ref(*args)
        args = args[:len(args) - (2 if "offline" in name else 1 if "on-device" in name else 0)]
        return check(kernel(*args), want, rtol, atol)
    if rel.startswith("contributed/"):  # their own checks call nki.baremetal()(kernel)
        from neuronxcc import nki
        kernel = nki.baremetal()(kernel)
    check(kernel(*args), ref(*args), rtol, atol)


def check(out, want, rtol, atol):
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
