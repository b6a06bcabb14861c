// The AVX-512 nc_matmul variant: fp32 in 8 x 48 blocks of C in 24 zmm accumulators; bf16 by
// the pairs kernel (matmul_bf16_pairs.hpp).
#include <cstddef>
#include <cstdint>

#include "matmul_variants.hpp"
#include "neuron/base/bf16_dot.hpp"

#if defined(__x86_64__)
#include <immintrin.h>

// GCC 12 reports the intentionally undefined pass-through operand inside its own intrinsic
// headers (_mm512_undefined_epi32) as (maybe-)uninitialized after inlining; it is not.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,fma")

namespace {

struct Avx512 {
  using reg = __m512;
  static constexpr int W = 16;
  static constexpr int MR = 8;
  static constexpr int NV = 3;
  static __mmask16 mask(int n) { return static_cast<__mmask16>((1u << n) - 1u); }
  static reg zero() { return _mm512_setzero_ps(); }
  static reg load(const float* p) { return _mm512_loadu_ps(p); }
  static reg load_part(const float* p, int n) { return _mm512_maskz_loadu_ps(mask(n), p); }
  static reg bcast(const float* p) { return _mm512_set1_ps(*p); }
  static reg fma(reg a, reg b, reg c) { return _mm512_fmadd_ps(a, b, c); }
  static reg add(reg a, reg b) { return _mm512_add_ps(a, b); }
  static void store(float* p, reg r) { _mm512_storeu_ps(p, r); }
  static void store_part(float* p, reg r, int n) { _mm512_mask_storeu_ps(p, mask(n), r); }
  static void copy_a(float* dst, const float* src) { _mm256_storeu_ps(dst, _mm256_loadu_ps(src)); }
};

// 6 x 64 blocks: a product 64 columns wide (attention's p @ v at head dim 64) in one block per
// row panel, 24 FMAs per row of A instead of 8 x 48 and 8 x 16 (32 FMAs for twice the A
// broadcasts).
struct Avx512Wide : Avx512 {
  static constexpr int MR = 6;
  static constexpr int NV = 4;
  static void copy_a(float* dst, const float* src) {
    _mm256_mask_storeu_ps(dst, 0x3f, _mm256_maskz_loadu_ps(0x3f, src));
  }
};

// bf16 pairs (matmul_bf16_pairs.hpp): 8 x 24 blocks of C, even/odd partial sums in lane pairs.
struct Avx512Pairs {
  using reg = __m512;
  static constexpr int W = 16;
  static constexpr int MR = 8;
  static constexpr int NV = 3;
  static reg zero() { return _mm512_setzero_ps(); }
  static reg load(const float* p) { return _mm512_loadu_ps(p); }
  static reg fma(reg a, reg b, reg c) { return _mm512_fmadd_ps(a, b, c); }
  static reg bcast2(const float* p) {
    double d;
    __builtin_memcpy(&d, p, 8);
    return _mm512_castpd_ps(_mm512_set1_pd(d));
  }
  static void pack_pairs(float* dst, const uint16_t* r0, const uint16_t* r1) {
    const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(r0));
    const __m128i y = _mm_loadu_si128(reinterpret_cast<const __m128i*>(r1));
    const __m256i xy = _mm256_set_m128i(_mm_unpackhi_epi16(x, y), _mm_unpacklo_epi16(x, y));
    _mm512_storeu_ps(dst, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(xy), 16)));
  }
  static void finish(float* c, reg acc, int cols, bool load_c) {
    const __m512 sum = _mm512_add_ps(acc, _mm512_permute_ps(acc, 0xB1));  // even + odd per pair
    const __m512i even_lanes = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m256 s = _mm512_castps512_ps256(_mm512_permutexvar_ps(even_lanes, sum));
    const __mmask8 m = static_cast<__mmask8>((1u << cols) - 1u);
    const __m256 old = load_c ? _mm256_maskz_loadu_ps(m, c) : _mm256_setzero_ps();
    _mm256_mask_storeu_ps(c, m, _mm256_add_ps(old, s));
  }
};

}  // namespace

#include "matmul_blocked.hpp"
#include "matmul_bf16_pairs.hpp"

namespace {

// 16 bf16 of a row (lanes >= n read 0) widened to fp32.
inline __m512 widen16(const uint16_t* p, __mmask16 m) {
  const __m256i h = _mm256_maskz_loadu_epi16(m, p);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

// C[0:R, 0:N] (+)= A^T B by bf16_dot's rule for R <= 2 rows of C, B read where it lies. Blocks
// of 32 rows of K outside, NV vectors of columns inside: a block's rows of B (SBUF partitions,
// or a weight's rows in HBM) are read front to back while they stay in L1, and C's few rows too.
// Even and odd rows of the block go to two sets of accumulators from +0, one fma per row in
// increasing k; at the block's end C = (C or +0) + (even + odd); MXCSR's flush-to-zero and
// denormals-are-zero (the caller's FlushDenormals) give the rule's flushes, as in the pairs
// kernel. Rows past K add nothing.
template <int R, int NV>
__attribute__((noinline)) void bf16_skinny(float* c, int64_t ldc, const uint16_t* a, int64_t lda,
                                           const uint16_t* b, int64_t ldb, int64_t N, int64_t K,
                                           bool accumulate) {
  for (int64_t k0 = 0; k0 < K; k0 += neuron::bf16dot::kBlock) {
    const int64_t k1 = K < k0 + neuron::bf16dot::kBlock ? K : k0 + neuron::bf16dot::kBlock;
    const bool load_c = accumulate || k0 > 0;
    for (int64_t n = 0; n < N; n += 16 * NV) {
      __mmask16 m[NV];
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) {
        const int64_t left = N - n - 16 * v;
        m[v] = left >= 16 ? __mmask16(0xffff) : left <= 0 ? __mmask16(0) : Avx512::mask(int(left));
      }
      __m512 even[R][NV], odd[R][NV];
#pragma GCC unroll 2
      for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) even[i][v] = odd[i][v] = _mm512_setzero_ps();
      int64_t k = k0;
      for (; k + 1 < k1; k += 2) {
        const uint16_t* r0 = b + k * ldb + n;
        const uint16_t* r1 = r0 + ldb;
        __m512 a0[R], a1[R];
#pragma GCC unroll 2
        for (int i = 0; i < R; ++i) {
          a0[i] = _mm512_set1_ps(widen1(a[k * lda + i]));
          a1[i] = _mm512_set1_ps(widen1(a[(k + 1) * lda + i]));
        }
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) {
          const __m512 b0 = widen16(r0 + 16 * v, m[v]), b1 = widen16(r1 + 16 * v, m[v]);
#pragma GCC unroll 2
          for (int i = 0; i < R; ++i) {
            even[i][v] = _mm512_fmadd_ps(a0[i], b0, even[i][v]);
            odd[i][v] = _mm512_fmadd_ps(a1[i], b1, odd[i][v]);
          }
        }
      }
      if (k < k1) {  // an even row with no odd row after it
        const uint16_t* r0 = b + k * ldb + n;
#pragma GCC unroll 2
        for (int i = 0; i < R; ++i) {
          const __m512 a0 = _mm512_set1_ps(widen1(a[k * lda + i]));
#pragma GCC unroll 4
          for (int v = 0; v < NV; ++v)
            even[i][v] = _mm512_fmadd_ps(a0, widen16(r0 + 16 * v, m[v]), even[i][v]);
        }
      }
#pragma GCC unroll 2
      for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) {
          float* cp = c + i * ldc + n + 16 * v;
          const __m512 old = load_c ? _mm512_maskz_loadu_ps(m[v], cp) : _mm512_setzero_ps();
          _mm512_mask_storeu_ps(cp, m[v], _mm512_add_ps(old, _mm512_add_ps(even[i][v], odd[i][v])));
        }
    }
  }
}

}  // namespace

namespace neuron::native {

void matmul_bf16_skinny_avx512(float* c, int64_t ldc, const uint16_t* a, int64_t lda,
                               const uint16_t* b, int64_t ldb, int64_t M, int64_t N, int64_t K,
                               bool accumulate) {
  FlushDenormals flush;
  if (K <= 0) {
    if (!accumulate)
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) c[m * ldc + n] = 0.0f;
    return;
  }
  if (M == 1) return bf16_skinny<1, 4>(c, ldc, a, lda, b, ldb, N, K, accumulate);
  bf16_skinny<2, 2>(c, ldc, a, lda, b, ldb, N, K, accumulate);
}

void matmul_f32_avx512(float* c, int64_t ldc, const float* a, int64_t lda, const float* b,
                       int64_t ldb, int64_t M, int64_t N, int64_t K, bool accumulate) {
  float* scratch = matmul_scratch(blocked_scratch_floats<Avx512>());
  matmul_blocked<Avx512>(c, ldc, a, lda, b, ldb, M, N, K, accumulate, scratch);
}

void matmul_f32_avx512_same_b(float* c, int64_t ldc, const float* a, int64_t lda, const float* b,
                              int64_t ldb, int64_t M, int64_t N, int64_t K, bool accumulate) {
  float* scratch = matmul_scratch(blocked_scratch_floats<Avx512>());
  matmul_blocked<Avx512>(c, ldc, a, lda, b, ldb, M, N, K, accumulate, scratch, true);
}

void matmul_f32_at_avx512(float* c, int64_t ldc, const float* at, int64_t ldat, const float* b,
                          int64_t ldb, int64_t M, int64_t N, int64_t K, bool accumulate,
                          float a_zero) {
  if (N % 64 == 0) {
    float* scratch = matmul_scratch(at_scratch_floats<Avx512Wide>(M, K, a_zero));
    return matmul_at_blocked<Avx512Wide>(c, ldc, at, ldat, b, ldb, M, N, K, accumulate, a_zero,
                                         scratch);
  }
  float* scratch = matmul_scratch(at_scratch_floats<Avx512>(M, K, a_zero));
  matmul_at_blocked<Avx512>(c, ldc, at, ldat, b, ldb, M, N, K, accumulate, a_zero, scratch);
}

void matmul_bf16_avx512(float* c, int64_t ldc, const uint16_t* a, int64_t lda, const uint16_t* b,
                        int64_t ldb, int64_t M, int64_t N, int64_t K, bool accumulate) {
  if (M <= kBf16SkinnyRows)
    return matmul_bf16_skinny_avx512(c, ldc, a, lda, b, ldb, M, N, K, accumulate);
  float* scratch = matmul_scratch(pairs_scratch_floats<Avx512Pairs>());
  matmul_bf16_pairs<Avx512Pairs>(c, ldc, a, lda, b, ldb, M, N, K, accumulate, scratch);
}

}  // namespace neuron::native

#pragma GCC pop_options
#pragma GCC diagnostic pop

#else  // not x86-64: the variant is never selected (see supports()); keep the symbols defined.

namespace neuron::native {
void matmul_f32_avx512(float* c, int64_t ldc, const float* a, int64_t lda, const float* b,
                       int64_t ldb, int64_t M, int64_t N, int64_t K, bool accumulate) {
  matmul_f32_portable(c, ldc, a, lda, b, ldb, M, N, K, accumulate);
}
void matmul_f32_avx512_same_b(float* c, int64_t ldc, const float* a, int64_t lda, const float* b,
                              int64_t ldb, int64_t M, int64_t N, int64_t K, bool accumulate) {
  matmul_f32_portable(c, ldc, a, lda, b, ldb, M, N, K, accumulate);
}
void matmul_f32_at_avx512(float* c, int64_t ldc, const float* at, int64_t ldat, const float* b,
                          int64_t ldb, int64_t M, int64_t N, int64_t K, bool accumulate,
                          float a_zero) {
  matmul_f32_at_portable(c, ldc, at, ldat, b, ldb, M, N, K, accumulate, a_zero);
}
void matmul_bf16_avx512(float* c, int64_t ldc, const uint16_t* a, int64_t lda, const uint16_t* b,
                        int64_t ldb, int64_t M, int64_t N, int64_t K, bool accumulate) {
  matmul_bf16_portable(c, ldc, a, lda, b, ldb, M, N, K, accumulate);
}
void matmul_bf16_skinny_avx512(float* c, int64_t ldc, const uint16_t* a, int64_t lda,
                               const uint16_t* b, int64_t ldb, int64_t M, int64_t N, int64_t K,
                               bool accumulate) {
  matmul_bf16_portable(c, ldc, a, lda, b, ldb, M, N, K, accumulate);
}
}  // namespace neuron::native

#endif
