// nc_matmul instruction kernel (neuron/base/matmul_kernel.hpp): every ISA variant against a
// scalar loop written here (std::fma for fp32, the AMX rule for bf16), bit for bit, over
// shapes, strides, both accumulate modes, fp32 and bf16, and special values.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

#include "../../dsl/base/src/kernels/matmul_variants.hpp"
#include "neuron/base/matmul_kernel.hpp"

namespace {

float f_of_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float widen(uint16_t h) {
  return f_of_bits(static_cast<uint32_t>(h) << 16);
}
float widen(float f) {
  return f;
}

// x86's flush-to-zero, written independently of the kernel's (which uses a double): the result
// is flushed when its value rounded with an unbounded exponent is below FLT_MIN. Scaling every
// term by 2^64 (exact for the values that get here) moves the tiny range into fp32's normals,
// where fp32 rounding is the unbounded-exponent rounding.
float flushed(float r, float scaled) {
  if (std::isnan(r) || std::isinf(r)) return r;
  const float scaled_min = std::ldexp(std::numeric_limits<float>::min(), 64);
  return std::fabs(scaled) < scaled_min ? std::copysign(0.0f, r) : r;
}
float fma_ftz(float a, float b, float c) {
  return flushed(std::fma(a, b, c),
                 std::fma(std::ldexp(a, 32), std::ldexp(b, 32), std::ldexp(c, 64)));
}
float add_ftz(float a, float b) {
  return flushed(a + b, std::ldexp(a, 64) + std::ldexp(b, 64));
}
float daz(float x) {
  return std::fpclassify(x) == FP_SUBNORMAL ? std::copysign(0.0f, x) : x;
}

// The contract, literally. fp32: acc = C or 0, then one fma per k in increasing k. bf16 (AMX's
// TDPBF16PS): per block of 32 rows, even and odd rows summed apart from 0, then
// acc = ftz(daz(acc) + ftz(even + odd)); subnormal inputs read as 0, tiny results flush to 0.
template <class T>
void reference(std::vector<float>& c, int64_t ldc, const std::vector<T>& a, int64_t lda,
               const std::vector<T>& b, int64_t ldb, int64_t M, int64_t N, int64_t K,
               bool accumulate) {
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      float acc = accumulate ? c[m * ldc + n] : 0.0f;
      if constexpr (std::is_same_v<T, float>) {
        for (int64_t k = 0; k < K; ++k)
          acc = std::fma(widen(a[k * lda + m]), widen(b[k * ldb + n]), acc);
      } else {
        for (int64_t k0 = 0; k0 < K; k0 += 32) {
          float even = 0.0f, odd = 0.0f;
          for (int64_t k = k0; k < K && k < k0 + 32; ++k) {
            float& part = (k - k0) % 2 == 0 ? even : odd;
            part = fma_ftz(daz(widen(a[k * lda + m])), daz(widen(b[k * ldb + n])), part);
          }
          acc = add_ftz(daz(acc), add_ftz(even, odd));
        }
      }
      c[m * ldc + n] = acc;
    }
}

struct Shape {
  int64_t M, N, K;
};

// The variants under test: each ISA by name (skipped where this CPU lacks it) and the host's.
const char* const kVariants[] = {"amx", "avx512bf16", "avx512", "avx2", "portable", "host"};

bool run_f32(const char* isa, std::vector<float>& c, int64_t ldc, const std::vector<float>& a,
             int64_t lda, const std::vector<float>& b, int64_t ldb, const Shape& s, bool acc) {
  if (std::string(isa) == "host") {
    neuron_matmul_f32(c.data(), ldc, a.data(), lda, b.data(), ldb, s.M, s.N, s.K, acc);
    return true;
  }
  return neuron_matmul_f32_variant(isa, c.data(), ldc, a.data(), lda, b.data(), ldb, s.M, s.N, s.K,
                                   acc) == 1;
}

bool run_bf16(const char* isa, std::vector<float>& c, int64_t ldc, const std::vector<uint16_t>& a,
              int64_t lda, const std::vector<uint16_t>& b, int64_t ldb, const Shape& s, bool acc) {
  if (std::string(isa) == "host") {
    neuron_matmul_bf16(c.data(), ldc, a.data(), lda, b.data(), ldb, s.M, s.N, s.K, acc);
    return true;
  }
  return neuron_matmul_bf16_variant(isa, c.data(), ldc, a.data(), lda, b.data(), ldb, s.M, s.N, s.K,
                                    acc) == 1;
}

// Random floats in [-2, 2) with a spread of exponents, so rounding differs between orders.
float random_float(std::mt19937& rng) {
  std::uniform_real_distribution<float> mant(-2.0f, 2.0f);
  std::uniform_int_distribution<int> ex(-6, 6);
  return std::ldexp(mant(rng), ex(rng));
}

uint16_t random_bf16(std::mt19937& rng) {
  return static_cast<uint16_t>(bits_of(random_float(rng)) >> 16);
}

// Fills a whole buffer (padding included): the kernel must leave padding alone.
template <class T>
std::vector<T> random_buffer(std::mt19937& rng, size_t size) {
  std::vector<T> v(size);
  for (auto& x : v) {
    if constexpr (std::is_same_v<T, float>)
      x = random_float(rng);
    else
      x = random_bf16(rng);
  }
  return v;
}

bool same_bits(const std::vector<float>& x, const std::vector<float>& y) {
  return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * 4) == 0;
}

// First differing element, for the failure message.
std::string first_difference(const std::vector<float>& got, const std::vector<float>& want,
                             int64_t ldc) {
  for (size_t i = 0; i < got.size(); ++i)
    if (bits_of(got[i]) != bits_of(want[i]))
      return "C(" + std::to_string(static_cast<int64_t>(i) / ldc) + ", " +
             std::to_string(static_cast<int64_t>(i) % ldc) + "): got " + std::to_string(got[i]) +
             " want " + std::to_string(want[i]);
  return "none";
}

template <class T>
void check_shape(const Shape& s, int64_t pad_a, int64_t pad_b, int64_t pad_c, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t lda = s.M + pad_a, ldb = s.N + pad_b, ldc = s.N + pad_c;
  const size_t Kr = static_cast<size_t>(s.K > 0 ? s.K : 1);
  auto a = random_buffer<T>(rng, Kr * static_cast<size_t>(lda));
  auto b = random_buffer<T>(rng, Kr * static_cast<size_t>(ldb));
  auto c0 = random_buffer<float>(rng, static_cast<size_t>(s.M) * static_cast<size_t>(ldc));
  for (bool acc : {false, true}) {
    std::vector<float> want = c0;
    reference(want, ldc, a, lda, b, ldb, s.M, s.N, s.K, acc);
    for (const char* isa : kVariants) {
      std::vector<float> got = c0;
      bool ran;
      if constexpr (std::is_same_v<T, float>)
        ran = run_f32(isa, got, ldc, a, lda, b, ldb, s, acc);
      else
        ran = run_bf16(isa, got, ldc, a, lda, b, ldb, s, acc);
      if (!ran) continue;
      INFO("isa=", std::string(isa), " M=", s.M, " N=", s.N, " K=", s.K, " lda=", lda, " ldb=", ldb,
           " ldc=", ldc, " accumulate=", acc,
           " first difference: ", first_difference(got, want, ldc));
      CHECK(same_bits(got, want));
    }
  }
}

const Shape kShapes[] = {{1, 1, 1},    {1, 1, 2},    {2, 3, 1},      {3, 5, 7},     {7, 33, 129},
                         {8, 48, 16},  {9, 49, 17},  {8, 16, 1},     {5, 17, 3},    {16, 64, 128},
                         {15, 47, 31}, {1, 100, 5},  {100, 1, 5},    {13, 96, 64},  {6, 8, 40},
                         {7, 24, 9},   {12, 40, 11}, {129, 50, 130}, {40, 20, 300}, {1, 512, 128},
                         {2, 70, 130}, {3, 64, 9},    // M <= 2: the skinny path, its
                         {1, 200, 3},  {2, 140, 2}};  // panels and tails

}  // namespace

TEST_CASE("matmul kernel: variants exist and the host picks the best one it supports") {
  std::string isa = neuron_matmul_isa();
  CHECK((isa == "amx" || isa == "avx512bf16" || isa == "avx512" || isa == "avx2" ||
         isa == "portable"));
  CHECK(neuron_matmul_variant_supported("portable") == 1);
  CHECK(neuron_matmul_variant_supported("sse9") == 0);
  if (neuron_matmul_variant_supported("amx"))
    CHECK(isa == "amx");
  else if (neuron_matmul_variant_supported("avx512bf16"))
    CHECK(isa == "avx512bf16");
  else if (neuron_matmul_variant_supported("avx512"))
    CHECK(isa == "avx512");
  else if (neuron_matmul_variant_supported("avx2"))
    CHECK(isa == "avx2");
  float c = 1.0f, a = 2.0f, b = 3.0f;
  CHECK(neuron_matmul_f32_variant("sse9", &c, 1, &a, 1, &b, 1, 1, 1, 1, 0) == 0);
  CHECK(c == 1.0f);
  MESSAGE("host matmul ISA: ", isa, "; amx ", neuron_matmul_variant_supported("amx"),
          ", avx512bf16 ", neuron_matmul_variant_supported("avx512bf16"), ", avx512 ",
          neuron_matmul_variant_supported("avx512"), ", avx2 ",
          neuron_matmul_variant_supported("avx2"));
}

TEST_CASE("matmul kernel: hand-computed 2x2x3 fp32 and bf16") {
  // A[k, m] = {{1, 2}, {3, 4}, {5, 6}}, B[k, n] = {{1, 0}, {0, 1}, {1, 1}}:
  // C = A^T B = {{1 + 5, 3 + 5}, {2 + 6, 4 + 6}} = {{6, 8}, {8, 10}}; accumulate adds to C.
  std::vector<float> a = {1, 2, 3, 4, 5, 6}, b = {1, 0, 0, 1, 1, 1};
  std::vector<uint16_t> ah, bh;
  for (float x : a) ah.push_back(static_cast<uint16_t>(bits_of(x) >> 16));
  for (float x : b) bh.push_back(static_cast<uint16_t>(bits_of(x) >> 16));
  for (const char* isa : kVariants) {
    for (int bf : {0, 1}) {
      std::vector<float> c = {100, 100, 100, 100};
      bool ran = bf ? run_bf16(isa, c, 2, ah, 2, bh, 2, {2, 2, 3}, false)
                    : run_f32(isa, c, 2, a, 2, b, 2, {2, 2, 3}, false);
      if (!ran) continue;
      INFO("isa=", std::string(isa), " bf16=", bf);
      CHECK(c == std::vector<float>{6, 8, 8, 10});
      if (bf)
        run_bf16(isa, c, 2, ah, 2, bh, 2, {2, 2, 3}, true);
      else
        run_f32(isa, c, 2, a, 2, b, 2, {2, 2, 3}, true);
      CHECK(c == std::vector<float>{12, 16, 16, 20});
    }
  }
}

TEST_CASE("matmul kernel: fp32 bit-exact against the fma loop over shapes and strides") {
  uint32_t seed = 1;
  for (const Shape& s : kShapes)
    for (int64_t pad : {0, 3, 17}) check_shape<float>(s, pad, pad + 1, pad * 2, seed++);
}

TEST_CASE("matmul kernel: bf16 bit-exact against the widened fma loop over shapes and strides") {
  uint32_t seed = 1000;
  for (const Shape& s : kShapes)
    for (int64_t pad : {0, 5}) check_shape<uint16_t>(s, pad, pad + 2, pad * 3, seed++);
}

TEST_CASE("matmul kernel: full 128x128x512 tile with partition-like strides") {
  // K = 128 partitions, M = 128, N = 512; strides like SBUF rows (large) and PSUM rows (4096).
  check_shape<float>({128, 512, 128}, 0, 0, 0, 77);
  check_shape<float>({128, 512, 128}, 1000 - 128, 1500 - 512, 4096 - 512, 78);
  check_shape<uint16_t>({128, 512, 128}, 2000 - 128, 3000 - 512, 4096 - 512, 79);
}

// neuron_matmul_{bf16,f32}_same_b: consecutive nc_matmuls over one moving tile. Every call must
// give the contract's bits for its own A, whether the variant reused its packed B or not.
template <class T>
void check_same_b_reuse(uint32_t seed) {
  constexpr bool kBf16 = sizeof(T) == 2;
  using Fn = void (*)(float*, int64_t, const T*, int64_t, const T*, int64_t, int64_t, int64_t,
                      int64_t, int);
  Fn plain, same_b;
  if constexpr (kBf16) {
    plain = neuron_matmul_bf16;
    same_b = neuron_matmul_bf16_same_b;
  } else {
    plain = neuron_matmul_f32;
    same_b = neuron_matmul_f32_same_b;
  }
  std::mt19937 rng(seed);
  const Shape s{128, 512, 128}, narrow{128, 256, 128}, tall{200, 512, 128};
  const int64_t ld = 512, ldc = 512;
  auto a1 = random_buffer<T>(rng, 128 * 256), a2 = random_buffer<T>(rng, 128 * 256);
  auto b = random_buffer<T>(rng, 128 * ld);
  auto check = [&](const std::vector<T>& a, const Shape& sh, const char* when) {
    std::vector<float> got(static_cast<size_t>(sh.M * ldc), 1.0f), want = got;
    same_b(got.data(), ldc, a.data(), 256, b.data(), ld, sh.M, sh.N, sh.K, 1);
    reference(want, ldc, a, 256, b, ld, sh.M, sh.N, sh.K, true);
    INFO(when, ": first difference ", first_difference(got, want, ldc));
    CHECK(same_bits(got, want));
  };
  std::vector<float> c(static_cast<size_t>(200 * ldc));
  plain(c.data(), ldc, a1.data(), 256, b.data(), ld, s.M, s.N, s.K, 0);
  check(a2, s, "right after a call over the same B");
  check(a1, s, "a third call over it");
  // Another matmul in between uses the same scratch: the packed B is gone.
  std::vector<float> fa(128 * 128, 0.5f), fb(128 * 512, 0.25f);
  std::vector<uint16_t> ha(128 * 128, 0x3f00), hb(128 * 512, 0x3e80);
  if constexpr (kBf16)
    neuron_matmul_f32(c.data(), ldc, fa.data(), 128, fb.data(), 512, 128, 512, 128, 0);
  else
    neuron_matmul_bf16(c.data(), ldc, ha.data(), 128, hb.data(), 512, 128, 512, 128, 0);
  check(a2, tall, "after a matmul of the other dtype, more rows than one chunk");
  check(a1, tall, "more rows than one chunk again");
  check(a2, s, "one chunk of rows");
  // A different shape over the same pointer is packed again.
  check(a1, narrow, "fewer columns of the same B");
  check(a2, s, "all columns again");
  // A call of a few rows (a variant may skip packing for it) over new values at the same
  // address, then one promised the same B: it must see the new values.
  for (auto& x : b) {
    if constexpr (kBf16)
      x = static_cast<uint16_t>(x ^ 0x0001);
    else
      x = -x;
  }
  plain(c.data(), ldc, a1.data(), 256, b.data(), ld, 2, s.N, s.K, 0);
  check(a2, s, "after a two-row call over changed values");
}

TEST_CASE("matmul kernel: a B promised unchanged is reused only where the packed copy is intact") {
  SUBCASE("bf16") {
    check_same_b_reuse<uint16_t>(4242);
  }
  SUBCASE("fp32") {
    check_same_b_reuse<float>(4243);
  }
}

TEST_CASE("matmul kernel: empty shapes") {
  std::vector<float> a(16, 1.0f), b(16, 1.0f);
  for (const char* isa : kVariants) {
    INFO("isa=", std::string(isa));
    // K = 0: overwrite gives 0 (the sum of nothing), accumulate leaves C.
    std::vector<float> c = {5, 5, 5, 5};
    if (!run_f32(isa, c, 2, a, 2, b, 2, {2, 2, 0}, false)) continue;
    CHECK(c == std::vector<float>{0, 0, 0, 0});
    c = {5, 5, 5, 5};
    run_f32(isa, c, 2, a, 2, b, 2, {2, 2, 0}, true);
    CHECK(c == std::vector<float>{5, 5, 5, 5});
    // M = 0 or N = 0 writes nothing.
    run_f32(isa, c, 2, a, 2, b, 2, {0, 2, 3}, false);
    run_f32(isa, c, 2, a, 2, b, 2, {2, 0, 3}, false);
    CHECK(c == std::vector<float>{5, 5, 5, 5});
  }
}

TEST_CASE("matmul kernel: fp32 keeps denormals; bf16 flushes them as AMX does") {
  // 2^-70 * 2^-70 = 2^-140, a denormal (fp32 normals start at 2^-126); 2^-149 + 2^-149 = 2^-148.
  const float t = std::ldexp(1.0f, -70), tiny = std::ldexp(1.0f, -149);
  for (const char* isa : kVariants) {
    INFO("isa=", std::string(isa));
    for (Shape s : {Shape{1, 1, 1}, Shape{9, 50, 3}}) {
      std::vector<float> a(static_cast<size_t>(s.K * s.M), 0.0f),
          b(static_cast<size_t>(s.K * s.N), 0.0f);
      a[0] = t;
      b[0] = t;
      std::vector<float> c(static_cast<size_t>(s.M * s.N), 0.0f);
      if (!run_f32(isa, c, s.N, a, s.M, b, s.N, s, false)) break;
      CHECK(c[0] == std::ldexp(1.0f, -140));
      // A denormal operand and a denormal accumulator.
      std::fill(a.begin(), a.end(), 0.0f);
      std::fill(b.begin(), b.end(), 0.0f);
      a[0] = tiny;
      b[0] = 1.0f;
      c[0] = tiny;
      run_f32(isa, c, s.N, a, s.M, b, s.N, s, true);
      CHECK(bits_of(c[0]) == 2u);  // 2^-148 is the denormal with mantissa bits 0b10
    }
  }
  // bf16 follows AMX instead: a bf16 denormal (0x0001 is 2^-133) reads as zero, a denormal
  // accumulator reads as zero, and a tiny result flushes to a zero of its sign.
  for (const char* isa : kVariants) {
    INFO("isa=", std::string(isa));
    std::vector<uint16_t> a = {0x0001, 0x3f80}, b = {0x3f80, 0x3f80};  // K = 2: t * 1, 1 * 1
    std::vector<float> c = {7.0f};
    if (!run_bf16(isa, c, 1, a, 1, b, 1, {1, 1, 1}, false)) continue;
    CHECK(bits_of(c[0]) == 0u);
    c = {tiny};
    run_bf16(isa, c, 1, a, 1, b, 1, {1, 1, 1}, true);
    CHECK(bits_of(c[0]) == 0u);  // daz(2^-149) + daz(2^-133) * 1
    // 2^-70 * -2^-70 = -2^-140: tiny, so the even partial sum is -0.0; -0.0 + the odd +0.0 is
    // +0.0, added to the accumulator's +0.0: +0.0 (the block sums start at +0.0).
    a = {0x1c80};
    b = {0x9c80};
    c = {1.0f};
    run_bf16(isa, c, 1, a, 1, b, 1, {1, 1, 1}, false);
    CHECK(bits_of(c[0]) == 0u);
    // With a normal product in the same block the tiny one is simply lost: 1 * 1 + (-2^-140).
    a = {0x3f80, 0x0000, 0x1c80};
    b = {0x3f80, 0x0000, 0x9c80};
    run_bf16(isa, c, 1, a, 1, b, 1, {1, 1, 3}, false);
    CHECK(c[0] == 1.0f);
    // Tininess after rounding: FLT_MIN - 2^-150 (1 - 2^-8) rounds to FLT_MIN as a denormal but
    // to FLT_MIN - 2^-150 with an unbounded exponent, so it flushes (as x86's FTZ and AMX do).
    // Rows 0 and 2 are both even: FLT_MIN, then FLT_MIN + 2^-75 (1 - 2^-8) * -2^-75.
    a = {0x3f80, 0x0000, 0x19ff};  // 1, 0, 2^-75 (1 - 2^-8)
    b = {0x0080, 0x0000, 0x9a00};  // FLT_MIN, 0, -2^-75
    c = {0.0f};
    run_bf16(isa, c, 1, a, 1, b, 1, {1, 1, 3}, false);
    CHECK(bits_of(c[0]) == 0u);
    b[2] = 0x0000;  // the same without the tiny product keeps FLT_MIN
    run_bf16(isa, c, 1, a, 1, b, 1, {1, 1, 3}, false);
    CHECK(bits_of(c[0]) == 0x00800000u);
  }
#if defined(__x86_64__)
  // Nothing may leave flush-to-zero (bit 15) or denormals-are-zero (bit 6) on in MXCSR.
  CHECK((_mm_getcsr() & 0x8040u) == 0u);
#endif
}

TEST_CASE("matmul kernel: inf, NaN, signed zero and overflow follow fma") {
  const float inf = std::numeric_limits<float>::infinity();
  const float specials[] = {inf,  -inf, -0.0f, 0.0f, 3.0e38f, -3.0e38f, std::ldexp(1.0f, -140),
                            1.0f, -1.0f};
  const Shape s{11, 37, 9};
  const int64_t lda = 13, ldb = 40, ldc = 41;
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> pick(0, 8), coin(0, 3);
  auto fill = [&](std::vector<float>& v) {
    for (auto& x : v) x = coin(rng) == 0 ? specials[pick(rng)] : random_float(rng);
  };
  std::vector<float> a(static_cast<size_t>(s.K * lda)), b(static_cast<size_t>(s.K * ldb)),
      c0(static_cast<size_t>(s.M * ldc));
  fill(a);
  fill(b);
  fill(c0);
  for (bool acc : {false, true}) {
    std::vector<float> want = c0;
    reference(want, ldc, a, lda, b, ldb, s.M, s.N, s.K, acc);
    int nans = 0;
    for (float x : want) nans += std::isnan(x);
    CHECK(nans > 0);  // the data does exercise inf - inf and 0 * inf
    for (const char* isa : kVariants) {
      std::vector<float> got = c0;
      if (!run_f32(isa, got, ldc, a, lda, b, ldb, s, acc)) continue;
      INFO("isa=", std::string(isa), " accumulate=", acc);
      // IEEE 754 leaves which NaN propagates open when NaNs meet, so NaN results compare as
      // NaN; every other result (infinities and signed zeros included) compares bit for bit.
      for (size_t i = 0; i < got.size(); ++i) {
        if (std::isnan(want[i])) {
          CHECK(std::isnan(got[i]));
        } else if (bits_of(got[i]) != bits_of(want[i])) {
          CHECK(bits_of(got[i]) == bits_of(want[i]));
        }
      }
    }
  }
}

// The bf16 variants that use hardware dot products (AMX, AVX512-BF16) were matched to the rule
// by measurement; this sweeps bands of exponents from the flush range to overflow, with
// subnormal, infinite and NaN inputs mixed in, so a CPU whose instruction rounds or flushes
// differently fails here rather than in a user's kernel.
TEST_CASE("matmul kernel: bf16 bit-exact across the exponent range, specials included") {
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> offset(-8, 8), mant(0, 127), coin(0, 99), rare(0, 999);
  const uint16_t specials[] = {0x7f80, 0xff80, 0x7fc1, 0x0001, 0x807f, 0x0000, 0x8000};
  for (int center : {-120, -66, -63, -10, 0, 60, 63, 120}) {
    // Specials in 0.3% of the values: most dot products over K ~ 128 then meet no infinity or
    // NaN, so their C values are compared bit for bit (at 3%, 97% of C was inf or NaN).
    auto one = [&](int e0) -> uint16_t {
      if (rare(rng) < 3) return specials[static_cast<size_t>(coin(rng)) % std::size(specials)];
      const int e = std::clamp(e0 + offset(rng), -126, 127);
      return static_cast<uint16_t>((coin(rng) % 2) << 15 | (e + 127) << 7 | mant(rng));
    };
    // M = 1 and 2: the skinny kernels (one or two rows of C, B read in place).
    for (Shape sh : {Shape{7, 33, 129}, Shape{16, 64, 128}, Shape{2, 40, 70}, Shape{1, 40, 70}}) {
      const int64_t lda = sh.M + 3, ldb = sh.N + 5, ldc = sh.N + 1;
      std::vector<uint16_t> a(static_cast<size_t>(sh.K * lda)), b(static_cast<size_t>(sh.K * ldb));
      for (auto& x : a) x = one(center);
      for (auto& x : b) x = one(center);
      std::vector<float> c0(static_cast<size_t>(sh.M * ldc));
      for (auto& x : c0) x = widen(one(2 * center)) * 1.5f;
      for (bool acc : {false, true}) {
        std::vector<float> want = c0;
        reference(want, ldc, a, lda, b, ldb, sh.M, sh.N, sh.K, acc);
        for (const char* isa : kVariants) {
          std::vector<float> got = c0;
          if (!run_bf16(isa, got, ldc, a, lda, b, ldb, sh, acc)) continue;
          INFO("isa=", std::string(isa), " exponents around ", center, " M=", sh.M, " N=", sh.N,
               " K=", sh.K, " accumulate=", acc);
          int differ = 0;
          for (size_t i = 0; i < got.size(); ++i)
            differ +=
                std::isnan(want[i]) ? !std::isnan(got[i]) : bits_of(got[i]) != bits_of(want[i]);
          CHECK(differ == 0);
        }
      }
    }
  }
}

TEST_CASE("matmul kernel: a single NaN input propagates its payload") {
  const float nan = f_of_bits(0x7fc01234u);
  const Shape s{10, 35, 6};
  for (const char* isa : kVariants) {
    std::mt19937 rng(9);
    auto a = random_buffer<float>(rng, static_cast<size_t>(s.K * s.M));
    auto b = random_buffer<float>(rng, static_cast<size_t>(s.K * s.N));
    a[3 * s.M + 2] = nan;  // A(k = 3, m = 2): all of row m = 2 of C becomes that NaN
    std::vector<float> c(static_cast<size_t>(s.M * s.N), 0.0f);
    if (!run_f32(isa, c, s.N, a, s.M, b, s.N, s, false)) continue;
    INFO("isa=", std::string(isa));
    for (int64_t m = 0; m < s.M; ++m)
      for (int64_t n = 0; n < s.N; ++n) {
        if (m == 2)
          CHECK(bits_of(c[m * s.N + n]) == 0x7fc01234u);
        else
          CHECK(!std::isnan(c[m * s.N + n]));
      }
  }
}

namespace {

// A as the plain kernels take it, [K, M] (A(k, m) at a[k * M + m]), from at [M, K] (rows ldat
// apart), each value through `value`.
template <class T, class F>
std::vector<T> untransposed(const std::vector<T>& at, int64_t ldat, const Shape& s, F value) {
  std::vector<T> a(static_cast<size_t>(s.K > 0 ? s.K : 1) * static_cast<size_t>(s.M));
  for (int64_t m = 0; m < s.M; ++m)
    for (int64_t k = 0; k < s.K; ++k) a[k * s.M + m] = value(at[m * ldat + k]);
  return a;
}

// A transposed-A kernel (run(isa, got, accumulate): false where this CPU lacks the variant)
// against the reference on the untransposed A, from C = c0, both accumulate modes, every
// variant; `what` joins the failure message. `nan_as_class`: a NaN matches any NaN (the bf16
// rule does not fix which comes out when two meet); else every bit must match.
template <class T, class Run>
void check_transposed_form(const Shape& s, int64_t ldat, int64_t ldb, int64_t ldc,
                           const std::vector<T>& a, const std::vector<T>& b,
                           const std::vector<float>& c0, const std::string& what,
                           bool nan_as_class, Run run) {
  for (bool acc : {false, true}) {
    std::vector<float> want = c0;
    reference(want, ldc, a, s.M, b, ldb, s.M, s.N, s.K, acc);
    for (const char* isa : kVariants) {
      std::vector<float> got = c0;
      if (!run(isa, got, acc)) continue;
      INFO("isa=", std::string(isa), " M=", s.M, " N=", s.N, " K=", s.K, " ldat=", ldat,
           " accumulate=", acc, what, " first difference: ", first_difference(got, want, ldc));
      if (!nan_as_class) {
        CHECK(same_bits(got, want));
        continue;
      }
      int differ = 0;
      for (size_t i = 0; i < got.size(); ++i)
        differ += std::isnan(want[i]) ? !std::isnan(got[i]) : bits_of(got[i]) != bits_of(want[i]);
      CHECK(differ == 0);
    }
  }
}

// The transposed-A form against the contract written here: A(k, m) = at[m * ldat + k] + zero
// (zero = +0.0f reads -0 as +0), then the fp32 fma loop. `zeros`: signed zeros among A's values,
// where the zero rule shows (without, a kernel may skip the rule; with, it must apply it).
void check_transposed(const Shape& s, int64_t pad, bool canonical, uint32_t seed,
                      bool zeros = true) {
  std::mt19937 rng(seed);
  const int64_t ldat = s.K + pad, ldb = s.N + pad + 1, ldc = s.N + 2 * pad;
  auto at = random_buffer<float>(rng, static_cast<size_t>(s.M) * static_cast<size_t>(ldat));
  if (zeros)
    for (size_t i = 0; i < at.size(); i += 7) at[i] = i % 14 == 0 ? -0.0f : 0.0f;
  // A quiet and a signaling NaN: the sum with `zero` quiets the second, as the fma does.
  if (at.size() > 5) at[5] = std::numeric_limits<float>::quiet_NaN();
  if (at.size() > 40) at[40] = f_of_bits(0x7fa00042u);
  const size_t Kr = static_cast<size_t>(s.K > 0 ? s.K : 1);
  auto b = random_buffer<float>(rng, Kr * static_cast<size_t>(ldb));
  auto c0 = random_buffer<float>(rng, static_cast<size_t>(s.M) * static_cast<size_t>(ldc));
  for (size_t i = 0; i < c0.size(); i += 5) c0[i] = -0.0f;  // -0 + -0 keeps its sign
  const float zero = canonical ? 0.0f : -0.0f;
  const auto a = untransposed(at, ldat, s, [&](float v) { return v + zero; });
  check_transposed_form(s, ldat, ldb, ldc, a, b, c0,
                        " canonical_zero=" + std::to_string(canonical), false,
                        [&](const char* isa, std::vector<float>& got, bool acc) {
                          if (std::string(isa) != "host")
                            return neuron_matmul_f32_at_variant(isa, got.data(), ldc, at.data(),
                                                                ldat, b.data(), ldb, s.M, s.N, s.K,
                                                                acc, canonical) == 1;
                          neuron_matmul_f32_at(got.data(), ldc, at.data(), ldat, b.data(), ldb,
                                               s.M, s.N, s.K, acc, canonical);
                          return true;
                        });
}

}  // namespace

TEST_CASE("matmul kernel: transposed A (fp32) bit-exact against the fma loop") {
  uint32_t seed = 5000;
  for (const Shape& s : kShapes)
    for (int64_t pad : {0, 9})
      for (bool canonical : {false, true}) check_transposed(s, pad, canonical, seed++);
  // A [128, 128] tile of SBUF rows times V rows [128, 64]: flash attention's p @ v.
  check_transposed({128, 64, 128}, 1000 - 128, true, 6000);
  check_transposed({128, 512, 128}, 0, false, 6001);
  // No -0 in A: read as it lies, whatever the zero rule.
  for (bool canonical : {false, true}) {
    check_transposed({128, 64, 128}, 1000 - 128, canonical, 6002, false);
    check_transposed({37, 70, 129}, 3, canonical, 6003, false);
  }
}

TEST_CASE("matmul kernel: transposed A reads -0 as +0 only when asked") {
  // C = -0 accumulating A = -0 times B = 1: -0 + (-0 * 1) = -0; with A read as +0, +0.
  for (const char* isa : kVariants) {
    for (int canonical : {0, 1}) {
      float c = -0.0f, at = -0.0f, b = 1.0f;
      if (std::string(isa) == "host")
        neuron_matmul_f32_at(&c, 1, &at, 1, &b, 1, 1, 1, 1, 1, canonical);
      else if (!neuron_matmul_f32_at_variant(isa, &c, 1, &at, 1, &b, 1, 1, 1, 1, 1, canonical))
        continue;
      INFO("isa=", std::string(isa), " canonical_zero=", canonical);
      CHECK(c == 0.0f);
      CHECK(std::signbit(c) == !canonical);
    }
  }
}

namespace {

// The bf16 transposed-A form against the rule written here (reference), A(k, m) read from
// at[m * ldat + k]: signed zeros, subnormals, infinities and NaN among the values. Infinities and
// NaN sit in every fifth row of A only (such a row of C is all NaN, which matches any NaN), signed
// zeros and subnormals in another fifth, so the rows of C that must match bit for bit show a
// misplaced row or column of A.
void check_transposed_bf16(const Shape& s, int64_t pad, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t ldat = s.K + pad, ldb = s.N + pad + 1, ldc = s.N + 2 * pad;
  auto at = random_buffer<uint16_t>(rng, static_cast<size_t>(s.M) * static_cast<size_t>(ldat));
  const uint16_t specials[] = {0x8000, 0x0000, 0x0001, 0x807f, 0x7f80, 0xff80, 0x7fc1};
  for (size_t i = 0; i < at.size(); i += 11) {
    const size_t row = i / static_cast<size_t>(ldat);
    if (row % 5 == 2) at[i] = specials[i / 11 % 4];  // the finite ones
    if (row % 5 == 4) at[i] = specials[i / 11 % std::size(specials)];
  }
  const size_t Kr = static_cast<size_t>(s.K > 0 ? s.K : 1);
  auto b = random_buffer<uint16_t>(rng, Kr * static_cast<size_t>(ldb));
  auto c0 = random_buffer<float>(rng, static_cast<size_t>(s.M) * static_cast<size_t>(ldc));
  for (size_t i = 0; i < c0.size(); i += 5) c0[i] = -0.0f;
  const auto a = untransposed(at, ldat, s, [](uint16_t v) { return v; });
  check_transposed_form(s, ldat, ldb, ldc, a, b, c0, "", true,
                        [&](const char* isa, std::vector<float>& got, bool acc) {
                          if (std::string(isa) != "host")
                            return neuron_matmul_bf16_at_variant(isa, got.data(), ldc, at.data(),
                                                                 ldat, b.data(), ldb, s.M, s.N,
                                                                 s.K, acc) == 1;
                          neuron_matmul_bf16_at(got.data(), ldc, at.data(), ldat, b.data(), ldb,
                                                s.M, s.N, s.K, acc);
                          return true;
                        });
}

}  // namespace

TEST_CASE("matmul kernel: transposed A (bf16) bit-exact against the rule") {
  uint32_t seed = 7000;
  for (const Shape& s : kShapes)
    for (int64_t pad : {0, 9}) check_transposed_bf16(s, pad, seed++);
  // Flash attention's p @ v: a [128, 128] tile of SBUF rows (partitions 64 KiB apart) times
  // V rows [128, 64]; and a full moving tile.
  check_transposed_bf16({128, 64, 128}, 32768 - 128, 8000);
  check_transposed_bf16({128, 512, 128}, 0, 8001);
  // Whole 32-row blocks of M and 32-column blocks of K, which AMX loads straight from at's rows:
  // over two K chunks, and over a second M chunk of 32 rows.
  check_transposed_bf16({64, 96, 256}, 5, 8002);
  check_transposed_bf16({160, 40, 96}, 0, 8003);
}
