// The AVX-512 forms of exp and of the fp32 -> bf16 rounding (builtins_avx512.hpp) against their
// scalar definitions (builtins_math.hpp, builtins.hpp), and the activation kernel's AVX-512 rows
// and the copy kernel's bf16 rows against the scalar rule. A stride through all 2^32 inputs
// plus every boundary here; all 2^32 with NEURON_TEST_EXHAUSTIVE=1 (0 mismatches when
// written). Skipped on a CPU without the ISA.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <tuple>
#include <vector>

#include "neuron/base/builtins.hpp"
#include "neuron/base/builtins_avx512.hpp"
#include "neuron/base/instr_kernels.hpp"
#include "neuron/base/matmul_kernel.hpp"

#if defined(__x86_64__)
namespace {

namespace b = neuron::builtins;
namespace m = neuron::builtins::math;
namespace x86 = neuron::builtins::avx512;
using neuron::native::NView;

// The ISA checks the kernels make (instr_kernels.cpp); a test skipped for want of one says so.
bool has_avx512() {
  if (neuron_matmul_variant_supported("avx512")) return true;
  MESSAGE("skipped: this CPU lacks AVX-512 (F, BW, DQ, VL) or FMA");
  return false;
}
bool has_avx512bf16() {
  if (has_avx512() && __builtin_cpu_supports("avx512bf16")) return true;
  MESSAGE("skipped: this CPU lacks AVX512-BF16");
  return false;
}
bool exhaustive() {
  const char* e = std::getenv("NEURON_TEST_EXHAUSTIVE");
  return e && std::strcmp(e, "1") == 0;
}

// The bit patterns to check: every `stride`-th of all 2^32 (all of them when exhaustive), then
// every pattern of the ranges around exp's and bf16's boundaries, then the special values.
template <class F>
void for_patterns(uint64_t stride, F&& f) {
  const uint64_t step = exhaustive() ? 1 : stride;
  for (uint64_t u = 0; u <= 0xffffffffu; u += step) f(static_cast<uint32_t>(u));
  if (exhaustive()) return;
  auto range = [&](float lo, float hi) {  // same sign, |lo| <= |hi|
    for (uint32_t u = m::bits(lo); u <= m::bits(hi); ++u) f(u);
  };
  range(-80.0f, -110.0f);  // subnormal results, the -104 select
  range(88.0f, 90.0f);     // overflow to inf, the 89 clamp
  for (uint32_t u = 0; u < 0x10000u; ++u) f(u), f(u | 0x80000000u);  // zeros, subnormals
  for (uint32_t u : {0x7f800000u, 0xff800000u, 0x7f800001u, 0x7fc00000u, 0x7fffffffu, 0xffc12345u,
                     0xff800001u, 0x7f7fffffu, 0xff7fffffu, 0x00800000u, 0x807fffffu})
    f(u);
}

NEURON_AVX512 void exp16_of(const float* in, float* out) {
  _mm512_storeu_ps(out, x86::exp16(_mm512_loadu_ps(in)));
}
NEURON_AVX512 void rule16_of(const float* in, uint16_t* out) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), x86::bf16_rule16(_mm512_loadu_ps(in)));
}
NEURON_AVX512BF16 void bf16x32_of(const float* in, uint16_t* out) {
  x86::store_bf16x32(out, _mm512_loadu_ps(in), _mm512_loadu_ps(in + 16));
}

// Feeds the patterns to `vec` 16 (or 32) at a time, in order, and compares each lane with
// `ref` of its input. Returns the number of mismatches (the first few reported).
template <int L, class T, class Vec, class Ref>
int64_t compare_lanes(uint64_t stride, Vec&& vec, Ref&& ref) {
  float in[L];
  T out[L];
  int n = 0;
  int64_t bad = 0, checked = 0;
  auto flush = [&] {
    for (int j = n; j < L; ++j) in[j] = 1.0f;
    vec(in, out);
    for (int j = 0; j < n; ++j) {
      ++checked;
      const T want = ref(in[j]);
      uint32_t got = 0, expected = 0;
      std::memcpy(&got, &out[j], sizeof(T));
      std::memcpy(&expected, &want, sizeof(T));
      if (got != expected && bad++ < 5) {
        char msg[80];
        std::snprintf(msg, sizeof msg, "input 0x%08x: vector 0x%x, scalar 0x%x", m::bits(in[j]),
                      got, expected);
        FAIL_CHECK(msg);
      }
    }
    n = 0;
  };
  for_patterns(stride, [&](uint32_t u) {
    in[n++] = m::from_bits(u);
    if (n == L) flush();
  });
  if (n) flush();
  CHECK(checked > 20000000);
  return bad;
}

}  // namespace

TEST_CASE("AVX-512 exp16 gives math::exp's bits") {
  if (!has_avx512()) return;
  const int64_t bad = compare_lanes<16, float>(
      97, [](const float* in, float* out) { exp16_of(in, out); },
      [](float x) { return m::exp(x); });
  CHECK(bad == 0);
}

TEST_CASE("AVX-512 bf16_rule16 gives f32_to_bf16's codes") {
  if (!has_avx512()) return;
  CHECK(compare_lanes<16, uint16_t>(
            61, [](const float* in, uint16_t* out) { rule16_of(in, out); },
            [](float x) { return b::f32_to_bf16(x); }) == 0);
}

TEST_CASE("vcvtne2ps2bf16 with its special-value fallback gives f32_to_bf16's codes") {
  if (!has_avx512bf16()) return;
  // Consecutive patterns: most groups of 32 are all normal (the instruction), the subnormal and
  // NaN ranges whole groups of the fallback.
  CHECK(compare_lanes<32, uint16_t>(
            61, [](const float* in, uint16_t* out) { bf16x32_of(in, out); },
            [](float x) { return b::f32_to_bf16(x); }) == 0);
  // Mixed groups: one subnormal, NaN or infinity among normal values, in every position.
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  int64_t bad = 0;
  for (float special :
       {m::from_bits(0x00000001u), m::from_bits(0x807fffffu), m::from_bits(0x7f800001u),
        m::from_bits(0xffc12345u), INFINITY, -INFINITY, 0.0f, -0.0f})
    for (int pos = 0; pos < 32; ++pos) {
      float in[32];
      uint16_t out[32];
      for (float& x : in) x = u(rng);
      in[pos] = special;
      bf16x32_of(in, out);
      for (int j = 0; j < 32; ++j) bad += out[j] != b::f32_to_bf16(in[j]);
    }
  CHECK(bad == 0);
}

namespace {

NView view(void* base, std::initializer_list<int64_t> size, std::initializer_list<int64_t> stride) {
  NView v{};
  v.base = static_cast<char*>(base);
  v.flags = nullptr;
  int i = 0;
  for (int64_t s : size) v.size[i++] = s;
  i = 0;
  for (int64_t s : stride) v.stride[i++] = s;
  return v;
}

// activation(d <- exp(s * scale + bias)) with a row sum, by the library's kernel, against the
// scalar rule computed here: each value math::exp(x * scale + bias) (two roundings), stored by
// f32_to_bf16 or as is, and summed in the lane-blocked order of builtins.hpp.
void check_exp_activation(neuron::DType ddt, int64_t P, int64_t R, int64_t N, bool reduce,
                          bool strided_dst) {
  const int64_t esz = neuron::dtype_bytes(ddt), dstep = strided_dst ? 2 : 1;
  std::mt19937 rng(static_cast<unsigned>(P * 1000 + R * 100 + N));
  std::normal_distribution<float> normal(0.0f, 6.0f);
  std::vector<float> src(P * R * N), bias(P), scale(P), red(P, -1.0f);
  for (float& x : src) x = normal(rng);
  // Special values (NaN, +-inf, huge and subnormal) at many positions of the rows of every
  // third partition; the other rows' sums stay finite, so their order shows.
  const float specials[] = {m::from_bits(0x7fc00001u), -INFINITY, INFINITY, -1e30f,
                            m::from_bits(0x00000005u), -200.0f,   95.0f};
  for (size_t i = 0; i < src.size(); i += 37)
    if (i / (R * N) % 3 == 2) src[i] = specials[(i / 37) % 7];
  for (int64_t p = 0; p < P; ++p) {
    bias[p] = normal(rng);
    scale[p] = 0.125f * static_cast<float>(p % 5 + 1);
  }
  std::vector<char> dst(static_cast<size_t>(P * R * N * dstep * esz), 0);
  const NView d =
      view(dst.data(), {P, 1, 1, R, N}, {R * N * dstep * esz, 0, 0, N * dstep * esz, dstep * esz});
  const NView s = view(src.data(), {P, 1, 1, R, N}, {R * N * 4, 0, 0, N * 4, 4});
  const NView bv = view(bias.data(), {P, 1, 1, 1, 1}, {4, 0, 0, 0, 0});
  const NView sv = view(scale.data(), {P, 1, 1, 1, 1}, {4, 0, 0, 0, 0});
  const NView rv = view(red.data(), {P, 1, 1, 1, 1}, {4, 0, 0, 0, 0});
  neuron_k_activation(
      &d, &s, &bv, &sv, reduce ? &rv : nullptr, int(ddt), int(neuron::DType::float32),
      int(neuron::DType::float32), int(neuron::DType::float32), int(neuron::DType::float32),
      int(neuron::ActFunc::exp), int(neuron::AluOp::add), 1.0, neuron::native::kSameShape);
  int64_t bad = 0;
  for (int64_t p = 0; p < P; ++p) {
    float lane[b::kReduceLanes];
    b::reduce_init(lane, neuron::AluOp::add);
    for (int64_t k = 0; k < R * N; ++k) {
      float t = src[p * R * N + k] * scale[p];
      t = t + bias[p];
      const float v = m::exp(t);
      lane[k % b::kReduceLanes] = lane[k % b::kReduceLanes] + v;
      const char* got = dst.data() + (p * R * N + k) * dstep * esz;
      if (ddt == neuron::DType::bfloat16) {
        uint16_t g;
        std::memcpy(&g, got, 2);
        bad += g != b::f32_to_bf16(v);
      } else {
        uint32_t g;
        std::memcpy(&g, got, 4);
        bad += g != m::bits(v);
      }
    }
    if (reduce) bad += m::bits(red[p]) != m::bits(b::reduce_finish(lane, neuron::AluOp::add));
  }
  CHECK_MESSAGE(bad == 0, "dtype " << int(ddt) << " P=" << P << " R=" << R << " N=" << N
                                   << " reduce=" << reduce << " strided=" << strided_dst);
}

}  // namespace

TEST_CASE("the activation kernel's AVX-512 exp rows give the scalar rule's bits") {
  // Taken here where the CPU has the ISA (else these check the scalar path, which must agree
  // all the same): rows of 512 (flash attention's p), a tail past the last group of 32, rows
  // under 32, rows starting off a multiple of 16 in the reduction (R > 1, N = 20: the scalar
  // path), and a strided destination (the scalar path).
  for (neuron::DType ddt : {neuron::DType::bfloat16, neuron::DType::float32})
    for (bool reduce : {true, false}) {
      check_exp_activation(ddt, 128, 1, 512, reduce, false);
      check_exp_activation(ddt, 5, 1, 77, reduce, false);
      check_exp_activation(ddt, 3, 1, 31, reduce, false);
      check_exp_activation(ddt, 4, 3, 20, reduce, false);
      check_exp_activation(ddt, 4, 2, 64, reduce, false);
      check_exp_activation(ddt, 2, 1, 96, reduce, true);
    }
}
TEST_CASE("the copy kernel's AVX512-BF16 rows give f32_to_bf16's codes") {
  // fp32 rows into bf16 (a PSUM evacuation): rows of 512, tails, short rows, and strided
  // destinations (the scalar path), with special values at many positions of some rows.
  for (auto [P, N, dstep] :
       {std::tuple<int64_t, int64_t, int64_t>{128, 512, 1}, {5, 77, 1}, {3, 31, 1}, {2, 96, 2}}) {
    std::mt19937 rng(static_cast<unsigned>(P + N));
    std::normal_distribution<float> normal(0.0f, 100.0f);
    std::vector<float> src(P * N);
    for (float& x : src) x = normal(rng);
    const float specials[] = {
        m::from_bits(0x7fc00001u), m::from_bits(0xff812345u), -INFINITY, INFINITY,
        m::from_bits(0x00000005u), m::from_bits(0x807fffffu), 3e38f,     -0.0f};
    for (size_t i = 0; i < src.size(); i += 29)
      if (i / N % 2 == 1) src[i] = specials[(i / 29) % 8];
    std::vector<uint16_t> dst(P * N * dstep, 0);
    const NView d = view(dst.data(), {P, 1, 1, 1, N}, {N * dstep * 2, 0, 0, 0, dstep * 2});
    const NView s = view(src.data(), {P, 1, 1, 1, N}, {N * 4, 0, 0, 0, 4});
    neuron_k_copy(&d, &s, int(neuron::DType::bfloat16), int(neuron::DType::float32),
                  neuron::native::kSameShape);
    int64_t bad = 0;
    for (int64_t i = 0; i < P * N; ++i) bad += dst[i * dstep] != b::f32_to_bf16(src[i]);
    CHECK_MESSAGE(bad == 0, "P=" << P << " N=" << N << " dstep=" << dstep);
  }
}
#endif
