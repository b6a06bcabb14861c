// The library's kernels in the kernel registry (neuron/registry.hpp), so Python reaches them by
// name (neuron.registry.get("attention"), neuron.ops): one registration per kernel variant, its
// tensors first, then its settings as typed parameters. The config structs of the C++ API
// become parameters here; optional tensors (a bias, a norm weight) become separate variants,
// since a registered kernel takes a fixed list of tensors.
//
// Grids are the caller's, as in C++ (the *_grid functions): `programs` for the row-wise
// kernels (it must divide the row count; split_rows picks one), (B, Hkv, Hq / Hkv) for
// attention, (B, Hkv) for its backward, (B, H) for rope.
#pragma once
#include <cstdint>
#include <tuple>
#include <vector>

#include "neuron/kernels/attention.hpp"
#include "neuron/kernels/attention_backward.hpp"
#include "neuron/kernels/matmul.hpp"
#include "neuron/kernels/norms.hpp"
#include "neuron/kernels/rope.hpp"
#include "neuron/kernels/softmax.hpp"
#include "neuron/kernels/swiglu.hpp"
#include "neuron/registry.hpp"

namespace neuron::kernels::registered {

using T = nl::tensor;

inline auto programs_param() {
  return neuron::param<int64_t>("programs", 1, "SPMD programs along the rows (divides them)");
}
inline auto eps_param() {
  return neuron::param<double>("eps", 1e-5, "added to the variance / mean square");
}

// ---- matmul, linear ----
inline T matmul(const T& a, const T& b, bool transpose_a, bool transpose_b, int64_t programs) {
  MatmulConfig cfg;
  cfg.transpose_a = transpose_a;
  cfg.transpose_b = transpose_b;
  cfg.programs = programs;
  return kernels::matmul(a, b, cfg);
}
inline T linear(const T& x, const T& w, int64_t programs) {
  MatmulConfig cfg;
  cfg.programs = programs;
  return kernels::linear(x, w, cfg);
}
inline T linear_bias(const T& x, const T& w, const T& bias, int64_t programs) {
  MatmulConfig cfg;
  cfg.programs = programs;
  return kernels::linear(x, w, bias, cfg);
}

NEURON_KERNEL(matmul, registered::matmul,
              "C[M, N] = op(A) @ op(B), fp32 accumulation; A [M, K] ([K, M] with transpose_a), "
              "B [K, N] ([N, K] with transpose_b); grid (programs,)",
              neuron::inputs("a", "b"),
              neuron::param<bool>("transpose_a", false, "A is stored [K, M]"),
              neuron::param<bool>("transpose_b", false, "B is stored [N, K]"), programs_param());
NEURON_KERNEL(linear, registered::linear,
              "torch.nn.functional.linear without a bias: y[M, N] = x[M, K] @ w[N, K].T; grid "
              "(programs,)",
              neuron::inputs("x", "w"), programs_param());
NEURON_KERNEL(linear_bias, registered::linear_bias,
              "torch.nn.functional.linear: y[M, N] = x[M, K] @ w[N, K].T + bias[N]; grid "
              "(programs,)",
              neuron::inputs("x", "w", "bias"), programs_param());

// ---- softmax ----
inline T softmax(const T& x, int64_t programs) {
  return kernels::softmax(x, SoftmaxConfig{programs});
}
inline T softmax_backward(const T& y, const T& dy, int64_t programs) {
  return kernels::softmax_backward(y, dy, SoftmaxConfig{programs});
}
NEURON_KERNEL(softmax, registered::softmax, "row softmax of x [R, C]; grid (programs,)",
              neuron::inputs("x"), programs_param());
NEURON_KERNEL(softmax_backward, registered::softmax_backward,
              "dx = y * (dy - sum(dy * y, axis=-1)) for the softmax output y [R, C]; grid "
              "(programs,)",
              neuron::inputs("y", "dy"), programs_param());

// ---- rms_norm, layer_norm (over the last axis of x [R, D]) ----
inline NormConfig norm_config(double eps, int64_t programs) {
  return NormConfig{eps, programs};
}
inline T rms_norm(const T& x, double eps, int64_t programs) {
  return kernels::rms_norm(x, norm_config(eps, programs));
}
inline T rms_norm_weight(const T& x, const T& w, double eps, int64_t programs) {
  return kernels::rms_norm(x, w, norm_config(eps, programs));
}
inline T rms_norm_backward(const T& x, const T& dy, double eps, int64_t programs) {
  return kernels::rms_norm_backward(x, dy, norm_config(eps, programs));
}
inline std::vector<T> rms_norm_weight_backward(const T& x, const T& w, const T& dy, double eps,
                                               int64_t programs) {
  return kernels::rms_norm_backward(x, w, dy, norm_config(eps, programs));
}
inline T layer_norm(const T& x, double eps, int64_t programs) {
  return kernels::layer_norm(x, norm_config(eps, programs));
}
inline T layer_norm_weight(const T& x, const T& w, double eps, int64_t programs) {
  return kernels::layer_norm(x, w, norm_config(eps, programs));
}
inline T layer_norm_affine(const T& x, const T& w, const T& b, double eps, int64_t programs) {
  return kernels::layer_norm(x, w, b, norm_config(eps, programs));
}
inline T layer_norm_backward(const T& x, const T& dy, double eps, int64_t programs) {
  return kernels::layer_norm_backward(x, dy, norm_config(eps, programs));
}
inline std::vector<T> layer_norm_weight_backward(const T& x, const T& w, const T& dy, double eps,
                                                 int64_t programs) {
  return kernels::layer_norm_backward(x, w, dy, norm_config(eps, programs));
}

NEURON_KERNEL(rms_norm, registered::rms_norm,
              "y = x * rsqrt(mean(x^2) + eps) over the last axis of x [R, D]; grid (programs,)",
              neuron::inputs("x"), eps_param(), programs_param());
NEURON_KERNEL(rms_norm_weight, registered::rms_norm_weight,
              "rms_norm times weight [D]; grid (programs,)", neuron::inputs("x", "weight"),
              eps_param(), programs_param());
NEURON_KERNEL(rms_norm_backward, registered::rms_norm_backward,
              "dx of rms_norm (no weight) from x and dy; grid (programs,)",
              neuron::inputs("x", "dy"), eps_param(), programs_param());
NEURON_KERNEL(rms_norm_weight_backward, registered::rms_norm_weight_backward,
              "dx and dweight [programs, D] (fp32 partial sums: add the rows) of rms_norm with a "
              "weight; grid (programs,)",
              neuron::inputs("x", "weight", "dy"), eps_param(), programs_param());
NEURON_KERNEL(layer_norm, registered::layer_norm,
              "y = (x - mean) * rsqrt(var + eps) over the last axis of x [R, D]; grid "
              "(programs,)",
              neuron::inputs("x"), eps_param(), programs_param());
NEURON_KERNEL(layer_norm_weight, registered::layer_norm_weight,
              "layer_norm times weight [D]; grid (programs,)", neuron::inputs("x", "weight"),
              eps_param(), programs_param());
NEURON_KERNEL(layer_norm_affine, registered::layer_norm_affine,
              "layer_norm times weight [D] plus bias [D]; grid (programs,)",
              neuron::inputs("x", "weight", "bias"), eps_param(), programs_param());
NEURON_KERNEL(layer_norm_backward, registered::layer_norm_backward,
              "dx of layer_norm (no weight) from x and dy; grid (programs,)",
              neuron::inputs("x", "dy"), eps_param(), programs_param());
NEURON_KERNEL(layer_norm_weight_backward, registered::layer_norm_weight_backward,
              "dx, dweight and dbias [programs, D] (fp32 partial sums: add the rows) of "
              "layer_norm with a weight (and a bias); grid (programs,)",
              neuron::inputs("x", "weight", "dy"), eps_param(), programs_param());

// ---- swiglu ----
inline T swiglu(const T& x, int64_t programs) {
  return kernels::swiglu(x, SwigluConfig{programs});
}
inline T swiglu_backward(const T& x, const T& dy, int64_t programs) {
  return kernels::swiglu_backward(x, dy, SwigluConfig{programs});
}
NEURON_KERNEL(swiglu, registered::swiglu,
              "y [R, H] = silu(x[:, :H]) * x[:, H:] for x [R, 2H]; grid (programs,)",
              neuron::inputs("x"), programs_param());
NEURON_KERNEL(swiglu_backward, registered::swiglu_backward,
              "dx [R, 2H] of swiglu from x and dy [R, H]; grid (programs,)",
              neuron::inputs("x", "dy"), programs_param());

// ---- rope ----
inline T rope(const T& x, const T& cos, const T& sin, bool backward) {
  return kernels::rope(x, cos, sin, RopeConfig{backward});
}
NEURON_KERNEL(rope, registered::rope,
              "rotary embedding, rotate-half convention: x [B, H, L, D], cos, sin [L, D/2]; grid "
              "(B, H)",
              neuron::inputs("x", "cos", "sin"),
              neuron::param<bool>("backward", false, "rotate by -angle (the gradient)"));

// ---- attention ----
inline AttentionConfig attention_config(bool causal, double scale, int64_t causal_offset) {
  AttentionConfig cfg;
  cfg.causal = causal;
  if (scale != 0) cfg.scale = scale;
  cfg.causal_offset = causal_offset;
  return cfg;
}
inline std::tuple<T, T> attention(const T& q, const T& k, const T& v, bool causal, double scale,
                                  int64_t causal_offset) {
  return attention_forward(q, k, v, attention_config(causal, scale, causal_offset));
}
inline std::tuple<T, T, T> attention_backward(const T& q, const T& k, const T& v, const T& out,
                                              const T& dout, const T& lse, bool causal,
                                              double scale, int64_t causal_offset) {
  return kernels::attention_backward(q, k, v, out, dout, lse,
                                     attention_config(causal, scale, causal_offset));
}

inline auto causal_param() {
  return neuron::param<bool>("causal", false, "key j visible to query i when j <= i + offset");
}
inline auto scale_param() {
  return neuron::param<double>("scale", 0.0, "softmax scale; 0 takes 1 / sqrt(E)");
}
inline auto offset_param() {
  return neuron::param<int64_t>("causal_offset", 0, "0 is PyTorch's is_causal (top left)");
}
NEURON_KERNEL(attention, registered::attention,
              "flash attention: q [B, Hq, L, E], k [B, Hkv, S, E], v [B, Hkv, S, Ev] -> out "
              "[B, Hq, L, Ev], lse [B, Hq, L] fp32; grid (B, Hkv, Hq / Hkv)",
              neuron::inputs("q", "k", "v"), causal_param(), scale_param(), offset_param());
NEURON_KERNEL(attention_backward, registered::attention_backward,
              "flash attention backward from the saved lse: dq, dk, dv (dk, dv summed over the "
              "GQA group); grid (B, Hkv)",
              neuron::inputs("q", "k", "v", "out", "dout", "lse"), causal_param(), scale_param(),
              offset_param());

}  // namespace neuron::kernels::registered
