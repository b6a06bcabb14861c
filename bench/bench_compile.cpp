// Compile latency of the tiled matmul example (matmul_naive of examples/profile_matmul.hpp, the
// loop nest the issue-3 targets were set on) through the native backend:
// cold, disk-cache hit and memory-cache hit (issue 3 targets: < 100 ms, < 2 ms, < 20 us).
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <string>

#include "../examples/profile_matmul.hpp"
#include "neuron/runtime/cache.hpp"
#include "neuron/runtime/native/native.hpp"

namespace {

namespace fs = std::filesystem;

neuron::Kernel matmul_kernel(int64_t n, neuron::DType dt) {
  return neuron::trace("matmul", examples::matmul_naive, {{{n, n}, dt}, {{n, n}, dt}});
}

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

// Wall seconds of f(); its CPU seconds on this thread are added to *cpu (the machine is
// shared, so wall time alone overstates what a quiet machine would see).
template <class F>
double seconds(F&& f, double* cpu = nullptr) {
  const double c0 = thread_cpu_seconds();
  auto t0 = std::chrono::steady_clock::now();
  f();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (cpu) *cpu += thread_cpu_seconds() - c0;
  return wall;
}

void set_cpu_counter(benchmark::State& state, double cpu_s, double scale, const char* name) {
  state.counters[name] = benchmark::Counter(cpu_s * scale, benchmark::Counter::kAvgIterations);
}

// Forgets every cached form of every kernel, disk included (the cache directory is this
// process's own temporary one).
void forget_everything() {
  neuron::clear_native_kernels();
  neuron::CompileCache::global().clear();
}

bool expect_cache(benchmark::State& state, const neuron::NativeKernel& k, const char* want) {
  if (k.report().cache == want) return true;
  state.SkipWithError(fmt::format("expected cache '{}', got '{}'", want, k.report().cache).c_str());
  return false;
}

// Cold: trace excluded; passes, LLVM lowering, optimization, machine code, store and load.
void compile_cold(benchmark::State& state, bool from_kernel) {
  auto kernel = matmul_kernel(state.range(0), neuron::DType::float32);
  auto compiled = neuron::compile(kernel, neuron::default_compile_options());
  double optimize_ms = 0, machine_ms = 0, cpu = 0;
  for (auto _ : state) {
    forget_everything();
    neuron::NativeKernel k;
    state.SetIterationTime(seconds(
        [&] {
          k = from_kernel ? neuron::compile_native(kernel) : neuron::compile_native(compiled);
        },
        &cpu));
    if (!expect_cache(state, k, "cold")) break;
    optimize_ms += k.report().phase_ms("llvm optimize");
    machine_ms += k.report().phase_ms("machine code");
  }
  state.counters["optimize_ms"] =
      benchmark::Counter(optimize_ms, benchmark::Counter::kAvgIterations);
  state.counters["machine_code_ms"] =
      benchmark::Counter(machine_ms, benchmark::Counter::kAvgIterations);
  set_cpu_counter(state, cpu, 1e3, "thread_cpu_ms");
}

// Disk hit: the in-process levels are cleared each iteration, the disk entry stays.
void compile_disk_hit(benchmark::State& state) {
  auto compiled = neuron::compile(matmul_kernel(state.range(0), neuron::DType::float32),
                                  neuron::default_compile_options());
  forget_everything();
  neuron::compile_native(compiled);
  double cpu = 0;
  for (auto _ : state) {
    neuron::clear_native_kernels();
    neuron::CompileCache::global().clear_memory();
    neuron::NativeKernel k;
    state.SetIterationTime(seconds([&] { k = neuron::compile_native(compiled); }, &cpu));
    if (!expect_cache(state, k, "disk")) break;
  }
  set_cpu_counter(state, cpu, 1e6, "thread_cpu_us");
}

// Memory hit: the kernel was loaded before in this process.
void compile_memory_hit(benchmark::State& state, bool from_kernel) {
  auto kernel = matmul_kernel(state.range(0), neuron::DType::float32);
  auto compiled = neuron::compile(kernel, neuron::default_compile_options());
  neuron::compile_native(kernel);
  neuron::compile_native(compiled);
  double cpu = 0;
  for (auto _ : state) {
    neuron::NativeKernel k;
    state.SetIterationTime(seconds(
        [&] {
          k = from_kernel ? neuron::compile_native(kernel) : neuron::compile_native(compiled);
        },
        &cpu));
    if (!expect_cache(state, k, "memory")) break;
  }
  set_cpu_counter(state, cpu, 1e6, "thread_cpu_us");
}

// Tracing the DSL function, for reference (not part of compile_native).
void trace_only(benchmark::State& state) {
  for (auto _ : state) {
    double s = seconds(
        [&] { benchmark::DoNotOptimize(matmul_kernel(state.range(0), neuron::DType::float32)); });
    state.SetIterationTime(s);
  }
}

}  // namespace

int main(int argc, char** argv) {
  // A private cache directory, so "cold" is cold and the user's cache is left alone.
  std::string tmpl = (fs::temp_directory_path() / "neuron-bench-compile-XXXXXX").string();
  if (!mkdtemp(tmpl.data())) return 1;
  setenv("NEURON_CACHE_DIR", tmpl.c_str(), 1);
  setenv("NEURON_CACHE", "on", 1);
  // LLVM's one-time initialization (targets, the process-wide LLJIT) is not a compile cost.
  neuron::compile_native(matmul_kernel(512, neuron::DType::float32));

  for (int64_t n : {512, 1024}) {
    benchmark::RegisterBenchmark("compile_cold/kernel", compile_cold, true)
        ->Arg(n)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark("compile_cold/compiled", compile_cold, false)
        ->Arg(n)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark("compile_disk_hit", compile_disk_hit)
        ->Arg(n)
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark("compile_memory_hit/kernel", compile_memory_hit, true)
        ->Arg(n)
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark("compile_memory_hit/compiled", compile_memory_hit, false)
        ->Arg(n)
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark("trace", trace_only)
        ->Arg(n)
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond);
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("neuron_cache_dir", tmpl);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  neuron::CompileCache::global().clear();
  std::error_code ec;
  fs::remove_all(tmpl, ec);
  return 0;
}
