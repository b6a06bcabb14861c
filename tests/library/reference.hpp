// Float64 references for the kernel library, written from the math (not from the kernels):
// plain loops over doubles, row-major tensors.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include "neuron/base/ops.hpp"

namespace neuron::testing::ref {

using Vec = std::vector<double>;

inline double activate(ActFunc f, double x) {
  switch (f) {
    case ActFunc::relu:
      return x > 0 ? x : 0;
    case ActFunc::gelu:
      return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
    case ActFunc::gelu_apprx_tanh:
      return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    case ActFunc::silu:
      return x / (1 + std::exp(-x));
    case ActFunc::sigmoid:
      return 1 / (1 + std::exp(-x));
    case ActFunc::tanh:
      return std::tanh(x);
    case ActFunc::copy:
      return x;
    default:
      return std::nan("");
  }
}

// C = op(A) @ op(B) + bias, then act. A is [M, K] or [K, M] (ta); B is [K, N] or [N, K] (tb).
inline Vec matmul(const Vec& a, const Vec& b, int64_t M, int64_t K, int64_t N, bool ta, bool tb,
                  const Vec* bias = nullptr, std::optional<ActFunc> act = std::nullopt) {
  Vec c(static_cast<size_t>(M * N));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = bias ? (*bias)[n] : 0.0;
      for (int64_t k = 0; k < K; ++k)
        s += a[ta ? k * M + m : m * K + k] * b[tb ? n * K + k : k * N + n];
      c[m * N + n] = act ? activate(*act, s) : s;
    }
  return c;
}

// Attention over q [B, Hq, L, E], k [B, Hkv, S, E], v [B, Hkv, S, Ev]: query head h reads kv
// head h / (Hq / Hkv); with `causal`, key j is visible to query i when j <= i + offset.
struct AttentionShape {
  int64_t B, Hq, Hkv, L, S, E, Ev;
  bool causal = false;
  int64_t offset = 0;
  double scale = 0;  // 0: 1 / sqrt(E)
  double sc() const { return scale > 0 ? scale : 1 / std::sqrt(double(E)); }
  bool visible(int64_t i, int64_t j) const { return !causal || j <= i + offset; }
  int64_t qi(int64_t b, int64_t h, int64_t i) const { return ((b * Hq + h) * L + i); }
  int64_t kj(int64_t b, int64_t h, int64_t j) const { return ((b * Hkv + h / (Hq / Hkv)) * S + j); }
};

struct AttentionOut {
  Vec out, lse;
};

// out = softmax(scale * q k^T masked) v and lse = logsumexp of the scaled masked scores; a
// query that sees no key gets out 0 and lse -inf.
inline AttentionOut attention(const AttentionShape& a, const Vec& q, const Vec& k, const Vec& v) {
  AttentionOut r{Vec(static_cast<size_t>(a.B * a.Hq * a.L * a.Ev), 0.0),
                 Vec(static_cast<size_t>(a.B * a.Hq * a.L), 0.0)};
  Vec s(static_cast<size_t>(a.S));
  for (int64_t b = 0; b < a.B; ++b)
    for (int64_t h = 0; h < a.Hq; ++h)
      for (int64_t i = 0; i < a.L; ++i) {
        double m = -INFINITY;
        for (int64_t j = 0; j < a.S; ++j) {
          if (!a.visible(i, j)) continue;
          double dot = 0;
          for (int64_t e = 0; e < a.E; ++e)
            dot += q[a.qi(b, h, i) * a.E + e] * k[a.kj(b, h, j) * a.E + e];
          s[j] = a.sc() * dot;
          m = std::max(m, s[j]);
        }
        if (m == -INFINITY) {
          r.lse[a.qi(b, h, i)] = -INFINITY;
          continue;
        }
        double l = 0;
        for (int64_t j = 0; j < a.S; ++j)
          if (a.visible(i, j)) l += std::exp(s[j] - m);
        for (int64_t j = 0; j < a.S; ++j) {
          if (!a.visible(i, j)) continue;
          const double w = std::exp(s[j] - m) / l;
          for (int64_t e = 0; e < a.Ev; ++e)
            r.out[a.qi(b, h, i) * a.Ev + e] += w * v[a.kj(b, h, j) * a.Ev + e];
        }
        r.lse[a.qi(b, h, i)] = m + std::log(l);
      }
  return r;
}

struct AttentionGrads {
  Vec dq, dk, dv;
};

// Gradients of sum(out * dout) for the attention above (dk, dv summed over the query heads of
// each kv head). Recomputed from scratch in float64.
inline AttentionGrads attention_backward(const AttentionShape& a, const Vec& q, const Vec& k,
                                         const Vec& v, const Vec& dout) {
  AttentionGrads g{Vec(q.size(), 0.0), Vec(k.size(), 0.0), Vec(v.size(), 0.0)};
  const AttentionOut fwd = attention(a, q, k, v);
  Vec p(static_cast<size_t>(a.S)), dp(static_cast<size_t>(a.S));
  for (int64_t b = 0; b < a.B; ++b)
    for (int64_t h = 0; h < a.Hq; ++h)
      for (int64_t i = 0; i < a.L; ++i) {
        const double lse = fwd.lse[a.qi(b, h, i)];
        if (lse == -INFINITY) continue;
        double D = 0;
        for (int64_t j = 0; j < a.S; ++j) {
          p[j] = dp[j] = 0;
          if (!a.visible(i, j)) continue;
          double dot = 0, dd = 0;
          for (int64_t e = 0; e < a.E; ++e)
            dot += q[a.qi(b, h, i) * a.E + e] * k[a.kj(b, h, j) * a.E + e];
          for (int64_t e = 0; e < a.Ev; ++e)
            dd += dout[a.qi(b, h, i) * a.Ev + e] * v[a.kj(b, h, j) * a.Ev + e];
          p[j] = std::exp(a.sc() * dot - lse);
          dp[j] = dd;
          D += p[j] * dd;
        }
        for (int64_t j = 0; j < a.S; ++j) {
          if (!a.visible(i, j)) continue;
          const double ds = p[j] * (dp[j] - D) * a.sc();
          for (int64_t e = 0; e < a.E; ++e) {
            g.dq[a.qi(b, h, i) * a.E + e] += ds * k[a.kj(b, h, j) * a.E + e];
            g.dk[a.kj(b, h, j) * a.E + e] += ds * q[a.qi(b, h, i) * a.E + e];
          }
          for (int64_t e = 0; e < a.Ev; ++e)
            g.dv[a.kj(b, h, j) * a.Ev + e] += p[j] * dout[a.qi(b, h, i) * a.Ev + e];
        }
      }
  return g;
}

// Row-wise ops over x [R, C] (the last axis).
inline Vec softmax(const Vec& x, int64_t R, int64_t C) {
  Vec y(x.size());
  for (int64_t r = 0; r < R; ++r) {
    double m = -INFINITY, l = 0;
    for (int64_t c = 0; c < C; ++c) m = std::max(m, x[r * C + c]);
    for (int64_t c = 0; c < C; ++c) l += std::exp(x[r * C + c] - m);
    for (int64_t c = 0; c < C; ++c) y[r * C + c] = std::exp(x[r * C + c] - m) / l;
  }
  return y;
}

// dx = y * (dy - sum(dy * y)) for y = softmax(x).
inline Vec softmax_backward(const Vec& y, const Vec& dy, int64_t R, int64_t C) {
  Vec dx(y.size());
  for (int64_t r = 0; r < R; ++r) {
    double s = 0;
    for (int64_t c = 0; c < C; ++c) s += dy[r * C + c] * y[r * C + c];
    for (int64_t c = 0; c < C; ++c) dx[r * C + c] = y[r * C + c] * (dy[r * C + c] - s);
  }
  return dx;
}

// Normalisation: rms (layer = false) or layer norm, optional weight and bias (nullptr: none).
struct NormGrads {
  Vec dx, dw, db;
};

inline Vec norm(bool layer, const Vec& x, int64_t R, int64_t D, double eps, const Vec* w,
                const Vec* b) {
  Vec y(x.size());
  for (int64_t r = 0; r < R; ++r) {
    double mean = 0, var = 0;
    if (layer)
      for (int64_t c = 0; c < D; ++c) mean += x[r * D + c] / D;
    for (int64_t c = 0; c < D; ++c) var += (x[r * D + c] - mean) * (x[r * D + c] - mean) / D;
    const double rstd = 1 / std::sqrt(var + eps);
    for (int64_t c = 0; c < D; ++c)
      y[r * D + c] = (x[r * D + c] - mean) * rstd * (w ? (*w)[c] : 1.0) + (b ? (*b)[c] : 0.0);
  }
  return y;
}

// Gradients of sum(norm(x) * dy), by differentiating the formula above: with xhat the
// normalised row and g = dy * w, dx = rstd * (g - mean(g) [layer only] - xhat * mean(g * xhat)).
inline NormGrads norm_backward(bool layer, const Vec& x, int64_t R, int64_t D, double eps,
                               const Vec* w, const Vec& dy) {
  NormGrads gr{Vec(x.size()), Vec(static_cast<size_t>(D), 0.0), Vec(static_cast<size_t>(D), 0.0)};
  Vec xhat(static_cast<size_t>(D)), g(static_cast<size_t>(D));
  for (int64_t r = 0; r < R; ++r) {
    double mean = 0, var = 0;
    if (layer)
      for (int64_t c = 0; c < D; ++c) mean += x[r * D + c] / D;
    for (int64_t c = 0; c < D; ++c) var += (x[r * D + c] - mean) * (x[r * D + c] - mean) / D;
    const double rstd = 1 / std::sqrt(var + eps);
    double mg = 0, mgx = 0;
    for (int64_t c = 0; c < D; ++c) {
      xhat[c] = (x[r * D + c] - mean) * rstd;
      g[c] = dy[r * D + c] * (w ? (*w)[c] : 1.0);
      mg += g[c] / D;
      mgx += g[c] * xhat[c] / D;
      gr.dw[c] += dy[r * D + c] * xhat[c];
      gr.db[c] += dy[r * D + c];
    }
    for (int64_t c = 0; c < D; ++c)
      gr.dx[r * D + c] = rstd * (g[c] - (layer ? mg : 0.0) - xhat[c] * mgx);
  }
  return gr;
}

// SwiGLU over x = [a | b] [R, 2H]: y = silu(a) * b; backward da = dy * b * silu'(a),
// db = dy * silu(a) with silu'(a) = s (1 + a (1 - s)), s = sigmoid(a).
inline Vec swiglu(const Vec& x, int64_t R, int64_t H) {
  Vec y(static_cast<size_t>(R * H));
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < H; ++c) {
      const double a = x[r * 2 * H + c], b = x[r * 2 * H + H + c];
      y[r * H + c] = a / (1 + std::exp(-a)) * b;
    }
  return y;
}

inline Vec swiglu_backward(const Vec& x, const Vec& dy, int64_t R, int64_t H) {
  Vec dx(x.size());
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < H; ++c) {
      const double a = x[r * 2 * H + c], b = x[r * 2 * H + H + c], g = dy[r * H + c];
      const double s = 1 / (1 + std::exp(-a));
      dx[r * 2 * H + c] = g * b * s * (1 + a * (1 - s));
      dx[r * 2 * H + H + c] = g * a * s;
    }
  return dx;
}

// Rotate-half rope of x [N, L, D] (N = batch * heads) with cos, sin [L, D/2]; `sign` -1
// rotates the other way (the backward).
inline Vec rope(const Vec& x, const Vec& cos, const Vec& sin, int64_t N, int64_t L, int64_t D,
                double sign = 1) {
  Vec y(x.size());
  const int64_t h = D / 2;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t l = 0; l < L; ++l)
      for (int64_t i = 0; i < h; ++i) {
        const double c = cos[l * h + i], s = sign * sin[l * h + i];
        const double x1 = x[(n * L + l) * D + i], x2 = x[(n * L + l) * D + h + i];
        y[(n * L + l) * D + i] = x1 * c - x2 * s;
        y[(n * L + l) * D + h + i] = x2 * c + x1 * s;
      }
  return y;
}

}  // namespace neuron::testing::ref
