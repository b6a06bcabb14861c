// Instruction semantics shared by the simulator and the native backend: dtype conversions, ALU ops,
// activations.
//
// This header is also compiled to LLVM bitcode with clang-14 for the native backend, so it
// depends only on <cmath>, <cstdint>, <cstring>, <limits> and the dtype/ops enums. Functions
// an instruction applies per element avoid libm calls (fmod and pow excepted), so the
// specialized loops vectorize.
//
// Numeric rules (mirrored in docs/numerics.md; change both together):
//  - Arithmetic: every input is converted to fp32, the op is evaluated in fp32, and the result
//    is converted once to the output dtype. Activation functions are float32 implementations
//    without libm (builtins_math.hpp) with measured error bounds (docs/numerics.md).
//  - fp32 -> bf16 / fp16 / fp8 e4m3 / fp8 e5m2: round to nearest, ties to even, on every write
//    to a narrower type. A value whose rounded magnitude exceeds the largest finite value
//    becomes +-inf (all four types have inf, IEEE style). NaN stays NaN (quiet, sign kept).
//    Subnormals of the narrow type are produced and read (no flush to zero).
//      bf16 1-8-7 bias 127, tf32 1-8-10 bias 127 (held in 32 bits), fp16 1-5-10 bias 15
//      (max 65504),
//      fp8 e4m3 1-4-3 bias 7 (max 240, like ml_dtypes.float8_e4m3),
//      fp8 e5m2 1-5-2 bias 15 (max 57344, like ml_dtypes.float8_e5m2).
//    fp8 e4m3fn (OCP "FN", like ml_dtypes.float8_e4m3fn) is e4m3 without infinities: the top
//    exponent holds normal values up to 448 and code 0x7f / 0xff is NaN; a value whose rounded
//    magnitude exceeds 448, +-inf and NaN become NaN (no saturation, as ml_dtypes).
//  - fp32 -> int8/16/32, uint8/16/32: round to nearest, ties to even, saturate to the range;
//    NaN -> 0; +-inf saturate. bool: 1 for any nonzero non-NaN value, else 0.
//  - Integer -> fp32 is the nearest fp32 (int32 above 2^24 may round).
//  - Bitwise ops and shifts act on the two's-complement bit patterns of the integer values
//    (fp32 operands are first rounded to int64 as above); right_shift is logical on 32 bits,
//    and an int8/int16 element is shifted as its own 8/16 bits (shift_operand).
//  - tensor_tensor of two integer tiles computes add, subtract, multiply, maximum, minimum and
//    the comparisons on the integers (alu_int): exact, 32-bit wrap where an operand is 32-bit
//    (NKI: on GpSimd, exact).
//  - Matmul: products accumulate into fp32 PSUM with a fused multiply-add per k in
//    increasing k: acc = fma(stationary[k,m], moving[k,n], acc), acc starting at the old PSUM
//    value (accumulate) or 0 (overwrite).
//  - Same-dtype copies (tensor_copy, dma_copy, nc_transpose) are bit-exact.
//  - Reductions (tensor_reduce, activation's reduce_res) use 16 lanes and a fixed tree
//    (reduce_init / reduce_run / reduce_finish below).
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "neuron/base/dtype.hpp"
#include "neuron/base/ops.hpp"
#include "neuron/base/builtins_math.hpp"

namespace neuron::builtins {

inline uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bits_f32(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// ---- narrow floats: E exponent bits, M mantissa bits, IEEE layout with inf and NaN ----------
// (kFinite: no infinities, the top exponent is normal and its all-ones mantissa is NaN.)

// Rounds fp32 to the narrow format (nearest, ties to even) and returns its code. Written
// with selects and no early returns, so that a loop storing a row vectorizes (clang's bitcode
// does; g++ 12 keeps fp16's sign shift scalar, so the library's copy does not for fp16).
template <int E, int M, bool kFinite = false>
inline uint32_t f32_to_narrow(float f) {
  const uint32_t u = f32_bits(f);
  const uint32_t sign = (u >> 31) << (E + M);
  const uint32_t a = u & 0x7fffffffu;
  constexpr uint32_t inf_code = ((1u << E) - 1) << M;
  constexpr uint32_t nan_code = (1u << (E + M)) - 1;  // kFinite's NaN
  constexpr int bias = (1 << (E - 1)) - 1;
  constexpr int emin = 1 - bias;
  const int e32 = static_cast<int>(a >> 23);
  const uint32_t sig = (a & 0x7fffffu) | (static_cast<uint32_t>(e32 != 0) << 23);
  const int e = (e32 > 1 ? e32 : 1) - 127;
  // Bits dropped from sig; past 25 every value is below half the smallest subnormal, and a
  // drop of 31 rounds those to 0 as well (sig < 2^24 < half), so it is clamped there.
  const int under = emin - e;
  int drop = 23 - M + (under > 0 ? under : 0);
  drop = drop < 31 ? drop : 31;
  uint32_t q = sig >> drop;
  const uint32_t rem = sig & ((1u << drop) - 1);
  const uint32_t half = 1u << (drop - 1);
  q += static_cast<uint32_t>(rem > half) | (static_cast<uint32_t>(rem == half) & q & 1u);
  // Normal: biased exponent field (e - emin + 1) plus mantissa q - 2^M; a carry out of the
  // mantissa bumps the exponent. Subnormal: q itself (q == 2^M is the smallest normal).
  uint32_t code = e >= emin ? (static_cast<uint32_t>(e - emin) << M) + q : q;
  if constexpr (kFinite) {
    code = code >= nan_code || a >= 0x7f800000u ? nan_code : code;  // too large, inf, NaN
  } else {
    code = code >= inf_code ? inf_code : code;                   // too large and inf: inf
    code = a > 0x7f800000u ? inf_code | (1u << (M - 1)) : code;  // NaN: quiet
  }
  return sign | code;
}

template <int E, int M, bool kFinite = false>
inline float narrow_to_f32(uint32_t code) {
  const uint32_t sign = (code >> (E + M)) & 1u;
  const uint32_t exp = (code >> M) & ((1u << E) - 1);
  const uint32_t mant = code & ((1u << M) - 1);
  constexpr uint32_t bias = (1u << (E - 1)) - 1;
  // A subnormal is mant * 2^(1 - bias - M): one multiply, exact in fp32 for every format here.
  constexpr float kSubnormalUlp = [] {
    float s = 1.0f;
    for (uint32_t i = 0; i + 1 < bias + M; ++i) s *= 0.5f;
    return s;
  }();
  // Masks rather than branches or selects (which g++ will not if-convert around a float
  // multiply), so that a loop widening a row vectorizes.
  const uint32_t normal = ((exp + (127u - bias)) << 23) | (mant << (23 - M));
  const uint32_t subnormal = f32_bits(static_cast<float>(mant) * kSubnormalUlp);
  const uint32_t is_subnormal = 0u - static_cast<uint32_t>(exp == 0);
  uint32_t bits = (subnormal & is_subnormal) | (normal & ~is_subnormal);
  if constexpr (kFinite) {
    const uint32_t is_nan =
        0u - static_cast<uint32_t>((code & ((1u << (E + M)) - 1)) == (1u << (E + M)) - 1);
    bits = (0x7fc00000u & is_nan) | (bits & ~is_nan);
  } else {
    // inf, or NaN (made quiet)
    const uint32_t special =
        0x7f800000u | (mant << (23 - M)) | (static_cast<uint32_t>(mant != 0) << 22);
    const uint32_t is_special = 0u - static_cast<uint32_t>(exp == (1u << E) - 1);
    bits = (special & is_special) | (bits & ~is_special);
  }
  return bits_f32(bits | (sign << 31));
}

// bf16 keeps fp32's exponent, so rounding is on the bits: add half an ulp minus one, plus the
// kept lsb (ties to even), and keep the top 16 (a carry rounds up into the exponent, to inf
// past the largest finite value); NaN becomes the signed quiet NaN. The same codes as
// f32_to_narrow<8, 7> for all 2^32 inputs (tests/exec/test_builtins.cpp), in a few integer
// operations the element loops vectorize (every bf16 store: exp's bf16 p in attention,
// PSUM evacuations). A NaN is first replaced by the signed quiet NaN's fp32 pattern, which
// rounds to itself: a float compare and one masked operation (AVX-512), 8 vector operations
// per 16 values where selecting after the rounding took 10. A select, not a branch: a fused
// chain's loop (a norm's normalize, weight, bias and bf16 store) ran one element at a time
// around the branch.
inline uint16_t f32_to_bf16(float f) {
  const uint32_t u = f32_bits(f);
  const uint32_t v = f != f ? (u & 0x80000000u) | 0x7fc00000u : u;
  return static_cast<uint16_t>((v + 0x7fffu + ((v >> 16) & 1u)) >> 16);
}
inline float bf16_to_f32(uint16_t h) {
  return bits_f32(static_cast<uint32_t>(h) << 16);
}
// tf32 (1-8-10 in 32 bits) rounds as bf16 does, at mantissa bit 13: the same codes as
// f32_to_narrow<8, 10> placed in an fp32's top 19 bits (tests/exec/test_builtins.cpp).
inline float f32_to_tf32(float f) {
  const uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bits_f32((u & 0x80000000u) | 0x7fc00000u);
  return bits_f32((u + 0xfffu + ((u >> 13) & 1u)) & 0xffffe000u);
}
inline uint16_t f32_to_fp16(float f) {
  return static_cast<uint16_t>(f32_to_narrow<5, 10>(f));
}
inline float fp16_to_f32(uint16_t h) {
  return narrow_to_f32<5, 10>(h);
}
inline uint8_t f32_to_fp8e4m3(float f) {
  return static_cast<uint8_t>(f32_to_narrow<4, 3>(f));
}
inline float fp8e4m3_to_f32(uint8_t b) {
  return narrow_to_f32<4, 3>(b);
}
inline uint8_t f32_to_fp8e4m3fn(float f) {
  return static_cast<uint8_t>(f32_to_narrow<4, 3, true>(f));
}
inline float fp8e4m3fn_to_f32(uint8_t b) {
  return narrow_to_f32<4, 3, true>(b);
}
// fp8 e8m0fnu (OCP MX scale): an unsigned exponent, 2^(code - 127), code 0xFF NaN. From fp32
// like ml_dtypes: the exponent rounded up when the mantissa is at least half (ties away from
// zero); zero, negatives, inf, NaN and values that round past 2^127 to NaN; fp32 subnormals to
// code 0 (2^-127).
inline uint8_t f32_to_e8m0(float f) {
  const uint32_t u = f32_bits(f);
  if (!(f > 0.0f) || (u & 0x7f800000u) == 0x7f800000u) return 0xffu;
  const uint32_t e = u >> 23;  // sign is 0
  if (e == 0) return 0;
  const uint32_t code = e + ((u & 0x7fffffu) >= 0x400000u ? 1u : 0u);
  return static_cast<uint8_t>(code > 254u ? 0xffu : code);
}
inline float e8m0_to_f32(uint8_t b) {
  if (b == 0xffu) return bits_f32(0x7fc00000u);
  return bits_f32(b == 0 ? 0x00400000u : static_cast<uint32_t>(b) << 23);
}
inline uint8_t f32_to_fp8e5m2(float f) {
  return static_cast<uint8_t>(f32_to_narrow<5, 2>(f));
}
inline float fp8e5m2_to_f32(uint8_t b) {
  return narrow_to_f32<5, 2>(b);
}

// ---- integers ---------------------------------------------------------------------------------

// Round to nearest, ties to even, saturate to [lo, hi]; NaN -> 0.
inline int64_t f64_to_int_sat(double v, int64_t lo, int64_t hi) {
  if (v != v) return 0;
  double r = std::nearbyint(v);
  if (r <= static_cast<double>(lo)) return lo;
  if (r >= static_cast<double>(hi)) return hi;
  return static_cast<int64_t>(r);
}

inline int64_t dtype_int_min(DType t) {
  switch (t) {
    case DType::int8:
      return -128;
    case DType::int16:
      return -32768;
    case DType::int32:
      return -2147483648LL;
    default:
      return 0;
  }
}
inline int64_t dtype_int_max(DType t) {
  switch (t) {
    case DType::int8:
      return 127;
    case DType::int16:
      return 32767;
    case DType::int32:
      return 2147483647LL;
    case DType::uint8:
      return 255;
    case DType::uint16:
      return 65535;
    case DType::uint32:
    case DType::float8_e5m2_x4:  // MX x4 elements as numbers: their raw bits (opaque)
    case DType::float8_e4m3fn_x4:
      return 4294967295LL;
    case DType::float4_e2m1fn_x4:
      return 65535;
    case DType::bool_:
      return 1;
    default:
      return 0;
  }
}

// ---- one element at a byte pointer --------------------------------------------------------------

// How the element functions below (a switch on the run-time dtype) are declared: `inline`,
// or forced inline by a file that defines it first (the library's instruction kernels, where
// a call per element through the PLT cost more than the switch; instr_kernels.cpp).
#ifndef NEURON_ELEMENT_FN
#define NEURON_ELEMENT_FN inline
#endif

NEURON_ELEMENT_FN float load_f32(const void* p, DType t) {
  switch (t) {
    case DType::float32:
    case DType::tfloat32: {
      float v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case DType::bfloat16: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return bf16_to_f32(v);
    }
    case DType::float16: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return fp16_to_f32(v);
    }
    case DType::float8_e4m3:
      return fp8e4m3_to_f32(*static_cast<const uint8_t*>(p));
    case DType::float8_e5m2:
      return fp8e5m2_to_f32(*static_cast<const uint8_t*>(p));
    case DType::float8_e4m3fn:
      return fp8e4m3fn_to_f32(*static_cast<const uint8_t*>(p));
    case DType::float8_e8m0fnu:
      return e8m0_to_f32(*static_cast<const uint8_t*>(p));
    case DType::int8:
      return static_cast<float>(*static_cast<const int8_t*>(p));
    case DType::int16: {
      int16_t v;
      std::memcpy(&v, p, 2);
      return static_cast<float>(v);
    }
    case DType::int32: {
      int32_t v;
      std::memcpy(&v, p, 4);
      return static_cast<float>(v);
    }
    case DType::uint8:
      return static_cast<float>(*static_cast<const uint8_t*>(p));
    case DType::uint16: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return static_cast<float>(v);
    }
    case DType::uint32:
    case DType::float8_e5m2_x4:  // MX x4 elements as numbers: their raw bits (opaque)
    case DType::float8_e4m3fn_x4: {
      uint32_t v;
      std::memcpy(&v, p, 4);
      return static_cast<float>(v);
    }
    case DType::float4_e2m1fn_x4: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return static_cast<float>(v);
    }
    case DType::bool_:
      return *static_cast<const uint8_t*>(p) ? 1.0f : 0.0f;
  }
  return 0.0f;
}

// Stores an integer value of an integer dtype's bit width (callers saturate or wrap first).
inline void store_int_bits(void* p, DType t, int64_t v) {
  switch (dtype_bytes(t)) {
    case 1: {
      uint8_t b = static_cast<uint8_t>(v);
      std::memcpy(p, &b, 1);
      break;
    }
    case 2: {
      uint16_t b = static_cast<uint16_t>(v);
      std::memcpy(p, &b, 2);
      break;
    }
    default: {
      uint32_t b = static_cast<uint32_t>(v);
      std::memcpy(p, &b, 4);
      break;
    }
  }
}

NEURON_ELEMENT_FN void store_f32(void* p, DType t, float v) {
  switch (t) {
    case DType::float32:
      std::memcpy(p, &v, 4);
      return;
    case DType::tfloat32: {
      const float r = f32_to_tf32(v);
      std::memcpy(p, &r, 4);
      return;
    }
    case DType::bfloat16: {
      uint16_t b = f32_to_bf16(v);
      std::memcpy(p, &b, 2);
      return;
    }
    case DType::float16: {
      uint16_t b = f32_to_fp16(v);
      std::memcpy(p, &b, 2);
      return;
    }
    case DType::float8_e4m3:
      *static_cast<uint8_t*>(p) = f32_to_fp8e4m3(v);
      return;
    case DType::float8_e5m2:
      *static_cast<uint8_t*>(p) = f32_to_fp8e5m2(v);
      return;
    case DType::float8_e4m3fn:
      *static_cast<uint8_t*>(p) = f32_to_fp8e4m3fn(v);
      return;
    case DType::float8_e8m0fnu:
      *static_cast<uint8_t*>(p) = f32_to_e8m0(v);
      return;
    case DType::bool_:
      *static_cast<uint8_t*>(p) = (v != 0.0f && v == v) ? 1 : 0;
      return;
    default:
      store_int_bits(p, t, f64_to_int_sat(v, dtype_int_min(t), dtype_int_max(t)));
      return;
  }
}

// Integer value of an integer-typed element, exactly (no trip through fp32).
inline int64_t load_int(const void* p, DType t) {
  switch (t) {
    case DType::int8:
      return *static_cast<const int8_t*>(p);
    case DType::int16: {
      int16_t v;
      std::memcpy(&v, p, 2);
      return v;
    }
    case DType::int32: {
      int32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case DType::uint8:
    case DType::bool_:
      return *static_cast<const uint8_t*>(p);
    case DType::uint16: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return v;
    }
    case DType::uint32: {
      uint32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
    default:
      return f64_to_int_sat(load_f32(p, t), INT64_MIN / 2, INT64_MAX / 2);
  }
}

// Stores an exact integer: integer dtypes saturate (no fp32 rounding), floats round via fp32.
inline void store_int(void* p, DType t, int64_t v) {
  if (dtype_is_float(t)) return store_f32(p, t, static_cast<float>(v));
  if (t == DType::bool_) return store_int_bits(p, t, v != 0 ? 1 : 0);
  int64_t lo = dtype_int_min(t), hi = dtype_int_max(t);
  store_int_bits(p, t, v < lo ? lo : v > hi ? hi : v);
}

// A double immediate (memset value, ...) stored to dtype t: integer dtypes round and saturate
// directly from double (exact for all int32 values); float dtypes round to fp32 first.
inline void store_f64(void* p, DType t, double v) {
  if (dtype_is_float(t) || t == DType::bool_) return store_f32(p, t, static_cast<float>(v));
  store_int_bits(p, t, f64_to_int_sat(v, dtype_int_min(t), dtype_int_max(t)));
}

// ---- ALU operators ------------------------------------------------------------------------------

inline bool alu_is_bitvec(AluOp op) {
  return op == AluOp::bitwise_and || op == AluOp::bitwise_or || op == AluOp::bitwise_xor ||
         op == AluOp::left_shift || op == AluOp::right_shift;
}

// Bitwise ops on two's-complement integer bit patterns. Shifts use 32-bit patterns; a shift
// count outside [0, 31] gives 0.
inline int64_t alu_bits(AluOp op, int64_t a, int64_t b) {
  switch (op) {
    case AluOp::bitwise_and:
      return a & b;
    case AluOp::bitwise_or:
      return a | b;
    case AluOp::bitwise_xor:
      return a ^ b;
    case AluOp::left_shift:
      return (b < 0 || b > 31)
                 ? 0
                 : static_cast<int64_t>(static_cast<int32_t>(static_cast<uint32_t>(a) << b));
    case AluOp::right_shift:
      return (b < 0 || b > 31) ? 0 : static_cast<int64_t>(static_cast<uint32_t>(a) >> b);
    default:
      return a;
  }
}

// The value right_shift shifts for an element of integer dtype t: its own bit pattern, zero
// extended (int8 -128 is 0x80, so -128 >> 2 = 32); 32-bit patterns are alu_bits' own.
inline int64_t shift_operand(int64_t v, DType t) {
  const int bytes = dtype_bytes(t);
  return bytes < 4 ? (v & ((int64_t(1) << (8 * bytes)) - 1)) : v;
}

// The ops tensor_tensor computes exactly on two integer tiles (alu_int).
inline bool alu_is_int_exact(AluOp op) {
  switch (op) {
    case AluOp::add:
    case AluOp::subtract:
    case AluOp::multiply:
    case AluOp::maximum:
    case AluOp::minimum:
    case AluOp::equal:
    case AluOp::not_equal:
    case AluOp::greater:
    case AluOp::greater_equal:
    case AluOp::less:
    case AluOp::less_equal:
      return true;
    default:
      return false;
  }
}

// How alu_int's add, subtract and multiply wrap: at 32 bits (GpSimd's integer ALU) when an
// operand is a 32-bit integer, unsigned when both operands are unsigned, else signed (two's
// complement); exact for narrower operands, whose results (|x| < 2^32) the store then saturates
// as NKI's fp32 rule would (uint8 1 - 3 is 0 in a uint8 tile and -2 in an int16 one; a 32-bit
// unsigned wrap gave 255 and 32767).
enum class IntWrap : uint8_t { exact, u32, i32 };

inline IntWrap int_wrap(DType a, DType b) {
  if (dtype_bytes(a) < 4 && dtype_bytes(b) < 4) return IntWrap::exact;
  return !dtype_is_signed(a) && !dtype_is_signed(b) ? IntWrap::u32 : IntWrap::i32;
}

// a op b on integers (values of int8 ... uint32 elements). add, subtract and multiply wrap as
// `wrap` says; the others are exact; comparisons give 1 / 0.
inline int64_t alu_int(AluOp op, int64_t a, int64_t b, IntWrap wrap_kind) {
  auto wrap = [&](uint64_t v) {
    switch (wrap_kind) {
      case IntWrap::u32:
        return static_cast<int64_t>(static_cast<uint32_t>(v));
      case IntWrap::i32:
        return static_cast<int64_t>(static_cast<int32_t>(static_cast<uint32_t>(v)));
      default:
        return static_cast<int64_t>(v);
    }
  };
  const uint64_t ua = static_cast<uint64_t>(a), ub = static_cast<uint64_t>(b);
  switch (op) {
    case AluOp::add:
      return wrap(ua + ub);
    case AluOp::subtract:
      return wrap(ua - ub);
    case AluOp::multiply:
      return wrap(ua * ub);
    case AluOp::maximum:
      return a > b ? a : b;
    case AluOp::minimum:
      return a < b ? a : b;
    case AluOp::equal:
      return a == b;
    case AluOp::not_equal:
      return a != b;
    case AluOp::greater:
      return a > b;
    case AluOp::greater_equal:
      return a >= b;
    case AluOp::less:
      return a < b;
    case AluOp::less_equal:
      return a <= b;
    default:
      return a;
  }
}

inline int64_t f32_to_i64_for_bits(float v) {
  return f64_to_int_sat(v, -(int64_t(1) << 62), int64_t(1) << 62);
}

// maximum / minimum: the non-NaN operand when one is NaN (fmax / fmin), and b when the two
// compare equal (+0 and -0: as numpy). Written out, not std::fmax, whose choice between +0 and
// -0 is left to the implementation: the simulator's library and LLVM's vectorised maxps chose
// differently, so the executors disagreed on max(-0, +0).
// The NaN test is on b alone and comes first, so in a reduction (alu(op, acc, x)) it is off the
// accumulator's chain, which is one maxps / minps per step: faster than std::fmax's lowering.
inline float max_f32(float a, float b) {
  b = b != b ? a : b;
  return a > b ? a : b;
}
inline float min_f32(float a, float b) {
  b = b != b ? a : b;
  return a < b ? a : b;
}

// a op b in fp32. Unary operators ignore b; bypass returns a. Comparisons and logical ops give
// 1.0 / 0.0. mod is floored (the result takes the divisor's sign, like numpy), fmod truncated
// (the dividend's sign, like C). maximum/minimum: max_f32 / min_f32.
inline float alu(AluOp op, float a, float b) {
  switch (op) {
    case AluOp::bypass:
      return a;
    case AluOp::add:
      return a + b;
    case AluOp::subtract:
      return a - b;
    case AluOp::multiply:
      return a * b;
    case AluOp::divide:
      return a / b;
    case AluOp::maximum:
      return max_f32(a, b);
    case AluOp::minimum:
      return min_f32(a, b);
    case AluOp::power:
      return std::pow(a, b);
    case AluOp::mod: {
      float r = std::fmod(a, b);
      if (r != 0.0f && ((r < 0.0f) != (b < 0.0f))) r += b;
      return r;
    }
    case AluOp::fmod:
      return std::fmod(a, b);
    case AluOp::equal:
      return a == b ? 1.0f : 0.0f;
    case AluOp::not_equal:
      return a != b ? 1.0f : 0.0f;
    case AluOp::greater:
      return a > b ? 1.0f : 0.0f;
    case AluOp::greater_equal:
      return a >= b ? 1.0f : 0.0f;
    case AluOp::less:
      return a < b ? 1.0f : 0.0f;
    case AluOp::less_equal:
      return a <= b ? 1.0f : 0.0f;
    case AluOp::logical_and:
      return (a != 0.0f && b != 0.0f) ? 1.0f : 0.0f;
    case AluOp::logical_or:
      return (a != 0.0f || b != 0.0f) ? 1.0f : 0.0f;
    case AluOp::logical_xor:
      return ((a != 0.0f) != (b != 0.0f)) ? 1.0f : 0.0f;
    case AluOp::bitwise_and:
    case AluOp::bitwise_or:
    case AluOp::bitwise_xor:
    case AluOp::left_shift:
    case AluOp::right_shift:
      return static_cast<float>(alu_bits(op, f32_to_i64_for_bits(a), f32_to_i64_for_bits(b)));
    case AluOp::abs:
      return std::fabs(a);
    case AluOp::rsqrt:
      return math::rsqrt(a);
    case AluOp::reciprocal:
      return 1.0f / a;
    case AluOp::logical_not:
      return a == 0.0f ? 1.0f : 0.0f;
  }
  return a;
}

// The value a reduction starts from: x == alu(op, identity, x) for every x.
// An affine_select comparison of an exact int64 affine value (iota/affine_select arithmetic is
// integer, so it is compared exactly rather than through fp32).
inline bool compare_int(AluOp op, int64_t a, int64_t c) {
  switch (op) {
    case AluOp::equal:
      return a == c;
    case AluOp::not_equal:
      return a != c;
    case AluOp::greater:
      return a > c;
    case AluOp::greater_equal:
      return a >= c;
    case AluOp::less:
      return a < c;
    case AluOp::less_equal:
      return a <= c;
    default:
      return alu(op, static_cast<float>(a), static_cast<float>(c)) != 0.0f;
  }
}

inline float reduce_identity(AluOp op) {
  switch (op) {
    case AluOp::multiply:
    case AluOp::logical_and:
      return 1.0f;
    case AluOp::maximum:
      return -std::numeric_limits<float>::infinity();
    case AluOp::minimum:
      return std::numeric_limits<float>::infinity();
    case AluOp::bitwise_and:
      return -1.0f;  // all ones
    default:
      return 0.0f;  // add, subtract, logical_or/xor, bitwise_or/xor
  }
}

// ---- reductions --------------------------------------------------------------------------------

// Every reduction along free axes (tensor_reduce; activation's reduce_res; nl.sum, max, min,
// mean) combines the n values v_0 .. v_{n-1} of one result (its reduced elements in row-major
// order) in one order, the same in both executors, that a vector unit can follow:
//   lane[j] = identity (j < 16);  lane[i mod 16] = op(lane[i mod 16], v_i) for i = 0, 1, ...;
//   then for h = 8, 4, 2, 1: lane[j] = combine(lane[j], lane[j + h]) for j < h;  result lane[0].
// combine is op itself, except for subtract, whose lanes hold negated partial sums and are
// added. 16 lanes: one AVX-512 register of partial results, or two AVX2 ones.
constexpr int kReduceLanes = 16;

inline AluOp reduce_combine(AluOp op) {
  return op == AluOp::subtract ? AluOp::add : op;
}

inline void reduce_init(float* lane, AluOp op) {
  for (int j = 0; j < kReduceLanes; ++j) lane[j] = reduce_identity(op);
}

// Feeds the values load(0), ..., load(n - 1), at positions pos .. pos + n - 1 of the reduction,
// into the lanes. Whole groups of 16 go through a local copy of the lanes with constant
// indices, which the native backend's optimizer turns into vector operations.
template <class Load>
[[gnu::always_inline]] inline void reduce_run(float* lane, AluOp op, int64_t pos, int64_t n,
                                              Load&& load) {
  constexpr int64_t kMask = kReduceLanes - 1;
  int64_t k = 0;
  for (; k < n && ((pos + k) & kMask) != 0; ++k)
    lane[(pos + k) & kMask] = alu(op, lane[(pos + k) & kMask], load(k));
  if (k + kReduceLanes <= n) {
    float acc[kReduceLanes];
    for (int j = 0; j < kReduceLanes; ++j) acc[j] = lane[j];
    for (; k + kReduceLanes <= n; k += kReduceLanes) {
#pragma GCC unroll 16
      for (int j = 0; j < kReduceLanes; ++j) acc[j] = alu(op, acc[j], load(k + j));
    }
    for (int j = 0; j < kReduceLanes; ++j) lane[j] = acc[j];
  }
  for (; k < n; ++k) lane[(pos + k) & kMask] = alu(op, lane[(pos + k) & kMask], load(k));
}

// R reductions from position 0 at once, reduction r fed load(r, 0), ..., load(r, n - 1): each
// gets exactly reduce_run's lanes, but R independent chains are in flight instead of one (a
// row's chain of 16-lane max or add operations waits on itself; rows do not).
template <int R, class Load>
[[gnu::always_inline]] inline void reduce_runs(float (*lane)[kReduceLanes], AluOp op, int64_t n,
                                               Load&& load) {
  constexpr int64_t kMask = kReduceLanes - 1;
  float acc[R][kReduceLanes];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int j = 0; j < kReduceLanes; ++j) acc[r][j] = lane[r][j];
  int64_t k = 0;
  for (; k + kReduceLanes <= n; k += kReduceLanes)
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 16
      for (int j = 0; j < kReduceLanes; ++j) acc[r][j] = alu(op, acc[r][j], load(r, k + j));
    }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int j = 0; j < kReduceLanes; ++j) lane[r][j] = acc[r][j];
  for (; k < n; ++k)
    for (int r = 0; r < R; ++r) lane[r][k & kMask] = alu(op, lane[r][k & kMask], load(r, k));
}

// The fixed tree that ends a reduction (inlined, so the op is a constant and the tree a few
// vector shuffles).
[[gnu::always_inline]] inline float reduce_finish(float* lane, AluOp op) {
  const AluOp c = reduce_combine(op);
  for (int h = kReduceLanes / 2; h >= 1; h /= 2)
    for (int j = 0; j < h; ++j) lane[j] = alu(c, lane[j], lane[j + h]);
  return lane[0];
}

// R whole reductions at once: out[r] = the reduction of load(r, 0), ..., load(r, n - 1), each
// with reduce_run's lanes and tree (tensor_reduce's rows, a fused chain's buffered rows).
template <int R, class Load>
[[gnu::always_inline]] inline void reduce_rows(float* out, AluOp op, int64_t n, Load&& load) {
  float lane[R][kReduceLanes];
  for (auto& l : lane) reduce_init(l, op);
  reduce_runs<R>(lane, op, n, load);
  for (int r = 0; r < R; ++r) out[r] = reduce_finish(lane[r], op);
}

// ---- random numbers --------------------------------------------------------------------------

// A counter-based generator, the same in both executors and independent of execution order:
// every partition has a state of four uint32 words [key lo, key hi, counter lo, counter hi]
// (an SBUF tile, docs/random.md); value i of a draw is rng_bits(key, counter + i), SplitMix64's
// output function applied to key + (counter + i + 1) * gamma (a bijection of its input, so
// distinct counters never repeat a value within 2^64 draws), and a draw of n values advances
// the counter by n (rng_skip).
constexpr uint64_t kRngGamma = 0x9E3779B97F4A7C15ull;

inline uint64_t rng_mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
inline uint64_t rng_bits(uint64_t key, uint64_t counter) {
  return rng_mix(key + (counter + 1) * kRngGamma);
}
// Uniform in [0, 1): the top 24 bits as a float's fraction (exact).
inline float rng_unit(uint64_t bits) {
  return static_cast<float>(bits >> 40) * 0x1p-24f;
}
// The key of partition p for a 32-bit seed: distinct for every (seed, partition) pair.
inline uint64_t rng_key(uint32_t seed, int64_t partition) {
  return rng_mix((static_cast<uint64_t>(seed) << 8 | static_cast<uint64_t>(partition & 0xff)) *
                     kRngGamma +
                 kRngGamma);
}

// ---- activation functions ------------------------------------------------------------------

// float32 implementations (builtins_math.hpp; measured errors in docs/numerics.md). gelu is the
// exact erf form; gelu_apprx_tanh the tanh approximation; sign(NaN) is NaN; relu(NaN) is 0.
// Always inlined so a constant `f` folds the switch and the element loop around it vectorizes.
[[gnu::always_inline]] inline float activate(ActFunc f, float x) {
  switch (f) {
    case ActFunc::copy:
      return x;
    case ActFunc::exp:
      return math::exp(x);
    case ActFunc::log:
      return math::log(x);
    case ActFunc::tanh:
      return math::tanh(x);
    case ActFunc::sqrt:
      return std::sqrt(x);
    case ActFunc::rsqrt:
      return math::rsqrt(x);
    case ActFunc::sigmoid:
      return math::sigmoid(x);
    case ActFunc::silu:
      return math::silu(x);
    case ActFunc::gelu:
      return math::gelu(x);
    case ActFunc::gelu_apprx_tanh:
      return math::gelu_apprx_tanh(x);
    case ActFunc::relu:
      return x > 0.0f ? x : 0.0f;
    case ActFunc::abs:
      return math::abs(x);
    case ActFunc::reciprocal:
      return 1.0f / x;
    case ActFunc::square:
      return x * x;
    case ActFunc::sign:
      return x > 0.0f ? 1.0f : x < 0.0f ? -1.0f : x;  // keeps +-0 and NaN
    case ActFunc::softplus:
      return math::softplus(x);
    case ActFunc::sin:
      return math::sin(x);
    case ActFunc::cos:
      return math::cos(x);
    case ActFunc::erf:
      return math::erf(x);
    case ActFunc::negative:
      return -x;
    case ActFunc::floor:
      return math::floor(x);
    case ActFunc::ceil:
      return math::ceil(x);
    case ActFunc::trunc:
      return math::trunc(x);
    case ActFunc::tan:
      return math::tan(x);
    case ActFunc::arctan:
      return math::arctan(x);
    case ActFunc::gelu_dx:
      return math::gelu_dx(x);
    case ActFunc::gelu_apprx_sigmoid:
      return math::gelu_apprx_sigmoid(x);
    case ActFunc::gelu_apprx_sigmoid_dx:
      return math::gelu_apprx_sigmoid_dx(x);
    case ActFunc::silu_dx:
      return math::silu_dx(x);
    case ActFunc::mish:
      return math::mish(x);
    case ActFunc::erf_dx:
      return math::erf_dx(x);
  }
  return x;
}

// ---- MX (OCP microscaling) data, NeuronCore-v4 (docs/mx.md) -------------------------------------
// An x4 element packs four values: fp8 value i in byte i, fp4 value i in nibble i (low nibble
// of byte i / 2 first). A block of 32 values (8 partitions x one x4 element) shares a uint8
// scale s meaning 2^(s - 127) (OCP E8M0; 0xFF is NaN).

// fp4 e2m1 (OCP, no inf or NaN): 1 sign, 2 exponent (bias 1), 1 mantissa bit; largest 6.
inline float fp4e2m1_to_f32(uint32_t code) {
  static constexpr float kMag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float m = kMag[code & 7u];
  return (code & 8u) ? -m : m;
}

// Value i (0..3) of the x4 element at p.
inline float mx_value(const void* p, DType t, int i) {
  const auto* b = static_cast<const uint8_t*>(p);
  switch (t) {
    case DType::float8_e5m2_x4:
      return fp8e5m2_to_f32(b[i]);
    case DType::float8_e4m3fn_x4:
      return fp8e4m3fn_to_f32(b[i]);
    default:  // float4_e2m1fn_x4
      return fp4e2m1_to_f32((b[i / 2] >> (4 * (i % 2))) & 0xfu);
  }
}

// 2^k as a double, for |k| <= 1022 (from its bits: no libm call in the JIT's bitcode).
inline double pow2_d(int k) {
  const uint64_t bits = static_cast<uint64_t>(k + 1023) << 52;
  double d;
  std::memcpy(&d, &bits, 8);
  return d;
}

// The scale 2^(s - 127) of a scale code (uint8 or float8_e8m0fnu: the same byte; 0xFF NaN).
inline float mx_scale(uint32_t s) {
  return e8m0_to_f32(static_cast<uint8_t>(s));
}

// quantize_mx's block scale for a block whose largest fp32 biased exponent field is `max_exp`
// (0..255) into fp8 type `t`: 2^(max_exp - 127 - emax + 1), i.e. twice the OCP reference
// algorithm's 2^(floor(log2(amax)) - emax), as NKI documents for the instruction (the block's
// largest value lands one binade below the format's largest, so rounding it never saturates).
// emax is 15 for e5m2 and 8 for e4m3fn; a code below 0 is clamped to 0.
inline uint32_t mx_block_scale(uint32_t max_exp, DType t) {
  const int emax = t == DType::float8_e5m2_x4 ? 15 : 8;
  const int s = static_cast<int>(max_exp) - emax + 1;
  return s < 0 ? 0u : static_cast<uint32_t>(s);
}

// One value quantized with block scale s into fp8 type t's code: x / 2^(s - 127) (exact in
// double), clamped to the format's largest finite magnitude (57344 e5m2, 448 e4m3fn; NaN stays
// NaN), rounded to nearest even.
inline uint8_t mx_quantize(float x, uint32_t s, DType t) {
  const double q = static_cast<double>(x) * pow2_d(127 - static_cast<int>(s));
  const double big = t == DType::float8_e5m2_x4 ? 57344.0 : 448.0;
  const float c = static_cast<float>(q > big ? big : q < -big ? -big : q);
  return t == DType::float8_e5m2_x4 ? f32_to_fp8e5m2(c) : f32_to_fp8e4m3fn(c);
}

}  // namespace neuron::builtins
