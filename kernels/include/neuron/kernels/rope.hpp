// Rotary position embedding (rope), "rotate half" convention (GPT-NeoX, Llama), forward and
// backward: for x [B, H, L, D] and cos, sin [L, D/2] (angle of position l, frequency i),
//   y[..., :D/2] = x1 * cos - x2 * sin,   y[..., D/2:] = x2 * cos + x1 * sin
// with x1 = x[..., :D/2], x2 = x[..., D/2:]. The backward is the inverse rotation (sin
// negated), the same kernel with cfg.backward. Arithmetic in fp32, results in x's dtype.
//
// Tiling and engine plan. One SPMD program per (batch, head) (grid rope_grid(x)); positions go
// on partitions 128 at a time, any L. Each tile loads its cos / sin rows and both halves of x
// by DMA; the Vector engine does the four products and two sums; one DMA per half stores.
// Every loop is an affine_range: tiles are independent and double-buffered.
#pragma once
#include <vector>

#include "neuron/kernels/tiling.hpp"

namespace neuron::kernels {

struct RopeConfig {
  bool backward = false;  // rotate by -angle: the gradient of the forward rotation
};

// The launch grid for x [B, H, L, D]: one program per (batch, head).
inline std::vector<int64_t> rope_grid(const std::vector<int64_t>& x_shape) {
  return {x_shape.at(0), x_shape.at(1)};
}

// y = rope(x, cos, sin); with cfg.backward, dx = rope_backward(dy, cos, sin) (pass dy as x).
inline nl::tensor rope(const nl::tensor& x, const nl::tensor& cos, const nl::tensor& sin,
                       const RopeConfig& cfg = {}, Span span = Span::current()) {
  const char* kernel = cfg.backward ? "rope_backward" : "rope";
  require_rank(x, 4, kernel, "x", span);
  require_float(x, kernel, "x", span);
  const auto xs = x.shape();
  const int64_t L = xs[2], D = xs[3], half = D / 2;
  if (D % 2 != 0) args_error(span, kernel, "the head dim {} of x must be even", D);
  for (auto [t, name] : {std::pair{&cos, "cos"}, std::pair{&sin, "sin"}})
    if (t->shape() != std::vector<int64_t>{L, half})
      args_error(span, kernel, "{} has shape {}; it must be [{}, {}] (positions x D/2)", name,
                 shape_str(t->shape()), L, half);
  auto out = nl::ndarray(xs, x.dtype(), nl::shared_hbm, "out");
  const nl::index b = nl::program_id(0), h = nl::program_id(1);
  // forward: y1 = x1 c - x2 s, y2 = x2 c + x1 s; backward: y1 = x1 c + x2 s, y2 = x2 c - x1 s
  const auto first = cfg.backward ? nl::add : nl::subtract;
  const auto second = cfg.backward ? nl::subtract : nl::add;
  for_each_tile(L, kPartitions, [&](nl::index, nl::index l0, int64_t lr) {
    auto rows = nl::ds(l0, lr);
    auto c = nl::load(cos(rows, nl::all), nl::float32);
    auto s = nl::load(sin(rows, nl::all), nl::float32);
    auto x1 = nl::load(x(b, h, rows, nl::ds(0, half)), nl::float32);
    auto x2 = nl::load(x(b, h, rows, nl::ds(half, half)), nl::float32);
    auto tile = [&](const char* name) {
      return nl::ndarray({lr, half}, nl::float32, nl::sbuf, name);
    };
    // Each half in the order product, product, sum, store: the last three each read the one
    // before, so the native backend runs them as one loop (a fused chain) and the store can
    // start before the other half is computed.
    auto x1c = tile("x1c"), x2s = tile("x2s"), x2c = tile("x2c"), x1s = tile("x1s");
    auto y1 = nl::ndarray({lr, half}, x.dtype(), nl::sbuf, "y1");
    auto y2 = nl::ndarray({lr, half}, x.dtype(), nl::sbuf, "y2");
    isa::tensor_tensor(x2s, x2, s, nl::multiply);
    isa::tensor_tensor(x1c, x1, c, nl::multiply);
    isa::tensor_tensor(y1, x1c, x2s, first);
    nl::store(out(b, h, rows, nl::ds(0, half)), y1);
    isa::tensor_tensor(x1s, x1, s, nl::multiply);
    isa::tensor_tensor(x2c, x2, c, nl::multiply);
    isa::tensor_tensor(y2, x2c, x1s, second);
    nl::store(out(b, h, rows, nl::ds(half, half)), y2);
  });
  return out;
}

// The gradient of rope with respect to x: rope with the inverse rotation.
inline nl::tensor rope_backward(const nl::tensor& dy, const nl::tensor& cos, const nl::tensor& sin,
                                Span span = Span::current()) {
  return rope(dy, cos, sin, RopeConfig{true}, span);
}

}  // namespace neuron::kernels
