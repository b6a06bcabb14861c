// softmax over the last axis of x [R, C], forward and backward, any R and C; statistics and
// arithmetic in fp32, results in x's dtype.
//
// Tiling and engine plan. Each SPMD program owns R / programs consecutive rows (grid
// softmax_grid(cfg)), taken 128 at a time with rows on partitions, so every reduction runs
// along the free axis of one tile and its [rows, 1] result is a per-partition scalar.
//  - Forward, rows of up to kSoftmaxWhole columns: one pass. The Vector engine takes the
//    negated row max, the Scalar engine computes exp(x - max) and its row sum in the same
//    instruction (activation with a bias column and an add reduction), the Vector engine
//    scales by 1 / sum into the output dtype, a DMA stores.
//  - Longer rows: two passes over column chunks. The first keeps an online running max and
//    rescaled sum (a sequential loop: the statistics carry) and each chunk's exp(x - running
//    max): in the output when it is fp32, else in an fp32 SBUF tile of the row (up to
//    kSoftmaxKeepOnChip columns; a narrow output would round twice). The second pass rescales
//    it by a per-chunk factor: one exp per element (the Scalar engine's cost; natively 0.27 ns
//    of the ~0.4 an element costs). Narrow rows longer than that compute exp again from x.
//  - Backward: dx = y * (dy - sum(dy * y)). The Vector engine forms dy * y and its row sum,
//    then (dy - sum) * y; rows over kSoftmaxWhole take the sum in a first pass over chunks.
#pragma once
#include <limits>
#include <optional>
#include <vector>

#include "neuron/kernels/tiling.hpp"

namespace neuron::kernels {

struct SoftmaxConfig {
  int64_t programs = 1;  // SPMD programs along the rows; must divide R
};

inline std::vector<int64_t> softmax_grid(const SoftmaxConfig& cfg) {
  return {cfg.programs};
}

// Rows of up to kSoftmaxWhole columns are handled whole, in one pass (the backward's five fp32
// tiles take 160 of a partition's 192 KiB); longer ones in chunks of kSoftmaxChunk columns.
// The one pass matters natively too: over chunks every instruction streams a [128, 2048] tile
// out of cache, [1024, 4096] fp32 took 3.1 ms forward and 3.4 ms backward at a whole limit of
// 2048, 0.8 and 0.85 ms at 8192 (PyTorch 0.9 and 0.8).
inline constexpr int64_t kSoftmaxWhole = 8192;
inline constexpr int64_t kSoftmaxChunk = 2048;
// Longer rows of a bf16 / fp16 softmax keep their exp in an fp32 tile of the whole row (128 KiB
// of a partition at this limit, beside the chunks' tiles) rather than computing it twice.
inline constexpr int64_t kSoftmaxKeepOnChip = 32768;

namespace detail {

inline void check_rows(const nl::tensor& x, int64_t programs, const char* kernel,
                       const Span& span) {
  require_rank(x, 2, kernel, "x", span);
  require_float(x, kernel, "x", span);
  if (programs < 1 || x.shape()[0] % programs != 0)
    args_error(span, kernel, "programs={} must divide the {} rows (use split_rows)", programs,
               x.shape()[0]);
}

// out = exp(t + negmax) / sum, t an fp32 tile; the sum comes back in `sum` when given.
inline void exp_shifted(const nl::tensor& e, const nl::tensor& t, const nl::tensor& negmax,
                        const nl::tensor& sum) {
  isa::activation(e, nl::exp, t, negmax, 1.0, nl::add, sum);
}

}  // namespace detail

// y = softmax(x, axis=-1) for x [R, C].
inline nl::tensor softmax(const nl::tensor& x, const SoftmaxConfig& cfg = {},
                          Span span = Span::current()) {
  detail::check_rows(x, cfg.programs, "softmax", span);
  const int64_t R = x.shape()[0], C = x.shape()[1];
  auto out = nl::ndarray({R, C}, x.dtype(), nl::shared_hbm, "out");
  const int64_t rows = R / cfg.programs;
  const nl::index row0 = nl::program_id(0) * rows;
  for_each_tile(rows, kPartitions, [&](nl::index, nl::index r0, int64_t rr) {
    auto xr = x(nl::ds(row0 + r0, rr), nl::all);
    auto yr = out(nl::ds(row0 + r0, rr), nl::all);
    auto negmax = nl::ndarray({rr, 1}, nl::float32, nl::sbuf, "negmax");
    auto sum = nl::ndarray({rr, 1}, nl::float32, nl::sbuf, "sum");
    if (C <= kSoftmaxWhole) {
      auto t = nl::load(xr, nl::float32);
      isa::tensor_reduce(negmax, nl::max, t, 1, /*negate=*/true);
      auto e = nl::ndarray({rr, C}, nl::float32, nl::sbuf, "e");
      detail::exp_shifted(e, t, negmax, sum);
      auto y = nl::ndarray({rr, C}, x.dtype(), nl::sbuf, "y");
      isa::tensor_scalar(y, e, nl::multiply, nl::reciprocal(sum));
      nl::store(yr, y);
      return;
    }
    // Pass 1: online max and sum over column chunks. Each chunk's exp(x - m_c), m_c the
    // running max after chunk c, is kept where it can be (an fp32 output: in the output; a
    // narrower one: in an fp32 SBUF tile of the row, up to kSoftmaxKeepOnChip columns), with
    // m_c in a column of `seen`: pass 2 rescales them instead of computing exp again.
    const bool in_output = x.dtype() == nl::float32;
    std::optional<nl::tensor> kept, seen;
    if (!in_output && C <= kSoftmaxKeepOnChip)
      kept = nl::ndarray({rr, C}, nl::float32, nl::sbuf, "kept");
    if (in_output || kept)
      seen = nl::ndarray({rr, ceil_div(C, kSoftmaxChunk)}, nl::float32, nl::sbuf, "seen");
    auto m =
        nl::full({rr, 1}, -std::numeric_limits<double>::infinity(), nl::float32, nl::sbuf, "m");
    isa::memset(sum, 0.0);
    for_each_tile(
        C, kSoftmaxChunk,
        [&](nl::index c, nl::index c0, int64_t cw) {
          auto t = nl::load(xr(nl::all, nl::ds(c0, cw)), nl::float32);
          auto m_new = nl::ndarray({rr, 1}, nl::float32, nl::sbuf, "m_new");
          isa::tensor_reduce(m_new, nl::max, t, 1);
          isa::tensor_tensor(m_new, m_new, m, nl::maximum);
          isa::tensor_scalar(negmax, m_new, nl::multiply, -1.0);
          auto alpha = nl::ndarray({rr, 1}, nl::float32, nl::sbuf, "alpha");
          isa::activation(alpha, nl::exp, m, negmax);
          auto e = kept ? (*kept)(nl::all, nl::ds(c0, cw))
                        : nl::ndarray({rr, cw}, nl::float32, nl::sbuf, "e");
          auto chunk_sum = nl::ndarray({rr, 1}, nl::float32, nl::sbuf, "chunk_sum");
          detail::exp_shifted(e, t, negmax, chunk_sum);
          isa::tensor_scalar(sum, sum, nl::multiply, alpha, false, nl::add, chunk_sum);
          isa::tensor_copy(m, m_new);
          if (in_output) nl::store(yr(nl::all, nl::ds(c0, cw)), e);
          if (seen) isa::tensor_copy((*seen)(nl::all, nl::ds(c, 1)), m_new);
        },
        0, LoopKind::sequential);
    auto inv = nl::reciprocal(sum);
    if (seen) {
      // Pass 2: y = exp(x - m_c) * (exp(m_c - max) / sum), read back from where it was kept.
      for_each_tile(C, kSoftmaxChunk, [&](nl::index c, nl::index c0, int64_t cw) {
        auto scale = nl::ndarray({rr, 1}, nl::float32, nl::sbuf, "scale");
        isa::activation(scale, nl::exp, (*seen)(nl::all, nl::ds(c, 1)), negmax);
        isa::tensor_scalar(scale, scale, nl::multiply, inv);
        auto e = kept ? (*kept)(nl::all, nl::ds(c0, cw))
                      : nl::load(yr(nl::all, nl::ds(c0, cw)), nl::float32);
        auto y = nl::ndarray({rr, cw}, x.dtype(), nl::sbuf, "y");
        isa::tensor_scalar(y, e, nl::multiply, scale);
        nl::store(yr(nl::all, nl::ds(c0, cw)), y);
      });
      return;
    }
    // Pass 2: recompute exp with the final max and scale.
    for_each_tile(C, kSoftmaxChunk, [&](nl::index, nl::index c0, int64_t cw) {
      auto t = nl::load(xr(nl::all, nl::ds(c0, cw)), nl::float32);
      auto e = nl::ndarray({rr, cw}, nl::float32, nl::sbuf, "e");
      isa::activation(e, nl::exp, t, negmax);
      auto y = nl::ndarray({rr, cw}, x.dtype(), nl::sbuf, "y");
      isa::tensor_scalar(y, e, nl::multiply, inv);
      nl::store(yr(nl::all, nl::ds(c0, cw)), y);
    });
  });
  return out;
}

// dx = y * (dy - sum(dy * y, axis=-1)) for the softmax output y and its gradient dy [R, C].
inline nl::tensor softmax_backward(const nl::tensor& y, const nl::tensor& dy,
                                   const SoftmaxConfig& cfg = {}, Span span = Span::current()) {
  detail::check_rows(y, cfg.programs, "softmax_backward", span);
  if (dy.shape() != y.shape())
    args_error(span, "softmax_backward", "dy has shape {} but y has shape {}",
               shape_str(dy.shape()), shape_str(y.shape()));
  const int64_t R = y.shape()[0], C = y.shape()[1];
  auto dx = nl::ndarray({R, C}, dy.dtype(), nl::shared_hbm, "dx");
  const int64_t rows = R / cfg.programs;
  const nl::index row0 = nl::program_id(0) * rows;
  for_each_tile(rows, kPartitions, [&](nl::index, nl::index r0, int64_t rr) {
    auto rows_of = [&](const nl::tensor& t, const nl::index& c0, int64_t cw) {
      return t(nl::ds(row0 + r0, rr), nl::ds(c0, cw));
    };
    // Whole rows write their sum; chunked ones add each chunk's to zeros.
    auto sum = C <= kSoftmaxWhole ? nl::ndarray({rr, 1}, nl::float32, nl::sbuf, "sum")
                                  : nl::zeros({rr, 1}, nl::float32, nl::sbuf, "sum");
    auto finish = [&](const nl::tensor& yt, const nl::tensor& dyt, const nl::index& c0,
                      int64_t cw) {
      auto d = nl::ndarray({rr, cw}, nl::float32, nl::sbuf, "d");
      isa::tensor_scalar(d, dyt, nl::subtract, sum);
      auto g = nl::ndarray({rr, cw}, dy.dtype(), nl::sbuf, "g");
      isa::tensor_tensor(g, d, yt, nl::multiply);
      nl::store(rows_of(dx, c0, cw), g);
    };
    // The product and its row sum: one loop natively (a fused chain ending in the reduction).
    auto row_sum = [&](const nl::tensor& s, const nl::tensor& yt, const nl::tensor& dyt,
                       int64_t cw) {
      auto prod = nl::ndarray({rr, cw}, nl::float32, nl::sbuf, "prod");
      isa::tensor_tensor(prod, dyt, yt, nl::multiply);
      isa::tensor_reduce(s, nl::add, prod, 1);
    };
    auto chunk_sum = [&](const nl::tensor& yt, const nl::tensor& dyt, int64_t cw) {
      auto s = nl::ndarray({rr, 1}, nl::float32, nl::sbuf, "chunk_sum");
      row_sum(s, yt, dyt, cw);
      isa::tensor_tensor(sum, sum, s, nl::add);
    };
    if (C <= kSoftmaxWhole) {
      auto yt = nl::load(rows_of(y, 0, C), nl::float32);
      auto dyt = nl::load(rows_of(dy, 0, C), nl::float32);
      row_sum(sum, yt, dyt, C);
      finish(yt, dyt, 0, C);
      return;
    }
    for_each_tile(
        C, kSoftmaxChunk,
        [&](nl::index, nl::index c0, int64_t cw) {
          chunk_sum(nl::load(rows_of(y, c0, cw), nl::float32),
                    nl::load(rows_of(dy, c0, cw), nl::float32), cw);
        },
        0, LoopKind::sequential);
    for_each_tile(C, kSoftmaxChunk, [&](nl::index, nl::index c0, int64_t cw) {
      finish(nl::load(rows_of(y, c0, cw), nl::float32), nl::load(rows_of(dy, c0, cw), nl::float32),
             c0, cw);
    });
  });
  return dx;
}

}  // namespace neuron::kernels
