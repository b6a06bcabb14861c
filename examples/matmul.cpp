// The main demo: the library's tiled matmul (kernels/include/neuron/kernels/matmul.hpp) traced
// from C++, compiled once, run on the NeuronCore simulator and natively through the LLVM JIT,
// in float32 and bfloat16. Both executors must agree bit for bit and match a double-precision
// reference.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <neuron/kernels/matmul.hpp>
#include <random>

#include "neuron/neuron.hpp"
#include "neuron/runtime/native/native.hpp"

namespace kn = neuron::kernels;

static int run(neuron::DType dtype, int64_t M, int64_t K, int64_t N, double tolerance) {
  // lhsT is stored [K, M], the Tensor engine's layout (K on partitions): transpose_a.
  kn::MatmulConfig cfg;
  cfg.transpose_a = true;
  auto kernel = neuron::trace(
      "matmul",
      [cfg](neuron::nl::tensor lhsT, neuron::nl::tensor rhs) { return kn::matmul(lhsT, rhs, cfg); },
      {{{K, M}, dtype}, {{K, N}, dtype}});
  auto compiled = neuron::compile(kernel, neuron::default_compile_options());
  auto lhsT = neuron::Tensor::empty({K, M}, dtype), rhs = neuron::Tensor::empty({K, N}, dtype);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  for (int64_t i = 0; i < K * M; ++i) lhsT.set(i, u(rng));
  for (int64_t i = 0; i < K * N; ++i) rhs.set(i, u(rng));

  auto simulated = neuron::simulate(compiled, {lhsT, rhs}, kn::matmul_grid(cfg))[0];
  auto native_kernel = neuron::compile_native(compiled);
  neuron::RunReport run_report;
  neuron::NativeOptions opts;
  opts.report = &run_report;
  auto native = native_kernel({lhsT, rhs}, kn::matmul_grid(cfg), opts)[0];

  double worst = 0;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double ref = 0;
      for (int64_t k = 0; k < K; ++k) ref += double(lhsT.get(k * M + m)) * rhs.get(k * N + n);
      worst = std::fmax(worst, std::fabs(simulated.get(m * N + n) - ref) / (1 + std::fabs(ref)));
    }
  bool identical = std::memcmp(simulated.data(), native.data(), simulated.bytes()) == 0;
  std::printf(
      "matmul %-8s M=%lld K=%lld N=%lld: %d instructions, max rel error %.3g (tolerance %g)\n",
      std::string(neuron::dtype_name(dtype)).c_str(), (long long)M, (long long)K, (long long)N,
      compiled.program.num_instrs, worst, tolerance);
  std::printf(
      "  native: compiled in %.1f ms (%s), ran in %.2f ms (%.1f GFLOP/s); %s the simulator\n",
      native_kernel.report().total_ms(), native_kernel.report().cache.c_str(), run_report.run_ms,
      2.0 * M * N * K / (run_report.run_ms * 1e6),
      identical ? "bit-identical to" : "DIFFERENT FROM");
  return worst <= tolerance && identical ? 0 : 1;
}

int main() {
  int failures = run(neuron::DType::float32, 256, 384, 1024, 1e-5);
  failures += run(neuron::DType::bfloat16, 256, 256, 512, 1e-2);
  failures += run(neuron::DType::float32, 130, 200, 77, 1e-5);  // sizes that are not tile multiples
  if (!failures) std::printf("ok: simulator and native agree and match the reference\n");
  return failures;
}
