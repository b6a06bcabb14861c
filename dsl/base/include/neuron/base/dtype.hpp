// Element types of tensors and tiles: one X-macro list drives names, sizes and predicates.
#pragma once
#include <cstdint>
#include <optional>
#include <string_view>

namespace neuron {

// X(enumerator, printed name, bytes, is_float, is_signed)
// The three *_x4 types are NeuronCore-v4 MX data: four narrow floats packed in one element
// (value i of the four in byte i, or for fp4 in nibble i, low nibble first). Only DMA copies,
// memset 0, quantize_mx and nc_matmul_mx take them (codegen/instrs/mx.hpp); as numbers they are
// opaque (the verifier refuses arithmetic on them). tfloat32 is the Tensor engine's 1-8-10
// operand format held in 32 bits: an fp32 whose low 13 mantissa bits are zero (builtins.hpp).
// New types go at the end: the enumerators' values are part of compiled-kernel cache keys.
#define NEURON_DTYPES(X)                  \
  X(float32, "float32", 4, true, true)     \
  X(bfloat16, "bfloat16", 2, true, true)   \
  X(float16, "float16", 2, true, true)     \
  X(float8_e4m3, "float8_e4m3", 1, true, true) \
  X(float8_e5m2, "float8_e5m2", 1, true, true) \
  X(float8_e4m3fn, "float8_e4m3fn", 1, true, true) \
  X(float8_e8m0fnu, "float8_e8m0fnu", 1, true, false) \
  X(int8, "int8", 1, false, true)          \
  X(int16, "int16", 2, false, true)        \
  X(int32, "int32", 4, false, true)        \
  X(uint8, "uint8", 1, false, false)       \
  X(uint16, "uint16", 2, false, false)     \
  X(uint32, "uint32", 4, false, false)     \
  X(bool_, "bool", 1, false, false)         \
  X(float8_e5m2_x4, "float8_e5m2_x4", 4, false, false) \
  X(float8_e4m3fn_x4, "float8_e4m3fn_x4", 4, false, false) \
  X(float4_e2m1fn_x4, "float4_e2m1fn_x4", 2, false, false) \
  X(tfloat32, "tfloat32", 4, true, true)

enum class DType : uint8_t {
#define X(e, name, bytes, is_float, is_signed) e,
  NEURON_DTYPES(X)
#undef X
};

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
#define X(e, name, bytes, is_float, is_signed) \
  case DType::e:                                \
    return name;
    NEURON_DTYPES(X)
#undef X
  }
  return "?";
}

constexpr int dtype_bytes(DType t) {
  switch (t) {
#define X(e, name, bytes, is_float, is_signed) \
  case DType::e:                                \
    return bytes;
    NEURON_DTYPES(X)
#undef X
  }
  return 0;
}

constexpr bool dtype_is_float(DType t) {
  switch (t) {
#define X(e, name, bytes, is_float, is_signed) \
  case DType::e:                                \
    return is_float;
    NEURON_DTYPES(X)
#undef X
  }
  return false;
}

constexpr bool dtype_is_signed(DType t) {
  switch (t) {
#define X(e, name, bytes, is_float, is_signed) \
  case DType::e:                                \
    return is_signed;
    NEURON_DTYPES(X)
#undef X
  }
  return false;
}

// An MX x4 type: four packed values per element (dtype.hpp above, docs/mx.md).
constexpr bool dtype_is_mx(DType t) {
  return t == DType::float8_e5m2_x4 || t == DType::float8_e4m3fn_x4 ||
         t == DType::float4_e2m1fn_x4;
}

inline std::optional<DType> dtype_from_name(std::string_view s) {
#define X(e, name, bytes, is_float, is_signed) \
  if (s == name) return DType::e;
  NEURON_DTYPES(X)
#undef X
  if (s == "bool_") return DType::bool_;
  return std::nullopt;
}

// Short aliases for C++ kernels (nl::f32 reads better than DType::float32 in a kernel body).
namespace dtypes {
inline constexpr DType float32 = DType::float32, bfloat16 = DType::bfloat16,
                       float16 = DType::float16, float8_e4m3 = DType::float8_e4m3,
                       float8_e5m2 = DType::float8_e5m2, float8_e4m3fn = DType::float8_e4m3fn,
                       float8_e8m0fnu = DType::float8_e8m0fnu,
                       int8 = DType::int8, int16 = DType::int16,
                       int32 = DType::int32, uint8 = DType::uint8, uint16 = DType::uint16,
                       uint32 = DType::uint32, bool_ = DType::bool_,
                       float8_e5m2_x4 = DType::float8_e5m2_x4,
                       float8_e4m3fn_x4 = DType::float8_e4m3fn_x4,
                       float4_e2m1fn_x4 = DType::float4_e2m1fn_x4,
                       tfloat32 = DType::tfloat32;
}  // namespace dtypes

}  // namespace neuron
