"""The activation functions and the reduction order of docs/numerics.md, in NumPy, for the fuzz
reference (reference.py). Written from the algorithms that docs/numerics.md states ("Activation
functions", "Reductions"), step by step in the same float32 / float64 arithmetic, so the
reference matches the executors bit for bit instead of within the functions' error bounds
(a one-ulp difference in an activation grows past any fixed tolerance after a cancelling
subtraction). np.float32 arithmetic is IEEE single precision with one rounding per operation
and NumPy never fuses a multiply and an add, like the executors; where the header writes
`fma`, `_fma` computes the fused result (one rounding) exactly.
"""
import numpy as np

F, D = np.float32, np.float64
I32, U32 = np.int32, np.uint32
INF = F(np.inf)

# ---- helpers ---------------------------------------------------------------------------------


def _bits(x):
    return np.asarray(x, F).view(U32)


def _from_bits(u):
    return np.asarray(u, U32).view(F)


MAGIC = F(12582912.0)  # 1.5 * 2^23 (the header's kRoundMagic)


def _round_int(x):
    """Nearest integer, ties to even, by adding and removing 1.5 * 2^23 (2^52 for doubles)."""
    magic = MAGIC if x.dtype == F else D(6755399441055744.0)
    return (x + magic) - magic


def _pow2(n):
    return _from_bits((n.astype(np.int64) + 127).astype(U32) << U32(23))


def _pow2d(n):
    return ((n.astype(np.int64) + 1023).astype(np.uint64) << np.uint64(52)).view(D)


def _scale(p, n):
    """p * 2^n with one rounding: 2^(n >> 1), then 2^(n - (n >> 1))."""
    n1 = n >> 1
    return (p * _pow2(n1)) * _pow2(n - n1)


def _fma(a, b, c):
    """fma(a, b, c) of float32 arrays, rounded once: a*b is exact in float64; the float64 sum
    is rounded to odd (its exact error by TwoSum; an inexact sum with an even last bit moves one
    ulp toward the error), and rounding a round-to-odd value of 53 bits to 24 gives the correctly
    rounded result (Boldo and Melquiond), which a plain double sum would not always."""
    p = np.asarray(a, F).astype(D) * np.asarray(b, F).astype(D)
    cd = np.asarray(c, F).astype(D)
    s = p + cd
    bb = s - p
    e = (p - (s - bb)) + (cd - bb)
    even = (s.view(np.int64) & 1) == 0
    s = np.where((e != 0) & even, np.nextafter(s, np.where(e > 0, D(np.inf), D(-np.inf))), s)
    return s.astype(F)


def _with_sign_of(mag, sign):
    return _from_bits(_bits(mag) | (_bits(sign) & U32(0x80000000)))


def _horner(r, coefs, fused=False):
    """((c0 * r + c1) * r + c2) ... in r's precision; fused: each step one fma (float32)."""
    q = np.full_like(r, coefs[0])
    for c in coefs[1:]:
        q = _fma(q, r, c) if fused else q * r + c
    return q


# Constants as the header writes them: float ones are rounded once to float32.
LOG2E = F(1.44269504088896341)
LN2_HI = F(0.693145751953125)
LN2_LO = F(1.42860682030941723212e-6)
LN2 = D(0.69314718055994530942)
# exp: 1/7!, 1/6!, ..., 1/2 as float32 quotients; expm1 adds 1/8!.
EXP_C = [F(1) / F(5040), F(1) / F(720), F(1) / F(120), F(1) / F(24), F(1) / F(6), F(0.5)]
EXPM1_C = [F(1) / F(40320)] + EXP_C
# log: 2/15, 2/13, ..., 2/3.
LOG_C = [F(2) / F(k) for k in (15, 13, 11, 9, 7, 5, 3)]
ERFCX_C = [float.fromhex(h) for h in (
    "0x1.9eee73ab6cf89p-6", "-0x1.02ace2e171a92p-3", "0x1.a1ee21ee2ff0ap-3",
    "-0x1.b5394699deb38p-8", "-0x1.40c9379868706p-2", "0x1.e7dd98c98fe2ep-3",
    "-0x1.5ab1bf989bc31p-5", "0x1.bda1eedafe084p-3", "0x1.e7a17ab93bfd5p-3",
    "0x1.220d08473b278p-2", "0x1.20c683da15ab7p-2", "0x1.8164e373073abp-19")]
TWO_OVER_PI = [D(c) * D(2.0) ** (-24 * (j + 1)) for j, c in enumerate(
    (0xa2f983, 0x6e4e44, 0x1529fc, 0x2757d1, 0xf534dd, 0xc0db62, 0x95993c, 0x439041, 0xfe5163))]
HALF_PI = float.fromhex("0x1.921fb54442d18p+0")

# ---- exp and log ---------------------------------------------------------------------------


def _exp_poly(r):
    return F(1) + _fma(r * r, _horner(r, EXP_C, fused=True), r)


def _exp_parts(x):
    """e^x = p 2^n; float32 x reduced in float32 (with fma), float64 x in float64."""
    if x.dtype == F:
        k = _fma(x, LOG2E, MAGIC) - MAGIC
        r = _fma(k, -LN2_LO, _fma(k, -LN2_HI, x))
    else:
        k = _round_int(x * D(1.4426950408889634074))
        r = (x - k * LN2).astype(F)
    return _exp_poly(r), k.astype(I32)


def exp(x):
    c = np.where(x > F(89), F(89), x)
    c = np.where(c < F(-104), F(-104), c)
    c = np.where(np.isnan(x), F(0), c).astype(F)
    p, n = _exp_parts(c)
    return np.where(np.isnan(x), x + x, _scale(p, n))


def expm1(x):
    c = np.where(np.isnan(x), F(0), x).astype(F)
    k = _fma(c, LOG2E, MAGIC) - MAGIC
    r = _fma(k, -LN2_LO, _fma(k, -LN2_HI, c))
    e = r + (r * r) * _horner(r, EXPM1_C, fused=True)
    s = _pow2(k.astype(I32))
    return np.where(np.isnan(x), x + x, s * e + (s - F(1)))


def _log1p_core(f):
    s = f / (F(2) + f)
    z = s * s
    r = _horner(z, LOG_C) * z
    hfsq = F(0.5) * f * f
    return f - (hfsq - s * (hfsq + r))


def log(x):
    sub = x < F(1.17549435e-38)
    xs = np.where(sub, x * F(8388608.0), x).astype(F)
    u = _bits(xs)
    up = ((u & U32(0x7FFFFF)) >= U32(0x400000)).astype(np.int64)
    e = ((u >> U32(23)) & U32(0xFF)).astype(np.int64) - 127 + up - np.where(sub, 23, 0)
    m = _from_bits((u & U32(0x7FFFFF)) | ((127 - up).astype(U32) << U32(23)))
    f = m - F(1)
    ef = e.astype(F)
    v = ef * LN2_HI + (_log1p_core(f) + ef * LN2_LO)
    r = np.where(x == F(0), -INF, v)
    r = np.where(x < F(0), F(np.nan), r)
    r = np.where(x == INF, INF, r)
    return np.where(np.isnan(x), x + x, r).astype(F)


def _log1p_unit(t):
    hi = t > F(0.5)
    f = np.where(hi, F(0.5) * t - F(0.5), t).astype(F)
    v = _log1p_core(f)
    return np.where(hi, (LN2_LO + v) + LN2_HI, v).astype(F)


# ---- functions built on exp ------------------------------------------------------------------


def tanh(x):
    a = np.abs(x)
    a = np.where(a > F(9.1), F(9.1), a).astype(F)
    u = expm1(F(2) * a).astype(D)
    return _with_sign_of((u / (u + D(2))).astype(F), x)


def _neg_abs_clamped(x):
    c = -np.abs(x)
    c = np.where(c < F(-120), F(-120), c)
    return np.where(np.isnan(x), F(0), c).astype(F)


def _exp_exact(c):
    p, n = _exp_parts(c)
    return p.astype(D) * _pow2d(n)


def sigmoid(x):
    e = _exp_exact(_neg_abs_clamped(x))
    r = (np.where(x >= F(0), D(1), e) / (D(1) + e)).astype(F)
    return np.where(np.isnan(x), x + x, r)


def silu(x):
    e = _exp_exact(_neg_abs_clamped(x))
    xd = np.where(x < F(-120), D(-120), x.astype(D))
    r = (np.where(x >= F(0), xd, xd * e) / (D(1) + e)).astype(F)
    return np.where(np.isnan(x) | (x == -INF), x - x, r)


def softplus(x):
    l = _log1p_unit(exp(-np.abs(x)))
    return np.where(x > F(0), x + l, l).astype(F)


# ---- erf and gelu ------------------------------------------------------------------------------


def _erfcx(z):
    t = D(1) / (D(1) + D(0.5) * z)
    return _horner(t, ERFCX_C)


def _exp_neg(z2):
    p, n = _exp_parts(-z2)
    return p.astype(D) * _pow2d(n)


def erf(x):
    a = np.abs(x).astype(D)
    a = np.where(a > D(10), D(10), a)
    a = np.where(np.isnan(x), D(0), a)
    z = a * a
    s = _horner(z, [D(-1) / 75600, D(1) / 9360, D(-1) / 1320, D(1) / 216, D(-1) / 42,
                    D(1) / 10, D(-1) / 3, D(1)])
    small = D(1.1283791670955126) * a * s
    large = D(1) - _exp_neg(z) * _erfcx(a)
    r = np.where(a < D(0.6), small, large).astype(F)
    return np.where(np.isnan(x), x + x, _with_sign_of(r, x))


def gelu(x):
    a = np.abs(x).astype(D)
    a = np.where(a > D(14.8), D(14.8), a)
    a = np.where(np.isnan(x), D(0), a)
    ec = _exp_neg(D(0.5) * a * a) * _erfcx(a * D(0.70710678118654752440))
    xd = x.astype(D)
    r = np.where(x >= F(0), xd * (D(1) - D(0.5) * ec), D(-0.5) * a * ec).astype(F)
    return np.where(np.isnan(x) | (x == -INF), x - x, r)


def gelu_apprx_tanh(x):
    xd = np.where(np.isnan(x), D(0), x.astype(D))
    w = D(1.5957691216057307118) * (xd + D(0.044715) * xd * xd * xd)
    m = np.where(w < D(0), w, -w)
    m = np.where(m < D(-200), D(-200), m)
    e = _exp_neg(-m)
    r = np.where(x >= F(0), xd / (D(1) + e), xd * e / (D(1) + e)).astype(F)
    return np.where(np.isnan(x) | (x == -INF), x - x, r)


# ---- sin and cos -------------------------------------------------------------------------------


def _mod4(t):
    r = t - D(4) * _round_int(D(0.25) * t)
    return np.where((t > D(2.0 ** 52)) | (t < -D(2.0 ** 52)), D(0), r)


def _two_sum(a, b):
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _reduce_half_pi(x):
    """x 2/pi = k + f: returns (k mod 4, f), with 2/pi's 24-bit chunks j0 .. j0+4."""
    e = ((_bits(x) >> U32(23)) & U32(0xFF)).astype(np.int64) - 127
    j0 = np.maximum(np.trunc((e - 25) / 24).astype(np.int64), 0)  # C++ / truncates
    xd = x.astype(D)
    table = np.array(TWO_OVER_PI)
    chunk = [xd * table[j0 + i] for i in range(5)]
    hi, lo = _two_sum(_mod4(chunk[0]), _mod4(chunk[1]))
    hi, e2 = _two_sum(hi, _mod4(chunk[2]))
    lo = lo + (e2 + (chunk[3] + chunk[4]))
    k = _round_int(hi)
    return k.astype(np.int64) & 3, (hi - k) + lo


def _sin_poly(r):
    z = r * r
    p = _horner(z, [D(-1) / 39916800, D(1) / 362880, D(-1) / 5040, D(1) / 120, D(-1) / 6])
    return r + r * z * p


def _cos_poly(r):
    z = r * r
    p = _horner(z, [D(1) / 479001600, D(-1) / 3628800, D(1) / 40320, D(-1) / 720, D(1) / 24,
                    D(-0.5)])
    return D(1) + z * p


def _sincos(x, cos):
    finite = np.abs(x) < INF
    c = np.where(finite, x, F(0)).astype(F)
    q, f = _reduce_half_pi(c)
    r = f * D(HALF_PI)
    s, co = _sin_poly(r), _cos_poly(r)
    if cos:
        v = np.where(q & 1, s, co)
        v = np.where((q + 1) & 2, -v, v).astype(F)
        return np.where(finite, v, x - x)
    v = np.where(q & 1, co, s)
    v = np.where(q & 2, -v, v).astype(F)
    return np.where(finite, np.where(x == F(0), x, v), x - x)


def sin(x):
    return _sincos(x, False)


def cos(x):
    return _sincos(x, True)


def rsqrt(x):
    return (D(1) / np.sqrt(x.astype(D))).astype(F)


FUNCTIONS = {"exp": exp, "log": log, "tanh": tanh, "sigmoid": sigmoid, "silu": silu,
             "softplus": softplus, "erf": erf, "gelu": gelu, "gelu_apprx_tanh": gelu_apprx_tanh,
             "sin": sin, "cos": cos, "rsqrt": rsqrt}


def activation(func, t):
    """func(t) for the functions above; None for the exact ones reference.py computes itself."""
    f = FUNCTIONS.get(func)
    if f is None:
        return None
    with np.errstate(all="ignore"):
        return np.asarray(f(np.asarray(t, F)), F)


# ---- reductions --------------------------------------------------------------------------------

LANES = 16


def reduce_lanes(values, op, alu, identity):
    """Reduces the last axis of `values` (float32) in the lane-blocked order: value i goes to
    lane i mod 16 (from `identity`), then lanes j and j + h combine for h = 8, 4, 2, 1 with `op`
    (subtract lanes hold negated partial sums and combine with add)."""
    n = values.shape[-1]
    lanes = [np.full(values.shape[:-1], F(identity), F) for _ in range(LANES)]
    with np.errstate(all="ignore"):
        for i in range(n):
            lanes[i % LANES] = alu(op, lanes[i % LANES], values[..., i])
        combine = "add" if op == "subtract" else op
        h = LANES // 2
        while h >= 1:
            for j in range(h):
                lanes[j] = alu(combine, lanes[j], lanes[j + h])
            h //= 2
    return lanes[0]
