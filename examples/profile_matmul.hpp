// Two bf16 matmuls for the profiler guide (docs/profiling.md): a naive one that loads small
// tiles inside the K loop, and a blocked, double-buffered one that keeps the Tensor engine busy.
#pragma once
#include <neuron/neuron.hpp>

#include <vector>

namespace examples {
namespace nl = neuron::nl;
namespace isa = neuron::isa;

// out[M, N] = lhsT[K, M].T @ rhs[K, N]. M and K multiples of 128, N a multiple of 512.
// Each 128x512 output tile reloads its operands one 128-row slice of K at a time: 32 KiB and
// 128 KiB transfers that each pay the DMA start latency, with only two of each in flight
// (the allocator double-buffers tiles allocated in a loop), so TensorE mostly waits on DMA.
inline nl::tensor matmul_naive(nl::tensor lhsT, nl::tensor rhs) {
  const int64_t K = lhsT.shape()[0], M = lhsT.shape()[1], N = rhs.shape()[1];
  const int64_t TM = 128, TK = 128, TN = 512;
  auto out = nl::ndarray({M, N}, lhsT.dtype(), nl::shared_hbm, "out");
  for (auto m : nl::affine_range(M / TM)) {
    for (auto n : nl::affine_range(N / TN)) {
      auto acc = nl::zeros({TM, TN}, nl::float32, nl::psum, "acc");
      for (auto k : nl::affine_range(K / TK)) {
        auto a = nl::load(lhsT(nl::ds(k * TK, TK), nl::ds(m * TM, TM)));
        auto b = nl::load(rhs(nl::ds(k * TK, TK), nl::ds(n * TN, TN)));
        isa::nc_matmul(acc, a, b, /*accumulate=*/true);
      }
      nl::store(out(nl::ds(m * TM, TM), nl::ds(n * TN, TN)), nl::copy(acc, lhsT.dtype()));
    }
  }
  return out;
}

// The C++ twin of tests/python/test_ir.py's matmul (front-end parity); the library's general
// matmul is registered as "matmul".
NEURON_KERNEL(matmul_naive, matmul_naive,
              "out[M, N] = lhsT[K, M].T @ rhs[K, N]; M, K multiples of 128, N of 512",
              neuron::inputs("lhsT", "rhs"));

// The same product, blocked for reuse and overlap:
//  - a block of BM = 512 output rows keeps its whole lhsT panel [K, 512] in SBUF (K on
//    partitions, one 128-row slice per `kt`), loaded once and reused for every column block;
//  - each 512-column block loads its rhs panel [K, 512] the same way. Both panels are
//    allocated inside their loops, so the allocator gives them two slots: the panels of the
//    next block load while the Tensor engine works on this one;
//  - four PSUM accumulators (one bank each, double-buffered: all 8 banks) collect the 4 x 1
//    grid of 128x512 tiles over K, so every stationary load feeds a full 512-column stream;
//    the first K slice overwrites instead of a memset (see below);
//  - PSUM is evacuated to bf16 by VectorE and stored while the next block computes.
// M a multiple of 512, K of 128, N of 512. SBUF: 2 x (K/128 x 1 KiB) per panel per partition.
inline nl::tensor matmul_blocked(nl::tensor lhsT, nl::tensor rhs) {
  const int64_t K = lhsT.shape()[0], M = lhsT.shape()[1], N = rhs.shape()[1];
  const int64_t TM = 128, TK = 128, TN = 512, MI = 4, BM = MI * TM, KT = K / TK;
  const auto dt = lhsT.dtype();
  auto out = nl::ndarray({M, N}, dt, nl::shared_hbm, "out");
  for (auto mb : nl::affine_range(M / BM)) {
    auto a = nl::ndarray({TK, KT, BM}, dt, nl::sbuf, "a_panel");
    for (auto kt : nl::affine_range(KT))
      isa::dma_copy(a(nl::all, kt, nl::all), lhsT(nl::ds(kt * TK, TK), nl::ds(mb * BM, BM)));
    for (auto nb : nl::affine_range(N / TN)) {
      auto b = nl::ndarray({TK, KT, TN}, dt, nl::sbuf, "b_panel");
      for (auto kt : nl::affine_range(KT))
        isa::dma_copy(b(nl::all, kt, nl::all), rhs(nl::ds(kt * TK, TK), nl::ds(nb * TN, TN)));
      // No memset: the first K slice overwrites (accumulate=false), the rest add. A memset
      // would queue on VectorE behind the previous block's evacuation and stall TensorE.
      std::vector<nl::tensor> acc;
      for (int64_t mi = 0; mi < MI; ++mi)
        acc.push_back(nl::ndarray({TM, TN}, nl::float32, nl::psum, "acc"));
      for (int64_t mi = 0; mi < MI; ++mi)
        isa::nc_matmul(acc[mi], a(nl::all, 0, nl::ds(mi * TM, TM)), b(nl::all, 0, nl::all),
                       /*accumulate=*/false);
      for (auto kt : nl::affine_range(1, KT))
        for (int64_t mi = 0; mi < MI; ++mi)  // unrolled: four matmuls share one moving tile
          isa::nc_matmul(acc[mi], a(nl::all, kt, nl::ds(mi * TM, TM)), b(nl::all, kt, nl::all),
                         /*accumulate=*/true);
      for (int64_t mi = 0; mi < MI; ++mi)
        nl::store(out(nl::ds(mb * BM + mi * TM, TM), nl::ds(nb * TN, TN)), nl::copy(acc[mi], dt));
    }
  }
  return out;
}

}  // namespace examples
