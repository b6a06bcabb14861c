// Flash attention (kernels/attention.hpp, attention_backward.hpp): native throughput at B=1, H=8,
// L=S=2048, D=64 (the SDPA comparison point; bench/compare_attention.py measures torch
// SDPA beside it in one process), and the simulated trn2 profile of one head at L=S=4096, D=128,
// bf16, non-causal: TensorE utilization, each engine's busy share and the profiler's verdict.
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <cstdint>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "neuron/kernels/attention.hpp"
#include "neuron/kernels/attention_backward.hpp"
#include "neuron/neuron.hpp"
#include "neuron/runtime/native/native.hpp"
#include "neuron/runtime/profile.hpp"

namespace {

namespace kn = neuron::kernels;
using neuron::nl::tensor;

neuron::Tensor random_tensor(std::vector<int64_t> shape, neuron::DType dt, uint32_t seed) {
  auto t = neuron::Tensor::empty(std::move(shape), dt);
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  for (int64_t i = 0; i < t.elements(); ++i) t.set(i, d(rng));
  return t;
}

neuron::Kernel forward_kernel(int64_t B, int64_t H, int64_t L, int64_t D, neuron::DType dt,
                              bool causal) {
  kn::AttentionConfig cfg;
  cfg.causal = causal;
  return neuron::trace(
      "attention_forward",
      [cfg](tensor q, tensor k, tensor v) { return kn::attention_forward(q, k, v, cfg); },
      {{{B, H, L, D}, dt}, {{B, H, L, D}, dt}, {{B, H, L, D}, dt}});
}

void native_forward(benchmark::State& state, neuron::DType dt, bool causal) {
  const int64_t B = 1, H = 8, L = state.range(0), D = 64;
  const int threads = static_cast<int>(state.range(1));
  auto k = neuron::compile_native(forward_kernel(B, H, L, D, dt, causal));
  state.counters["compile_s"] = k.report().total_ms() / 1e3;
  auto q = random_tensor({B, H, L, D}, dt, 1), kk = random_tensor({B, H, L, D}, dt, 2),
       v = random_tensor({B, H, L, D}, dt, 3);
  auto out = neuron::Tensor::empty({B, H, L, D}, dt);
  auto lse = neuron::Tensor::empty({B, H, L}, neuron::DType::float32);
  const auto grid = kn::attention_grid({B, H, L, D}, {B, H, L, D});
  neuron::NativeOptions opts;
  opts.threads = threads;
  k.run({q, kk, v, out, lse}, grid, opts);
  for (auto _ : state) k.run({q, kk, v, out, lse}, grid, opts);
  // Two matmuls of 2 * L * S * D flops each; a causal mask halves the useful work.
  const double flops = 4.0 * B * H * L * L * D * (causal ? 0.5 : 1.0);
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// Timing only (no data) on the simulator: one program, i.e. one head on one NeuronCore.
void simulated(benchmark::State& state, bool backward) {
  const int64_t L = state.range(0), D = 128;
  const auto dt = neuron::DType::bfloat16;
  const std::vector<int64_t> s{1, 1, L, D};
  neuron::Kernel k =
      backward ? neuron::trace(
                     "attention_backward",
                     [](tensor q, tensor k, tensor v, tensor o, tensor d, tensor l) {
                       return kn::attention_backward(q, k, v, o, d, l);
                     },
                     {{s, dt}, {s, dt}, {s, dt}, {s, dt}, {s, dt}, {{1, 1, L}, neuron::DType::float32}})
               : forward_kernel(1, 1, L, D, dt, false);
  auto opts = neuron::default_compile_options();
  opts.target = "trn2";
  neuron::Compiled c = neuron::compile(k, opts);
  neuron::SimOptions so;
  so.execute = false;
  neuron::SimResult r;
  for (auto _ : state) r = neuron::simulate_profiled(c, {}, {1, 1, 1}, so);
  neuron::ProfileStats st = neuron::analyze(r.profile);
  state.counters["sim_us"] = r.profile.total_ns / 1e3;
  state.counters["TensorE_hfu"] = st.tensor_hfu;
  for (size_t u = 0; u < 4 && u < r.profile.units.size(); ++u)
    state.counters[r.profile.units[u] + "_busy"] = st.unit_busy_ns[u] / r.profile.total_ns;
  state.counters["DMA_active"] = st.dma_active_ns / r.profile.total_ns;
  state.SetLabel(st.verdict);
  if (const char* path = std::getenv("NEURON_BENCH_SUMMARY")) {
    std::ofstream f(path, std::ios::app);
    f << neuron::summary_text(r.profile) << "\n";
  }
}

}  // namespace

int main(int argc, char** argv) {
  using neuron::DType;
  for (bool causal : {true, false})
    for (auto [dt, name] : {std::pair{DType::float32, "fp32"}, std::pair{DType::bfloat16, "bf16"}})
      benchmark::RegisterBenchmark(
          fmt::format("attention_forward_{}/{}", causal ? "causal" : "full", name).c_str(),
          native_forward, dt, causal)
          ->ArgNames({"L", "threads"})
          ->ArgsProduct({{2048}, {2}})
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime()
          ->Iterations(3);
  for (bool backward : {false, true})
    benchmark::RegisterBenchmark(
        fmt::format("sim_trn2_attention_{}/bf16_D128", backward ? "backward" : "forward").c_str(),
        simulated, backward)
        ->ArgNames({"L"})
        ->Arg(4096)
        ->Unit(benchmark::kMillisecond)
        ->Iterations(1);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
