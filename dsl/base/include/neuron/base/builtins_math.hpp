// The transcendental functions of the builtins (activation functions, rsqrt), written so that
// both executors compute the same bits and the native backend's instruction loops vectorize:
//
//  - only IEEE-exact operations (+ - * /, sqrt, conversions, compares, bit operations, and
//    fused multiply-add where written as `fma`), no other libm calls, no contraction (the
//    bitcode is compiled with -ffp-contract=off, the library by g++ in ISO mode: a*b+c is two
//    roundings everywhere unless written as `fma`, which is one everywhere);
//  - no branches on data: special cases are selects, so a loop calling these has one path;
//  - no tables indexed by data (gathers would keep the vectorizer away).
//
// Error bounds (measured against double-precision libm rounded once, exhaustively or densely
// over all float inputs, by tools/neuron_ulp.cpp) are in docs/numerics.md. Constants: Taylor
// coefficients are 1/k!; the erfc fit and the bits of 2/pi come from
// tools/gen_builtins_math_constants.py.
#pragma once
#include <cstdint>
#include <cstring>

// Always inlined: a call left in an element loop (the inliner's size limit would leave gelu,
// erf, sin and cos as calls) keeps that loop from vectorizing.
#define NEURON_MATH_INLINE [[gnu::always_inline]] inline

namespace neuron::builtins::math {

NEURON_MATH_INLINE uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
NEURON_MATH_INLINE float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
NEURON_MATH_INLINE uint64_t bits(double f) {
  uint64_t u;
  std::memcpy(&u, &f, 8);
  return u;
}
NEURON_MATH_INLINE double from_bits64(uint64_t u) {
  double f;
  std::memcpy(&f, &u, 8);
  return f;
}

NEURON_MATH_INLINE bool is_nan(float x) {
  return x != x;
}
// |x| and copysign through the sign bit (exact, branch-free).
NEURON_MATH_INLINE float abs(float x) {
  return from_bits(bits(x) & 0x7fffffffu);
}
NEURON_MATH_INLINE float with_sign_of(float mag, float sign) {
  return from_bits(bits(mag) | (bits(sign) & 0x80000000u));
}

// Nearest integer, ties to even, for |x| < 2^22 (float) / 2^51 (double): adding and removing
// 1.5 * 2^23 leaves no fraction bits. Exact IEEE arithmetic, no rounding-mode instruction.
constexpr float kRoundMagic = 12582912.0f;  // 1.5 * 2^23
NEURON_MATH_INLINE float round_int(float x) {
  return (x + kRoundMagic) - kRoundMagic;
}
NEURON_MATH_INLINE double round_int(double x) {
  const double magic = 6755399441055744.0;  // 1.5 * 2^52
  return (x + magic) - magic;
}

// a*b + c with one rounding (IEEE fusedMultiplyAdd), so the same bits in both executors: the
// JIT'd code gets the CPU's FMA instruction (16 lanes at a time), the simulator's g++ build
// calls libm's fmaf, which runs that instruction where the CPU has it and is exact elsewhere.
// Used where it saves operations in the hot polynomials (exp's: 1.4x fewer instructions).
NEURON_MATH_INLINE float fma(float a, float b, float c) {
  return __builtin_fmaf(a, b, c);
}

// 2^n as a float, for -126 <= n <= 127.
NEURON_MATH_INLINE float pow2(int32_t n) {
  return from_bits(static_cast<uint32_t>(n + 127) << 23);
}
// 2^n as a double, for -1022 <= n <= 1023.
NEURON_MATH_INLINE double pow2d(int32_t n) {
  return from_bits64(static_cast<uint64_t>(n + 1023) << 52);
}

// p * 2^n for -252 <= n <= 254 with one rounding: the first factor keeps p normal (exact), the
// second rounds once, to a subnormal, a normal or infinity.
NEURON_MATH_INLINE float scale(float p, int32_t n) {
  const int32_t n1 = n >> 1;
  return (p * pow2(n1)) * pow2(n - n1);
}

// ---- exp ----------------------------------------------------------------------------------

// e^r for |r| <= ln2/2 (+ a little): Taylor to degree 7 (truncation below 5.2e-9 relative),
// Horner in fma.
NEURON_MATH_INLINE float exp_poly(float r) {
  float q = 1.0f / 5040.0f;
  q = fma(q, r, 1.0f / 720.0f);
  q = fma(q, r, 1.0f / 120.0f);
  q = fma(q, r, 1.0f / 24.0f);
  q = fma(q, r, 1.0f / 6.0f);
  q = fma(q, r, 0.5f);
  return 1.0f + fma(r * r, q, r);
}

// e^r - 1 for |r| <= ln2/2: Taylor to degree 8, Horner in fma. The last step stays two
// roundings: fused, tanh's worst case grew from 1.52 to 1.59 ulp.
NEURON_MATH_INLINE float expm1_poly(float r) {
  float q = 1.0f / 40320.0f;
  q = fma(q, r, 1.0f / 5040.0f);
  q = fma(q, r, 1.0f / 720.0f);
  q = fma(q, r, 1.0f / 120.0f);
  q = fma(q, r, 1.0f / 24.0f);
  q = fma(q, r, 1.0f / 6.0f);
  q = fma(q, r, 0.5f);
  return r + (r * r) * q;
}

constexpr float kLog2e = 1.44269504088896341f;
// ln 2 = kLn2Hi + kLn2Lo; kLn2Hi has 16 significant bits, so k * kLn2Hi is exact for |k| < 256.
constexpr float kLn2Hi = 0.693145751953125f;
constexpr float kLn2Lo = 1.42860682030941723212e-6f;
constexpr double kLn2 = 0.69314718055994530942;

// e^x = p * 2^n with p = e^r, r = x - n ln2, |r| <= ln2/2. x finite, |x| <= 120.
NEURON_MATH_INLINE void exp_parts(float x, float& p, int32_t& n) {
  // The nearest integer to x * log2e as round_int finds it, the product rounded only once.
  const float k = fma(x, kLog2e, kRoundMagic) - kRoundMagic;
  // x - k*hi is exact (k*hi has at most 24 bits; Sterbenz once k != 0), so r carries only the
  // one rounding of fma(k, -lo, .).
  const float r = fma(k, -kLn2Lo, fma(k, -kLn2Hi, x));
  p = exp_poly(r);
  n = static_cast<int32_t>(k);
}

// The same from a double argument (|x| <= 745): the reduction is done in double, so an
// argument computed in double (gelu's) loses nothing before the polynomial.
NEURON_MATH_INLINE void exp_parts(double x, float& p, int32_t& n) {
  const double k = round_int(x * 1.4426950408889634074);
  p = exp_poly(static_cast<float>(x - k * kLn2));
  n = static_cast<int32_t>(k);
}

// e^x. Overflows to inf above 88.72, underflows through the subnormals to 0 below -103.97.
NEURON_MATH_INLINE float exp(float x) {
  // Clamp into the range where scale() works. Written so that NaN compares false and stays
  // (two min/max instructions): it flows through every step as x's quieted NaN, the result
  // x + x would give, with no select at the end. exp_parts is written out to take n from t's
  // bits (t = 1.5 * 2^23 + n exactly) instead of converting k: no NaN is ever converted to
  // an integer. 25 -> 22 vector instructions per 16 values; the same bits for every input.
  float c = x > 89.0f ? 89.0f : x;
  c = c < -104.0f ? -104.0f : c;
  const float t = fma(c, kLog2e, kRoundMagic);  // as in exp_parts
  const float k = t - kRoundMagic;
  const float r = fma(k, -kLn2Lo, fma(k, -kLn2Hi, c));
  // n + 254, so that its halves carry pow2's exponent bias: (n + 254) >> 1 = (n >> 1) + 127 and
  // (n + 254) - that = n - (n >> 1) + 127, each 2^m's bits after one shift. The same bits as
  // scale()'s pow2(n1) and pow2(n - n1) for every t (no int32 overflow, NaNs included), in 5
  // vector operations instead of 7: softmax -3% (Intel Xeon, [4096, 1024] fp32).
  const int32_t biased = static_cast<int32_t>(bits(t) - bits(kRoundMagic)) + 254;
  // scale() written out, its last product taken only from x >= -104 on (and for NaN). Below,
  // c = -104 gives p * 2^-150 with p < 1, which rounds to +0: the result is +0 either way. But
  // computing that underflow costs an Intel core a microcode assist per vector (~1.6 ns an
  // element against 0.23, Xeon with AMX): a softmax row half -inf (masked logits, a causal
  // diagonal, a sliding window) ran 2.8x slower. As a select, AVX-512 zero-masks the product
  // and never computes those lanes. The same bits for every input (tests/exec/test_builtins.cpp).
  const float p = exp_poly(r);
  const int32_t half = biased >> 1;
  const float part = p * from_bits(static_cast<uint32_t>(half) << 23);
  return x < -104.0f ? 0.0f : part * from_bits(static_cast<uint32_t>(biased - half) << 23);
}

// e^x - 1, accurate near 0. For |x| <= 40 (callers clamp); NaN propagates.
NEURON_MATH_INLINE float expm1(float x) {
  const float c = is_nan(x) ? 0.0f : x;
  const float k = fma(c, kLog2e, kRoundMagic) - kRoundMagic;  // as in exp_parts
  const float r = fma(k, -kLn2Lo, fma(k, -kLn2Hi, c));
  const float e = expm1_poly(r);
  const float s = pow2(static_cast<int32_t>(k));
  // e^x - 1 = 2^k (e^r - 1) + (2^k - 1): both terms exact for |k| <= 24, one rounding.
  const float v = s * e + (s - 1.0f);
  return is_nan(x) ? x + x : v;
}

// ---- log ----------------------------------------------------------------------------------

// log(1 + f) for -0.25 <= f <= 0.5, f exact: with s = f / (2 + f),
// log(1 + f) = 2 atanh(s) = f - (f^2/2 - s (f^2/2 + R)), R = 2s^2/3 + 2s^4/5 + ... (|s| <= 0.2;
// R through s^14), arranged so the large term f is exact and added last.
NEURON_MATH_INLINE float log1p_core(float f) {
  const float s = f / (2.0f + f);
  const float z = s * s;
  float r = 2.0f / 15.0f;
  r = r * z + 2.0f / 13.0f;
  r = r * z + 2.0f / 11.0f;
  r = r * z + 2.0f / 9.0f;
  r = r * z + 2.0f / 7.0f;
  r = r * z + 2.0f / 5.0f;
  r = r * z + 2.0f / 3.0f;
  r = r * z;
  const float hfsq = 0.5f * f * f;
  return f - (hfsq - s * (hfsq + r));
}

// Natural log. log(0) = -inf, log(x < 0) = NaN, log(inf) = inf, subnormals are exact inputs.
NEURON_MATH_INLINE float log(float x) {
  // Subnormals: scale by 2^23 first (exact).
  const bool sub = x < 1.17549435e-38f;
  const float xs = sub ? x * 8388608.0f : x;
  const uint32_t u = bits(xs);
  // m in [0.75, 1.5): subtract 1 from the exponent when the mantissa is >= 1.5.
  const int32_t up = (u & 0x7fffffu) >= 0x400000u ? 1 : 0;
  const int32_t e = static_cast<int32_t>((u >> 23) & 0xffu) - 127 + up - (sub ? 23 : 0);
  const float m = from_bits((u & 0x7fffffu) | (static_cast<uint32_t>(127 - up) << 23));
  const float f = m - 1.0f;  // exact
  const float ef = static_cast<float>(e);
  // e*ln2 + log1p(f), the exact e*hi term added last.
  const float v = ef * kLn2Hi + (log1p_core(f) + ef * kLn2Lo);
  const float inf = from_bits(0x7f800000u);
  float r = x == 0.0f ? -inf : v;
  r = x < 0.0f ? from_bits(0x7fc00000u) : r;
  r = x == inf ? inf : r;
  return is_nan(x) ? x + x : r;
}

// log(1 + t) for 0 <= t <= 1 (t = e^-|x| in softplus): log1p_core directly up to 0.5, above
// ln 2 + log1p((t - 1) / 2), both arguments exact.
NEURON_MATH_INLINE float log1p_unit(float t) {
  const bool hi = t > 0.5f;
  const float f = hi ? 0.5f * t - 0.5f : t;
  const float v = log1p_core(f);
  return hi ? (kLn2Lo + v) + kLn2Hi : v;
}

// ---- functions built on exp --------------------------------------------------------------

// The final divisions below are done in double: operands exact, one rounding at the end, so
// the error is the polynomial's plus half an ulp (in float, each step would add its own).

// tanh(x) = u / (u + 2) with u = expm1(2|x|), sign restored; 1 from |x| >= 9.1 (where tanh
// rounds to 1).
NEURON_MATH_INLINE float tanh(float x) {
  float a = abs(x);
  a = a > 9.1f ? 9.1f : a;
  const double u = expm1(2.0f * a);
  return with_sign_of(static_cast<float>(u / (u + 2.0)), x);
}

// e^c = p 2^n for -120 <= c <= 0 as an exact double.
NEURON_MATH_INLINE double exp_exact(float c, float& p, int32_t& n) {
  exp_parts(c, p, n);
  return static_cast<double>(p) * pow2d(n);
}

// sigmoid(x) = 1 / (1 + e) for x >= 0, e / (1 + e) for x < 0, with e = e^-|x| (never overflows).
NEURON_MATH_INLINE float sigmoid(float x) {
  float c = -abs(x);
  c = c > -120.0f ? c : -120.0f;  // sigmoid is 0 or 1 in float well before; NaN: -120
  float p;
  int32_t n;
  const double e = exp_exact(c, p, n);
  const double r = (x >= 0.0f ? 1.0 : e) / (1.0 + e);
  return is_nan(x) ? x + x : static_cast<float>(r);
}

// x * sigmoid(x) = x / (1 + e) for x >= 0, x e / (1 + e) for x < 0, e = e^-|x|; e is exact in
// double even where it would be subnormal in float. Below -120 the result has underflowed
// (to -0); silu(-inf) = -inf * 0 = NaN.
NEURON_MATH_INLINE float silu(float x) {
  float c = -abs(x);
  c = c > -120.0f ? c : -120.0f;  // NaN: -120 (the result is chosen at the end)
  float p;
  int32_t n;
  const double e = exp_exact(c, p, n);
  const double xd = x < -120.0f ? -120.0 : static_cast<double>(x);
  const double r = (x >= 0.0f ? xd : xd * e) / (1.0 + e);
  return (is_nan(x) || x == -from_bits(0x7f800000u)) ? x - x : static_cast<float>(r);
}

// softplus(x) = log(1 + e^x) = max(x, 0) + log1p(e^-|x|) (never overflows).
NEURON_MATH_INLINE float softplus(float x) {
  const float l = log1p_unit(exp(-abs(x)));
  return x > 0.0f ? x + l : l;
}

// ---- functions evaluated partly in double (arguments that float would round too early) -----

// erfc(z) e^(z^2) for 0 <= z <= 10.5: a degree-11 polynomial in t = 1 / (1 + z/2), relative
// error below 1.9e-9 (tools/gen_builtins_math_constants.py).
NEURON_MATH_INLINE double erfcx(double z) {
  const double t = 1.0 / (1.0 + 0.5 * z);
  double p = 0x1.9eee73ab6cf89p-6;
  p = p * t - 0x1.02ace2e171a92p-3;
  p = p * t + 0x1.a1ee21ee2ff0ap-3;
  p = p * t - 0x1.b5394699deb38p-8;
  p = p * t - 0x1.40c9379868706p-2;
  p = p * t + 0x1.e7dd98c98fe2ep-3;
  p = p * t - 0x1.5ab1bf989bc31p-5;
  p = p * t + 0x1.bda1eedafe084p-3;
  p = p * t + 0x1.e7a17ab93bfd5p-3;
  p = p * t + 0x1.220d08473b278p-2;
  p = p * t + 0x1.20c683da15ab7p-2;
  p = p * t + 0x1.8164e373073abp-19;
  return p;
}

// e^-z2 as a double, z2 >= 0 given exactly (callers square a float in double).
NEURON_MATH_INLINE double exp_neg(double z2) {
  float p;
  int32_t n;
  exp_parts(-z2, p, n);
  return static_cast<double>(p) * pow2d(n);
}

// erf(x): (2/sqrt(pi)) x (1 - x^2/3 + x^4/10 - ...) below 0.6 (Taylor through x^15), else
// 1 - erfc(|x|) with the sign of x; +-1 beyond 10.
NEURON_MATH_INLINE float erf(float x) {
  double a = abs(x);
  a = a > 10.0 ? 10.0 : a;
  a = is_nan(x) ? 0.0 : a;
  const double z = a * a;  // exact
  double s = -1.0 / 75600.0;
  s = s * z + 1.0 / 9360.0;
  s = s * z - 1.0 / 1320.0;
  s = s * z + 1.0 / 216.0;
  s = s * z - 1.0 / 42.0;
  s = s * z + 1.0 / 10.0;
  s = s * z - 1.0 / 3.0;
  s = s * z + 1.0;
  const double small = 1.1283791670955126 * a * s;
  const double large = 1.0 - exp_neg(z) * erfcx(a);
  const float r = static_cast<float>(a < 0.6 ? small : large);
  return is_nan(x) ? x + x : with_sign_of(r, x);
}

// gelu(x) = x Phi(x) = x (1 - erfc(x/sqrt2)/2) for x >= 0, x erfc(|x|/sqrt2)/2 for x < 0 (no
// cancellation either way), in double, rounded once. |x| is clamped at 14.8, where the
// negative side has underflowed. gelu(-inf) = -inf * 0 = NaN.
NEURON_MATH_INLINE float gelu(float x) {
  double a = abs(x);
  a = a > 14.8 ? 14.8 : a;
  a = is_nan(x) ? 0.0 : a;
  const double ec = exp_neg(0.5 * a * a) * erfcx(a * 0.70710678118654752440);
  const double xd = x;
  const double neg = -0.5 * a * ec;
  const float r = static_cast<float>(x >= 0.0f ? xd * (1.0 - 0.5 * ec) : neg);
  return (is_nan(x) || x == -from_bits(0x7f800000u)) ? x - x : r;
}

// gelu_apprx_tanh(x) = 0.5 x (1 + tanh(w/2)) = x / (1 + e^-w), w = 2 sqrt(2/pi)(x + 0.044715 x^3)
// computed in double (in float its rounding would be magnified by up to |w| in the result):
// x / (1 + e) for x >= 0, x e / (1 + e) for x < 0, e = e^-|w|. gelu_apprx_tanh(-inf) = NaN.
NEURON_MATH_INLINE float gelu_apprx_tanh(float x) {
  const double xd = is_nan(x) ? 0.0 : static_cast<double>(x);
  const double w = 1.5957691216057307118 * (xd + 0.044715 * xd * xd * xd);
  double m = w < 0.0 ? w : -w;
  m = m < -200.0 ? -200.0 : m;
  const double e = exp_neg(-m);
  const double r = x >= 0.0f ? xd / (1.0 + e) : xd * e / (1.0 + e);
  const float v = static_cast<float>(r);
  return (is_nan(x) || x == -from_bits(0x7f800000u)) ? x - x : v;
}

// ---- sin and cos --------------------------------------------------------------------------

// 2/pi = sum_j kTwoOverPi[j] 2^(-24 (j + 1)), exact doubles.
constexpr double kTwoOverPi[9] = {
    0xa2f983 * 0x1p-24, 0x6e4e44 * 0x1p-48,  0x1529fc * 0x1p-72,
    0x2757d1 * 0x1p-96, 0xf534dd * 0x1p-120, 0xc0db62 * 0x1p-144,
    0x95993c * 0x1p-168, 0x439041 * 0x1p-192, 0xfe5163 * 0x1p-216};

// t mod 4 in [-2, 2] for t with at most 48 significant bits: exact.
NEURON_MATH_INLINE double mod4(double t) {
  const double r = t - 4.0 * round_int(0.25 * t);
  return (t > 0x1p52 || t < -0x1p52) ? 0.0 : r;  // such t are multiples of 4
}

// a + b = s + e exactly (TwoSum: additions only).
NEURON_MATH_INLINE void two_sum(double a, double b, double& s, double& e) {
  s = a + b;
  const double bb = s - a;
  e = (a - (s - bb)) + (b - bb);
}

// x (2/pi) = k + f with k an integer, returned as q = k mod 4, and |f| <= 1/2 to about 2^-100
// (Payne-Hanek without tables indexed by data): x = M 2^(E-23); chunk j of 2/pi contributes
// M C_j 2^(E-47-24j), a multiple of 4 (nothing mod 4) for j < j0; five chunks from j0 on
// are exact products, reduced mod 4 exactly and summed in double-double.
NEURON_MATH_INLINE double reduce_half_pi(float x, int32_t& q) {
  const int32_t e = static_cast<int32_t>((bits(x) >> 23) & 0xffu) - 127;
  int32_t j0 = (e - 25) / 24;
  j0 = j0 < 0 ? 0 : j0;
  const double xd = x;
  // kTwoOverPi[j0 + i] by selects (j0 <= 4), not an indexed load.
  auto chunk = [&](int i) {
    double c = kTwoOverPi[i];
    c = j0 == 1 ? kTwoOverPi[i + 1] : c;
    c = j0 == 2 ? kTwoOverPi[i + 2] : c;
    c = j0 == 3 ? kTwoOverPi[i + 3] : c;
    c = j0 == 4 ? kTwoOverPi[i + 4] : c;
    return xd * c;
  };
  // Terms 0..2 may exceed 4 and are reduced; 3 and 4 are below 2^-22 and only need adding.
  double hi, lo, e2;
  two_sum(mod4(chunk(0)), mod4(chunk(1)), hi, lo);
  two_sum(hi, mod4(chunk(2)), hi, e2);
  lo += e2 + (chunk(3) + chunk(4));
  const double k = round_int(hi);
  q = static_cast<int32_t>(k) & 3;
  return (hi - k) + lo;  // hi - k is exact
}

// sin r and cos r for |r| <= pi/4 (+ a little), in double: Taylor through r^11 and r^12.
NEURON_MATH_INLINE double sin_poly(double r) {
  const double z = r * r;
  double p = -1.0 / 39916800.0;
  p = p * z + 1.0 / 362880.0;
  p = p * z - 1.0 / 5040.0;
  p = p * z + 1.0 / 120.0;
  p = p * z - 1.0 / 6.0;
  return r + r * z * p;
}
NEURON_MATH_INLINE double cos_poly(double r) {
  const double z = r * r;
  double p = 1.0 / 479001600.0;
  p = p * z - 1.0 / 3628800.0;
  p = p * z + 1.0 / 40320.0;
  p = p * z - 1.0 / 720.0;
  p = p * z + 1.0 / 24.0;
  p = p * z - 0.5;
  return 1.0 + z * p;
}

constexpr double kHalfPi = 0x1.921fb54442d18p+0;

// sin and cos over all floats: exact reduction by pi/2 (reduce_half_pi), the polynomials in
// double, one rounding to float. sin(+-0) = +-0; inf and NaN give NaN.
NEURON_MATH_INLINE float sin(float x) {
  const float c = abs(x) < from_bits(0x7f800000u) ? x : 0.0f;
  int32_t q;
  const double r = reduce_half_pi(c, q) * kHalfPi;
  const double s = sin_poly(r), co = cos_poly(r);
  double v = (q & 1) ? co : s;
  v = (q & 2) ? -v : v;
  const float f = static_cast<float>(v);
  return abs(x) < from_bits(0x7f800000u) ? (x == 0.0f ? x : f) : x - x;
}
NEURON_MATH_INLINE float cos(float x) {
  const float c = abs(x) < from_bits(0x7f800000u) ? x : 0.0f;
  int32_t q;
  const double r = reduce_half_pi(c, q) * kHalfPi;
  const double s = sin_poly(r), co = cos_poly(r);
  double v = (q & 1) ? s : co;
  v = ((q + 1) & 2) ? -v : v;
  const float f = static_cast<float>(v);
  return abs(x) < from_bits(0x7f800000u) ? f : x - x;
}

// tan x = sin r / cos r (or -cos r / sin r in odd quadrants), the quotient of the double
// polynomials rounded once. tan(+-0) = +-0; inf and NaN give NaN.
NEURON_MATH_INLINE float tan(float x) {
  const float c = abs(x) < from_bits(0x7f800000u) ? x : 0.0f;
  int32_t q;
  const double r = reduce_half_pi(c, q) * kHalfPi;
  const double s = sin_poly(r), co = cos_poly(r);
  const float f = static_cast<float>((q & 1) ? -co / s : s / co);
  return abs(x) < from_bits(0x7f800000u) ? (x == 0.0f ? x : f) : x - x;
}

// arctan in double: |x| > 1 uses pi/2 - atan(1/|x|); above tan(pi/12),
// atan(t) = pi/6 + atan((t sqrt3 - 1) / (t + sqrt3)); then |t| <= 0.268 and the odd Taylor
// series through t^23 (truncation below 3e-16). arctan(+-inf) = +-pi/2 rounded.
NEURON_MATH_INLINE float arctan(float x) {
  const double a = is_nan(x) ? 0.0 : static_cast<double>(abs(x));
  const bool inv = a > 1.0;
  double t = inv ? 1.0 / a : a;
  const bool shift = t > 0.26794919243112270;
  constexpr double kSqrt3 = 1.7320508075688772935;
  t = shift ? (t * kSqrt3 - 1.0) / (t + kSqrt3) : t;
  const double z = t * t;
  double p = 1.0 / 23.0;
  p = 1.0 / 21.0 - z * p;
  p = 1.0 / 19.0 - z * p;
  p = 1.0 / 17.0 - z * p;
  p = 1.0 / 15.0 - z * p;
  p = 1.0 / 13.0 - z * p;
  p = 1.0 / 11.0 - z * p;
  p = 1.0 / 9.0 - z * p;
  p = 1.0 / 7.0 - z * p;
  p = 1.0 / 5.0 - z * p;
  p = 1.0 / 3.0 - z * p;
  double r = t - t * z * p;
  r = shift ? 0.52359877559829887308 + r : r;
  r = inv ? kHalfPi - r : r;
  return is_nan(x) ? x + x : with_sign_of(static_cast<float>(r), x);
}

// ---- rounding to integers (exact) -------------------------------------------------------------

// Toward zero through int32 below 2^23 (larger floats, inf and NaN are already integers or
// pass through); the sign is kept, so trunc(-0.5) = -0.
NEURON_MATH_INLINE float trunc(float x) {
  const bool small = abs(x) < 8388608.0f;
  const float t = static_cast<float>(static_cast<int32_t>(small ? x : 0.0f));
  return small ? with_sign_of(t, x) : x;
}
NEURON_MATH_INLINE float floor(float x) {
  const float t = trunc(x);
  return t > x ? t - 1.0f : t;
}
NEURON_MATH_INLINE float ceil(float x) {
  const float t = trunc(x);
  return t < x ? t + 1.0f : t;
}

// ---- derivatives and sigmoid-gated activations, in double ------------------------------------

// The new functions below return their limits at +-inf (0 or 1, +-inf for mish), NaN for NaN.

// e^-z for 0 <= z <= 700 to about 2^-52 relative, all in double: z = k ln2 - r with
// ln2 = hi + lo (hi has 21 trailing zero bits, so k hi is exact), |r| <= ln2/2, Taylor to degree
// 13 (truncation below 3e-17). The derivatives below need it: their values are differences
// (e.g. 1 + e + w near silu_dx's zero), which magnify an error in e.
NEURON_MATH_INLINE double exp_neg_d(double z) {
  z = z > 700.0 ? 700.0 : z;
  const double k = round_int(z * 1.4426950408889634074);
  const double r = (k * 0x1.62e42fee00000p-1 - z) + k * 0x1.a39ef35793c76p-33;
  double p = 1.0 / 6227020800.0;
  const double inv[12] = {479001600.0, 39916800.0, 3628800.0, 362880.0, 40320.0, 5040.0,
                          720.0,       120.0,      24.0,      6.0,      2.0,     1.0};
  for (double f : inv) p = p * r + 1.0 / f;
  p = p * r + 1.0;
  return p * pow2d(-static_cast<int32_t>(k));
}

// e^-|w| (|w| clamped at 200, where every result using it has saturated or underflowed).
NEURON_MATH_INLINE double exp_neg_abs(double w) {
  double a = w < 0.0 ? -w : w;
  a = a > 200.0 ? 200.0 : a;
  return exp_neg_d(a);
}

// d/dw [w sigmoid(w)] = sigmoid(w) + w sigmoid(w)(1 - sigmoid(w)); with e = e^-|w| and
// d = 1 + e: (d + w e) / d^2 for w >= 0, e (d + w) / d^2 for w < 0 (no overflow). w is
// clamped to +-200, where the result is 1 or has underflowed.
NEURON_MATH_INLINE double silu_dx_d(double w) {
  w = w > 200.0 ? 200.0 : (w < -200.0 ? -200.0 : w);
  const double e = exp_neg_abs(w), d = 1.0 + e;
  return (w >= 0.0 ? d + w * e : e * (d + w)) / (d * d);
}
NEURON_MATH_INLINE float silu_dx(float x) {
  const double r = silu_dx_d(is_nan(x) ? 0.0 : static_cast<double>(x));
  return is_nan(x) ? x + x : static_cast<float>(r);
}

// x sigmoid(1.702 x) (the sigmoid form of gelu) and its derivative
// sigmoid(w) + w sigmoid(w)(1 - sigmoid(w)), w = 1.702 x, i.e. silu_dx at w.
constexpr double kGeluSigmoid = 1.702;
NEURON_MATH_INLINE float gelu_apprx_sigmoid(float x) {
  double xd = is_nan(x) ? 0.0 : static_cast<double>(x);
  xd = xd < -200.0 ? -200.0 : xd;
  const double e = exp_neg_abs(kGeluSigmoid * xd);
  const double r = (x >= 0.0f ? xd : xd * e) / (1.0 + e);
  return is_nan(x) ? x + x : static_cast<float>(r);
}
NEURON_MATH_INLINE float gelu_apprx_sigmoid_dx(float x) {
  const double r = silu_dx_d(is_nan(x) ? 0.0 : kGeluSigmoid * static_cast<double>(x));
  return is_nan(x) ? x + x : static_cast<float>(r);
}

// mish(x) = x tanh(softplus(x)) = x u (u + 2) / (u (u + 2) + 2) with u = e^x; as e = e^-|x|:
// x (1 + 2e) / (1 + 2e + 2e^2) for x >= 0, x e (e + 2) / (e (e + 2) + 2) for x < 0.
NEURON_MATH_INLINE float mish(float x) {
  double xd = is_nan(x) ? 0.0 : static_cast<double>(x);
  xd = xd < -200.0 ? -200.0 : xd;
  const double e = exp_neg_abs(xd);
  const double r = x >= 0.0f ? xd * (1.0 + 2.0 * e) / (1.0 + 2.0 * e + 2.0 * e * e)
                             : xd * e * (e + 2.0) / (e * (e + 2.0) + 2.0);
  return is_nan(x) ? x + x : static_cast<float>(r);
}

// d/dx erf(x) = (2 / sqrt(pi)) e^(-x^2); 0 beyond |x| = 11 (underflowed).
NEURON_MATH_INLINE float erf_dx(float x) {
  double a = is_nan(x) ? 0.0 : static_cast<double>(abs(x));
  a = a > 11.0 ? 11.0 : a;
  const double r = 1.1283791670955126 * exp_neg_d(a * a);
  return is_nan(x) ? x + x : static_cast<float>(r);
}

// d/dx gelu(x) = Phi(x) + x phi(x), phi(x) = e^(-x^2/2) / sqrt(2 pi). It crosses zero near
// x = -0.7518, so both parts must be accurate to double precision there:
//  - |x| < 2: Phi(x) = 1/2 + phi(x) sum_n x^(2n+1) / (2n+1)!!, so the result is
//    1/2 + phi(x) (x + sum_n ...), 26 terms (the last below 1e-18 of the sum);
//  - |x| >= 2, no cancellation left: with g = e^(-a^2/2), a = |x|, c = erfcx(a / sqrt2) (as in
//    gelu), 1 - g (c/2 - a/sqrt(2 pi)) for x >= 0, g (c/2 - a/sqrt(2 pi)) for x < 0; |x|
//    clamped at 14.8.
NEURON_MATH_INLINE float gelu_dx(float x) {
  double a = is_nan(x) ? 0.0 : static_cast<double>(abs(x));
  a = a > 14.8 ? 14.8 : a;
  const double g = exp_neg_d(0.5 * a * a), phi = g * 0.39894228040143267794;
  const double xs = x < 0.0f ? -a : a;
  const double z = a < 2.0 ? a * a : 0.0;
  double t = xs, sum = xs;
  for (int n = 1; n <= 25; ++n) {
    t = t * z * (1.0 / static_cast<double>(2 * n + 1));
    sum = sum + t;
  }
  const double near = 0.5 + phi * (xs + sum);
  const double k = g * (0.5 * erfcx(a * 0.70710678118654752440) - a * 0.39894228040143267794);
  const double far = x >= 0.0f ? 1.0 - k : k;
  return is_nan(x) ? x + x : static_cast<float>(a < 2.0 ? near : far);
}

// 1/sqrt(x): sqrt and division in double (both correctly rounded), rounded once to float.
NEURON_MATH_INLINE float rsqrt(float x) {
  return static_cast<float>(1.0 / __builtin_sqrt(static_cast<double>(x)));
}

}  // namespace neuron::builtins::math
