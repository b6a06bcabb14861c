// How nc_matmul accumulates when both operands are bfloat16, defined once (docs/numerics.md,
// "Matmul"): the simulator's generic path and the portable native variant call these; the SIMD
// variants compute the same bits with hardware (x86 AMX, or fp32 FMA under MXCSR's
// flush-to-zero and denormals-are-zero).
//
// The rule is what x86's AMX instruction TDPBF16PS computes (measured bit for bit on a Xeon with
// AMX over 10 million outputs, denormals included):
//   - K is cut into blocks of 32 rows from the instruction's first row;
//   - within a block, the even rows' products and the odd rows' products are summed in two
//     separate fp32 partial sums, each starting at +0, one fma per row in increasing k;
//   - at the end of a block, acc = flush(daz(acc) + flush(even + odd));
//   - every bf16 input that is subnormal reads as zero (daz), and every fp32 result whose value,
//     rounded as if the exponent were unbounded, is below FLT_MIN in magnitude becomes a zero of
//     its sign (flush: x86's flush-to-zero, which detects tininess after rounding).
// Rows past K contribute nothing (a padded row adds -0.0, which changes no partial sum).
#pragma once
#include <cfloat>
#include <cmath>
#include <cstdint>

namespace neuron::bf16dot {

constexpr int64_t kBlock = 32;  // rows of K per block: one AMX tile of bf16 pairs

// Denormals read as zero (keeps the sign; NaN and infinities pass).
inline float daz(float x) {
  return std::fabs(x) < FLT_MIN ? std::copysign(0.0f, x) : x;
}

// `r` is a correctly rounded fp32 result and `exact` the same operation in double. Values in
// [FLT_MIN - 2^-151, FLT_MIN) round up to FLT_MIN with an unbounded exponent, so they are not
// tiny; anything below is. Only |r| == FLT_MIN needs the double to tell the two apart.
inline float flush(float r, double exact) {
  const float m = std::fabs(r);
  if (!(m <= FLT_MIN)) return r;  // normal, infinite or NaN
  if (m == FLT_MIN && std::fabs(exact) >= 0x1.ffffffp-127) return r;
  return std::copysign(0.0f, r);
}

// flush(fma(a, b, c)). The double fma is exact whenever the result is near FLT_MIN (a and b are
// normal bf16 values, so their product has 16 significant bits).
inline float fma_flush(float a, float b, float c) {
  const float r = std::fma(a, b, c);
  if (!(std::fabs(r) <= FLT_MIN)) return r;  // the common case needs no double
  return flush(r, std::fma(static_cast<double>(a), static_cast<double>(b), static_cast<double>(c)));
}

inline float add_flush(float a, float b) {
  const float r = a + b;
  if (!(std::fabs(r) <= FLT_MIN)) return r;
  return flush(r, static_cast<double>(a) + static_cast<double>(b));
}

// acc after the bf16 rule over k < K, where a(k) and b(k) give the widened bf16 operands of one
// output element. K = 0 leaves acc as it is.
template <class A, class B>
inline float dot(float acc, int64_t K, A&& a, B&& b) {
  for (int64_t k0 = 0; k0 < K; k0 += kBlock) {
    float part[2] = {0.0f, 0.0f};  // even rows, odd rows of the block
    const int64_t k1 = K < k0 + kBlock ? K : k0 + kBlock;
    for (int64_t k = k0; k < k1; ++k)
      part[(k - k0) & 1] = fma_flush(daz(a(k)), daz(b(k)), part[(k - k0) & 1]);
    acc = add_flush(daz(acc), add_flush(part[0], part[1]));
  }
  return acc;
}

}  // namespace neuron::bf16dot
