"""Row softmax, one 128-row tile per program (the one-pass path of the library's
kernels/include/neuron/kernels/softmax.hpp, simplified, in Python), on the
simulator with its profile. Run: PYTHONPATH=build/python python3 examples/python/softmax.py"""
import sys

import numpy as np

import neuron
import neuron.language as nl


@neuron.kernel
def softmax(x):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm, name="out")
    rows = nl.ds(nl.program_id(0) * nl.tile_size.pmax, nl.tile_size.pmax)
    t = nl.load(x[rows], dtype=nl.float32)
    e = nl.exp(t - nl.max(t, axis=1))          # Vector subtract, Scalar engine exp
    inv = nl.reciprocal(nl.sum(e, axis=1))     # [128, 1]
    nl.store(out[rows], nl.multiply(e, inv, dtype=x.dtype))
    return out


def main():
    x = np.random.default_rng(1).standard_normal((512, 256)).astype(np.float32)
    sim = neuron.simulate(softmax[4])
    out = sim(x)
    e = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    worst = float(np.abs(out - e / e.sum(axis=1, keepdims=True)).max())
    print(sim.profile.splitlines()[0] if sim.profile else "")
    print(f"softmax 512x256, grid 4: max abs error {worst:.2e}")
    return 0 if worst < 1e-6 else 1


if __name__ == "__main__":
    sys.exit(main())
