"""Self-test of the NumPy reference (reference.py) against hand-computed values.

The reference is what the differential fuzzer trusts, so its own corner cases are pinned here
with values worked out by hand from docs/numerics.md. Run: python3 tests/fuzz/test_reference.py
"""
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference as R  # noqa: E402

F = np.float32


def check(name, got, want):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    same = (got == want) | (np.isnan(got) & np.isnan(want))
    same &= np.signbit(got) == np.signbit(want)
    if not same.all():
        raise AssertionError(f"{name}: got {got.tolist()} want {want.tolist()}")


def run(text, inputs, grid=(1,)):
    return R.execute(text, inputs, list(grid))[0]


def main():
    # Narrow conversions: ties to even, overflow to inf (docs/numerics.md).
    check("fp16", R.from_f32([65519.0, 65520.0], "float16").astype(F), [65504.0, np.inf])
    check("e4m3", R.from_f32([247.0, 248.0], "float8_e4m3").astype(F), [240.0, np.inf])
    check("int8", R.from_f32([2.5, 3.5, 300.0, np.nan, -np.inf], "int8"), [2, 4, 127, 0, -128])
    check("uint8", R.from_f32([-1.0], "uint8"), [0])
    check("bool", R.from_f32([0.3, 0.0, np.nan], "bool"), [1, 0, 0])
    # Floored mod takes the divisor's sign; fmax ignores NaN.
    check("mod", R.alu("mod", [-7.0, 7.0], [3.0, -3.0]), [2.0, -2.0])
    check("maximum", R.alu("maximum", [np.nan], [1.0]), [1.0])
    # bf16 matmul (docs/numerics.md): products 1, 2^-24, 2^-24 in rows 0, 1, 3 give 1 + 2^-23
    # (the odd partial sum holds 2^-23 exactly); in rows 0, 2, 4 (all even) they give 1.
    e = 2.0 ** -12
    for rows, want in (((0, 1, 3), 1 + 2.0 ** -23), ((0, 2, 4), 1.0)):
        s, m = np.zeros((5, 1)), np.zeros((5, 1))
        for r, v in zip(rows, (1.0, e, e)):
            s[r, 0], m[r, 0] = v, v
        check(f"bf16 matmul rows {rows}", R.bf16_matmul(s, m, np.zeros((1, 1), F)), [[want]])
    # Row 32 starts a new block: 1 in row 0, 2^-24 in rows 32 and 34 (one block's even sum,
    # 2^-23) give 1 + 2^-23; a subnormal operand reads as 0; a tiny product flushes.
    s, m = np.zeros((35, 1)), np.zeros((35, 1))
    s[[0, 32, 34], 0] = m[[0, 32, 34], 0] = [1.0, e, e]
    check("bf16 matmul blocks", R.bf16_matmul(s, m, np.zeros((1, 1), F)), [[1 + 2.0 ** -23]])
    check("bf16 matmul daz", R.bf16_matmul(np.array([[2.0 ** -133]]), np.array([[1.0]]),
                                           np.array([[2.0 ** -140]], F)), [[0.0]])
    check("bf16 matmul flush", R.bf16_matmul(np.array([[2.0 ** -70], [1.0]]),
                                             np.array([[2.0 ** -70], [0.0]]),
                                             np.zeros((1, 1), F)), [[0.0]])
    # fma at an fp32 tie: 3 * 5592407 = 16777221 lies exactly halfway between the fp32 values
    # 16777220 and 16777222 (spacing 2 above 2^24), so a tiny acc decides the rounding; a
    # double sum (exact only to 53 bits) would round to the tie and then to even both times.
    prod = np.array([3.0 * 5592407.0])
    check("fma tie up", R.fma_f32(prod, np.array([F(2.0**-40)])), [16777222.0])
    check("fma tie down", R.fma_f32(prod, np.array([F(-2.0**-40)])), [16777220.0])
    check("fma exact tie", R.fma_f32(prod, np.array([F(0.0)])), [16777220.0])
    # activation: -0 * scale + bias(0) = +0, so reciprocal gives +inf.
    k = """kernel k(a: float32[1, 2] shared_hbm) -> (o: float32[1, 2] shared_hbm) {
  alloc t: float32[1, 2] sbuf
  dma_copy(dst=t[0:+1, 0:+2], src=a[0:+1, 0:+2])
  activation(dst=t[0:+1, 0:+2], data=t[0:+1, 0:+2], func="reciprocal", scale=-1.0)
  dma_copy(dst=o[0:+1, 0:+2], src=t[0:+1, 0:+2])
}"""
    check("activation -0", run(k, {"a": np.array([[0.0, 4.0]], F)})["o"], [[np.inf, -0.25]])
    # iota: offset + p*channel_multiplier + stride*i, into int8 (saturating) over 2 programs.
    k = """kernel k() -> (o: int8[2, 3] shared_hbm) {
  alloc t: int8[1, 3] sbuf
  iota(dst=t[0:+1, 0:+3], pattern=[100, 3], offset=-5, channel_multiplier=7)
  dma_copy(dst=o[pid0:+1, 0:+3], src=t[0:+1, 0:+3])
}"""
    check("iota", run(k, {}, (2,))["o"], [[-5, 95, 127], [-5, 95, 127]])
    # matmul: stationary [K=2, M=1], moving [K=2, N=2]; then auto-accumulate adds.
    k = """kernel k(s: float32[2, 1] shared_hbm, m: float32[2, 2] shared_hbm) -> (o: float32[1, 2] shared_hbm) {
  alloc a: float32[2, 1] sbuf
  alloc b: float32[2, 2] sbuf
  alloc p: float32[1, 2] psum
  alloc r: float32[1, 2] sbuf
  dma_copy(dst=a[0:+2, 0:+1], src=s[0:+2, 0:+1])
  dma_copy(dst=b[0:+2, 0:+2], src=m[0:+2, 0:+2])
  nc_matmul(dst=p[0:+1, 0:+2], stationary=a[0:+2, 0:+1], moving=b[0:+2, 0:+2], accumulate=0)
  nc_matmul(dst=p[0:+1, 0:+2], stationary=a[0:+2, 0:+1], moving=b[0:+2, 0:+2], accumulate=-1)
  tensor_copy(dst=r[0:+1, 0:+2], src=p[0:+1, 0:+2])
  dma_copy(dst=o[0:+1, 0:+2], src=r[0:+1, 0:+2])
}"""
    out = run(k, {"s": np.array([[2.0], [3.0]], F), "m": np.array([[1.0, 10.0], [100.0, 1000.0]], F)})
    check("matmul", out["o"], [[2 * (2 + 300), 2 * (20 + 3000)]])
    # tensor_reduce add starts from +0 (so -0 inputs give +0) and negate flips the sign.
    k = """kernel k(a: float32[1, 3] shared_hbm) -> (o: float32[1, 1] shared_hbm) {
  alloc t: float32[1, 3] sbuf
  alloc r: float32[1, 1] sbuf
  dma_copy(dst=t[0:+1, 0:+3], src=a[0:+1, 0:+3])
  tensor_reduce(dst=r[0:+1, 0:+1], data=t[0:+1, 0:+3], op="add", axes=[1], negate=1)
  dma_copy(dst=o[0:+1, 0:+1], src=r[0:+1, 0:+1])
}"""
    check("reduce", run(k, {"a": np.array([[1.5, 2.25, -8.0]], F)})["o"], [[4.25]])
    check("reduce -0", run(k, {"a": np.array([[-0.0, -0.0, -0.0]], F)})["o"], [[-0.0]])
    assert math.isclose(float(R.activation_fn("gelu", np.array([1.0], F))[0]), 0.8413447, rel_tol=1e-6)
    # Activation functions (reference_math.py, docs/numerics.md "Transcendentals"): where the
    # algorithms give the correctly rounded value, it is Python's math value rounded once.
    x = np.array([1.0], F)
    for name, want in (("exp", math.e), ("tanh", math.tanh(1.0)), ("sin", math.sin(1.0)),
                       ("cos", math.cos(1.0)), ("erf", math.erf(1.0)),
                       ("sigmoid", 1 / (1 + math.exp(-1.0))), ("log", 0.0)):
        check(name + "(1)", R.activation_fn(name, x), [F(want)])
    check("specials", [R.activation_fn("sin", np.array([-0.0], F))[0],
                       R.activation_fn("exp", np.array([-np.inf], F))[0],
                       R.activation_fn("log", np.array([0.0], F))[0],
                       R.activation_fn("sigmoid", np.array([-200.0], F))[0]],
          [-0.0, 0.0, -np.inf, 0.0])
    assert np.isnan(R.activation_fn("silu", np.array([-np.inf], F))[0]), "silu(-inf) is NaN"
    # Reductions in the lane-blocked order (docs/numerics.md "Reductions"): 2^24 then 31 ones
    # give 16777246 (left to right: 16777216).
    k = """kernel k(a: float32[1, 32] shared_hbm) -> (o: float32[1, 1] shared_hbm) {
  alloc t: float32[1, 32] sbuf
  alloc s: float32[1, 1] sbuf
  dma_copy(dst=t[0:+1, 0:+32], src=a[0:+1, 0:+32])
  tensor_reduce(dst=s[0:+1, 0:+1], data=t[0:+1, 0:+32], op="add", axes=[1], negate=0)
  dma_copy(dst=o[0:+1, 0:+1], src=s[0:+1, 0:+1])
}"""
    a = np.ones((1, 32), F)
    a[0, 0] = 2.0 ** 24
    check("lane-blocked sum", run(k, {"a": a})["o"], [[16777246.0]])
    print("reference self-test: ok")


if __name__ == "__main__":
    main()
