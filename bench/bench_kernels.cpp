// Throughput of natively compiled library kernels: matmul (kernels/matmul.hpp) in fp32 and bf16
// at 1024 and 2048 over 1 and 2 threads, the one-program tiled example (matmul_naive of
// examples/profile_matmul.hpp) for comparison, and the softmax; GFLOP/s counters.
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "../examples/profile_matmul.hpp"
#include "neuron/kernels/matmul.hpp"
#include "neuron/neuron.hpp"
#include "neuron/kernels/softmax.hpp"
#include "neuron/runtime/native/native.hpp"

namespace {

namespace kn = neuron::kernels;

neuron::Tensor random_tensor(std::vector<int64_t> shape, neuron::DType dt, uint32_t seed,
                             float scale = 1.0f) {
  auto t = neuron::Tensor::empty(std::move(shape), dt);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-scale, scale);
  for (int64_t i = 0; i < t.elements(); ++i) t.set(i, d(rng));
  return t;
}

// The library matmul (lhsT stored [K, M]) with `rows` rows per program, or (rows == 0) the
// one-program example.
void matmul(benchmark::State& state, neuron::DType dt, int64_t rows) {
  const int64_t n = state.range(0);
  const int threads = static_cast<int>(state.range(1));
  const std::vector<neuron::TensorSpec> specs{{{n, n}, dt}, {{n, n}, dt}};
  kn::MatmulConfig cfg;
  cfg.transpose_a = true;
  cfg.programs = rows ? n / rows : 1;
  auto kernel =
      rows
          ? neuron::trace(
                "matmul",
                [cfg](neuron::nl::tensor a, neuron::nl::tensor b) { return kn::matmul(a, b, cfg); },
                specs)
          : neuron::trace("matmul_naive", examples::matmul_naive, specs);
  auto k = neuron::compile_native(kernel);
  auto a = random_tensor({n, n}, dt, 1), b = random_tensor({n, n}, dt, 2);
  auto out = neuron::Tensor::empty({n, n}, dt);
  const auto grid = kn::matmul_grid(cfg);
  neuron::NativeOptions opts;
  opts.threads = threads;
  k.run({a, b, out}, grid, opts);  // warm-up: worker scratch, page faults
  for (auto _ : state) k.run({a, b, out}, grid, opts);
  state.counters["GFLOP/s"] = benchmark::Counter(2e-9 * double(n) * double(n) * double(n),
                                                 benchmark::Counter::kIsIterationInvariantRate);
}

void softmax(benchmark::State& state) {
  const int64_t rows = state.range(0), cols = state.range(1);
  const int threads = static_cast<int>(state.range(2));
  const kn::SoftmaxConfig cfg{rows / 128};
  auto k = neuron::compile_native(neuron::trace(
      "softmax", [cfg](neuron::nl::tensor x) { return kn::softmax(x, cfg); },
      {{{rows, cols}, neuron::DType::float32}}));
  auto x = random_tensor({rows, cols}, neuron::DType::float32, 3, 4.0f);
  auto out = neuron::Tensor::empty({rows, cols}, neuron::DType::float32);
  neuron::NativeOptions opts;
  opts.threads = threads;
  k.run({x, out}, {rows / 128}, opts);
  for (auto _ : state) k.run({x, out}, {rows / 128}, opts);
  // ~5 flops per element: max, subtract, exp, sum, multiply.
  state.counters["GFLOP/s"] =
      benchmark::Counter(5e-9 * double(rows * cols), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GB/s"] =
      benchmark::Counter(8e-9 * double(rows * cols), benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace

int main(int argc, char** argv) {
  using neuron::DType;
  for (auto [dt, name] : {std::pair{DType::float32, "fp32"}, std::pair{DType::bfloat16, "bf16"}}) {
    for (int64_t rows : {512, 128}) {
      benchmark::RegisterBenchmark(fmt::format("matmul_rows{}/{}", rows, name).c_str(), matmul, dt,
                                   rows)
          ->ArgNames({"n", "threads"})
          ->ArgsProduct({{1024, 2048}, {1, 2}})
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
    }
    benchmark::RegisterBenchmark(fmt::format("matmul_naive/{}", name).c_str(), matmul, dt,
                                 int64_t{0})
        ->ArgNames({"n", "threads"})
        ->ArgsProduct({{1024, 2048}, {1}})
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
  }
  benchmark::RegisterBenchmark("softmax/fp32", softmax)
      ->ArgNames({"rows", "cols", "threads"})
      ->ArgsProduct({{4096}, {1024}, {1, 2}})
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
