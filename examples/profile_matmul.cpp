// Profiles the naive and the blocked bf16 matmul (examples/profile_matmul.hpp): checks both
// against a double-precision reference at a small size, then times them at 4096^3 in timing-only
// mode and writes trace, summary and HTML report for each.
//   profile_matmul [outdir] [size]     (defaults: ./profile-matmul, 4096)
#include "profile_matmul.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

template <class Fn>
static bool check(const char* name, Fn fn, int64_t M, int64_t K, int64_t N) {
  using neuron::DType;
  auto kernel = neuron::trace(name, fn, {{{K, M}, DType::bfloat16}, {{K, N}, DType::bfloat16}});
  auto compiled = neuron::compile(kernel, neuron::default_compile_options());
  auto lhsT = neuron::Tensor::empty({K, M}, DType::bfloat16);
  auto rhs = neuron::Tensor::empty({K, N}, DType::bfloat16);
  std::srand(11);
  for (int64_t i = 0; i < K * M; ++i) lhsT.set(i, std::rand() / (float)RAND_MAX - 0.5f);
  for (int64_t i = 0; i < K * N; ++i) rhs.set(i, std::rand() / (float)RAND_MAX - 0.5f);
  auto r = neuron::simulate_profiled(compiled, {lhsT, rhs});
  double worst = 0;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double ref = 0;
      for (int64_t k = 0; k < K; ++k) ref += double(lhsT.get(k * M + m)) * rhs.get(k * N + n);
      worst = std::fmax(worst, std::fabs(r.outputs[0].get(m * N + n) - ref) / (1 + std::fabs(ref)));
    }
  std::printf("%s %lldx%lldx%lld: max rel error %.3g, simulated %.2f us\n", name, (long long)M,
              (long long)K, (long long)N, worst, r.profile.total_ns / 1000);
  return worst < 2e-2;
}

template <class Fn>
static void profile(const char* name, Fn fn, int64_t S, const std::string& dir) {
  using neuron::DType;
  auto kernel = neuron::trace(name, fn, {{{S, S}, DType::bfloat16}, {{S, S}, DType::bfloat16}});
  auto compiled = neuron::compile(kernel, neuron::default_compile_options());
  neuron::SimOptions opts;
  opts.execute = false;  // timing only: no data math, so 4096^3 takes seconds
  auto r = neuron::simulate_profiled(compiled, {}, {1}, opts);
  auto paths = neuron::write_profile(r.profile, dir, name);
  std::printf("\n== %s %lld^3 ==\n%s", name, (long long)S,
              neuron::summary_text(r.profile).c_str());
  std::printf("wrote %s, %s, %s\n", paths[0].c_str(), paths[1].c_str(), paths[2].c_str());
}

int main(int argc, char** argv) {
  std::string dir = argc > 1 ? argv[1] : "profile-matmul";
  int64_t size = argc > 2 ? std::atoll(argv[2]) : 4096;
  bool ok = check("matmul_naive", examples::matmul_naive, 256, 256, 512);
  ok = check("matmul_blocked", examples::matmul_blocked, 512, 256, 1024) && ok;
  profile("matmul_naive", examples::matmul_naive, size, dir);
  profile("matmul_blocked", examples::matmul_blocked, size, dir);
  return ok ? 0 : 1;
}
