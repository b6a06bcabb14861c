// Helpers shared by the kernel library: cutting any length into tiles (a rolled loop over the
// full tiles plus one static tail), on-chip transposes, rows of 1-D tensors, argument checks.
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "neuron/isa.hpp"
#include "neuron/language.hpp"

namespace neuron::kernels {

namespace nl = neuron::nl;
namespace isa = neuron::isa;

inline constexpr int64_t kPartitions = nl::tile_size::pmax;        // 128
inline constexpr int64_t kPsumColumns = nl::tile_size::psum_fmax;  // 512 fp32 per PSUM bank

inline int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}
// Rounded toward -infinity, for any sign of a (b > 0).
inline int64_t floor_div(int64_t a, int64_t b) {
  return a >= 0 ? a / b : -((-a + b - 1) / b);
}

// Calls body(tile_index, start, size) over [base, base + n) cut in tiles of `tile` elements:
// once inside a rolled loop for the n / tile full tiles (tile_index and start symbolic), and
// once more, statically, for the remainder. So any n works and the IR holds at most two copies
// of the body, whatever n is. A single full tile needs no loop.
template <typename Body>
void for_each_tile(int64_t n, int64_t tile, const Body& body, const nl::index& base = 0,
                   LoopKind kind = LoopKind::affine) {
  const int64_t full = n / tile, tail = n % tile;
  if (full == 1) {
    body(nl::index(0), base, tile);
  } else if (full > 1) {
    if (kind == LoopKind::affine) {
      for (nl::index i : nl::affine_range(full)) body(i, base + i * tile, tile);
    } else {
      for (nl::index i : nl::sequential_range(full)) body(i, base + i * tile, tile);
    }
  }
  if (tail > 0) body(nl::index(full), base + full * tile, tail);
}

// Static tiles only (the body runs once per tile, with integer starts): for short loops whose
// bodies need static offsets (masks, per-tile extents).
template <typename Body>
void for_each_static_tile(int64_t begin, int64_t end, int64_t tile, const Body& body) {
  for (int64_t s = begin; s < end; s += tile) body(s, std::min(tile, end - s));
}

// x [P, F] (SBUF, F <= 128) transposed on the Tensor engine through PSUM into an SBUF tile
// [F, P] of the same dtype (a bit-exact copy). The PSUM evacuation runs on the Vector engine,
// or on the Scalar engine (an identity activation) when the caller's Vector engine is the
// busier one.
inline nl::tensor transpose_to_sbuf(const nl::tensor& x, const std::string& name = "xT",
                                    bool evacuate_on_scalar = false) {
  auto s = x.shape();
  auto t = nl::ndarray({s[1], s[0]}, x.dtype(), nl::sbuf, name);
  if (evacuate_on_scalar)
    isa::activation(t, nl::copy, nl::transpose(x));
  else
    isa::tensor_copy(t, nl::transpose(x));
  return t;
}

// elements [start, start + n) of a 1-D HBM tensor as an SBUF row [1, n].
inline nl::tensor load_row(const nl::tensor& v, const nl::index& start, int64_t n, DType dtype,
                           const std::string& name = "row") {
  auto t = nl::ndarray({1, n}, dtype, nl::sbuf, name);
  if (dtype == v.dtype()) {
    isa::dma_copy(t, v(nl::ds(start, n)));
  } else {
    auto raw = nl::ndarray({1, n}, v.dtype(), nl::sbuf, name + "_raw");
    isa::dma_copy(raw, v(nl::ds(start, n)));
    isa::tensor_copy(t, raw);
  }
  return t;
}

// A 1-D HBM tensor (length n) broadcast over `rows` partitions: [rows, n] in `dtype`. One
// DMA across partitions, done once and reused by every tile.
inline nl::tensor load_broadcast_row(const nl::tensor& v, int64_t rows, DType dtype,
                                     const std::string& name = "row") {
  const int64_t n = v.shape()[0];
  return nl::broadcast_to(load_row(v, 0, n, dtype, name), {rows, n});
}

// Argument checks shared by the kernels: a UserError "kernel-args" naming the kernel and the
// values, at the caller's line.
template <typename... Args>
[[noreturn]] void args_error(const Span& span, const char* kernel, fmt::format_string<Args...> f,
                             Args&&... args) {
  user_error(span, "kernel-args", "{}: {}", kernel, fmt::format(f, std::forward<Args>(args)...));
}

inline std::string shape_str(const std::vector<int64_t>& s) {
  return fmt::format("[{}]", fmt::join(s, ", "));
}

inline void require_rank(const nl::tensor& t, size_t rank, const char* kernel, const char* arg,
                         const Span& span) {
  if (t.ndim() != rank)
    args_error(span, kernel, "{} must have {} dimensions, got shape {}", arg, rank,
               shape_str(t.shape()));
}

inline void require_float(const nl::tensor& t, const char* kernel, const char* arg,
                          const Span& span) {
  if (t.dtype() != DType::float32 && t.dtype() != DType::bfloat16 && t.dtype() != DType::float16)
    args_error(span, kernel, "{} is {}; this kernel takes float32, bfloat16 or float16", arg,
               dtype_name(t.dtype()));
}

// The number of SPMD programs `rows` rows are split into: the largest divisor of `rows` not
// above max_programs that leaves each program at least min_rows rows (1 when none does).
// Programs own equal static slices, so a kernel's tiling stays static; a prime row count
// runs as one program.
inline int64_t split_rows(int64_t rows, int64_t max_programs = 64, int64_t min_rows = 128) {
  int64_t best = 1;
  for (int64_t p = 1; p <= max_programs && p * min_rows <= rows; ++p)
    if (rows % p == 0) best = p;
  return best;
}

}  // namespace neuron::kernels
