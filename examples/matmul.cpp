// The main demo: a tiled matmul traced from C++, compiled, run on the simulator in float32 and
// bfloat16, and checked against a double-precision reference.
#include "matmul.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>

static int run(neuron::DType dtype, int64_t M, int64_t K, int64_t N, double tolerance) {
  auto kernel = neuron::trace("matmul", examples::matmul, {{{K, M}, dtype}, {{K, N}, dtype}});
  auto compiled = neuron::compile(kernel, neuron::default_compile_options());
  auto lhsT = neuron::Tensor::empty({K, M}, dtype), rhs = neuron::Tensor::empty({K, N}, dtype);
  std::srand(7);
  for (int64_t i = 0; i < K * M; ++i) lhsT.set(i, std::rand() / (float)RAND_MAX - 0.5f);
  for (int64_t i = 0; i < K * N; ++i) rhs.set(i, std::rand() / (float)RAND_MAX - 0.5f);
  auto out = neuron::simulate(compiled, {lhsT, rhs})[0];

  double worst = 0;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double ref = 0;
      for (int64_t k = 0; k < K; ++k) ref += double(lhsT.get(k * M + m)) * rhs.get(k * N + n);
      worst = std::fmax(worst, std::fabs(out.get(m * N + n) - ref) / (1 + std::fabs(ref)));
    }
  std::printf("matmul %-8s M=%lld K=%lld N=%lld: %d instructions, max rel error %.3g (tolerance %g)\n",
              std::string(neuron::dtype_name(dtype)).c_str(), (long long)M, (long long)K,
              (long long)N, compiled.program.num_instrs, worst, tolerance);
  return worst <= tolerance ? 0 : 1;
}

int main() {
  int failures = run(neuron::DType::float32, 256, 384, 1024, 1e-5);
  failures += run(neuron::DType::bfloat16, 256, 256, 512, 1e-2);
  if (!failures) std::printf("ok: simulator matches the reference\n");
  return failures;
}
