// A benchmark variant of examples/matmul.hpp that splits M over SPMD programs (so the native
// runtime can spread it over threads) and reuses each moving tile for several row blocks.
#pragma once
#include <neuron/neuron.hpp>

namespace bench {
namespace nl = neuron::nl;
namespace isa = neuron::isa;

// out[M, N] = lhsT[K, M].T @ rhs[K, N]. Program p computes the `blocks` row blocks of 128 rows
// starting at row p * 128 * blocks: launch with grid {M / (128 * blocks)}. Each rhs tile
// [128, 512] is loaded once per program and step k and feeds `blocks` matmuls, which cuts the
// tile-load traffic that is the example's largest cost after the micro-kernel itself. Each
// accumulator takes one PSUM bank, double-buffered across n steps: blocks <= 4 (8 banks).
// M must be a multiple of 128 * blocks, K of 128 and N of 512 (or of 128 when smaller).
inline nl::tensor spmd_matmul(nl::tensor lhsT, nl::tensor rhs, int64_t blocks) {
  const int64_t K = lhsT.shape()[0], M = lhsT.shape()[1], N = rhs.shape()[1];
  const int64_t TM = nl::tile_size::gemm_stationary_fmax;                   // 128
  const int64_t TK = nl::tile_size::pmax;                                   // 128
  const int64_t TN = N % nl::tile_size::gemm_moving_fmax == 0 ? 512 : 128;  // one PSUM bank
  auto out = nl::ndarray({M, N}, lhsT.dtype(), nl::shared_hbm, "out");
  auto row0 = nl::program_id(0) * (TM * blocks);

  for (auto n : nl::affine_range(N / TN)) {
    std::vector<nl::tensor> acc;
    for (int64_t j = 0; j < blocks; ++j)
      acc.push_back(nl::zeros({TM, TN}, nl::float32, nl::psum, "acc"));
    for (auto k : nl::affine_range(K / TK)) {
      auto b = nl::load(rhs(nl::ds(k * TK, TK), nl::ds(n * TN, TN)));
      for (int64_t j = 0; j < blocks; ++j) {
        auto a = nl::load(lhsT(nl::ds(k * TK, TK), nl::ds(row0 + j * TM, TM)));
        isa::nc_matmul(acc[j], a, b, /*accumulate=*/true);
      }
    }
    for (int64_t j = 0; j < blocks; ++j)
      nl::store(out(nl::ds(row0 + j * TM, TM), nl::ds(n * TN, TN)), nl::copy(acc[j], lhsT.dtype()));
  }
  return out;
}

// The same product with the stationary operand hoisted: each program first copies its
// `blocks` row stripes of lhsT ([K, 128] each, K / 128 tiles of [128, 128]) into SBUF once,
// so the n loop only loads rhs tiles. SBUF per partition: blocks * K * 4 bytes (fp32).
inline nl::tensor spmd_matmul_hoisted(nl::tensor lhsT, nl::tensor rhs, int64_t blocks) {
  const int64_t K = lhsT.shape()[0], M = lhsT.shape()[1], N = rhs.shape()[1];
  const int64_t TM = nl::tile_size::gemm_stationary_fmax;
  const int64_t TK = nl::tile_size::pmax;
  const int64_t TN = N % nl::tile_size::gemm_moving_fmax == 0 ? 512 : 128;
  auto out = nl::ndarray({M, N}, lhsT.dtype(), nl::shared_hbm, "out");
  auto row0 = nl::program_id(0) * (TM * blocks);

  std::vector<nl::tensor> stripes;
  for (int64_t j = 0; j < blocks; ++j) {
    auto s = nl::ndarray({TK, K / TK, TM}, lhsT.dtype(), nl::sbuf, "stripe");
    for (auto k : nl::affine_range(K / TK))
      isa::dma_copy(s(nl::ds(0, TK), k, nl::ds(0, TM)),
                    lhsT(nl::ds(k * TK, TK), nl::ds(row0 + j * TM, TM)));
    stripes.push_back(s);
  }
  for (auto n : nl::affine_range(N / TN)) {
    std::vector<nl::tensor> acc;
    for (int64_t j = 0; j < blocks; ++j)
      acc.push_back(nl::zeros({TM, TN}, nl::float32, nl::psum, "acc"));
    for (auto k : nl::affine_range(K / TK)) {
      auto b = nl::load(rhs(nl::ds(k * TK, TK), nl::ds(n * TN, TN)));
      for (int64_t j = 0; j < blocks; ++j)
        isa::nc_matmul(acc[j], stripes[j](nl::ds(0, TK), k, nl::ds(0, TM)), b,
                       /*accumulate=*/true);
    }
    for (int64_t j = 0; j < blocks; ++j)
      nl::store(out(nl::ds(row0 + j * TM, TM), nl::ds(n * TN, TN)), nl::copy(acc[j], lhsT.dtype()));
  }
  return out;
}

}  // namespace bench
