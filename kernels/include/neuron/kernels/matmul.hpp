// matmul and linear: C[M, N] = op(A) @ op(B) (+ bias, then an activation), any M, N, K,
// float32 / bfloat16 / float16 operands with float32 accumulation.
//
// Tiling and engine plan. Each SPMD program owns M / programs consecutive rows of C and, with
// column_programs > 1, N / column_programs consecutive columns of them (launch with grid
// matmul_grid(cfg); split_rows picks `programs`, and split_columns the column programs when
// there are too few rows to split: a decode step's [1, K] x [K, N] otherwise runs on one core). Its
// rows go in groups of up to 4 x 128 (2 x 128 when B is stored [N, K] and needs transposes, to
// leave PSUM banks free).
//  - The group's A panel [K, rows] comes on chip once with K on partitions (the Tensor
//    engine's contraction layout): DMA straight from A when A is stored [K, M], else 128 x 128
//    tiles transposed on the Tensor engine through PSUM. A panel over cfg.panel_bytes (64 KiB
//    per partition: K up to 4096 fp32 / 8192 bf16 for 512-row groups) is not kept: its tiles
//    are then loaded (and transposed) inside the K loop, for each column block.
//  - For each 512-column block of C (one PSUM bank of fp32 per 128-row subtile), each 128-row
//    slice of K loads one B tile [k, 512] by DMA (transposed by the Tensor engine, 128 columns
//    at a time, when B is [N, K]) and feeds one nc_matmul per subtile: the moving tile is
//    reused by the whole group. The K loop accumulates in PSUM (fp32), the first chunk
//    overwriting it (no memset).
//  - Epilogue: the bias joins the PSUM accumulation as a last rank-1 product on the Tensor
//    engine (ones[1, rows].T @ bias[1, 512]: exact products, so the same fp32 sum as adding a
//    broadcast bias tile, without writing and reading one); PSUM is evacuated into the output
//    dtype by the Vector engine, or by the Scalar engine applying the activation, and a DMA
//    stores the tile.
// Remainders of M, N and K are a second, static copy of each loop body with smaller tiles.
#pragma once
#include <optional>
#include <vector>

#include "neuron/kernels/tiling.hpp"

namespace neuron::kernels {

struct MatmulConfig {
  bool transpose_a = false;           // A is stored [K, M] (the Tensor engine's layout)
  bool transpose_b = false;           // B is stored [N, K] (a linear layer's weight)
  std::optional<ActFunc> activation;  // applied after the bias: relu, gelu, silu, tanh, ...
  std::optional<DType> out_dtype;     // default: A's dtype
  int64_t programs = 1;               // SPMD programs along M; must divide M
  // SBUF bytes per partition a row group's A panel may take (it is double-buffered); larger
  // panels are not kept and A tiles load inside the K loop. 0 never keeps one.
  int64_t panel_bytes = 64 * 1024;
  // SPMD programs along N (grid axis 1); must divide N. Last, so aggregate initializers written
  // before it keep their meaning.
  int64_t column_programs = 1;
};

inline std::vector<int64_t> matmul_grid(const MatmulConfig& cfg) {
  if (cfg.column_programs > 1) return {cfg.programs, cfg.column_programs};
  return {cfg.programs};
}

// Column programs for C's N columns when its rows make one program: the most (up to
// max_programs) that divide N into slices of at least min_columns (one PSUM bank's 512 fp32
// columns by default), 1 when none does.
inline int64_t split_columns(int64_t N, int64_t max_programs = 64,
                             int64_t min_columns = kPsumColumns) {
  return split_rows(N, max_programs, min_columns);
}

namespace detail {

inline nl::tensor matmul_impl(const nl::tensor& a, const nl::tensor& b,
                              const std::optional<nl::tensor>& bias, const MatmulConfig& cfg,
                              const char* kernel, const Span& span) {
  require_rank(a, 2, kernel, "A", span);
  require_rank(b, 2, kernel, "B", span);
  require_float(a, kernel, "A", span);
  require_float(b, kernel, "B", span);
  const auto as = a.shape(), bs = b.shape();
  const int64_t M = cfg.transpose_a ? as[1] : as[0], K = cfg.transpose_a ? as[0] : as[1];
  const int64_t N = cfg.transpose_b ? bs[0] : bs[1], Kb = cfg.transpose_b ? bs[1] : bs[0];
  if (K != Kb)
    args_error(span, kernel, "contraction sizes differ: A {}{} has K={} but B {}{} has K={}",
               shape_str(as), cfg.transpose_a ? " (stored [K, M])" : "", K, shape_str(bs),
               cfg.transpose_b ? " (stored [N, K])" : "", Kb);
  if (bias && (bias->ndim() != 1 || bias->shape()[0] != N))
    args_error(span, kernel, "bias has shape {}; it must be [{}] (one value per output column)",
               shape_str(bias->shape()), N);
  if (cfg.programs < 1 || M % cfg.programs != 0)
    args_error(span, kernel, "programs={} must divide M={} (use split_rows(M))", cfg.programs, M);
  if (cfg.column_programs < 1 || N % cfg.column_programs != 0)
    args_error(span, kernel, "column_programs={} must divide N={} (use split_columns(N))",
               cfg.column_programs, N);

  const DType out_dt = cfg.out_dtype.value_or(a.dtype());
  auto out = nl::ndarray({M, N}, out_dt, nl::shared_hbm, "out");
  const int64_t rows = M / cfg.programs;
  const nl::index row0 = nl::program_id(0) * rows;
  const int64_t columns = N / cfg.column_programs;
  const nl::index col0 = cfg.column_programs > 1 ? nl::program_id(1) * columns : nl::index(0);
  const int64_t KP = std::min(K, kPartitions), KT = ceil_div(K, kPartitions);
  const int64_t subtiles = cfg.transpose_b ? 2 : 4;

  // A's [kr, cw] tile with K on partitions: rows [r0, r0 + cw) of C, K rows [k0, k0 + kr).
  auto load_a = [&](const nl::index& r0, int64_t cw, const nl::index& k0, int64_t kr) {
    if (cfg.transpose_a) return nl::load(a(nl::ds(k0, kr), nl::ds(r0, cw)));
    return transpose_to_sbuf(nl::load(a(nl::ds(r0, cw), nl::ds(k0, kr))), "aT");
  };
  // B's [kr, nr] tile with K on partitions.
  auto load_b = [&](const nl::index& k0, int64_t kr, const nl::index& n0, int64_t nr) {
    if (!cfg.transpose_b) return nl::load(b(nl::ds(k0, kr), nl::ds(n0, nr)));
    auto t = nl::ndarray({kr, nr}, b.dtype(), nl::sbuf, "bT");
    for_each_static_tile(0, nr, kPartitions, [&](int64_t c, int64_t cw) {
      auto w = nl::load(b(nl::ds(n0 + c, cw), nl::ds(k0, kr)));
      isa::tensor_copy(t(nl::all, nl::ds(c, cw)), nl::transpose(w));
    });
    return t;
  };

  std::optional<nl::tensor> ones;
  if (bias) ones = nl::ones({1, kPartitions}, nl::float32, nl::sbuf, "ones");
  for_each_tile(rows, subtiles * kPartitions, [&](nl::index, nl::index g0, int64_t gr) {
    const nl::index grow = row0 + g0;
    std::optional<nl::tensor> panel;
    if (KT * gr * dtype_bytes(a.dtype()) <= cfg.panel_bytes) {
      panel = nl::ndarray({KP, KT, gr}, a.dtype(), nl::sbuf, "a_panel");
      for_each_tile(K, kPartitions, [&](nl::index kt, nl::index k0, int64_t kr) {
        if (cfg.transpose_a) {
          isa::dma_copy((*panel)(nl::ds(0, kr), kt, nl::all), a(nl::ds(k0, kr), nl::ds(grow, gr)));
        } else {
          for_each_static_tile(0, gr, kPartitions, [&](int64_t c, int64_t cw) {
            auto t = nl::load(a(nl::ds(grow + c, cw), nl::ds(k0, kr)));
            isa::tensor_copy((*panel)(nl::ds(0, kr), kt, nl::ds(c, cw)), nl::transpose(t));
          });
        }
      });
    }
    for_each_tile(columns, kPsumColumns, [&](nl::index, nl::index c0, int64_t nr) {
      const nl::index n0 = col0 + c0;  // this program's columns start at col0
      // The first K chunk's matmuls overwrite the accumulators, the others add to them: no
      // memset of them first (a [128, 512] fp32 tile per subtile; an outer product, K = 1,
      // spent a fifth of its time there). K = 0 leaves zeros.
      std::vector<nl::tensor> acc;
      for_each_static_tile(0, gr, kPartitions, [&](int64_t, int64_t cw) {
        acc.push_back(K == 0 ? nl::zeros({cw, nr}, nl::float32, nl::psum, "acc")
                             : nl::ndarray({cw, nr}, nl::float32, nl::psum, "acc"));
      });
      auto k_chunk = [&](const nl::index& kt, const nl::index& k0, int64_t kr, bool first) {
        auto bt = load_b(k0, kr, n0, nr);
        size_t j = 0;
        for_each_static_tile(0, gr, kPartitions, [&](int64_t c, int64_t cw) {
          auto at =
              panel ? (*panel)(nl::ds(0, kr), kt, nl::ds(c, cw)) : load_a(grow + c, cw, k0, kr);
          isa::nc_matmul(acc[j++], at, bt, /*accumulate=*/!first);
        });
      };
      if (K > 0) k_chunk(nl::index(0), nl::index(0), std::min(K, kPartitions), true);
      // Accumulating into PSUM is an associative reduction, so the rest of the K loop may be an
      // affine_range: the loads of step k + 1 overlap the matmuls of step k.
      if (K > kPartitions)
        for_each_tile(
            K - kPartitions, kPartitions,
            [&](nl::index kt, nl::index k0, int64_t kr) { k_chunk(kt + 1, k0, kr, false); },
            nl::index(kPartitions));
      if (bias) {
        // The bias joins the accumulation as one more rank-1 product, ones[1, rows].T @
        // bias[1, nr]: every row gets bias added in fp32 (the product is exact), with no
        // [rows, nr] broadcast of it to write and read back.
        auto bias_row = load_row(*bias, n0, nr, nl::float32, "bias");
        size_t j = 0;
        for_each_static_tile(0, gr, kPartitions, [&](int64_t, int64_t cw) {
          isa::nc_matmul(acc[j++], (*ones)(nl::all, nl::ds(0, cw)), bias_row,
                         /*accumulate=*/true);
        });
      }
      size_t j = 0;
      for_each_static_tile(0, gr, kPartitions, [&](int64_t c, int64_t cw) {
        auto y = nl::ndarray({cw, nr}, out_dt, nl::sbuf, "y");
        if (cfg.activation)
          isa::activation(y, *cfg.activation, acc[j++]);
        else
          isa::tensor_copy(y, acc[j++]);
        nl::store(out(nl::ds(grow + c, cw), nl::ds(n0, nr)), y);
      });
    });
  });
  return out;
}

}  // namespace detail

// C = op(A) @ op(B): A is [M, K] ([K, M] with transpose_a), B is [K, N] ([N, K] with
// transpose_b); C is [M, N] in cfg.out_dtype (A's dtype by default).
inline nl::tensor matmul(const nl::tensor& a, const nl::tensor& b, const MatmulConfig& cfg = {},
                         Span span = Span::current()) {
  return detail::matmul_impl(a, b, std::nullopt, cfg, "matmul", span);
}

// The same with a bias [N] added to every row before the activation.
inline nl::tensor matmul(const nl::tensor& a, const nl::tensor& b, const nl::tensor& bias,
                         const MatmulConfig& cfg = {}, Span span = Span::current()) {
  return detail::matmul_impl(a, b, bias, cfg, "matmul", span);
}

// torch.nn.functional.linear: y[M, N] = x[M, K] @ w[N, K].T (+ bias[N]), then cfg.activation.
// cfg.transpose_b is implied (w is stored [N, K]); cfg.transpose_a may say x is stored [K, M].
inline nl::tensor linear(const nl::tensor& x, const nl::tensor& w, MatmulConfig cfg = {},
                         Span span = Span::current()) {
  cfg.transpose_b = true;
  return detail::matmul_impl(x, w, std::nullopt, cfg, "linear", span);
}

inline nl::tensor linear(const nl::tensor& x, const nl::tensor& w, const nl::tensor& bias,
                         MatmulConfig cfg = {}, Span span = Span::current()) {
  cfg.transpose_b = true;
  return detail::matmul_impl(x, w, bias, cfg, "linear", span);
}

}  // namespace neuron::kernels
