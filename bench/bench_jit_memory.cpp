// The long run of bounded JIT memory (issue 13 item 5; docs/native.md "Memory"): compiles N
// distinct kernels natively in one process and prints, at checkpoints, the process's memory
// mappings, its resident memory and the kernels loaded. Before kernels were unloaded, every
// kernel left two mappings and ~22 KB behind and the process died near kernel 21,800
// (vm.max_map_count). Issue target: mappings and RSS within 10% from kernel 10,000 to 100,000.
//
//   build/bench/bench_jit_memory [--kernels N] [--held H] [--bitcode]
//
// Each kernel is `out = x * c` for its own constant c (a distinct IR and cache key). The
// caller keeps the last H kernels (default 16) alive, like a training loop holding the kernels
// of its current shapes; the memory level (NEURON_CACHE_MEMORY_ENTRIES, default 512) keeps its
// own. Kernels are compiled with the library's kernels called, not inlined, at O0 (--bitcode:
// the default O2 bitcode mode, about 20x slower per kernel), and NEURON_CACHE=off (no disk).
// Not a Google Benchmark program: one long pass with a table, not repeated timings.
#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <string>

#include "neuron/neuron.hpp"
#include "neuron/runtime/native/native.hpp"

namespace nl = neuron::nl;

namespace {

std::size_t mapping_count() {
  std::ifstream f("/proc/self/maps");
  std::size_t n = 0;
  for (std::string line; std::getline(f, line);) ++n;
  return n;
}

double resident_mib() {
  std::ifstream f("/proc/self/statm");
  std::size_t size = 0, resident = 0;
  f >> size >> resident;
  return double(resident) * double(sysconf(_SC_PAGESIZE)) / (1 << 20);
}

neuron::Kernel scale_kernel(float c) {
  return neuron::trace(
      "scale",
      [c](nl::tensor x) {
        auto out = nl::ndarray(x.shape(), x.dtype(), nl::shared_hbm, "out");
        nl::store(out, nl::load(x) * c);
        return out;
      },
      {{{128, 64}, neuron::DType::float32}});
}

}  // namespace

int main(int argc, char** argv) {
  long kernels = 100000, held = 16;
  bool bitcode = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--kernels") && i + 1 < argc)
      kernels = std::atol(argv[++i]);
    else if (!std::strcmp(argv[i], "--held") && i + 1 < argc)
      held = std::atol(argv[++i]);
    else if (!std::strcmp(argv[i], "--bitcode"))
      bitcode = true;
    else {
      fmt::print(stderr, "usage: {} [--kernels N] [--held H] [--bitcode]\n", argv[0]);
      return 2;
    }
  }
  setenv("NEURON_CACHE", "off", 1);
  neuron::NativeCompileOptions opts;
  opts.kernels = bitcode ? "bitcode" : "host";
  opts.opt_level = bitcode ? 2 : 0;
  const char* bound = std::getenv("NEURON_CACHE_MEMORY_ENTRIES");
  fmt::print("{} kernels ({} O{}), {} held by the caller, memory level bound {}\n", kernels,
             opts.kernels, opts.opt_level, held, bound ? bound : "512 (default)");
  fmt::print("{:>8} {:>9} {:>9} {:>8} {:>9}\n", "kernel", "mappings", "RSS MiB", "loaded",
             "elapsed s");
  auto row = [&](long k, double s) {
    fmt::print("{:>8} {:>9} {:>9.1f} {:>8} {:>9.1f}\n", k, mapping_count(), resident_mib(),
               neuron::loaded_native_kernels(), s);
    std::fflush(stdout);
  };
  const auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  row(0, 0);
  std::deque<neuron::NativeKernel> kept;
  std::vector<float> ones(128 * 64, 1.0f);
  neuron::Tensor x = neuron::Tensor::from_floats(ones, {128, 64}, neuron::DType::float32);
  for (long k = 1; k <= kernels; ++k) {
    // c = k is exact in fp32 up to 2^24: every kernel differs.
    neuron::NativeKernel nk = neuron::compile_native(scale_kernel(float(k)), opts);
    if (k % 1000 == 0 && nk({x})[0].get(77) != float(k)) {
      fmt::print(stderr, "kernel {} computed a wrong result\n", k);
      return 1;
    }
    kept.push_back(std::move(nk));
    if (long(kept.size()) > held) kept.pop_front();
    if (k == 1000 || k % 10000 == 0) row(k, elapsed());
  }
  return 0;
}
