#!/usr/bin/env python3
"""Prints the constants of dsl/base/include/neuron/base/builtins_math.hpp that are not plain
Taylor coefficients, so they can be checked and regenerated (needs mpmath and numpy):

- the bits of 2/pi in 24-bit chunks (sin/cos argument reduction);
- pi/2 as a double;
- the erfc fit: erfc(z) * exp(z^2) on 0 <= z <= 10.5 as a degree-11 polynomial in
  t = 1 / (1 + z/2), a least-squares fit of the relative error on Chebyshev nodes (max relative
  error printed; about 1.9e-9, 1/60 of a float ulp).
"""
import mpmath as mp
import numpy as np

mp.mp.dps = 100  # 2/pi to 240 bits needs more than 72 digits

def two_over_pi_chunks(n=10):
    big = int(mp.floor(2 / mp.pi * mp.mpf(2) ** (24 * n)))
    return [(big >> (24 * (n - j - 1))) & 0xFFFFFF for j in range(n)]

def erfcx_fit(zmax=10.5, deg=11, a=0.5):
    g = lambda z: mp.erfc(z) * mp.exp(z * z)
    tlo = 1 / (1 + a * zmax)
    k = np.arange(6 * (deg + 1))
    tn = np.cos((2 * k + 1) * np.pi / (2 * len(k)))
    ts = (tn + 1) / 2 * (1 - tlo) + tlo
    ys = np.array([float(g(mp.mpf((1 / t - 1) / a))) for t in ts])
    v = np.vander(ts, deg + 1, increasing=True) / ys[:, None]
    c, *_ = np.linalg.lstsq(v, np.ones_like(ys), rcond=None)
    tt = np.linspace(tlo, 1, 40001)
    ref = np.array([float(g(mp.mpf((1 / t - 1) / a))) for t in tt])
    got = np.polyval(c[::-1], tt)
    return c, float(np.max(np.abs(got / ref - 1)))

if __name__ == "__main__":
    print("2/pi chunks:", ", ".join(f"{c:#08x}" for c in two_over_pi_chunks()))
    print("pi/2:", float(mp.pi / 2).hex())
    c, err = erfcx_fit()
    print(f"erfcx fit (t^0 first), max relative error {err:.3g}:")
    for x in c:
        print("   ", float(x).hex())
