// Tiled matmul: out[M, N] = lhsT[K, M].T @ rhs[K, N], accumulating over K in PSUM.
#pragma once
#include <neuron/neuron.hpp>

namespace examples {
namespace nl = neuron::nl;
namespace isa = neuron::isa;

// The left operand comes transposed (K on partitions), which is the layout the Tensor engine
// wants: nc_matmul(stationary[K, M], moving[K, N]) computes stationary.T @ moving. M and K must
// be multiples of 128 and N a multiple of 512 (or of 128 when smaller); out has lhsT's dtype.
inline nl::tensor matmul(nl::tensor lhsT, nl::tensor rhs) {
  const int64_t K = lhsT.shape()[0], M = lhsT.shape()[1], N = rhs.shape()[1];
  const int64_t TM = nl::tile_size::gemm_stationary_fmax;                       // 128
  const int64_t TK = nl::tile_size::pmax;                                       // 128
  const int64_t TN = N % nl::tile_size::gemm_moving_fmax == 0 ? 512 : 128;     // one PSUM bank
  auto out = nl::ndarray({M, N}, lhsT.dtype(), nl::shared_hbm, "out");

  for (auto m : nl::affine_range(M / TM)) {
    for (auto n : nl::affine_range(N / TN)) {
      auto acc = nl::zeros({TM, TN}, nl::float32, nl::psum, "acc");
      // Accumulating into one PSUM tile is an associative reduction, so the K loop may be an
      // affine_range: the loads of step k+1 can overlap the matmul of step k.
      for (auto k : nl::affine_range(K / TK)) {
        auto a = nl::load(lhsT(nl::ds(k * TK, TK), nl::ds(m * TM, TM)));
        auto b = nl::load(rhs(nl::ds(k * TK, TK), nl::ds(n * TN, TN)));
        isa::nc_matmul(acc, a, b, /*accumulate=*/true);
      }
      // PSUM -> SBUF with a cast to the output dtype, then SBUF -> HBM.
      nl::store(out(nl::ds(m * TM, TM), nl::ds(n * TN, TN)), nl::copy(acc, lhsT.dtype()));
    }
  }
  return out;
}

NEURON_KERNEL(matmul, matmul,
              "out[M, N] = lhsT[K, M].T @ rhs[K, N]; M, K multiples of 128, N of 512 (or of 128 "
              "when smaller)",
              neuron::inputs("lhsT", "rhs"));

}  // namespace examples
