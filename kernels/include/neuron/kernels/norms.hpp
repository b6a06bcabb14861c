// rms_norm and layer_norm over the last axis of x [R, D], forward and backward, any R and D;
// statistics and arithmetic in fp32, results in x's dtype.
//
// Tiling and engine plan. Each SPMD program owns R / programs consecutive rows (grid
// norm_grid(cfg)), 128 at a time with rows on partitions. Rows of up to kNormWholeForward
// (forward) / kNormWholeBackward (backward, more live tiles) columns are kept whole per tile,
// and the weight and bias rows are broadcast over the partitions once per program by one DMA.
// Longer rows, of any length, are taken in column chunks of kNormChunk (passes over the
// chunks, as softmax.hpp does; x and dy are read once per pass, weight chunks per tile):
// statistics first (for layer_norm the mean, then the centred squares), then the output.
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
//    rows, which lie on partitions, with the Tensor engine after dx: ones[rows, 1].T @
//    (dy * xhat) accumulating in PSUM across the program's tiles when the sums fit its banks,
//    else added to an fp32 SBUF accumulator per tile. (After dx, a tile's instructions from
//    its loads to these matmuls are element-wise or contract over its rows, so the native
//    backend runs them all a few rows at a time.) Programs write their partial sums as
//    row `program` of dweight / dbias [programs, D]; the caller adds the rows (one row when
//    programs == 1). For chunked rows the row means mean(g * xhat) and mean(g) take a first
//    pass over the chunks, which also adds each chunk's column sums to the program's row of
//    dweight / dbias in HBM (read, add, write back: no [1, D] accumulator on chip); dx a second.
//    A chunk's weight is broadcast before its loads, and its column-sum matmuls all precede
//    the additions: natively the chunk's instructions from its loads on then make one
//    partition-blocked run, which reads x and dy in place (the backward of [512, 5120] fp32,
//    12.6 -> 5.5 ms in the native profile).
#pragma once
#include <optional>
#include <tuple>
#include <vector>

#include "neuron/kernels/tiling.hpp"

namespace neuron::kernels {

// Column chunk of long rows (fp32 tiles of 8 KiB per partition), and the widest rows kept
// whole per tile: measured against trn2's SBUF with every variant (weight, bias, fp32, bf16).
inline constexpr int64_t kNormChunk = 2048;
inline constexpr int64_t kNormWholeForward = 8192, kNormWholeBackward = 4096;

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

// row_stats of rows xr [rr, D] (an HBM view) longer than one chunk: a sequential pass over
// the column chunks per statistic (the sums carry from chunk to chunk).
inline RowStats chunked_row_stats(NormKind kind, const nl::tensor& xr, const nl::tensor& eps_col) {
  const int64_t rr = xr.shape()[0], D = xr.shape()[1];
  auto chunks = [&](auto&& body) {
    for_each_tile(
        D, kNormChunk,
        [&](nl::index, nl::index c0, int64_t cw) {
          body(nl::load(xr(nl::all, nl::ds(c0, cw)), nl::float32), cw);
        },
        0, LoopKind::sequential);
  };
  std::optional<nl::tensor> mean, negmean;
  if (kind == NormKind::layer) {
    auto sum = nl::zeros({rr, 1}, nl::float32, nl::sbuf, "sum");
    chunks([&](const nl::tensor& t, int64_t) {
      auto part = nl::ndarray({rr, 1}, nl::float32, nl::sbuf, "part");
      isa::tensor_reduce(part, nl::add, t, 1);
      isa::tensor_tensor(sum, sum, part, nl::add);
    });
    mean = nl::ndarray({rr, 1}, nl::float32, nl::sbuf, "mean");
    isa::tensor_scalar(*mean, sum, nl::multiply, 1.0 / double(D));
    negmean = nl::ndarray({rr, 1}, nl::float32, nl::sbuf, "negmean");
    isa::tensor_scalar(*negmean, *mean, nl::multiply, -1.0);
  }
  auto ss = nl::zeros({rr, 1}, nl::float32, nl::sbuf, "sumsq");
  chunks([&](const nl::tensor& t, int64_t cw) {
    auto sq = nl::ndarray({rr, cw}, nl::float32, nl::sbuf, "sq");
    auto part = nl::ndarray({rr, 1}, nl::float32, nl::sbuf, "part");
    isa::activation(sq, nl::square, t, negmean, 1.0, nl::add, part);
    isa::tensor_tensor(ss, ss, part, nl::add);
  });
  auto rstd = nl::ndarray({rr, 1}, nl::float32, nl::sbuf, "rstd");
  isa::activation(rstd, nl::rsqrt, ss, eps_col(nl::ds(0, rr), nl::all), 1.0 / double(D));
  return {mean, rstd};
}

// The statistics of rows xr [rr, D] (an HBM view) computed as the forward computes them, so
// that a backward recomputing them and one given the forward's saved statistics agree bit for
// bit.
inline RowStats forward_row_stats(NormKind kind, const nl::tensor& xr, const nl::tensor& eps_col) {
  if (xr.shape()[1] > kNormWholeForward) return chunked_row_stats(kind, xr, eps_col);
  return row_stats(kind, nl::load(xr, nl::float32), eps_col);
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
  const bool whole = D <= kNormWholeForward;
  std::optional<nl::tensor> wb, bb;  // whole rows: broadcast once per program
  if (whole && in.w) wb = load_broadcast_row(*in.w, P, nl::float32, "weight");
  if (whole && in.b) bb = load_broadcast_row(*in.b, P, nl::float32, "bias");
  // y = normalize(t) (* weight) (+ bias) for columns [c0, c0 + cw) of the tile's rows.
  auto emit = [&](const nl::tensor& t, const RowStats& st, const nl::tensor& yr,
                  const nl::index& c0, int64_t cw) {
    const int64_t rr = t.shape()[0];
    auto w_at = [&](const std::optional<nl::tensor>& whole_row, const std::optional<nl::tensor>& v,
                    const char* name) -> std::optional<nl::tensor> {
      if (!v) return std::nullopt;
      if (whole) return (*whole_row)(nl::ds(0, rr), nl::all);
      return nl::broadcast_to(load_row(*v, c0, cw, nl::float32, name), {rr, cw});
    };
    const auto wv = w_at(wb, in.w, "weight"), bv = w_at(bb, in.b, "bias");
    if (!wv && !bv) {
      auto y = nl::ndarray({rr, cw}, in.x.dtype(), nl::sbuf, "y");
      normalize(y, t, st);
      nl::store(yr, y);
      return;
    }
    auto xn = nl::ndarray({rr, cw}, nl::float32, nl::sbuf, "xn");
    normalize(xn, t, st);
    // The affine steps write into xn (and an fp32 result stays there): two [rows, D] tiles
    // fewer, so at D = 8192 the bias's broadcast row no longer shares bytes with another tile
    // and is folded natively (one row, read by every partition): [512, 8192] fp32 with a
    // weight and a bias 1.55 -> 0.95-1.08 ms (PyTorch 0.75).
    auto y = in.x.dtype() == nl::float32 ? xn : nl::ndarray({rr, cw}, in.x.dtype(), nl::sbuf, "y");
    if (wv && bv) {
      isa::tensor_tensor(xn, xn, *wv, nl::multiply);
      isa::tensor_tensor(y, xn, *bv, nl::add);
    } else {
      isa::tensor_tensor(y, xn, wv ? *wv : *bv, wv ? nl::multiply : nl::add);
    }
    nl::store(yr, y);
  };
  for_each_tile(rows, kPartitions, [&](nl::index, nl::index r0, int64_t rr) {
    auto rows_v = nl::ds(row0 + r0, rr);
    auto save = [&](const RowStats& st) {
      if (mean_out) nl::store((*mean_out)(rows_v, nl::all), *st.mean);
      if (rstd_out) nl::store((*rstd_out)(rows_v, nl::all), st.rstd);
    };
    if (whole) {
      auto t = nl::load(in.x(rows_v, nl::all), nl::float32);
      const RowStats st = row_stats(kind, t, eps_col);
      emit(t, st, out(rows_v, nl::all), 0, D);
      save(st);
      return;
    }
    const RowStats st = chunked_row_stats(kind, in.x(rows_v, nl::all), eps_col);
    for_each_tile(D, kNormChunk, [&](nl::index, nl::index c0, int64_t cw) {
      emit(nl::load(in.x(rows_v, nl::ds(c0, cw)), nl::float32), st, out(rows_v, nl::ds(c0, cw)),
           c0, cw);
    });
    save(st);
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

// Adds ones[rr, 1].T @ v[rr, D] to the PSUM accumulators ps (512 columns each), which carry the
// sums across tiles.
inline void accumulate_column_sums(const std::vector<nl::tensor>& ps, const nl::tensor& v,
                                   const nl::tensor& ones) {
  const int64_t rr = v.shape()[0];
  for (size_t c = 0; c < ps.size(); ++c)
    isa::nc_matmul(ps[c], ones(nl::ds(0, rr), nl::all),
                   v(nl::all, nl::ds(int64_t(c) * kPsumColumns, ps[c].shape()[1])),
                   /*accumulate=*/true);
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
  const nl::index program = nl::program_id(0);
  const bool whole = D <= kNormWholeBackward;
  std::optional<nl::tensor> eps_col;
  if (!saved) eps_col = nl::full({P, 1}, cfg.eps, nl::float32, nl::sbuf, "eps");
  std::optional<nl::tensor> wb, ones, dw_acc, db_acc;
  // Whole rows whose dweight (and dbias) sums fit PSUM's banks accumulate there across the
  // program's tiles, one matmul per 512 columns per tile; else each tile's sums are added to
  // an SBUF accumulator.
  std::vector<nl::tensor> ps_w, ps_b;
  const int64_t psum_chunks = (D + kPsumColumns - 1) / kPsumColumns;
  const bool in_psum = whole && w && psum_chunks * (db ? 2 : 1) <= tile_limits::psum_banks;
  if (w) {
    ones = nl::ones({P, 1}, nl::float32, nl::sbuf, "ones");
    if (whole) {
      wb = load_broadcast_row(*w, P, nl::float32, "weight");
      if (in_psum) {
        dw_acc = nl::ndarray({1, D}, nl::float32, nl::sbuf, "dw_acc");
        if (db) db_acc = nl::ndarray({1, D}, nl::float32, nl::sbuf, "db_acc");
        for (int64_t c = 0; c < psum_chunks; ++c) {
          const int64_t cw = std::min(kPsumColumns, D - c * kPsumColumns);
          ps_w.push_back(nl::zeros({1, cw}, nl::float32, nl::psum, "dw_sum"));
          if (db) ps_b.push_back(nl::zeros({1, cw}, nl::float32, nl::psum, "db_sum"));
        }
      } else {
        dw_acc = nl::zeros({1, D}, nl::float32, nl::sbuf, "dw_acc");
        if (db) db_acc = nl::zeros({1, D}, nl::float32, nl::sbuf, "db_acc");
      }
    } else {  // the program's rows of dweight / dbias accumulate in HBM, chunk by chunk
      // A chunk's column sums, one PSUM bank per 512 columns (with dbias all eight): made once,
      // so their matmuls can all follow one another (chunked_column_sums).
      for (int64_t c = 0; c < std::min(D, kNormChunk); c += kPsumColumns) {
        ps_w.push_back(nl::ndarray({1, kPsumColumns}, nl::float32, nl::psum, "dw_part"));
        if (db) ps_b.push_back(nl::ndarray({1, kPsumColumns}, nl::float32, nl::psum, "db_part"));
      }
      auto zero = nl::zeros({1, std::min(D, kNormChunk)}, nl::float32, nl::sbuf, "zero");
      for_each_tile(D, kNormChunk, [&](nl::index, nl::index c0, int64_t cw) {
        const auto z = zero(nl::all, nl::ds(0, cw));
        nl::store((*dw)(nl::ds(program, 1), nl::ds(c0, cw)), z);
        if (db) nl::store((*db)(nl::ds(program, 1), nl::ds(c0, cw)), z);
      });
    }
  }
  // Columns [c0, c0 + cw) of a tile t of x, dy tile dyt: xhat and g = dy * weight.
  struct Grads {
    nl::tensor xhat, g;
  };
  // A chunk's weight broadcast over rr partitions, made before the chunk's loads (a
  // one-partition DMA between the loads and their readers would end their native run).
  auto chunk_weight = [&](const nl::index& c0, int64_t rr,
                          int64_t cw) -> std::optional<nl::tensor> {
    if (!w) return std::nullopt;
    auto wt = nl::ndarray({rr, cw}, nl::float32, nl::sbuf, "weight_rows");
    isa::dma_copy(wt, nl::broadcast_to(load_row(*w, c0, cw, nl::float32, "weight"), {rr, cw}));
    return wt;
  };
  auto grads_at = [&](const nl::tensor& t, const nl::tensor& dyt, const RowStats& st,
                      const std::optional<nl::tensor>& wc) {
    const int64_t rr = t.shape()[0], cw = t.shape()[1];
    auto xhat = nl::ndarray({rr, cw}, nl::float32, nl::sbuf, "xhat");
    normalize(xhat, t, st);
    if (!w) return Grads{xhat, dyt};
    auto wv = whole ? (*wb)(nl::ds(0, rr), nl::all) : *wc;
    auto g = nl::ndarray({rr, cw}, nl::float32, nl::sbuf, "g");
    isa::tensor_tensor(g, dyt, wv, nl::multiply);
    return Grads{xhat, g};
  };
  // The row sums of g * xhat and (layer_norm) of g into mgx, mg, or added to them (chunks).
  auto row_sums = [&](const Grads& gr, const nl::tensor& mgx, const std::optional<nl::tensor>& mg,
                      bool add) {
    const int64_t rr = gr.g.shape()[0], cw = gr.g.shape()[1];
    auto sum_into = [&](const nl::tensor& acc, const nl::tensor& v, const char* name) {
      if (!add) return isa::tensor_reduce(acc, nl::add, v, 1);
      auto part = nl::ndarray({rr, 1}, nl::float32, nl::sbuf, name);
      isa::tensor_reduce(part, nl::add, v, 1);
      isa::tensor_tensor(acc, acc, part, nl::add);
    };
    // g's sum first, right after g's multiply: natively each product's loop feeds its row sum
    // (a fused chain ending in the reduction).
    if (mg) sum_into(*mg, gr.g, "part_g");
    auto gx = nl::ndarray({rr, cw}, nl::float32, nl::sbuf, "gx");
    isa::tensor_tensor(gx, gr.g, gr.xhat, nl::multiply);
    sum_into(mgx, gx, "part");
  };
  // Adds the column sums of dy * xhat and dy to the dweight / dbias accumulators: the PSUM
  // ones (ps_w, ps_b) when there are, else acc_w, acc_b.
  auto column_sums = [&](const Grads& gr, const nl::tensor& dyt,
                         const std::optional<nl::tensor>& acc_w,
                         const std::optional<nl::tensor>& acc_b) {
    const int64_t rr = dyt.shape()[0], cw = dyt.shape()[1];
    auto add = [&](const std::optional<nl::tensor>& acc, const std::vector<nl::tensor>& ps,
                   const nl::tensor& v) {
      if (ps.empty())
        add_column_sums(*acc, v, *ones);
      else
        accumulate_column_sums(ps, v, *ones);
    };
    if (acc_w) {
      auto dyx = nl::ndarray({rr, cw}, nl::float32, nl::sbuf, "dyx");
      isa::tensor_tensor(dyx, dyt, gr.xhat, nl::multiply);
      add(acc_w, ps_w, dyx);
    }
    if (acc_b) add(acc_b, ps_b, dyt);
  };
  // Adds the column sums of a chunk's dy * xhat and dy (columns [c0, c0 + cw)) to the program's
  // rows of dweight / dbias in HBM. Every matmul comes before the first addition, each into its
  // own PSUM bank (ps_w, ps_b): natively the chunk's instructions from its loads to these
  // matmuls are then element-wise or contract over its rows, so they run a few rows at a time
  // with the loads read in place (docs/native.md "Partition blocks").
  auto chunked_column_sums = [&](const Grads& gr, const nl::tensor& dyt, const nl::index& c0) {
    const int64_t rr = dyt.shape()[0], cw = dyt.shape()[1];
    auto dyx = nl::ndarray({rr, cw}, nl::float32, nl::sbuf, "dyx");
    isa::tensor_tensor(dyx, dyt, gr.xhat, nl::multiply);
    auto sums = [&](const std::vector<nl::tensor>& ps, const nl::tensor& v) {
      for_each_static_tile(0, cw, kPsumColumns, [&](int64_t b0, int64_t bw) {
        isa::nc_matmul(ps[size_t(b0 / kPsumColumns)](nl::all, nl::ds(0, bw)),
                       (*ones)(nl::ds(0, rr), nl::all), v(nl::all, nl::ds(b0, bw)),
                       /*accumulate=*/false);
      });
    };
    sums(ps_w, dyx);
    if (db) sums(ps_b, dyt);
    auto add = [&](const nl::tensor& hbm, const std::vector<nl::tensor>& ps) {
      auto acc = nl::load(hbm(nl::ds(program, 1), nl::ds(c0, cw)), nl::float32);
      for_each_static_tile(0, cw, kPsumColumns, [&](int64_t b0, int64_t bw) {
        const auto cols = acc(nl::all, nl::ds(b0, bw));
        isa::tensor_tensor(cols, cols, ps[size_t(b0 / kPsumColumns)](nl::all, nl::ds(0, bw)),
                           nl::add);
      });
      nl::store(hbm(nl::ds(program, 1), nl::ds(c0, cw)), acc);
    };
    add(*dw, ps_w);
    if (db) add(*db, ps_b);
  };
  // dx = (g - (xhat * mean(g * xhat) + mean(g))) * rstd (no mean(g) for rms_norm) as
  // consecutive element-wise steps, each reading the one before (the native backend runs
  // them, and the store, as one loop); mgx and mg already hold the means.
  auto store_dx = [&](const Grads& gr, const nl::tensor& mgx, const std::optional<nl::tensor>& mg,
                      const nl::tensor& rstd, const nl::tensor& dst) {
    const int64_t rr = gr.g.shape()[0], cw = gr.g.shape()[1];
    auto corr = nl::ndarray({rr, cw}, nl::float32, nl::sbuf, "corr");
    if (mg)
      isa::tensor_scalar(corr, gr.xhat, nl::multiply, mgx, false, nl::add, *mg);
    else
      isa::tensor_scalar(corr, gr.xhat, nl::multiply, mgx);
    auto d = nl::ndarray({rr, cw}, nl::float32, nl::sbuf, "d");
    isa::tensor_tensor(d, gr.g, corr, nl::subtract);
    auto dxt = nl::ndarray({rr, cw}, dy.dtype(), nl::sbuf, "dxt");
    isa::tensor_scalar(dxt, d, nl::multiply, rstd);
    nl::store(dst, dxt);
  };
  // The dweight / dbias accumulators carry from tile to tile.
  const LoopKind kind_of_loop = w ? LoopKind::sequential : LoopKind::affine;
  for_each_tile(
      rows, kPartitions,
      [&](nl::index, nl::index r0, int64_t rr) {
        auto rows_v = nl::ds(row0 + r0, rr);
        // Chunked rows add each chunk's row sums to zeros; whole rows write them.
        auto column = [&](const char* name) {
          return whole ? nl::ndarray({rr, 1}, nl::float32, nl::sbuf, name)
                       : nl::zeros({rr, 1}, nl::float32, nl::sbuf, name);
        };
        auto mgx = column("mgx");
        std::optional<nl::tensor> mg;
        if (kind == NormKind::layer) mg = column("mg");
        auto to_means = [&] {
          isa::tensor_scalar(mgx, mgx, nl::multiply, 1.0 / double(D));
          if (mg) isa::tensor_scalar(*mg, *mg, nl::multiply, 1.0 / double(D));
        };
        if (whole) {
          auto t = nl::load(x(rows_v, nl::all), nl::float32);
          auto dyt = nl::load(dy(rows_v, nl::all), nl::float32);
          const RowStats st = saved ? load_row_stats(*saved, row0 + r0, rr)
                                    : row_stats(kind, t, *eps_col);
          const Grads gr = grads_at(t, dyt, st, std::nullopt);
          row_sums(gr, mgx, mg, /*add=*/false);
          to_means();
          store_dx(gr, mgx, mg, st.rstd, dx(rows_v, nl::all));
          // After dx, so with the sums in PSUM the tile's instructions from its loads to these
          // matmuls are element-wise or contract over its rows: the native backend runs them a
          // few rows at a time, the tiles staying in cache (docs/native.md "Partition blocks").
          column_sums(gr, dyt, dw_acc, db_acc);
          return;
        }
        const RowStats st = saved ? load_row_stats(*saved, row0 + r0, rr)
                                  : forward_row_stats(kind, x(rows_v, nl::all), *eps_col);
        auto load_chunk = [&](const nl::tensor& v, const nl::index& c0, int64_t cw) {
          return nl::load(v(rows_v, nl::ds(c0, cw)), nl::float32);
        };
        // Pass 1: the row sums, and the chunk's column sums into dweight / dbias in HBM.
        for_each_tile(
            D, kNormChunk,
            [&](nl::index, nl::index c0, int64_t cw) {
              const auto wc = chunk_weight(c0, rr, cw);
              auto dyt = load_chunk(dy, c0, cw);
              const Grads gr = grads_at(load_chunk(x, c0, cw), dyt, st, wc);
              row_sums(gr, mgx, mg, /*add=*/true);
              if (dw) chunked_column_sums(gr, dyt, c0);
            },
            0, LoopKind::sequential);
        to_means();
        // Pass 2: dx.
        for_each_tile(D, kNormChunk, [&](nl::index, nl::index c0, int64_t cw) {
          const auto wc = chunk_weight(c0, rr, cw);
          auto dyt = load_chunk(dy, c0, cw);
          store_dx(grads_at(load_chunk(x, c0, cw), dyt, st, wc), mgx, mg, st.rstd,
                   dx(rows_v, nl::ds(c0, cw)));
        });
      },
      0, kind_of_loop);
  std::vector<nl::tensor> outs{dx};
  for (size_t c = 0; in_psum && c < ps_w.size(); ++c) {  // the PSUM sums through SBUF to HBM
    const auto cols = nl::ds(int64_t(c) * kPsumColumns, ps_w[c].shape()[1]);
    isa::tensor_copy((*dw_acc)(nl::all, cols), ps_w[c]);
    if (db) isa::tensor_copy((*db_acc)(nl::all, cols), ps_b[c]);
  }
  if (dw_acc) nl::store((*dw)(nl::ds(program, 1), nl::all), *dw_acc);
  if (db_acc) nl::store((*db)(nl::ds(program, 1), nl::all), *db_acc);
  if (dw) outs.push_back(*dw);
  if (db) outs.push_back(*db);
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
