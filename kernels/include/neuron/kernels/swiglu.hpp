// Fused SwiGLU: y = silu(a) * b for x = [a | b] split in halves along the last axis,
// forward and backward, any sizes; arithmetic in fp32, results in x's dtype.
//
// Tiling and engine plan. Each SPMD program owns R / programs consecutive rows (grid
// swiglu_grid(cfg)), 128 at a time on partitions, and walks the H columns of each half in
// chunks of up to kSwigluChunk (so LLM-sized hidden widths fit SBUF). Both halves of a chunk
// come in by DMA; the Scalar engine evaluates silu (forward) or sigmoid (backward), the Vector
// engine does the products, and one more DMA stores. Nothing is reduced, so every loop is an
// affine_range and the allocator double-buffers loads against compute.
//  - Backward: with s = sigmoid(a), silu(a) = a * s and silu'(a) = s + silu(a) * (1 - s):
//    da = dy * b * silu'(a), db = dy * silu(a), written as dx = [da | db].
#pragma once
#include <vector>

#include "neuron/kernels/tiling.hpp"

namespace neuron::kernels {

struct SwigluConfig {
  int64_t programs = 1;  // SPMD programs along the rows; must divide R
};

inline std::vector<int64_t> swiglu_grid(const SwigluConfig& cfg) {
  return {cfg.programs};
}

inline constexpr int64_t kSwigluChunk = 1024;

namespace detail {

inline int64_t check_swiglu(const nl::tensor& x, const SwigluConfig& cfg, const char* kernel,
                            const Span& span) {
  require_rank(x, 2, kernel, "x", span);
  require_float(x, kernel, "x", span);
  if (x.shape()[1] % 2 != 0)
    args_error(span, kernel, "x has {} columns; it must be even (the halves a and b)",
               x.shape()[1]);
  if (cfg.programs < 1 || x.shape()[0] % cfg.programs != 0)
    args_error(span, kernel, "programs={} must divide the {} rows (use split_rows)", cfg.programs,
               x.shape()[0]);
  return x.shape()[1] / 2;
}

// Calls body(rows view, column start, column count, rr, cw) over the program's row tiles and
// column chunks.
template <typename Body>
void swiglu_tiles(int64_t R, int64_t H, const SwigluConfig& cfg, const Body& body) {
  const int64_t rows = R / cfg.programs;
  const nl::index row0 = nl::program_id(0) * rows;
  for_each_tile(rows, kPartitions, [&](nl::index, nl::index r0, int64_t rr) {
    for_each_tile(H, kSwigluChunk, [&](nl::index, nl::index c0, int64_t cw) {
      body(nl::ds(row0 + r0, rr), c0, rr, cw);
    });
  });
}

}  // namespace detail

// y [R, H] = silu(x[:, :H]) * x[:, H:] for x [R, 2H].
inline nl::tensor swiglu(const nl::tensor& x, const SwigluConfig& cfg = {},
                         Span span = Span::current()) {
  const int64_t H = detail::check_swiglu(x, cfg, "swiglu", span), R = x.shape()[0];
  auto out = nl::ndarray({R, H}, x.dtype(), nl::shared_hbm, "out");
  detail::swiglu_tiles(R, H, cfg, [&](nl::ds_t rows, const nl::index& c0, int64_t rr, int64_t cw) {
    auto a = nl::load(x(rows, nl::ds(c0, cw)), nl::float32);
    auto b = nl::load(x(rows, nl::ds(c0 + H, cw)), nl::float32);
    auto s = nl::ndarray({rr, cw}, nl::float32, nl::sbuf, "silu");
    isa::activation(s, nl::silu, a);
    auto y = nl::ndarray({rr, cw}, x.dtype(), nl::sbuf, "y");
    isa::tensor_tensor(y, s, b, nl::multiply);
    nl::store(out(rows, nl::ds(c0, cw)), y);
  });
  return out;
}

// dx [R, 2H] = [dy * b * silu'(a) | dy * silu(a)] for x = [a | b] [R, 2H] and dy [R, H].
inline nl::tensor swiglu_backward(const nl::tensor& x, const nl::tensor& dy,
                                  const SwigluConfig& cfg = {}, Span span = Span::current()) {
  const int64_t H = detail::check_swiglu(x, cfg, "swiglu_backward", span), R = x.shape()[0];
  if (dy.shape() != std::vector<int64_t>{R, H})
    args_error(span, "swiglu_backward", "dy has shape {}; it must be [{}, {}]",
               shape_str(dy.shape()), R, H);
  auto dx = nl::ndarray({R, 2 * H}, dy.dtype(), nl::shared_hbm, "dx");
  detail::swiglu_tiles(R, H, cfg, [&](nl::ds_t rows, const nl::index& c0, int64_t rr, int64_t cw) {
    auto a = nl::load(x(rows, nl::ds(c0, cw)), nl::float32);
    auto b = nl::load(x(rows, nl::ds(c0 + H, cw)), nl::float32);
    auto g = nl::load(dy(rows, nl::ds(c0, cw)), nl::float32);
    auto tile = [&](const char* name) {
      return nl::ndarray({rr, cw}, nl::float32, nl::sbuf, name);
    };
    auto s = tile("sig"), silu = tile("silu"), one_minus = tile("one_minus"), t = tile("t");
    isa::activation(s, nl::sigmoid, a);
    isa::tensor_tensor(silu, a, s, nl::multiply);
    auto db = nl::ndarray({rr, cw}, dy.dtype(), nl::sbuf, "db");
    isa::tensor_tensor(db, g, silu, nl::multiply);
    nl::store(dx(rows, nl::ds(c0 + H, cw)), db);
    // silu'(a) = s + silu * (1 - s)
    isa::tensor_scalar(one_minus, s, nl::multiply, -1.0, false, nl::add, 1.0);
    isa::tensor_tensor(t, silu, one_minus, nl::multiply);
    isa::tensor_tensor(t, t, s, nl::add);
    isa::tensor_tensor(t, t, b, nl::multiply);
    auto da = nl::ndarray({rr, cw}, dy.dtype(), nl::sbuf, "da");
    isa::tensor_tensor(da, t, g, nl::multiply);
    nl::store(dx(rows, nl::ds(c0, cw)), da);
  });
  return dx;
}

}  // namespace neuron::kernels
