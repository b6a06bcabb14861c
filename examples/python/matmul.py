"""Tiled matmul out[M,N] = lhsT.T @ rhs with rolled loops and PSUM accumulation
(matmul_naive of examples/profile_matmul.hpp in Python; the library's matmul for any size is
kernels/include/neuron/kernels/matmul.hpp). Run: PYTHONPATH=build/python python3 examples/python/matmul.py"""
import sys

import numpy as np

import neuron
import neuron.isa as nisa
import neuron.language as nl


@neuron.kernel
def matmul(lhsT, rhs):
    K, M = lhsT.shape
    N = rhs.shape[1]
    TM, TK = nl.tile_size.gemm_stationary_fmax, nl.tile_size.pmax
    TN = 512 if N % nl.tile_size.gemm_moving_fmax == 0 else 128  # one PSUM bank
    out = nl.ndarray((M, N), lhsT.dtype, buffer=nl.shared_hbm, name="out")
    for m in nl.affine_range(M // TM):
        for n in nl.affine_range(N // TN):
            acc = nl.zeros((TM, TN), nl.float32, buffer=nl.psum, name="acc")
            for k in nl.affine_range(K // TK):
                a = nl.load(lhsT[k * TK:(k + 1) * TK, m * TM:(m + 1) * TM])
                b = nl.load(rhs[k * TK:(k + 1) * TK, n * TN:(n + 1) * TN])
                nisa.nc_matmul(acc, a, b, accumulate=True)
            nl.store(out[m * TM:(m + 1) * TM, n * TN:(n + 1) * TN], nl.copy(acc, lhsT.dtype))
    return out


def main():
    rng = np.random.default_rng(0)
    lhsT = rng.standard_normal((256, 256)).astype(np.float32)
    rhs = rng.standard_normal((256, 1024)).astype(np.float32)
    out = matmul(lhsT, rhs)
    ref = lhsT.astype(np.float64).T @ rhs
    worst = float(np.abs(out - ref).max())
    print(f"matmul 256x256 @ 256x1024: max abs error {worst:.2e}")
    return 0 if worst < 1e-3 else 1


if __name__ == "__main__":
    sys.exit(main())
