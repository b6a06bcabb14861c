// nc_matmul for the native backend: chooses the ISA variant once, and the portable variant.
#include "neuron/base/matmul_kernel.hpp"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "matmul_variants.hpp"
#include "neuron/base/bf16_dot.hpp"
#include "neuron/base/config.hpp"
#include "neuron/base/error.hpp"

namespace neuron::native {

namespace bf16dot = neuron::bf16dot;

namespace {
thread_local uint64_t scratch_uses = 0;
}  // namespace

uint64_t matmul_scratch_uses() {
  return scratch_uses;
}

float* matmul_scratch(size_t floats) {
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  thread_local std::unique_ptr<float, Free> buf;
  thread_local size_t size = 0;
  ++scratch_uses;
  if (size < floats) {
    size_t bytes = (floats * sizeof(float) + 63) / 64 * 64;
    buf.reset(static_cast<float*>(std::aligned_alloc(64, bytes)));
    NEURON_ASSERT(buf != nullptr, "out of memory for the matmul scratch ({} bytes)", bytes);
    size = floats;
  }
  return buf.get();
}

// The portable variant writes through C row by row; each C(m, n) still sees one fma per k in
// increasing k, starting from C or 0, exactly like the blocked variants. On x86-64 a clone for
// AVX2 + FMA CPUs runs its column loop as vector fma (neuron_matmul_f32_rows calls it on every
// CPU); the same bits, one rounding per fma either way.
#if defined(__x86_64__) && !defined(__clang__)
__attribute__((target_clones("arch=x86-64-v3", "default"),
               optimize("tree-vectorize", "vect-cost-model=dynamic")))
#endif
void matmul_f32_portable(float* c, int64_t ldc, const float* a, int64_t lda, const float* b,
                         int64_t ldb, int64_t M, int64_t N, int64_t K, bool accumulate) {
  for (int64_t m = 0; m < M; ++m) {
    float* crow = c + m * ldc;
    if (!accumulate)
      for (int64_t n = 0; n < N; ++n) crow[n] = 0.0f;
    for (int64_t k = 0; k < K; ++k) {
      const float av = a[k * lda + m];
      const float* brow = b + k * ldb;
      for (int64_t n = 0; n < N; ++n) crow[n] = std::fma(av, brow[n], crow[n]);
    }
  }
}

// The transposed-A form, the portable loop's order: one fma per k in increasing k.
void matmul_f32_at_portable(float* c, int64_t ldc, const float* at, int64_t ldat, const float* b,
                            int64_t ldb, int64_t M, int64_t N, int64_t K, bool accumulate,
                            float a_zero) {
  for (int64_t m = 0; m < M; ++m) {
    float* crow = c + m * ldc;
    if (!accumulate)
      for (int64_t n = 0; n < N; ++n) crow[n] = 0.0f;
    for (int64_t k = 0; k < K; ++k) {
      const float av = at[m * ldat + k] + a_zero;
      const float* brow = b + k * ldb;
      for (int64_t n = 0; n < N; ++n) crow[n] = std::fma(av, brow[n], crow[n]);
    }
  }
}

namespace {
inline float widen_bf16(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
}  // namespace

// The bf16 rule of neuron/base/bf16_dot.hpp, one output element at a time.
void matmul_bf16_portable(float* c, int64_t ldc, const uint16_t* a, int64_t lda, const uint16_t* b,
                          int64_t ldb, int64_t M, int64_t N, int64_t K, bool accumulate) {
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      float& out = c[m * ldc + n];
      out = bf16dot::dot(
          accumulate ? out : 0.0f, K, [&](int64_t k) { return widen_bf16(a[k * lda + m]); },
          [&](int64_t k) { return widen_bf16(b[k * ldb + n]); });
    }
}

// The bf16 transposed-A form, the rule read from at's rows: A(k, m) = at[m * ldat + k].
void matmul_bf16_at_portable(float* c, int64_t ldc, const uint16_t* at, int64_t ldat,
                             const uint16_t* b, int64_t ldb, int64_t M, int64_t N, int64_t K,
                             bool accumulate) {
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      float& out = c[m * ldc + n];
      out = bf16dot::dot(
          accumulate ? out : 0.0f, K, [&](int64_t k) { return widen_bf16(at[m * ldat + k]); },
          [&](int64_t k) { return widen_bf16(b[k * ldb + n]); });
    }
}

void transpose32_portable(char* d, int64_t drs, const char* s, int64_t srs, int64_t P, int64_t F) {
  // 8 x 8 blocks, so both sides stay within a few cache lines per block.
  for (int64_t p0 = 0; p0 < P; p0 += 8)
    for (int64_t f0 = 0; f0 < F; f0 += 8) {
      const int64_t pe = p0 + 8 < P ? p0 + 8 : P, fe = f0 + 8 < F ? f0 + 8 : F;
      for (int64_t f = f0; f < fe; ++f)
        for (int64_t p = p0; p < pe; ++p) std::memcpy(d + f * drs + p * 4, s + p * srs + f * 4, 4);
    }
}

// 16-bit transpose: 8 x 8 blocks through SSE2 registers (x86-64's baseline, so no variant
// choice), three rounds of unpacks; edges and other CPUs element by element.
void transpose16(char* d, int64_t drs, const char* s, int64_t srs, int64_t P, int64_t F) {
  int64_t P8 = 0, F8 = 0;
#if defined(__SSE2__)
  P8 = P / 8 * 8;
  F8 = F / 8 * 8;
  for (int64_t p0 = 0; p0 < P8; p0 += 8)
    for (int64_t f0 = 0; f0 < F8; f0 += 8) {
      __m128i r[8], a[8], b[8];
      for (int i = 0; i < 8; ++i)
        r[i] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + (p0 + i) * srs + f0 * 2));
      for (int i = 0; i < 4; ++i) {
        a[2 * i] = _mm_unpacklo_epi16(r[2 * i], r[2 * i + 1]);
        a[2 * i + 1] = _mm_unpackhi_epi16(r[2 * i], r[2 * i + 1]);
      }
      // b[h * 4 + j]: rows 4h..4h+3 of columns 2j, 2j+1.
      for (int h = 0; h < 2; ++h) {
        b[4 * h + 0] = _mm_unpacklo_epi32(a[4 * h], a[4 * h + 2]);
        b[4 * h + 1] = _mm_unpackhi_epi32(a[4 * h], a[4 * h + 2]);
        b[4 * h + 2] = _mm_unpacklo_epi32(a[4 * h + 1], a[4 * h + 3]);
        b[4 * h + 3] = _mm_unpackhi_epi32(a[4 * h + 1], a[4 * h + 3]);
      }
      for (int j = 0; j < 4; ++j) {
        char* lo = d + (f0 + 2 * j) * drs + p0 * 2;
        _mm_storeu_si128(reinterpret_cast<__m128i*>(lo), _mm_unpacklo_epi64(b[j], b[4 + j]));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(lo + drs), _mm_unpackhi_epi64(b[j], b[4 + j]));
      }
    }
#endif
  for (int64_t f = F8; f < F; ++f)
    for (int64_t p = 0; p < P; ++p) std::memcpy(d + f * drs + p * 2, s + p * srs + f * 2, 2);
  for (int64_t f = 0; f < F8; ++f)
    for (int64_t p = P8; p < P; ++p) std::memcpy(d + f * drs + p * 2, s + p * srs + f * 2, 2);
}

namespace {

struct Variant {
  const char* name;
  MatmulF32Fn f32;
  MatmulBf16Fn bf16;
  Transpose32Fn transpose32;
  MatmulF32AtFn f32_at;
  MatmulBf16Fn bf16_same_b = nullptr;  // keeps the packed B of the previous call (else bf16)
  MatmulF32Fn f32_same_b = nullptr;    // the same for f32 (else f32)
  MatmulBf16Fn bf16_at = nullptr;      // bf16 with A transposed (else bf16_at_by_copy)
};

// The bf16 transposed-A form of a variant without one: A transposed back into a [K, M] copy
// (bits moved, so the variant's rule gives the same bits), then the variant's product. The copy
// is one pass over A; the triple it replaces made two (transpose, evacuation) and a PSUM tile.
void bf16_at_by_copy(MatmulBf16Fn bf16, float* c, int64_t ldc, const uint16_t* at, int64_t ldat,
                     const uint16_t* b, int64_t ldb, int64_t M, int64_t N, int64_t K,
                     bool accumulate) {
  thread_local std::vector<uint16_t> a;
  a.resize(static_cast<size_t>(K * M));
  transpose16(reinterpret_cast<char*>(a.data()), M * 2, reinterpret_cast<const char*>(at), ldat * 2,
              M, K);
  bf16(c, ldc, a.data(), M, b, ldb, M, N, K, accumulate);
}

bool supports(const char* isa) {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (std::strcmp(isa, "amx") == 0) return amx_usable();
  // VDPBF16PS was checked bit for bit against the rule on AMD (Zen 4), where it runs at the fp32
  // FMA rate in products; on the Intel Xeons seen here it makes half as many products per cycle
  // as FMA does (and those have AMX).
  if (std::strcmp(isa, "avx512bf16") == 0)
    return supports("avx512") && __builtin_cpu_supports("avx512bf16") && __builtin_cpu_is("amd");
  if (std::strcmp(isa, "avx512") == 0)
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("fma");
  if (std::strcmp(isa, "avx2") == 0)
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
  return std::strcmp(isa, "portable") == 0;
}

// Fastest first; the last (portable) runs anywhere.
const Variant kVariants[] = {
    {"amx", matmul_f32_avx512, matmul_bf16_amx, transpose32_avx2, matmul_f32_at_avx512,
     matmul_bf16_amx_same_b, matmul_f32_avx512_same_b, matmul_bf16_at_amx},
    {"avx512bf16", matmul_f32_avx512, matmul_bf16_avx512bf16, transpose32_avx2,
     matmul_f32_at_avx512, matmul_bf16_avx512bf16_same_b, matmul_f32_avx512_same_b},
    {"avx512", matmul_f32_avx512, matmul_bf16_avx512, transpose32_avx2, matmul_f32_at_avx512,
     nullptr, matmul_f32_avx512_same_b},
    {"avx2", matmul_f32_avx2, matmul_bf16_avx2, transpose32_avx2, matmul_f32_at_avx2},
    {"portable", matmul_f32_portable, matmul_bf16_portable, transpose32_portable,
     matmul_f32_at_portable, nullptr, nullptr, matmul_bf16_at_portable},
};

const Variant* find_variant(const char* isa) {
  if (!isa || !supports(isa)) return nullptr;
  for (const Variant& v : kVariants)
    if (std::strcmp(v.name, isa) == 0) return &v;
  return nullptr;
}

void run_bf16_at(const Variant& v, float* c, int64_t ldc, const uint16_t* at, int64_t ldat,
                 const uint16_t* b, int64_t ldb, int64_t M, int64_t N, int64_t K, bool accumulate) {
  if (v.bf16_at) return v.bf16_at(c, ldc, at, ldat, b, ldb, M, N, K, accumulate);
  bf16_at_by_copy(v.bf16, c, ldc, at, ldat, b, ldb, M, N, K, accumulate);
}

// Chosen once, at first use (a function-local static is initialized thread-safely):
// NEURON_MATMUL_ISA when this CPU runs it (config() reports a bad one at compile time), else
// the fastest supported.
const Variant& host_variant() {
  static const Variant& chosen = [&]() -> const Variant& {
    if (const Variant* v = find_variant(config_matmul_isa().c_str())) return *v;
    for (const Variant& v : kVariants)
      if (supports(v.name)) return v;
    return kVariants[std::size(kVariants) - 1];
  }();
  return chosen;
}

}  // namespace
}  // namespace neuron::native

extern "C" {

void neuron_matmul_f32(float* c, int64_t ldc, const float* a, int64_t lda, const float* b,
                       int64_t ldb, int64_t M, int64_t N, int64_t K, int accumulate) {
  if (M <= 0 || N <= 0) return;
  neuron::native::host_variant().f32(c, ldc, a, lda, b, ldb, M, N, K, accumulate != 0);
}

void neuron_matmul_f32_same_b(float* c, int64_t ldc, const float* a, int64_t lda, const float* b,
                              int64_t ldb, int64_t M, int64_t N, int64_t K, int accumulate) {
  if (M <= 0 || N <= 0) return;
  const neuron::native::Variant& v = neuron::native::host_variant();
  (v.f32_same_b ? v.f32_same_b : v.f32)(c, ldc, a, lda, b, ldb, M, N, K, accumulate != 0);
}

void neuron_matmul_f32_rows(float* c, int64_t ldc, const float* a, int64_t lda, const float* b,
                            int64_t ldb, int64_t M, int64_t N, int64_t K, int accumulate) {
  if (M <= 0 || N <= 0) return;
  neuron::native::matmul_f32_portable(c, ldc, a, lda, b, ldb, M, N, K, accumulate != 0);
}

void neuron_matmul_bf16(float* c, int64_t ldc, const uint16_t* a, int64_t lda, const uint16_t* b,
                        int64_t ldb, int64_t M, int64_t N, int64_t K, int accumulate) {
  if (M <= 0 || N <= 0) return;
  neuron::native::host_variant().bf16(c, ldc, a, lda, b, ldb, M, N, K, accumulate != 0);
}

void neuron_matmul_bf16_same_b(float* c, int64_t ldc, const uint16_t* a, int64_t lda,
                               const uint16_t* b, int64_t ldb, int64_t M, int64_t N, int64_t K,
                               int accumulate) {
  if (M <= 0 || N <= 0) return;
  const neuron::native::Variant& v = neuron::native::host_variant();
  (v.bf16_same_b ? v.bf16_same_b : v.bf16)(c, ldc, a, lda, b, ldb, M, N, K, accumulate != 0);
}

void neuron_matmul_f32_at(float* c, int64_t ldc, const float* at, int64_t ldat, const float* b,
                          int64_t ldb, int64_t M, int64_t N, int64_t K, int accumulate,
                          int canonical_zero) {
  if (M <= 0 || N <= 0) return;
  neuron::native::host_variant().f32_at(c, ldc, at, ldat, b, ldb, M, N, K, accumulate != 0,
                                        canonical_zero ? 0.0f : -0.0f);
}

void neuron_matmul_bf16_at(float* c, int64_t ldc, const uint16_t* at, int64_t ldat,
                           const uint16_t* b, int64_t ldb, int64_t M, int64_t N, int64_t K,
                           int accumulate) {
  if (M <= 0 || N <= 0) return;
  neuron::native::run_bf16_at(neuron::native::host_variant(), c, ldc, at, ldat, b, ldb, M, N, K,
                              accumulate != 0);
}

void neuron_transpose32(char* d, int64_t drs, const char* s, int64_t srs, int64_t P, int64_t F) {
  if (P <= 0 || F <= 0) return;
  neuron::native::host_variant().transpose32(d, drs, s, srs, P, F);
}

void neuron_transpose16(char* d, int64_t drs, const char* s, int64_t srs, int64_t P, int64_t F) {
  if (P <= 0 || F <= 0) return;
  neuron::native::transpose16(d, drs, s, srs, P, F);
}

const char* neuron_matmul_isa() {
  return neuron::native::host_variant().name;
}

int neuron_matmul_f32_variant(const char* isa, float* c, int64_t ldc, const float* a, int64_t lda,
                              const float* b, int64_t ldb, int64_t M, int64_t N, int64_t K,
                              int accumulate) {
  const neuron::native::Variant* v = neuron::native::find_variant(isa);
  if (!v) return 0;
  if (M > 0 && N > 0) v->f32(c, ldc, a, lda, b, ldb, M, N, K, accumulate != 0);
  return 1;
}

int neuron_matmul_f32_at_variant(const char* isa, float* c, int64_t ldc, const float* at,
                                 int64_t ldat, const float* b, int64_t ldb, int64_t M, int64_t N,
                                 int64_t K, int accumulate, int canonical_zero) {
  const neuron::native::Variant* v = neuron::native::find_variant(isa);
  if (!v) return 0;
  if (M > 0 && N > 0)
    v->f32_at(c, ldc, at, ldat, b, ldb, M, N, K, accumulate != 0, canonical_zero ? 0.0f : -0.0f);
  return 1;
}

int neuron_matmul_bf16_variant(const char* isa, float* c, int64_t ldc, const uint16_t* a,
                               int64_t lda, const uint16_t* b, int64_t ldb, int64_t M, int64_t N,
                               int64_t K, int accumulate) {
  const neuron::native::Variant* v = neuron::native::find_variant(isa);
  if (!v) return 0;
  if (M > 0 && N > 0) v->bf16(c, ldc, a, lda, b, ldb, M, N, K, accumulate != 0);
  return 1;
}

int neuron_matmul_bf16_at_variant(const char* isa, float* c, int64_t ldc, const uint16_t* at,
                                  int64_t ldat, const uint16_t* b, int64_t ldb, int64_t M,
                                  int64_t N, int64_t K, int accumulate) {
  const neuron::native::Variant* v = neuron::native::find_variant(isa);
  if (!v) return 0;
  if (M > 0 && N > 0)
    neuron::native::run_bf16_at(*v, c, ldc, at, ldat, b, ldb, M, N, K, accumulate != 0);
  return 1;
}

const char* neuron_matmul_supported_variants() {
  static const std::string names = [] {
    std::string s;
    for (const auto& v : neuron::native::kVariants)
      if (neuron::native::supports(v.name)) s += (s.empty() ? "" : ", ") + std::string(v.name);
    return s;
  }();
  return names.c_str();
}

int neuron_matmul_variant_supported(const char* isa) {
  return neuron::native::find_variant(isa) != nullptr;
}
}
