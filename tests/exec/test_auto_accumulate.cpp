// nc_matmul with accumulate=auto into a PSUM tile allocated inside a loop: each iteration's tile
// must start a fresh accumulation even though rotating slots reuse earlier iterations' storage.
#include <doctest/doctest.h>

#include <random>

#include "exec/differential.hpp"
#include "neuron/neuron.hpp"

using namespace neuron;
using namespace neuron::testing;

namespace {

// out[M, N] = lhsT.T @ rhs with the NKI idiom: a PSUM tile per output block, matmuls into it
// with the default accumulate (auto: the first overwrites, the rest add).
nl::tensor auto_matmul(nl::tensor lhsT, nl::tensor rhs) {
  const int64_t K = lhsT.shape()[0], M = lhsT.shape()[1], N = rhs.shape()[1];
  auto out = nl::ndarray({M, N}, nl::float32, nl::shared_hbm, "out");
  for (auto m : nl::affine_range(M / 128)) {
    for (auto n : nl::affine_range(N / 128)) {
      auto acc = nl::ndarray({128, 128}, nl::float32, nl::psum, "acc");
      for (auto k : nl::sequential_range(K / 128)) {
        auto a = nl::load(lhsT(nl::ds(k * 128, 128), nl::ds(m * 128, 128)));
        auto b = nl::load(rhs(nl::ds(k * 128, 128), nl::ds(n * 128, 128)));
        isa::nc_matmul(acc, a, b);
      }
      nl::store(out(nl::ds(m * 128, 128), nl::ds(n * 128, 128)), nl::copy(acc));
    }
  }
  return out;
}

}  // namespace

TEST_CASE("auto-accumulating matmul into a per-iteration PSUM tile restarts every iteration") {
  const int64_t M = 256, K = 256, N = 512;  // 2 x 4 output blocks: slots are reused
  auto k = trace("auto_matmul", auto_matmul,
                 {{{K, M}, DType::float32}, {{K, N}, DType::float32}});
  Compiled c = compile(k, default_compile_options());
  Tensor lhsT = Tensor::empty({K, M}, DType::float32), rhs = Tensor::empty({K, N}, DType::float32);
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  for (int64_t i = 0; i < K * M; ++i) lhsT.set(i, u(rng));
  for (int64_t i = 0; i < K * N; ++i) rhs.set(i, u(rng));
  std::vector<double> ref(static_cast<size_t>(M * N));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = 0;
      for (int64_t kk = 0; kk < K; ++kk) s += double(lhsT.get(kk * M + m)) * rhs.get(kk * N + n);
      ref[static_cast<size_t>(m * N + n)] = s;
    }
  check_reference(run_both(c, {lhsT, rhs}), 0, ref);
}
