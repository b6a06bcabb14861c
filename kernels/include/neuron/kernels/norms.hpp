// rms_norm and layer_norm over the last axis of x [R, D], forward and backward, any R and D;
// statistics and arithmetic in fp32, results in x's dtype.
//
// Tiling and engine plan. Each SPMD program owns R / programs consecutive rows (grid
// norm_grid(cfg)), 128 at a time with rows on partitions, whole rows per tile (D up to
// ~12k columns fits SBUF). The weight and bias rows are broadcast over the partitions once
// per program by one DMA.
//  - Statistics: the Scalar engine squares and sums a row in one activation with an add
//    reduction (for layer_norm centred by its bias, the negated row mean); rstd = rsqrt(sum / D
//    + eps) is one more activation with an eps bias column and scale 1/D.
//  - Normalising is one Vector engine tensor_scalar with two per-row scalars ((x - mean) *
//    rstd: the centred tile is never stored), the affine transform tensor_tensor (weight,
//    bias) instructions.
//  - The *_with_stats forwards also store the row statistics (mean for layer_norm, rstd) as
//    [R, 1] fp32, as PyTorch's native_layer_norm does; a backward given them loads two columns
//    per tile instead of recomputing them from x (two passes over the tile: a row sum and the
//    squares). Without them it recomputes.
//  - Backward forms dx row by row on the Vector engine, and reduces dweight / dbias over
//    rows, which lie on partitions, with the Tensor engine: ones[rows, 1].T @ (dy * xhat) into
//    PSUM, added to an fp32 SBUF accumulator per program. Programs write their partial sums as
//    row `program` of dweight / dbias [programs, D]; the caller adds the rows (one row when
//    programs == 1).
#pragma once
#include <optional>
#include <tuple>
#include <vector>

#include "neuron/kernels/tiling.hpp"

namespace neuron::kernels {

struct NormConfig {
  double eps = 1e-5;
  int64_t programs = 1;  // SPMD programs along the rows; must divide R
};

inline std::vector<int64_t> norm_grid(const NormConfig& cfg) {
  return {cfg.programs};
}

// Row statistics a *_with_stats forward returns for the backward: the row means (layer_norm
// only) and rsqrt(variance + eps), each [R, 1] fp32 in HBM.
struct SavedStats {
  std::optional<nl::tensor> mean;
  nl::tensor rstd;
};

namespace detail {

enum class NormKind { rms, layer };

struct NormInputs {
  nl::tensor x;
  std::optional<nl::tensor> w, b;
};

inline void check_norm(const nl::tensor& x, const std::optional<nl::tensor>& w,
                       const std::optional<nl::tensor>& b, const NormConfig& cfg,
                       const char* kernel, const Span& span) {
  require_rank(x, 2, kernel, "x", span);
  require_float(x, kernel, "x", span);
  const int64_t D = x.shape()[1];
  for (auto [t, name] : {std::pair{&w, "weight"}, std::pair{&b, "bias"}})
    if (*t && ((*t)->ndim() != 1 || (*t)->shape()[0] != D))
      args_error(span, kernel, "{} has shape {}; it must be [{}]", name, shape_str((*t)->shape()),
                 D);
  if (cfg.programs < 1 || x.shape()[0] % cfg.programs != 0)
    args_error(span, kernel, "programs={} must divide the {} rows (use split_rows)", cfg.programs,
               x.shape()[0]);
  if (!(cfg.eps >= 0)) args_error(span, kernel, "eps={} must be a non-negative number", cfg.eps);
}

// Row statistics of an fp32 tile t [rr, D]: mean (layer_norm only) and rstd [rr, 1]. The
// centred tile is never stored: the squares take the negated mean as the activation's bias,
// and normalize() centres and scales in one two-op tensor_scalar (the same fp32 roundings as
// storing it; x - mean is x + (-mean) exactly).
struct RowStats {
  std::optional<nl::tensor> mean;
  nl::tensor rstd;
};

inline RowStats row_stats(NormKind kind, const nl::tensor& t, const nl::tensor& eps_col) {
  const int64_t rr = t.shape()[0], D = t.shape()[1];
  std::optional<nl::tensor> mean, negmean;
  if (kind == NormKind::layer) {
    auto sum = nl::ndarray({rr, 1}, nl::float32, nl::sbuf, "sum");
    isa::tensor_reduce(sum, nl::add, t, 1);
    mean = nl::ndarray({rr, 1}, nl::float32, nl::sbuf, "mean");
    isa::tensor_scalar(*mean, sum, nl::multiply, 1.0 / double(D));
    negmean = nl::ndarray({rr, 1}, nl::float32, nl::sbuf, "negmean");
    isa::tensor_scalar(*negmean, *mean, nl::multiply, -1.0);
  }
  auto sq = nl::ndarray({rr, D}, nl::float32, nl::sbuf, "sq");
  auto ss = nl::ndarray({rr, 1}, nl::float32, nl::sbuf, "sumsq");
  isa::activation(sq, nl::square, t, negmean, 1.0, nl::add, ss);
  auto rstd = nl::ndarray({rr, 1}, nl::float32, nl::sbuf, "rstd");
  isa::activation(rstd, nl::rsqrt, ss, eps_col(nl::ds(0, rr), nl::all), 1.0 / double(D));
  return {mean, rstd};
}

// The statistics of rows [r0, r0 + rr) saved by a *_with_stats forward, loaded as columns.
inline RowStats load_row_stats(const SavedStats& saved, const nl::index& r0, int64_t rr) {
  std::optional<nl::tensor> mean;
  if (saved.mean) mean = nl::load((*saved.mean)(nl::ds(r0, rr), nl::all), nl::float32);
  return {mean, nl::load(saved.rstd(nl::ds(r0, rr), nl::all), nl::float32)};
}

// out = (t - mean) * rstd (layer_norm) or t * rstd (rms_norm).
inline void normalize(const nl::tensor& out, const nl::tensor& t, const RowStats& st) {
  if (st.mean)
    isa::tensor_scalar(out, t, nl::subtract, *st.mean, false, nl::multiply, st.rstd);
  else
    isa::tensor_scalar(out, t, nl::multiply, st.rstd);
}

// {out}, or with save_stats {out, [mean,] rstd} (SavedStats' tensors, [R, 1] fp32).
inline std::vector<nl::tensor> norm_forward(NormKind kind, const NormInputs& in,
                                            const NormConfig& cfg, bool save_stats,
                                            const char* kernel, const Span& span) {
  check_norm(in.x, in.w, in.b, cfg, kernel, span);
  const int64_t R = in.x.shape()[0], D = in.x.shape()[1];
  auto out = nl::ndarray({R, D}, in.x.dtype(), nl::shared_hbm, "out");
  std::optional<nl::tensor> mean_out, rstd_out;
  if (save_stats) {
    if (kind == NormKind::layer)
      mean_out = nl::ndarray({R, 1}, nl::float32, nl::shared_hbm, "mean");
    rstd_out = nl::ndarray({R, 1}, nl::float32, nl::shared_hbm, "rstd");
  }
  const int64_t rows = R / cfg.programs, P = std::min(rows, kPartitions);
  const nl::index row0 = nl::program_id(0) * rows;
  auto eps_col = nl::full({P, 1}, cfg.eps, nl::float32, nl::sbuf, "eps");
  std::optional<nl::tensor> wb, bb;
  if (in.w) wb = load_broadcast_row(*in.w, P, nl::float32, "weight");
  if (in.b) bb = load_broadcast_row(*in.b, P, nl::float32, "bias");
  for_each_tile(rows, kPartitions, [&](nl::index, nl::index r0, int64_t rr) {
    auto t = nl::load(in.x(nl::ds(row0 + r0, rr), nl::all), nl::float32);
    const RowStats st = row_stats(kind, t, eps_col);
    auto y = nl::ndarray({rr, D}, in.x.dtype(), nl::sbuf, "y");
    if (!wb && !bb) {
      normalize(y, t, st);
    } else {
      auto xn = nl::ndarray({rr, D}, nl::float32, nl::sbuf, "xn");
      normalize(xn, t, st);
      if (wb && bb) {
        auto scaled = nl::ndarray({rr, D}, nl::float32, nl::sbuf, "scaled");
        isa::tensor_tensor(scaled, xn, (*wb)(nl::ds(0, rr), nl::all), nl::multiply);
        isa::tensor_tensor(y, scaled, (*bb)(nl::ds(0, rr), nl::all), nl::add);
      } else if (wb) {
        isa::tensor_tensor(y, xn, (*wb)(nl::ds(0, rr), nl::all), nl::multiply);
      } else {
        isa::tensor_tensor(y, xn, (*bb)(nl::ds(0, rr), nl::all), nl::add);
      }
    }
    nl::store(out(nl::ds(row0 + r0, rr), nl::all), y);
    if (mean_out) nl::store((*mean_out)(nl::ds(row0 + r0, rr), nl::all), *st.mean);
    if (rstd_out) nl::store((*rstd_out)(nl::ds(row0 + r0, rr), nl::all), st.rstd);
  });
  std::vector<nl::tensor> outs{out};
  if (mean_out) outs.push_back(*mean_out);
  if (rstd_out) outs.push_back(*rstd_out);
  return outs;
}

// Adds ones[rr, 1].T @ v[rr, D] (the column sums of v, rows on partitions) to acc [1, D].
inline void add_column_sums(const nl::tensor& acc, const nl::tensor& v, const nl::tensor& ones) {
  const int64_t rr = v.shape()[0], D = v.shape()[1];
  for_each_static_tile(0, D, kPsumColumns, [&](int64_t c0, int64_t cw) {
    auto ps = nl::ndarray({1, cw}, nl::float32, nl::psum, "colsum");
    isa::nc_matmul(ps, ones(nl::ds(0, rr), nl::all), v(nl::all, nl::ds(c0, cw)),
                   /*accumulate=*/false);
    isa::tensor_tensor(acc(nl::all, nl::ds(c0, cw)), acc(nl::all, nl::ds(c0, cw)), ps, nl::add);
  });
}

// Returns dx, and with a weight also dweight [programs, D] and (layer_norm) dbias
// [programs, D], fp32 partial sums per program.
// The row statistics come from `saved` when given (a *_with_stats forward's), else from x.
inline std::vector<nl::tensor> norm_backward(NormKind kind, const nl::tensor& x,
                                             const std::optional<nl::tensor>& w,
                                             const std::optional<SavedStats>& saved,
                                             const nl::tensor& dy, const NormConfig& cfg,
                                             const char* kernel, const Span& span) {
  check_norm(x, w, std::nullopt, cfg, kernel, span);
  if (dy.shape() != x.shape())
    args_error(span, kernel, "dy has shape {} but x has shape {}", shape_str(dy.shape()),
               shape_str(x.shape()));
  const int64_t R = x.shape()[0], D = x.shape()[1];
  if (saved) {
    if ((kind == NormKind::layer) != bool(saved->mean))
      args_error(span, kernel, "{} takes {} as its saved statistics (what {}_with_stats returns)",
                 kernel, kind == NormKind::layer ? "the mean and the rstd" : "only the rstd",
                 kind == NormKind::layer ? "layer_norm" : "rms_norm");
    const std::vector<int64_t> column{R, 1};
    for (auto [t, name] : {std::pair{saved->mean ? &*saved->mean : nullptr, "mean"},
                           std::pair{&saved->rstd, "rstd"}})
      if (t && (t->shape() != column || t->dtype() != nl::float32))
        args_error(span, kernel, "saved {} is {} {}; it must be float32 [{}, 1], as the "
                   "*_with_stats forward returns it", name, dtype_name(t->dtype()),
                   shape_str(t->shape()), R);
  }
  auto dx = nl::ndarray({R, D}, dy.dtype(), nl::shared_hbm, "dx");
  std::optional<nl::tensor> dw, db;
  if (w) {
    dw = nl::ndarray({cfg.programs, D}, nl::float32, nl::shared_hbm, "dweight");
    if (kind == NormKind::layer)
      db = nl::ndarray({cfg.programs, D}, nl::float32, nl::shared_hbm, "dbias");
  }
  const int64_t rows = R / cfg.programs, P = std::min(rows, kPartitions);
  const nl::index row0 = nl::program_id(0) * rows;
  std::optional<nl::tensor> eps_col;
  if (!saved) eps_col = nl::full({P, 1}, cfg.eps, nl::float32, nl::sbuf, "eps");
  std::optional<nl::tensor> wb, ones, dw_acc, db_acc;
  if (w) {
    wb = load_broadcast_row(*w, P, nl::float32, "weight");
    ones = nl::ones({P, 1}, nl::float32, nl::sbuf, "ones");
    dw_acc = nl::zeros({1, D}, nl::float32, nl::sbuf, "dw_acc");
    if (db) db_acc = nl::zeros({1, D}, nl::float32, nl::sbuf, "db_acc");
  }
  // The dweight / dbias accumulators carry from tile to tile.
  const LoopKind kind_of_loop = w ? LoopKind::sequential : LoopKind::affine;
  for_each_tile(
      rows, kPartitions,
      [&](nl::index, nl::index r0, int64_t rr) {
        auto rows_v = nl::ds(row0 + r0, rr);
        auto t = nl::load(x(rows_v, nl::all), nl::float32);
        auto dyt = nl::load(dy(rows_v, nl::all), nl::float32);
        const RowStats st = saved ? load_row_stats(*saved, row0 + r0, rr)
                                  : row_stats(kind, t, *eps_col);
        const nl::tensor& rstd = st.rstd;
        auto xhat = nl::ndarray({rr, D}, nl::float32, nl::sbuf, "xhat");
        normalize(xhat, t, st);
        nl::tensor g = dyt;
        if (wb) {
          g = nl::ndarray({rr, D}, nl::float32, nl::sbuf, "g");
          isa::tensor_tensor(g, dyt, (*wb)(nl::ds(0, rr), nl::all), nl::multiply);
        }
        // The row means first, then dx = (g - (xhat * mean(g * xhat) + mean(g))) * rstd (no
        // mean(g) for rms_norm) as consecutive element-wise steps, each reading the one before
        // (the native backend runs them, and the store, as one loop).
        auto gx = nl::ndarray({rr, D}, nl::float32, nl::sbuf, "gx");
        isa::tensor_tensor(gx, g, xhat, nl::multiply);
        auto mgx = nl::ndarray({rr, 1}, nl::float32, nl::sbuf, "mgx");
        isa::tensor_reduce(mgx, nl::add, gx, 1);
        isa::tensor_scalar(mgx, mgx, nl::multiply, 1.0 / double(D));
        auto corr = nl::ndarray({rr, D}, nl::float32, nl::sbuf, "corr");
        if (kind == NormKind::layer) {
          auto mg = nl::ndarray({rr, 1}, nl::float32, nl::sbuf, "mg");
          isa::tensor_reduce(mg, nl::add, g, 1);
          isa::tensor_scalar(mg, mg, nl::multiply, 1.0 / double(D));
          isa::tensor_scalar(corr, xhat, nl::multiply, mgx, false, nl::add, mg);
        } else {
          isa::tensor_scalar(corr, xhat, nl::multiply, mgx);
        }
        auto d = nl::ndarray({rr, D}, nl::float32, nl::sbuf, "d");
        isa::tensor_tensor(d, g, corr, nl::subtract);
        auto dxt = nl::ndarray({rr, D}, dy.dtype(), nl::sbuf, "dxt");
        isa::tensor_scalar(dxt, d, nl::multiply, rstd);
        nl::store(dx(rows_v, nl::all), dxt);
        if (w) {
          auto dyx = nl::ndarray({rr, D}, nl::float32, nl::sbuf, "dyx");
          isa::tensor_tensor(dyx, dyt, xhat, nl::multiply);
          add_column_sums(*dw_acc, dyx, *ones);
          if (db_acc) add_column_sums(*db_acc, dyt, *ones);
        }
      },
      0, kind_of_loop);
  std::vector<nl::tensor> outs{dx};
  if (dw) {
    nl::store((*dw)(nl::ds(nl::program_id(0), 1), nl::all), *dw_acc);
    outs.push_back(*dw);
  }
  if (db) {
    nl::store((*db)(nl::ds(nl::program_id(0), 1), nl::all), *db_acc);
    outs.push_back(*db);
  }
  return outs;
}

}  // namespace detail

// torch.nn.functional.rms_norm over the last axis: y = x * rsqrt(mean(x^2) + eps) (* weight).
inline nl::tensor rms_norm(const nl::tensor& x, const NormConfig& cfg = {},
                           Span span = Span::current()) {
  return detail::norm_forward(detail::NormKind::rms, {x, std::nullopt, std::nullopt}, cfg, false,
                              "rms_norm", span)[0];
}
inline nl::tensor rms_norm(const nl::tensor& x, const nl::tensor& weight,
                           const NormConfig& cfg = {}, Span span = Span::current()) {
  return detail::norm_forward(detail::NormKind::rms, {x, weight, std::nullopt}, cfg, false,
                              "rms_norm", span)[0];
}
// rms_norm and its row statistics for the backward: {y, rstd [R, 1] fp32}.
inline std::vector<nl::tensor> rms_norm_with_stats(const nl::tensor& x,
                                                   const std::optional<nl::tensor>& weight,
                                                   const NormConfig& cfg = {},
                                                   Span span = Span::current()) {
  return detail::norm_forward(detail::NormKind::rms, {x, weight, std::nullopt}, cfg, true,
                              "rms_norm", span);
}

// torch.nn.functional.layer_norm over the last axis: (x - mean) * rsqrt(var + eps)
// (* weight) (+ bias), var the biased variance.
inline nl::tensor layer_norm(const nl::tensor& x, const NormConfig& cfg = {},
                             Span span = Span::current()) {
  return detail::norm_forward(detail::NormKind::layer, {x, std::nullopt, std::nullopt}, cfg, false,
                              "layer_norm", span)[0];
}
inline nl::tensor layer_norm(const nl::tensor& x, const nl::tensor& weight,
                             const NormConfig& cfg = {}, Span span = Span::current()) {
  return detail::norm_forward(detail::NormKind::layer, {x, weight, std::nullopt}, cfg, false,
                              "layer_norm", span)[0];
}
inline nl::tensor layer_norm(const nl::tensor& x, const nl::tensor& weight, const nl::tensor& bias,
                             const NormConfig& cfg = {}, Span span = Span::current()) {
  return detail::norm_forward(detail::NormKind::layer, {x, weight, bias}, cfg, false, "layer_norm",
                              span)[0];
}
// layer_norm and its row statistics for the backward: {y, mean [R, 1], rstd [R, 1]} (fp32).
inline std::vector<nl::tensor> layer_norm_with_stats(const nl::tensor& x,
                                                     const std::optional<nl::tensor>& weight,
                                                     const std::optional<nl::tensor>& bias,
                                                     const NormConfig& cfg = {},
                                                     Span span = Span::current()) {
  return detail::norm_forward(detail::NormKind::layer, {x, weight, bias}, cfg, true, "layer_norm",
                              span);
}

// Backward of rms_norm: dx; with a weight {dx, dweight [programs, D] fp32 partial sums}. The
// row statistics are recomputed from x, or taken from `saved` (rms_norm_with_stats' rstd).
inline nl::tensor rms_norm_backward(const nl::tensor& x, const nl::tensor& dy,
                                    const NormConfig& cfg = {}, Span span = Span::current()) {
  return detail::norm_backward(detail::NormKind::rms, x, std::nullopt, std::nullopt, dy, cfg,
                               "rms_norm_backward", span)[0];
}
inline std::vector<nl::tensor> rms_norm_backward(const nl::tensor& x, const nl::tensor& weight,
                                                 const nl::tensor& dy, const NormConfig& cfg = {},
                                                 Span span = Span::current()) {
  return detail::norm_backward(detail::NormKind::rms, x, weight, std::nullopt, dy, cfg,
                               "rms_norm_backward", span);
}
inline std::vector<nl::tensor> rms_norm_backward(const nl::tensor& x,
                                                 const std::optional<nl::tensor>& weight,
                                                 const SavedStats& saved, const nl::tensor& dy,
                                                 const NormConfig& cfg = {},
                                                 Span span = Span::current()) {
  return detail::norm_backward(detail::NormKind::rms, x, weight, saved, dy, cfg,
                               "rms_norm_backward", span);
}

// Backward of layer_norm: dx; with a weight {dx, dweight, dbias}, the last two [programs, D]
// fp32 partial sums (dbias is the bias's gradient when the forward had one). The row
// statistics are recomputed from x, or taken from `saved` (layer_norm_with_stats' mean, rstd).
inline nl::tensor layer_norm_backward(const nl::tensor& x, const nl::tensor& dy,
                                      const NormConfig& cfg = {}, Span span = Span::current()) {
  return detail::norm_backward(detail::NormKind::layer, x, std::nullopt, std::nullopt, dy, cfg,
                               "layer_norm_backward", span)[0];
}
inline std::vector<nl::tensor> layer_norm_backward(const nl::tensor& x, const nl::tensor& weight,
                                                   const nl::tensor& dy, const NormConfig& cfg = {},
                                                   Span span = Span::current()) {
  return detail::norm_backward(detail::NormKind::layer, x, weight, std::nullopt, dy, cfg,
                               "layer_norm_backward", span);
}
inline std::vector<nl::tensor> layer_norm_backward(const nl::tensor& x,
                                                   const std::optional<nl::tensor>& weight,
                                                   const SavedStats& saved, const nl::tensor& dy,
                                                   const NormConfig& cfg = {},
                                                   Span span = Span::current()) {
  return detail::norm_backward(detail::NormKind::layer, x, weight, saved, dy, cfg,
                               "layer_norm_backward", span);
}

}  // namespace neuron::kernels
