// Throughput of natively compiled kernels: the SPMD matmul (bench/spmd_matmul.hpp) and the
// matmul example in fp32 and bf16 at 1024 and 2048, and the softmax example; GFLOP/s counters.
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "../examples/matmul.hpp"
#include "../examples/softmax.hpp"
#include "neuron/runtime/native/native.hpp"
#include "spmd_matmul.hpp"

namespace {

neuron::Tensor random_tensor(std::vector<int64_t> shape, neuron::DType dt, uint32_t seed,
                             float scale = 1.0f) {
  auto t = neuron::Tensor::empty(std::move(shape), dt);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-scale, scale);
  for (int64_t i = 0; i < t.elements(); ++i) t.set(i, d(rng));
  return t;
}

// How the matmul is written: the example (one program), bench/spmd_matmul.hpp, or its variant
// with the stationary stripes hoisted out of the n loop.
enum class Variant { example, spmd, hoisted };

neuron::Kernel matmul_kernel(Variant v, int64_t n, neuron::DType dt, int64_t blocks) {
  const std::vector<neuron::TensorSpec> specs{{{n, n}, dt}, {{n, n}, dt}};
  if (v == Variant::example) return neuron::trace("matmul", examples::matmul, specs);
  return neuron::trace(
      v == Variant::spmd ? "bench_spmd_matmul" : "bench_spmd_matmul_hoisted",
      [v, blocks](neuron::nl::tensor a, neuron::nl::tensor b) {
        return v == Variant::spmd ? bench::spmd_matmul(a, b, blocks)
                                  : bench::spmd_matmul_hoisted(a, b, blocks);
      },
      specs);
}

// `blocks` row blocks per program for the SPMD variants.
void matmul(benchmark::State& state, neuron::DType dt, Variant v, int64_t blocks) {
  const int64_t n = state.range(0);
  const int threads = static_cast<int>(state.range(1));
  auto kernel = matmul_kernel(v, n, dt, blocks);
  auto k = neuron::compile_native(kernel);
  auto a = random_tensor({n, n}, dt, 1), b = random_tensor({n, n}, dt, 2);
  auto out = neuron::Tensor::empty({n, n}, dt);
  const std::vector<int64_t> grid{v == Variant::example ? 1 : n / (128 * blocks)};
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
  auto k = neuron::compile_native(
      neuron::trace("softmax", examples::softmax, {{{rows, cols}, neuron::DType::float32}}));
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
    for (int64_t blocks : {4, 1}) {
      benchmark::RegisterBenchmark(fmt::format("matmul_spmd_b{}/{}", blocks, name).c_str(), matmul,
                                   dt, Variant::spmd, blocks)
          ->ArgNames({"n", "threads"})
          ->ArgsProduct({{1024, 2048}, {1, 2}})
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
    }
    benchmark::RegisterBenchmark(fmt::format("matmul_spmd_hoisted_b4/{}", name).c_str(), matmul, dt,
                                 Variant::hoisted, int64_t{4})
        ->ArgNames({"n", "threads"})
        ->ArgsProduct({{1024, 2048}, {1, 2}})
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
    benchmark::RegisterBenchmark(fmt::format("matmul_example/{}", name).c_str(), matmul, dt,
                                 Variant::example, int64_t{0})
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
