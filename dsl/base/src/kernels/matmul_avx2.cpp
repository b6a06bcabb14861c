// The AVX2 + FMA nc_matmul variant: fp32 in 6 x 16 blocks of C in 12 ymm accumulators; bf16 by
// the pairs kernel (matmul_bf16_pairs.hpp).
#include <cstddef>
#include <cstdint>

#include "matmul_variants.hpp"

#if defined(__x86_64__)
#include <immintrin.h>

// GCC 12 reports the intentionally undefined pass-through operand inside its own intrinsic
// headers (_mm512_undefined_epi32) as (maybe-)uninitialized after inlining; it is not.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC push_options
#pragma GCC target("avx2,fma")

namespace {

struct Avx2 {
  using reg = __m256;
  static constexpr int W = 8;
  static constexpr int MR = 6;
  static constexpr int NV = 2;
  // Lane i is enabled when i < n (maskload/maskstore read the sign bit; masked lanes load 0).
  static __m256i mask(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static reg zero() { return _mm256_setzero_ps(); }
  static reg load(const float* p) { return _mm256_loadu_ps(p); }
  static reg load_part(const float* p, int n) { return _mm256_maskload_ps(p, mask(n)); }
  static reg bcast(const float* p) { return _mm256_broadcast_ss(p); }
  static reg fma(reg a, reg b, reg c) { return _mm256_fmadd_ps(a, b, c); }
  static reg add(reg a, reg b) { return _mm256_add_ps(a, b); }
  static void store(float* p, reg r) { _mm256_storeu_ps(p, r); }
  static void store_part(float* p, reg r, int n) { _mm256_maskstore_ps(p, mask(n), r); }
  static void copy_a(float* dst, const float* src) { __builtin_memcpy(dst, src, MR * 4); }
};

// bf16 pairs (matmul_bf16_pairs.hpp): 4 x 12 blocks of C, even/odd partial sums in lane pairs.
struct Avx2Pairs {
  using reg = __m256;
  static constexpr int W = 8;
  static constexpr int MR = 4;
  static constexpr int NV = 3;
  static reg zero() { return _mm256_setzero_ps(); }
  static reg load(const float* p) { return _mm256_loadu_ps(p); }
  static reg fma(reg a, reg b, reg c) { return _mm256_fmadd_ps(a, b, c); }
  static reg bcast2(const float* p) {
    return _mm256_castpd_ps(_mm256_broadcast_sd(reinterpret_cast<const double*>(p)));
  }
  static void pack_pairs(float* dst, const uint16_t* r0, const uint16_t* r1) {
    const __m128i x = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(r0));
    const __m128i y = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(r1));
    const __m128i xy = _mm_unpacklo_epi16(x, y);
    _mm256_storeu_ps(dst, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(xy), 16)));
  }
  static void finish(float* c, reg acc, int cols, bool load_c) {
    const __m256 sum = _mm256_add_ps(acc, _mm256_permute_ps(acc, 0xB1));  // even + odd per pair
    const __m128 s = _mm256_castps256_ps128(
        _mm256_permutevar8x32_ps(sum, _mm256_setr_epi32(0, 2, 4, 6, 0, 0, 0, 0)));
    if (cols == 4) {
      _mm_storeu_ps(c, _mm_add_ps(load_c ? _mm_loadu_ps(c) : _mm_setzero_ps(), s));
      return;
    }
    const __m128i m = _mm_cmpgt_epi32(_mm_set1_epi32(cols), _mm_setr_epi32(0, 1, 2, 3));
    _mm_maskstore_ps(c, m, _mm_add_ps(load_c ? _mm_maskload_ps(c, m) : _mm_setzero_ps(), s));
  }
};

}  // namespace

#include "matmul_blocked.hpp"
#include "matmul_bf16_pairs.hpp"

namespace neuron::native {

// 8 x 8 blocks through registers (unpack, shuffle, swap 128-bit halves); edges element-wise.
void transpose32_avx2(char* d, int64_t drs, const char* s, int64_t srs, int64_t P, int64_t F) {
  const int64_t P8 = P / 8 * 8, F8 = F / 8 * 8;
  for (int64_t p0 = 0; p0 < P8; p0 += 8)
    for (int64_t f0 = 0; f0 < F8; f0 += 8) {
      __m256 r[8], t[8], u[8];
      for (int i = 0; i < 8; ++i)
        r[i] = _mm256_loadu_ps(reinterpret_cast<const float*>(s + (p0 + i) * srs) + f0);
      for (int i = 0; i < 4; ++i) {
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
      }
      for (int h = 0; h < 2; ++h) {
        u[4 * h + 0] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], _MM_SHUFFLE(1, 0, 1, 0));
        u[4 * h + 1] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], _MM_SHUFFLE(3, 2, 3, 2));
        u[4 * h + 2] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], _MM_SHUFFLE(1, 0, 1, 0));
        u[4 * h + 3] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], _MM_SHUFFLE(3, 2, 3, 2));
      }
      for (int i = 0; i < 4; ++i) {
        float* lo = reinterpret_cast<float*>(d + (f0 + i) * drs) + p0;
        float* hi = reinterpret_cast<float*>(d + (f0 + i + 4) * drs) + p0;
        _mm256_storeu_ps(lo, _mm256_permute2f128_ps(u[i], u[i + 4], 0x20));
        _mm256_storeu_ps(hi, _mm256_permute2f128_ps(u[i], u[i + 4], 0x31));
      }
    }
  // The edges: columns past F8 for every row, rows past P8 for the first F8 columns.
  for (int64_t f = F8; f < F; ++f)
    for (int64_t p = 0; p < P; ++p) __builtin_memcpy(d + f * drs + p * 4, s + p * srs + f * 4, 4);
  for (int64_t f = 0; f < F8; ++f)
    for (int64_t p = P8; p < P; ++p) __builtin_memcpy(d + f * drs + p * 4, s + p * srs + f * 4, 4);
}

void matmul_f32_avx2(float* c, int64_t ldc, const float* a, int64_t lda, const float* b,
                     int64_t ldb, int64_t M, int64_t N, int64_t K, bool accumulate) {
  float* scratch = matmul_scratch(blocked_scratch_floats<Avx2>());
  matmul_blocked<Avx2>(c, ldc, a, lda, b, ldb, M, N, K, accumulate, scratch);
}

void matmul_f32_at_avx2(float* c, int64_t ldc, const float* at, int64_t ldat, const float* b,
                        int64_t ldb, int64_t M, int64_t N, int64_t K, bool accumulate,
                        float a_zero) {
  float* scratch = matmul_scratch(at_scratch_floats<Avx2>(M, K, a_zero));
  matmul_at_blocked<Avx2>(c, ldc, at, ldat, b, ldb, M, N, K, accumulate, a_zero, scratch);
}

void matmul_bf16_avx2(float* c, int64_t ldc, const uint16_t* a, int64_t lda, const uint16_t* b,
                      int64_t ldb, int64_t M, int64_t N, int64_t K, bool accumulate) {
  float* scratch = matmul_scratch(pairs_scratch_floats<Avx2Pairs>());
  matmul_bf16_pairs<Avx2Pairs>(c, ldc, a, lda, b, ldb, M, N, K, accumulate, scratch);
}

}  // namespace neuron::native

#pragma GCC pop_options
#pragma GCC diagnostic pop

#else  // not x86-64: the variant is never selected (see supports()); keep the symbols defined.

namespace neuron::native {
void matmul_f32_avx2(float* c, int64_t ldc, const float* a, int64_t lda, const float* b,
                     int64_t ldb, int64_t M, int64_t N, int64_t K, bool accumulate) {
  matmul_f32_portable(c, ldc, a, lda, b, ldb, M, N, K, accumulate);
}
void matmul_f32_at_avx2(float* c, int64_t ldc, const float* at, int64_t ldat, const float* b,
                        int64_t ldb, int64_t M, int64_t N, int64_t K, bool accumulate,
                        float a_zero) {
  matmul_f32_at_portable(c, ldc, at, ldat, b, ldb, M, N, K, accumulate, a_zero);
}
void matmul_bf16_avx2(float* c, int64_t ldc, const uint16_t* a, int64_t lda, const uint16_t* b,
                      int64_t ldb, int64_t M, int64_t N, int64_t K, bool accumulate) {
  matmul_bf16_portable(c, ldc, a, lda, b, ldb, M, N, K, accumulate);
}
void transpose32_avx2(char* d, int64_t drs, const char* s, int64_t srs, int64_t P, int64_t F) {
  transpose32_portable(d, drs, s, srs, P, F);
}
}  // namespace neuron::native

#endif
