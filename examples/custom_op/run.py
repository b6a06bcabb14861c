"""Loads the operator library built from add_rms_norm.hpp and checks torch.ops.my_ops.add_rms_norm
against a float64 PyTorch reference (fp32 and bf16, an odd row count); exits non-zero on a
mismatch.

    python3 run.py path/to/libmy_ops.so
"""
import sys

import torch

import neuron


def reference(x, residual, weight, eps):
    h = x.double() + residual.double()
    out = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * weight.double()
    return out, h


def main(path):
    lib = neuron.load_ops(path)
    print(lib)
    torch.manual_seed(0)
    worst = {}
    for dtype, tol in ((torch.float32, 1e-5), (torch.bfloat16, 2e-2)):
        for rows, dim in ((300, 96), (7, 1000)):
            x = torch.randn(rows, dim).to(dtype)
            residual = torch.randn(rows, dim).to(dtype)
            weight = (1 + 0.1 * torch.randn(dim)).to(dtype)
            out, h = torch.ops.my_ops.add_rms_norm(x, residual, weight, eps=1e-5)
            want_out, want_h = reference(x, residual, weight, 1e-5)
            assert out.dtype == dtype and out.shape == (rows, dim), (out.dtype, out.shape)
            err = max(((out.double() - want_out).abs().max() / want_out.abs().max()).item(),
                      ((h.double() - want_h).abs().max() / want_h.abs().max()).item())
            worst[str(dtype), rows, dim] = err
            if not err <= tol:
                print(f"FAIL {dtype} [{rows}, {dim}]: relative error {err:.3g} > {tol}")
                return 1
    # A parameter reaches the kernel as given (a large eps changes every value).
    x, residual, weight = torch.randn(9, 16), torch.randn(9, 16), torch.rand(16) + 0.5
    out, _ = torch.ops.my_ops.add_rms_norm(x, residual, weight, eps=3.5)
    err = ((out.double() - reference(x, residual, weight, 3.5)[0]).abs().max()).item()
    if not err <= 1e-5:
        print(f"FAIL eps=3.5: max error {err:.3g} (the parameter did not arrive)")
        return 1
    try:  # a misspelt operator name lists the library's operators
        lib.kernel("add_rms_nrom")
        print("FAIL: lib.kernel found a misspelt operator")
        return 1
    except KeyError as e:
        if "add_rms_norm" not in str(e):
            print(f"FAIL: the KeyError does not list the operators: {e}")
            return 1
    # An error of the compiler's later passes names a source line (here the tile's allocation
    # in the kernel library's helper), as a trace error does, not a line of the IR text.
    try:
        torch.ops.my_ops.add_rms_norm(torch.randn(4, 60000), torch.randn(4, 60000),
                                      torch.randn(60000))
        print("FAIL: rows of 60000 fp32 fit SBUF?")
        return 1
    except neuron.NeuronError as e:
        if "[sbuf-capacity]" not in str(e) or ".hpp:" not in str(e) or ".so:" in str(e):
            print(f"FAIL: the capacity error does not name its source line: {e}")
            return 1
    # The fake implementation (shapes only) is what torch.compile and meta tensors see.
    meta = torch.ops.my_ops.add_rms_norm(torch.empty(5, 8, device="meta"),
                                         torch.empty(5, 8, device="meta"),
                                         torch.empty(8, device="meta"))
    assert [tuple(t.shape) for t in meta] == [(5, 8), (5, 8)]
    for key, err in worst.items():
        print(f"{key}: max relative error {err:.3g}")
    print("custom op OK")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
