"""SPMD vector add: each program of the grid adds one 128-row tile (examples/vector_add.hpp in
Python). Run: PYTHONPATH=build/python python3 examples/python/vector_add.py"""
import sys

import numpy as np

import neuron
import neuron.language as nl


@neuron.kernel
def vector_add(a, b):
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm, name="out")
    i = nl.program_id(0)
    ta = nl.load(a[i * 128:(i + 1) * 128, :])  # HBM -> SBUF (DMA)
    tb = nl.load(b[i * 128:(i + 1) * 128, :])
    nl.store(out[i * 128:(i + 1) * 128, :], ta + tb)  # Vector engine add, SBUF -> HBM
    return out


def main():
    n, f = 1024, 512
    a = np.sin(0.001 * np.arange(n * f, dtype=np.float32)).reshape(n, f)
    b = np.cos(0.002 * np.arange(n * f, dtype=np.float32)).reshape(n, f)
    out = vector_add[n // 128](a, b)
    worst = float(np.abs(out - (a + b)).max())
    print(f"vector_add {n}x{f}, grid {n // 128}: max abs error {worst}")
    return 0 if worst == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
