// Builtins: dtype conversions against hand-derived bit patterns and enumeration references; ALU and
// activations against <cmath>.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <ios>
#include <limits>
#include <random>
#include <vector>

#include "neuron/base/builtins.hpp"

using namespace neuron;
namespace b = neuron::builtins;

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

// Independent decoder: value of a code of a 1-E-M IEEE-style format, in double.
double decode_ref(uint32_t code, int E, int M) {
  const int bias = (1 << (E - 1)) - 1;
  const uint32_t s = (code >> (E + M)) & 1, e = (code >> M) & ((1u << E) - 1),
                 m = code & ((1u << M) - 1);
  double v;
  if (e == (1u << E) - 1)
    v = m ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  else if (e == 0)
    v = std::ldexp(static_cast<double>(m), 1 - bias - M);
  else
    v = std::ldexp(1.0 + static_cast<double>(m) / (1 << M), static_cast<int>(e) - bias);
  return s ? -v : v;
}

// Reference rounding: nearest of all finite non-negative codes (plus a virtual code one step
// past the largest finite value, which stands for inf), ties to the even code.
struct RoundRef {
  int E, M;
  std::vector<double> values;  // index = code, non-negative finite codes, then the virtual one
  RoundRef(int e, int m) : E(e), M(m) {
    uint32_t inf_code = ((1u << E) - 1) << M;
    for (uint32_t c = 0; c < inf_code; ++c) values.push_back(decode_ref(c, E, M));
    values.push_back(std::ldexp(1.0, (1 << (E - 1))));  // 2^(emax + 1)
  }
  uint32_t round(float x) const {
    const uint32_t sign = (bits_of(x) >> 31) << (E + M);
    const uint32_t inf_code = ((1u << E) - 1) << M;
    if (std::isnan(x)) return 0xffffffffu;
    double a = std::fabs(static_cast<double>(x));
    if (std::isinf(a)) return sign | inf_code;
    auto it = std::lower_bound(values.begin(), values.end(), a);
    uint32_t code;
    if (it == values.end()) {
      code = inf_code;
    } else if (*it == a || it == values.begin()) {
      code = static_cast<uint32_t>(it - values.begin());
    } else {
      uint32_t hi = static_cast<uint32_t>(it - values.begin()), lo = hi - 1;
      double dl = a - values[lo], dh = values[hi] - a;
      code = dl < dh ? lo : dh < dl ? hi : ((lo & 1) ? hi : lo);
    }
    return sign | code;
  }
};

template <typename F>
void check_rounding(const RoundRef& ref, F convert, int n, uint32_t seed) {
  std::mt19937 rng(seed);
  const int bias = (1 << (ref.E - 1)) - 1;
  std::uniform_int_distribution<int> exp_d(1 - bias - ref.M - 3, bias + 3);
  std::uniform_int_distribution<uint32_t> mant_d(0, 0x7fffff), any(0, 0xffffffffu);
  std::uniform_int_distribution<int> coin(0, 7);
  int mismatches = 0;
  for (int i = 0; i < n; ++i) {
    float x;
    int c = coin(rng);
    if (c == 0) {
      x = f_of_bits(any(rng));  // arbitrary patterns, including NaN and huge / tiny values
    } else {
      // In or near the format's range; sometimes exactly on a tie between two codes.
      int e = exp_d(rng);
      uint32_t m = mant_d(rng);
      if (c == 1) m = (m >> (23 - ref.M)) << (23 - ref.M) | (1u << (22 - ref.M));
      x = std::ldexp(1.0f + static_cast<float>(m) / 8388608.0f, e);
      if (rng() & 1) x = -x;
    }
    uint32_t got = convert(x), want = ref.round(x);
    if (want == 0xffffffffu) {
      CHECK(std::isnan(decode_ref(got, ref.E, ref.M)));
      continue;
    }
    if (got != want && ++mismatches < 10)
      FAIL_CHECK("x=" << x << " (bits 0x" << std::hex << bits_of(x) << ") got 0x" << got
                      << " want 0x" << want << std::dec);
  }
  CHECK(mismatches == 0);
}

}  // namespace

TEST_CASE("bf16 conversions match hand-derived bit patterns") {
  CHECK(b::f32_to_bf16(1.0f) == 0x3F80);
  CHECK(b::f32_to_bf16(-2.0f) == 0xC000);
  CHECK(b::f32_to_bf16(1.0f + std::ldexp(1.0f, -8)) == 0x3F80);      // tie -> even (down)
  CHECK(b::f32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)) == 0x3F82);  // tie -> even (up)
  CHECK(b::f32_to_bf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)) == 0x3F81);
  CHECK(b::f32_to_bf16(std::numeric_limits<float>::infinity()) == 0x7F80);
  CHECK(b::f32_to_bf16(std::numeric_limits<float>::max()) == 0x7F80);  // rounds past max
  CHECK(b::f32_to_bf16(f_of_bits(0x7F7F7FFF)) == 0x7F7F);              // max bf16 stays
  CHECK(b::f32_to_bf16(f_of_bits(0x00010000)) == 0x0001);              // subnormal
  CHECK(b::f32_to_bf16(f_of_bits(0x00008000)) == 0x0000);              // tie -> even 0
  CHECK(b::f32_to_bf16(f_of_bits(0x80018000)) == 0x8002);              // tie -> even
  CHECK(std::isnan(b::bf16_to_f32(b::f32_to_bf16(std::nanf("")))));
  CHECK(std::isnan(b::bf16_to_f32(b::f32_to_bf16(f_of_bits(0x7F800001)))));  // low payload NaN
  CHECK(b::bf16_to_f32(0x3F80) == 1.0f);
  CHECK(b::bf16_to_f32(0xC0A0) == -5.0f);
}

TEST_CASE("the bit-trick bf16 rounding equals the general narrow-float rounding") {
  // Exhaustive over all 2^32 inputs when written (0 mismatches); here every 251st pattern,
  // which walks every exponent, sign and NaN class, plus the signed NaNs.
  int64_t bad = 0;
  for (uint64_t i = 0; i < (1ull << 32); i += 251) {
    const float f = f_of_bits(static_cast<uint32_t>(i));
    bad += b::f32_to_bf16(f) != b::f32_to_narrow<8, 7>(f);
  }
  CHECK(bad == 0);
  CHECK(b::f32_to_bf16(f_of_bits(0xFFC12345)) == 0xFFC0);
  CHECK(b::f32_to_bf16(f_of_bits(0x7F812345)) == 0x7FC0);
}

TEST_CASE("tf32 rounding is the 1-8-10 narrow-float rounding held in an fp32") {
  // f32_to_narrow<8, 10> gives the 19-bit code; tf32 keeps it in the fp32's top bits. Every
  // 251st pattern (all exponents, signs, NaN classes), NaN compared as a class.
  int64_t bad = 0;
  for (uint64_t i = 0; i < (1ull << 32); i += 251) {
    const float f = f_of_bits(static_cast<uint32_t>(i));
    const uint32_t got = bits_of(b::f32_to_tf32(f));
    const uint32_t code = b::f32_to_narrow<8, 10>(f);
    if (std::isnan(f)) {
      bad += !std::isnan(b::f32_to_tf32(f)) || (got >> 31) != (bits_of(f) >> 31);
      continue;
    }
    bad += got != (code << 13) || (got & 0x1fffu) != 0;
  }
  CHECK(bad == 0);
  CHECK(b::f32_to_tf32(1.0f + std::ldexp(1.0f, -11)) == 1.0f);            // tie -> even (down)
  CHECK(b::f32_to_tf32(1.0f + 3 * std::ldexp(1.0f, -11)) == 1.0f + std::ldexp(1.0f, -9));
  CHECK(std::isinf(b::f32_to_tf32(std::numeric_limits<float>::max())));   // rounds past max
  float stored = 0;
  b::store_f32(&stored, neuron::DType::tfloat32, 1.0f + std::ldexp(1.0f, -12));
  CHECK(stored == 1.0f);
  CHECK(b::load_f32(&stored, neuron::DType::tfloat32) == 1.0f);
}

TEST_CASE("fp16 conversions match hand-derived bit patterns") {
  CHECK(b::f32_to_fp16(1.0f) == 0x3C00);
  CHECK(b::f32_to_fp16(65504.0f) == 0x7BFF);
  CHECK(b::f32_to_fp16(65519.0f) == 0x7BFF);
  CHECK(b::f32_to_fp16(65520.0f) == 0x7C00);  // halfway to 2^16: ties to even -> inf
  CHECK(b::f32_to_fp16(-1e6f) == 0xFC00);
  CHECK(b::f32_to_fp16(std::ldexp(1.0f, -24)) == 0x0001);  // smallest subnormal
  CHECK(b::f32_to_fp16(std::ldexp(1.0f, -25)) == 0x0000);  // tie -> even 0
  CHECK(b::f32_to_fp16(std::ldexp(1.5f, -25)) == 0x0001);
  CHECK(b::f32_to_fp16(std::ldexp(3.0f, -25)) == 0x0002);  // 1.5 ulp tie -> even 2
  CHECK(b::f32_to_fp16(std::ldexp(1.0f, -14)) == 0x0400);  // smallest normal
  CHECK(b::f32_to_fp16(1.0f + std::ldexp(1.0f, -11)) == 0x3C00);
  CHECK(b::f32_to_fp16(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3C02);
  CHECK(b::fp16_to_f32(0x0001) == std::ldexp(1.0f, -24));
  CHECK(b::fp16_to_f32(0xC000) == -2.0f);
  CHECK(b::fp16_to_f32(0x7BFF) == 65504.0f);
  CHECK(std::isinf(b::fp16_to_f32(0x7C00)));
  CHECK(std::isnan(b::fp16_to_f32(b::f32_to_fp16(std::nanf("")))));
}

TEST_CASE("fp8 e4m3 and e5m2 conversions match hand-derived bit patterns") {
  CHECK(b::f32_to_fp8e4m3(1.0f) == 0x38);    // 0 0111 000
  CHECK(b::f32_to_fp8e4m3(240.0f) == 0x77);  // 0 1110 111, largest finite
  CHECK(b::f32_to_fp8e4m3(247.0f) == 0x77);
  CHECK(b::f32_to_fp8e4m3(248.0f) == 0x78);  // halfway to 256: ties to even -> inf
  CHECK(b::f32_to_fp8e4m3(256.0f) == 0x78);
  CHECK(b::f32_to_fp8e4m3(-256.0f) == 0xF8);
  CHECK(b::f32_to_fp8e4m3(std::ldexp(1.0f, -9)) == 0x01);   // smallest subnormal
  CHECK(b::f32_to_fp8e4m3(std::ldexp(1.0f, -10)) == 0x00);  // tie -> 0
  CHECK(b::f32_to_fp8e4m3(std::ldexp(3.0f, -10)) == 0x02);  // tie -> even
  CHECK(b::f32_to_fp8e4m3(std::ldexp(1.0f, -6)) == 0x08);   // smallest normal
  CHECK(b::fp8e4m3_to_f32(0x77) == 240.0f);
  CHECK(b::fp8e4m3_to_f32(0x07) == 7.0f * std::ldexp(1.0f, -9));
  CHECK(b::fp8e4m3_to_f32(0xB8) == -1.0f);
  CHECK(std::isinf(b::fp8e4m3_to_f32(0x78)));
  CHECK(std::isnan(b::fp8e4m3_to_f32(b::f32_to_fp8e4m3(std::nanf("")))));

  CHECK(b::f32_to_fp8e5m2(1.0f) == 0x3C);      // 0 01111 00
  CHECK(b::f32_to_fp8e5m2(57344.0f) == 0x7B);  // 0 11110 11, largest finite
  CHECK(b::f32_to_fp8e5m2(61439.0f) == 0x7B);
  CHECK(b::f32_to_fp8e5m2(61440.0f) == 0x7C);  // tie -> inf
  CHECK(b::f32_to_fp8e5m2(1.125f) == 0x3C);    // tie between 1.0 and 1.25 -> even
  CHECK(b::f32_to_fp8e5m2(1.375f) == 0x3E);    // tie between 1.25 and 1.5 -> even 1.5
  CHECK(b::f32_to_fp8e5m2(std::ldexp(1.0f, -16)) == 0x01);
  CHECK(b::f32_to_fp8e5m2(-std::ldexp(1.0f, -17)) == 0x80);  // tie -> -0
  CHECK(b::fp8e5m2_to_f32(0x7B) == 57344.0f);
  CHECK(b::fp8e5m2_to_f32(0x03) == 3.0f * std::ldexp(1.0f, -16));
  CHECK(std::isnan(b::fp8e5m2_to_f32(0x7F)));
}

TEST_CASE("narrow-float rounding equals nearest-code enumeration with ties to even") {
  check_rounding(
      RoundRef(8, 7), [](float x) { return uint32_t(b::f32_to_bf16(x)); }, 200000, 1);
  check_rounding(
      RoundRef(5, 10), [](float x) { return uint32_t(b::f32_to_fp16(x)); }, 200000, 2);
  check_rounding(
      RoundRef(4, 3), [](float x) { return uint32_t(b::f32_to_fp8e4m3(x)); }, 100000, 3);
  check_rounding(
      RoundRef(5, 2), [](float x) { return uint32_t(b::f32_to_fp8e5m2(x)); }, 100000, 4);
}

// The value and the sign (-0.0 included); a NaN must come out a NaN with the code's sign, and
// quiet where the format is narrower than bf16 (bf16 is the top half of its fp32, payload and
// all).
void check_decode(float got, double want, uint32_t code, bool quiet = true) {
  INFO("code ", code, ": got ", got, ", want ", want);
  CHECK(std::signbit(got) == std::signbit(want));
  if (std::isnan(want))
    CHECK((std::isnan(got) && (!quiet || (bits_of(got) & 0x400000u) != 0)));
  else
    CHECK(static_cast<double>(got) == want);
}

TEST_CASE("narrow-float decoding equals the format formula for every code") {
  for (uint32_t c = 0; c < 65536; ++c) {
    check_decode(b::bf16_to_f32(static_cast<uint16_t>(c)), decode_ref(c, 8, 7), c, false);
    check_decode(b::fp16_to_f32(static_cast<uint16_t>(c)), decode_ref(c, 5, 10), c);
    if (c < 256) {
      check_decode(b::fp8e4m3_to_f32(static_cast<uint8_t>(c)), decode_ref(c, 4, 3), c);
      check_decode(b::fp8e5m2_to_f32(static_cast<uint8_t>(c)), decode_ref(c, 5, 2), c);
      // e4m3fn: no inf; exponent 1111 is normal, S.1111.111 is NaN.
      const bool nan = (c & 0x7f) == 0x7f;
      const double fn =
          nan ? std::copysign(std::numeric_limits<double>::quiet_NaN(), (c & 0x80) ? -1.0 : 1.0)
          : (c & 0x78) == 0x78 ? ((c & 0x80) ? -1.0 : 1.0) * std::ldexp(1.0 + (c & 7) / 8.0, 8)
                               : decode_ref(c, 4, 3);
      check_decode(b::fp8e4m3fn_to_f32(static_cast<uint8_t>(c)), fn, c);
    }
  }
}

TEST_CASE("integer and bool stores round to even and saturate") {
  auto st = [](DType t, float v) {
    uint8_t buf[4] = {};
    b::store_f32(buf, t, v);
    return b::load_int(buf, t);
  };
  CHECK(st(DType::int8, 2.5f) == 2);
  CHECK(st(DType::int8, 3.5f) == 4);
  CHECK(st(DType::int8, -2.5f) == -2);
  CHECK(st(DType::int8, 127.5f) == 127);
  CHECK(st(DType::int8, 300.0f) == 127);
  CHECK(st(DType::int8, -300.0f) == -128);
  CHECK(st(DType::int8, std::nanf("")) == 0);
  CHECK(st(DType::uint8, -1.0f) == 0);
  CHECK(st(DType::uint8, 255.5f) == 255);
  CHECK(st(DType::uint8, 254.5f) == 254);
  CHECK(st(DType::int16, 40000.0f) == 32767);
  CHECK(st(DType::uint16, 65535.4f) == 65535);
  CHECK(st(DType::int32, 3e9f) == 2147483647);
  CHECK(st(DType::int32, -3e9f) == -2147483648LL);
  CHECK(st(DType::int32, -std::numeric_limits<float>::infinity()) == -2147483648LL);
  CHECK(st(DType::uint32, 4294967296.0f) == 4294967295LL);
  CHECK(st(DType::uint32, 16777216.0f) == 16777216);
  CHECK(st(DType::bool_, 0.3f) == 1);
  CHECK(st(DType::bool_, -2.0f) == 1);
  CHECK(st(DType::bool_, 0.0f) == 0);
  CHECK(st(DType::bool_, std::nanf("")) == 0);
  uint8_t buf[4];
  b::store_f64(buf, DType::int32, 2147483647.0);
  CHECK(b::load_int(buf, DType::int32) == 2147483647);
  b::store_f64(buf, DType::int32, 16777217.0);  // not representable in fp32, exact here
  CHECK(b::load_int(buf, DType::int32) == 16777217);
  b::store_f32(buf, DType::int8, -5.0f);
  CHECK(b::load_f32(buf, DType::int8) == -5.0f);
  CHECK(buf[0] == 0xFB);
}

TEST_CASE("ALU ops agree with <cmath> evaluated in double") {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> d(-50.0f, 50.0f);
  auto close = [](double got, double want) {
    return std::fabs(got - want) <= 1e-6 * std::fabs(want) + 1e-30;
  };
  for (int i = 0; i < 2000; ++i) {
    float x = d(rng), y = d(rng);
    if (i % 10 == 0) y = x;  // exercise equality
    double X = x, Y = y;
    CHECK(b::alu(AluOp::bypass, x, y) == x);
    CHECK(b::alu(AluOp::add, x, y) == static_cast<float>(X + Y));
    CHECK(b::alu(AluOp::subtract, x, y) == static_cast<float>(X - Y));
    CHECK(b::alu(AluOp::multiply, x, y) == static_cast<float>(X * Y));
    CHECK(b::alu(AluOp::divide, x, y) == static_cast<float>(X / Y));
    CHECK(b::alu(AluOp::maximum, x, y) == static_cast<float>(std::max(X, Y)));
    CHECK(b::alu(AluOp::minimum, x, y) == static_cast<float>(std::min(X, Y)));
    CHECK(close(b::alu(AluOp::power, std::fabs(x), y / 10),
                std::pow(std::fabs(X), static_cast<double>(y / 10))));
    CHECK(close(b::alu(AluOp::mod, x, y), X - std::floor(X / Y) * Y));
    CHECK(b::alu(AluOp::equal, x, y) == (X == Y ? 1.0f : 0.0f));
    CHECK(b::alu(AluOp::not_equal, x, y) == (X != Y ? 1.0f : 0.0f));
    CHECK(b::alu(AluOp::greater, x, y) == (X > Y ? 1.0f : 0.0f));
    CHECK(b::alu(AluOp::greater_equal, x, y) == (X >= Y ? 1.0f : 0.0f));
    CHECK(b::alu(AluOp::less, x, y) == (X < Y ? 1.0f : 0.0f));
    CHECK(b::alu(AluOp::less_equal, x, y) == (X <= Y ? 1.0f : 0.0f));
    CHECK(b::alu(AluOp::abs, x, y) == static_cast<float>(std::fabs(X)));
    CHECK(close(b::alu(AluOp::rsqrt, std::fabs(x), y), 1.0 / std::sqrt(std::fabs(X))));
    CHECK(b::alu(AluOp::reciprocal, x, y) == static_cast<float>(1.0 / X));
  }
  CHECK(b::alu(AluOp::mod, -7.0f, 3.0f) == 2.0f);
  CHECK(b::alu(AluOp::mod, 7.0f, -3.0f) == -2.0f);
  CHECK(b::alu(AluOp::logical_and, 2.0f, 0.0f) == 0.0f);
  CHECK(b::alu(AluOp::logical_and, 2.0f, -1.0f) == 1.0f);
  CHECK(b::alu(AluOp::logical_or, 0.0f, 0.0f) == 0.0f);
  CHECK(b::alu(AluOp::logical_or, 0.0f, 3.0f) == 1.0f);
  CHECK(b::alu(AluOp::logical_xor, 1.0f, 3.0f) == 0.0f);
  CHECK(b::alu(AluOp::logical_xor, 0.0f, 3.0f) == 1.0f);
  CHECK(b::alu(AluOp::logical_not, 0.0f, 9.0f) == 1.0f);
  CHECK(b::alu(AluOp::logical_not, 0.5f, 9.0f) == 0.0f);
  CHECK(b::alu(AluOp::bitwise_and, 12.0f, 10.0f) == 8.0f);
  CHECK(b::alu(AluOp::bitwise_or, 12.0f, 10.0f) == 14.0f);
  CHECK(b::alu(AluOp::bitwise_xor, 12.0f, 10.0f) == 6.0f);
  CHECK(b::alu(AluOp::left_shift, 3.0f, 4.0f) == 48.0f);
  CHECK(b::alu(AluOp::right_shift, 48.0f, 4.0f) == 3.0f);
  CHECK(b::alu_bits(AluOp::right_shift, -1, 28) == 15);  // logical on 32 bits
  CHECK(b::alu_bits(AluOp::left_shift, 1, 31) == -2147483648LL);
  CHECK(b::alu_bits(AluOp::bitwise_and, -1, 0x1234) == 0x1234);
  CHECK(b::reduce_identity(AluOp::add) == 0.0f);
  CHECK(b::reduce_identity(AluOp::multiply) == 1.0f);
  CHECK(b::reduce_identity(AluOp::maximum) == -std::numeric_limits<float>::infinity());
  CHECK(b::reduce_identity(AluOp::minimum) == std::numeric_limits<float>::infinity());
}

// The documented error bounds (docs/numerics.md, measured by tools/neuron_ulp.cpp over dense
// samples of all floats) hold on a sample of every binade and a fine grid over [-20, 20]:
// |ours - ref| <= bound * ulp(float(ref)) against double-precision <cmath>, NaN where it is
// NaN, and the same infinity where the rounded reference is infinite.
TEST_CASE("activation functions stay within their documented ulp bounds") {
  const double kPi = 3.14159265358979323846;
  auto sig = [](double x) { return 1.0 / (1.0 + std::exp(-x)); };
  const std::vector<std::pair<ActFunc, double>> bounds = {
      {ActFunc::exp, 1.06},      {ActFunc::log, 1.0},      {ActFunc::tanh, 1.55},
      {ActFunc::sigmoid, 1.55},  {ActFunc::silu, 1.7},     {ActFunc::gelu, 1.8},
      {ActFunc::gelu_apprx_tanh, 1.8}, {ActFunc::softplus, 1.65}, {ActFunc::erf, 1.0},
      {ActFunc::sin, 0.501},     {ActFunc::cos, 0.501},    {ActFunc::rsqrt, 0.501},
      {ActFunc::sqrt, 0.5},      {ActFunc::reciprocal, 0.5},   {ActFunc::tan, 0.501},
      {ActFunc::arctan, 0.501},  {ActFunc::floor, 0.0},        {ActFunc::ceil, 0.0},
      {ActFunc::trunc, 0.0},     {ActFunc::gelu_dx, 0.51},      {ActFunc::gelu_apprx_sigmoid, 0.51},
      {ActFunc::gelu_apprx_sigmoid_dx, 0.51}, {ActFunc::silu_dx, 0.51}, {ActFunc::mish, 0.51},
      {ActFunc::erf_dx, 0.51}};
  auto silu_dx = [&](double x) { return sig(x) + x * sig(x) * sig(-x); };
  // The derivatives and gated forms are defined by their limits at +-inf.
  auto limit = [](double x, double neg, double pos, double v) {
    return x == -INFINITY ? neg : x == INFINITY ? pos : v;
  };
  auto reference = [&](ActFunc f, double x) {
    switch (f) {
      case ActFunc::exp: return std::exp(x);
      case ActFunc::log: return std::log(x);
      case ActFunc::tanh: return std::tanh(x);
      case ActFunc::sigmoid: return sig(x);
      case ActFunc::silu: return x * sig(x);
      case ActFunc::gelu: return 0.5 * x * std::erfc(-x / std::sqrt(2.0));
      case ActFunc::gelu_apprx_tanh:
        return x * sig(2.0 * std::sqrt(2.0 / kPi) * (x + 0.044715 * x * x * x));
      case ActFunc::softplus:
        return x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
      case ActFunc::erf: return std::erf(x);
      case ActFunc::sin: return std::sin(x);
      case ActFunc::cos: return std::cos(x);
      case ActFunc::rsqrt: return 1.0 / std::sqrt(x);
      case ActFunc::sqrt: return std::sqrt(x);
      case ActFunc::reciprocal: return 1.0 / x;
      case ActFunc::tan: return std::tan(x);
      case ActFunc::arctan: return std::atan(x);
      case ActFunc::floor: return std::floor(x);
      case ActFunc::ceil: return std::ceil(x);
      case ActFunc::trunc: return std::trunc(x);
      case ActFunc::gelu_dx:
        return limit(x, 0, 1,
                     0.5 * std::erfc(-x / std::sqrt(2.0)) +
                         x * std::exp(-0.5 * x * x) / std::sqrt(2.0 * kPi));
      case ActFunc::gelu_apprx_sigmoid: return limit(x, 0, INFINITY, x * sig(1.702 * x));
      case ActFunc::gelu_apprx_sigmoid_dx: return limit(x, 0, 1, silu_dx(1.702 * x));
      case ActFunc::silu_dx: return limit(x, 0, 1, silu_dx(x));
      case ActFunc::mish:
        return limit(x, 0, INFINITY, x * std::tanh(std::log1p(std::exp(x))));
      case ActFunc::erf_dx: return 2.0 / std::sqrt(kPi) * std::exp(-x * x);
      default: return 0.0;
    }
  };
  std::vector<float> xs;
  for (uint64_t u = 0; u < (uint64_t(1) << 32); u += 65521) xs.push_back(f_of_bits(uint32_t(u)));
  for (int i = -100000; i <= 100000; ++i) xs.push_back(float(i) / 5000.0f);
  for (float v : {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e-45f, -1e-45f, 88.72f, 89.0f, -104.0f,
                  -120.0f, 9.1f, 14.8f, -14.8f, 0.6f, -0.6f, 1e30f, -1e30f, 3.4e38f})
    xs.push_back(v);
  for (auto [f, bound] : bounds) {
    double worst = 0;
    float worst_x = 0;
    int special_wrong = 0;
    for (float x : xs) {
      const float got = b::activate(f, x);
      const double want = reference(f, x);
      const float want_f = static_cast<float>(want);
      if (std::isnan(want) || std::isinf(want_f) || std::isnan(got) || std::isinf(got)) {
        const bool ok = std::isnan(want) ? std::isnan(got) : got == want_f;
        if (!ok && special_wrong++ == 0) FAIL_CHECK(act_func_name(f) << " at x=" << x);
        continue;
      }
      const double a = std::fabs(static_cast<double>(want_f));
      const double ulp = a < 0x1p-126 ? 0x1p-149 : std::ldexp(1.0, std::ilogb(a) - 23);
      const double e = std::fabs(static_cast<double>(got) - want) / ulp;
      if (e > worst) worst = e, worst_x = x;
    }
    INFO(act_func_name(f) << ": max " << worst << " ulp at x=" << worst_x << ", bound " << bound);
    CHECK(worst <= bound);
    CHECK(special_wrong == 0);
  }
  // Special values the rules name.
  CHECK(b::activate(ActFunc::softplus, 1000.0f) == 1000.0f);  // no overflow
  CHECK(std::isnan(b::activate(ActFunc::sign, std::nanf(""))));
  CHECK(b::activate(ActFunc::relu, std::nanf("")) == 0.0f);
  CHECK(std::isnan(b::activate(ActFunc::silu, -INFINITY)));
  CHECK(std::signbit(b::activate(ActFunc::sin, -0.0f)));
  CHECK(b::activate(ActFunc::exp, -INFINITY) == 0.0f);
  CHECK(b::activate(ActFunc::log, 0.0f) == -INFINITY);
  CHECK(b::activate(ActFunc::sigmoid, -200.0f) == 0.0f);
  CHECK(b::activate(ActFunc::exp, -103.0f) > 0.0f);  // subnormal results are produced
  CHECK(std::signbit(b::activate(ActFunc::trunc, -0.5f)));
  CHECK(b::activate(ActFunc::floor, -0.5f) == -1.0f);
  CHECK(std::signbit(b::activate(ActFunc::ceil, -0.5f)));
  CHECK(b::activate(ActFunc::floor, 1e30f) == 1e30f);
  CHECK(std::isnan(b::activate(ActFunc::floor, std::nanf(""))));
  CHECK(std::signbit(b::activate(ActFunc::tan, -0.0f)));
  CHECK(b::activate(ActFunc::silu_dx, INFINITY) == 1.0f);
  CHECK(b::activate(ActFunc::mish, -INFINITY) == 0.0f);
}

TEST_CASE("fmod truncates, mod floors") {
  CHECK(b::alu(AluOp::fmod, -7.0f, 3.0f) == -1.0f);
  CHECK(b::alu(AluOp::fmod, 7.0f, -3.0f) == 1.0f);
  CHECK(b::alu(AluOp::mod, -7.0f, 3.0f) == 2.0f);
  CHECK(b::alu(AluOp::fmod, 5.5f, 2.0f) == 1.5f);
  CHECK(std::isnan(b::alu(AluOp::fmod, 1.0f, 0.0f)));
}

// exp skips its last product below x = -104 (an underflow that costs Intel cores a microcode
// assist) and returns +0 there, and forms scale's two powers of two from n + 254: the bits must
// be those of scale(p, n) from exp_parts, for every input. All floats from -110 to -80 (the
// band where results go subnormal and then to 0) and a stride through every other bit pattern,
// specials included.
TEST_CASE("exp's skipped underflow gives the bits of the full computation") {
  namespace m = neuron::builtins::math;
  auto full = [](float x) {
    float c = x > 89.0f ? 89.0f : x;
    c = c < -104.0f ? -104.0f : c;
    float p;
    int32_t n;
    m::exp_parts(c, p, n);
    return std::isnan(x) ? x + x : m::scale(p, n);
  };
  int64_t checked = 0, differ = 0;
  auto check = [&](uint32_t u) {
    const float x = f_of_bits(u);
    ++checked;
    if (bits_of(m::exp(x)) != bits_of(full(x)) && differ++ < 5)
      FAIL_CHECK("exp(" << x << ") = " << m::exp(x) << ", full computation " << full(x));
  };
  for (uint32_t u = bits_of(80.0f) | 0x80000000u; u <= (bits_of(110.0f) | 0x80000000u); ++u)
    check(u);
  for (uint64_t u = 0; u <= 0xffffffffu; u += 4099) check(static_cast<uint32_t>(u));
  for (float x : {-INFINITY, INFINITY, -104.0f, std::nextafter(-104.0f, -200.0f),
                  std::nextafter(-104.0f, 0.0f), -103.97f, 88.72f, 89.0f})
    check(bits_of(x));
  CHECK(differ == 0);
  CHECK(checked > 4000000);
}
