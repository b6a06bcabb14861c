// The library's kernels as operators in the kernel registry (neuron/registry.hpp), so Python
// reaches them by name (neuron.registry.get("attention"), neuron.ops): one operator per kernel
// variant, its tensors first, then its settings as typed parameters. The config structs of the
// C++ API become parameters here; optional tensors (a bias, a norm weight) become separate
// variants, since a registered kernel takes a fixed list of tensors.
//
// Registered through neuron-opgen (tools/neuron_opgen.cpp), like a user's operators: the build
// runs it on this header (NEURON_OP marks) and compiles the registration code it writes into
// the Python module (CMakeLists.txt, "neuron-opgen"). The comment above a function is its doc,
// the comment just before a parameter the parameter's.
//
// Grids are the caller's, as in C++ (the *_grid functions): `programs` for the row-wise
// kernels (it must divide the row count; split_rows picks one), (B, Hkv, Hq / Hkv) for
// attention, (B, Hkv) for its backward, (B, H) for rope.
#pragma once
#include <cstdint>
#include <tuple>

#include "neuron/kernels/attention.hpp"
#include "neuron/kernels/attention_backward.hpp"
#include "neuron/kernels/matmul.hpp"
#include "neuron/kernels/norms.hpp"
#include "neuron/kernels/rope.hpp"
#include "neuron/kernels/softmax.hpp"
#include "neuron/kernels/swiglu.hpp"
#include "neuron/op.hpp"

namespace neuron::kernels::registered {

using T = nl::tensor;

// ---- matmul, linear ----

inline MatmulConfig matmul_config(bool transpose_a, bool transpose_b, int64_t programs,
                                  int64_t column_programs) {
  MatmulConfig cfg;
  cfg.transpose_a = transpose_a;
  cfg.transpose_b = transpose_b;
  cfg.programs = programs;
  cfg.column_programs = column_programs;
  return cfg;
}

// C[M, N] = op(A) @ op(B), fp32 accumulation; A [M, K] ([K, M] with transpose_a), B [K, N]
// ([N, K] with transpose_b); grid (programs,), or (programs, column_programs)
NEURON_OP(neuron)
inline T matmul(const T& a, const T& b,
                // A is stored [K, M]
                bool transpose_a = false,
                // B is stored [N, K]
                bool transpose_b = false,
                // SPMD programs along the rows (divides them)
                int64_t programs = 1,
                // SPMD programs along the columns (divides them; grid axis 1)
                int64_t column_programs = 1) {
  return kernels::matmul(a, b, matmul_config(transpose_a, transpose_b, programs, column_programs));
}

// C[M, N] = op(A) @ op(B) + bias[N] (bias added to every row), fp32 accumulation; grid
// (programs,), or (programs, column_programs)
NEURON_OP(neuron)
inline T matmul_bias(const T& a, const T& b, const T& bias,
                     // A is stored [K, M]
                     bool transpose_a = false,
                     // B is stored [N, K]
                     bool transpose_b = false,
                     // SPMD programs along the rows (divides them)
                     int64_t programs = 1,
                     // SPMD programs along the columns (divides them; grid axis 1)
                     int64_t column_programs = 1) {
  return kernels::matmul(a, b, bias,
                         matmul_config(transpose_a, transpose_b, programs, column_programs));
}

// torch.nn.functional.linear without a bias: y[M, N] = x[M, K] @ w[N, K].T; grid (programs,),
// or (programs, column_programs)
NEURON_OP(neuron)
inline T linear(const T& x, const T& w,
                // SPMD programs along the rows (divides them)
                int64_t programs = 1,
                // SPMD programs along the columns (divides them; grid axis 1)
                int64_t column_programs = 1) {
  return kernels::linear(x, w, matmul_config(false, true, programs, column_programs));
}

// torch.nn.functional.linear: y[M, N] = x[M, K] @ w[N, K].T + bias[N]; grid (programs,), or
// (programs, column_programs)
NEURON_OP(neuron)
inline T linear_bias(const T& x, const T& w, const T& bias,
                     // SPMD programs along the rows (divides them)
                     int64_t programs = 1,
                     // SPMD programs along the columns (divides them; grid axis 1)
                     int64_t column_programs = 1) {
  return kernels::linear(x, w, bias, matmul_config(false, true, programs, column_programs));
}

// ---- softmax ----

// row softmax of x [R, C]; grid (programs,)
NEURON_OP(neuron)
inline T softmax(const T& x,
                 // SPMD programs along the rows (divides them)
                 int64_t programs = 1) {
  return kernels::softmax(x, SoftmaxConfig{programs});
}

// dx = y * (dy - sum(dy * y, axis=-1)) for the softmax output y [R, C]; grid (programs,)
NEURON_OP(neuron)
inline T softmax_backward(const T& y, const T& dy,
                          // SPMD programs along the rows (divides them)
                          int64_t programs = 1) {
  return kernels::softmax_backward(y, dy, SoftmaxConfig{programs});
}

// ---- rms_norm, layer_norm (over the last axis of x [R, D]) ----
// The forwards also return their row statistics ([R, 1] fp32: rstd, and layer_norm's mean),
// which the backwards take instead of recomputing them from x.

inline NormConfig norm_config(double eps, int64_t programs) {
  return NormConfig{eps, programs};
}
// A backward's config: eps only enters the statistics, which the backward is given.
inline NormConfig backward_config(int64_t programs) {
  return NormConfig{0.0, programs};
}

inline std::tuple<T, T> two(const std::vector<T>& v) {
  return {v.at(0), v.at(1)};
}
inline std::tuple<T, T, T> three(const std::vector<T>& v) {
  return {v.at(0), v.at(1), v.at(2)};
}

// (y, rstd): y = x * rsqrt(mean(x^2) + eps) over the last axis of x [R, D]; grid (programs,)
NEURON_OP(neuron)
inline std::tuple<T, T> rms_norm(const T& x,
                                 // added to the mean square
                                 double eps = 1e-5,
                                 // SPMD programs along the rows (divides them)
                                 int64_t programs = 1) {
  return two(kernels::rms_norm_with_stats(x, std::nullopt, norm_config(eps, programs)));
}

// (y, rstd) of rms_norm times weight [D]; grid (programs,)
NEURON_OP(neuron)
inline std::tuple<T, T> rms_norm_weight(const T& x, const T& weight,
                                        // added to the mean square
                                        double eps = 1e-5,
                                        // SPMD programs along the rows (divides them)
                                        int64_t programs = 1) {
  return two(kernels::rms_norm_with_stats(x, weight, norm_config(eps, programs)));
}

// dx of rms_norm (no weight) from x, the forward's rstd and dy; grid (programs,)
NEURON_OP(neuron)
inline T rms_norm_backward(const T& x, const T& rstd, const T& dy,
                           // SPMD programs along the rows (divides them)
                           int64_t programs = 1) {
  return kernels::rms_norm_backward(x, std::nullopt, SavedStats{std::nullopt, rstd}, dy,
                                    backward_config(programs))[0];
}

// dx and dweight [programs, D] (fp32 partial sums: add the rows) of rms_norm with a weight,
// from the forward's rstd; grid (programs,)
NEURON_OP(neuron)
inline std::tuple<T, T> rms_norm_weight_backward(const T& x, const T& weight, const T& rstd,
                                                 const T& dy,
                                                 // SPMD programs along the rows (divides them)
                                                 int64_t programs = 1) {
  return two(kernels::rms_norm_backward(x, weight, SavedStats{std::nullopt, rstd}, dy,
                                        backward_config(programs)));
}

// (y, mean, rstd): y = (x - mean) * rsqrt(var + eps) over the last axis of x [R, D];
// grid (programs,)
NEURON_OP(neuron)
inline std::tuple<T, T, T> layer_norm(const T& x,
                                      // added to the variance
                                      double eps = 1e-5,
                                      // SPMD programs along the rows (divides them)
                                      int64_t programs = 1) {
  return three(kernels::layer_norm_with_stats(x, std::nullopt, std::nullopt,
                                              norm_config(eps, programs)));
}

// (y, mean, rstd) of layer_norm times weight [D]; grid (programs,)
NEURON_OP(neuron)
inline std::tuple<T, T, T> layer_norm_weight(const T& x, const T& weight,
                                             // added to the variance
                                             double eps = 1e-5,
                                             // SPMD programs along the rows (divides them)
                                             int64_t programs = 1) {
  return three(kernels::layer_norm_with_stats(x, weight, std::nullopt,
                                              norm_config(eps, programs)));
}

// (y, mean, rstd) of layer_norm times weight [D] plus bias [D]; grid (programs,)
NEURON_OP(neuron)
inline std::tuple<T, T, T> layer_norm_affine(const T& x, const T& weight, const T& bias,
                                             // added to the variance
                                             double eps = 1e-5,
                                             // SPMD programs along the rows (divides them)
                                             int64_t programs = 1) {
  return three(kernels::layer_norm_with_stats(x, weight, bias, norm_config(eps, programs)));
}

// dx of layer_norm (no weight) from x, the forward's mean and rstd, and dy; grid (programs,)
NEURON_OP(neuron)
inline T layer_norm_backward(const T& x, const T& mean, const T& rstd, const T& dy,
                             // SPMD programs along the rows (divides them)
                             int64_t programs = 1) {
  return kernels::layer_norm_backward(x, std::nullopt, SavedStats{mean, rstd}, dy,
                                      backward_config(programs))[0];
}

// dx, dweight and dbias [programs, D] (fp32 partial sums: add the rows) of layer_norm with a
// weight (and a bias), from the forward's mean and rstd; grid (programs,)
NEURON_OP(neuron)
inline std::tuple<T, T, T> layer_norm_weight_backward(const T& x, const T& weight, const T& mean,
                                                      const T& rstd, const T& dy,
                                                      // SPMD programs along the rows (divides
                                                      // them)
                                                      int64_t programs = 1) {
  return three(kernels::layer_norm_backward(x, weight, SavedStats{mean, rstd}, dy,
                                            backward_config(programs)));
}

// ---- swiglu ----

// y [R, H] = silu(x[:, :H]) * x[:, H:] for x [R, 2H]; grid (programs,)
NEURON_OP(neuron)
inline T swiglu(const T& x,
                // SPMD programs along the rows (divides them)
                int64_t programs = 1) {
  return kernels::swiglu(x, SwigluConfig{programs});
}

// dx [R, 2H] of swiglu from x and dy [R, H]; grid (programs,)
NEURON_OP(neuron)
inline T swiglu_backward(const T& x, const T& dy,
                         // SPMD programs along the rows (divides them)
                         int64_t programs = 1) {
  return kernels::swiglu_backward(x, dy, SwigluConfig{programs});
}

// ---- rope ----

// rotary embedding, rotate-half convention: x [B, H, L, D], cos, sin [L, D/2]; grid (B, H)
NEURON_OP(neuron)
inline T rope(const T& x, const T& cos, const T& sin,
              // rotate by -angle (the gradient)
              bool backward = false) {
  return kernels::rope(x, cos, sin, RopeConfig{backward});
}

// ---- attention ----

inline AttentionConfig attention_config(bool causal, double scale, int64_t causal_offset) {
  AttentionConfig cfg;
  cfg.causal = causal;
  if (scale != 0) cfg.scale = scale;
  cfg.causal_offset = causal_offset;
  return cfg;
}

// flash attention: q [B, Hq, L, E], k [B, Hkv, S, E], v [B, Hkv, S, Ev] -> out [B, Hq, L, Ev],
// lse [B, Hq, L] fp32; grid (B, Hkv, Hq / Hkv)
NEURON_OP(neuron)
inline std::tuple<T, T> attention(const T& q, const T& k, const T& v,
                                  // key j visible to query i when j <= i + offset
                                  bool causal = false,
                                  // softmax scale; 0 takes 1 / sqrt(E)
                                  double scale = 0.0,
                                  // 0 is PyTorch's is_causal (top left)
                                  int64_t causal_offset = 0) {
  return attention_forward(q, k, v, attention_config(causal, scale, causal_offset));
}

// flash attention with an additive fp32 bias [B or 1, Hq or 1, L or 1, S] on the scaled scores
// (PyTorch's float attn_mask; -inf hides a key) -> out, lse; grid (B, Hkv, Hq / Hkv)
NEURON_OP(neuron)
inline std::tuple<T, T> attention_bias(const T& q, const T& k, const T& v, const T& bias,
                                       // key j visible to query i when j <= i + offset
                                       bool causal = false,
                                       // softmax scale; 0 takes 1 / sqrt(E)
                                       double scale = 0.0,
                                       // 0 is PyTorch's is_causal (top left)
                                       int64_t causal_offset = 0) {
  return attention_forward(q, k, v, bias, attention_config(causal, scale, causal_offset));
}

// flash attention backward from the saved lse: dq, dk, dv (dk, dv summed over the GQA group);
// grid (B, Hkv)
NEURON_OP(neuron)
inline std::tuple<T, T, T> attention_backward(const T& q, const T& k, const T& v, const T& out,
                                              const T& dout, const T& lse,
                                              // key j visible to query i when j <= i + offset
                                              bool causal = false,
                                              // softmax scale; 0 takes 1 / sqrt(E)
                                              double scale = 0.0,
                                              // 0 is PyTorch's is_causal (top left)
                                              int64_t causal_offset = 0) {
  return kernels::attention_backward(q, k, v, out, dout, lse,
                                     attention_config(causal, scale, causal_offset));
}

// attention_bias' backward from its saved lse: dq, dk, dv (the bias gets no gradient); grid
// (B, Hkv)
NEURON_OP(neuron)
inline std::tuple<T, T, T> attention_bias_backward(const T& q, const T& k, const T& v, const T& out,
                                                   const T& dout, const T& lse, const T& bias,
                                                   // key j visible to query i when j <= i + offset
                                                   bool causal = false,
                                                   // softmax scale; 0 takes 1 / sqrt(E)
                                                   double scale = 0.0,
                                                   // 0 is PyTorch's is_causal (top left)
                                                   int64_t causal_offset = 0) {
  return kernels::attention_backward(q, k, v, out, dout, lse, bias,
                                     attention_config(causal, scale, causal_offset));
}

// the backward of PyTorch's math path (attention_backward.hpp): dq, dk, dv from the inputs and
// dout only, p = exp(s - m) / l and D = rowsum(p * dp) recomputed; grid (B, Hkv)
NEURON_OP(neuron)
inline std::tuple<T, T, T> attention_math_backward(const T& q, const T& k, const T& v,
                                                   const T& dout,
                                                   // key j visible to query i when j <= i + offset
                                                   bool causal = false,
                                                   // softmax scale; 0 takes 1 / sqrt(E)
                                                   double scale = 0.0,
                                                   // 0 is PyTorch's is_causal (top left)
                                                   int64_t causal_offset = 0) {
  return kernels::attention_math_backward(q, k, v, dout, std::nullopt,
                                          attention_config(causal, scale, causal_offset));
}

// attention_math_backward with attention_bias' bias (which gets no gradient); grid (B, Hkv)
NEURON_OP(neuron)
inline std::tuple<T, T, T> attention_bias_math_backward(
    const T& q, const T& k, const T& v, const T& dout, const T& bias,
    // key j visible to query i when j <= i + offset
    bool causal = false,
    // softmax scale; 0 takes 1 / sqrt(E)
    double scale = 0.0,
    // 0 is PyTorch's is_causal (top left)
    int64_t causal_offset = 0) {
  return kernels::attention_math_backward(q, k, v, dout, bias,
                                          attention_config(causal, scale, causal_offset));
}

}  // namespace neuron::kernels::registered
