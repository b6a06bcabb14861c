// Bounded JIT memory (issue 13 item 5): loaded kernels are released when the memory level evicts
// them and no caller holds them, so mappings and resident memory stay flat over many kernels;
// running out of mappings is a UserError, never an abort. The long run (100,000 kernels) is
// bench/bench_jit_memory.cpp.
#include <doctest/doctest.h>

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cmath>
#include <vector>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <string>

#include "neuron/codegen/pipeline.hpp"
#include "neuron/base/error.hpp"
#include "neuron/runtime/cache.hpp"
#include "neuron/codegen/jit.hpp"
#include "neuron/runtime/native/native.hpp"
#include "vector_add.hpp"

using namespace neuron;
namespace nl = neuron::nl;

namespace {

std::size_t mapping_count() {
  std::ifstream f("/proc/self/maps");
  std::size_t n = 0;
  for (std::string line; std::getline(f, line);) ++n;
  return n;
}

std::size_t resident_bytes() {
  std::ifstream f("/proc/self/statm");
  std::size_t size = 0, resident = 0;
  f >> size >> resident;
  return resident * std::size_t(sysconf(_SC_PAGESIZE));
}

// vector_add over [128, f]: a distinct kernel (and cache key) per f.
Compiled small_kernel(int64_t f) {
  Kernel k = trace("vector_add", examples::vector_add,
                   {{{128, f}, DType::float32}, {{128, f}, DType::float32}});
  return compile(k, default_compile_options());
}

// Cheap cold compiles: calls to the library's kernels, no optimization.
const NativeCompileOptions kCheap{.kernels = "host", .opt_level = 0};

// out = a + b with a[i] = i, b[i] = 2i, checked exactly.
void check_runs(const NativeKernel& k, int64_t f) {
  std::vector<float> av(128 * f), bv(128 * f);
  for (int64_t i = 0; i < 128 * f; ++i) av[i] = float(i), bv[i] = float(2 * i);
  Tensor out = k({Tensor::from_floats(av, {128, f}, DType::float32),
                  Tensor::from_floats(bv, {128, f}, DType::float32)})[0];
  int64_t wrong = 0;
  for (int64_t i = 0; i < 128 * f; ++i) wrong += out.get(i) != float(3 * i);
  CHECK(wrong == 0);
}

// Scoped environment variable.
struct Env {
  std::string name;
  Env(const char* n, const char* v) : name(n) { setenv(n, v, 1); }
  ~Env() { unsetenv(name.c_str()); }
};

// Runs `body` in a forked child (it may exhaust or rearrange the child's address space) and
// checks that it exits with 0, body's result; `codes` explains the others.
void check_child_succeeds(const char* codes, const std::function<int()>& body) {
  std::fflush(nullptr);
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    const int code = body();
    std::fflush(nullptr);
    _exit(code);
  }
  int st = 0;
  REQUIRE(waitpid(pid, &st, 0) == pid);
  INFO(codes);
  REQUIRE(WIFEXITED(st));
  CHECK(WEXITSTATUS(st) == 0);
}

}  // namespace

TEST_CASE("unloading a kernel releases its mappings and memory") {
  Compiled c = small_kernel(8);
  native::JitOptions jo;
  jo.bitcode_kernels = false;
  jo.opt_level = 0;
  const std::vector<std::uint8_t> object = native::compile_object(c.program, jo).bytes;
  const std::size_t loaded0 = native::loaded_object_count();
  // Warm up allocator pools and the JIT's tables, then load and drop many copies.
  for (int i = 0; i < 200; ++i) native::load_object(object);
  const std::size_t maps0 = mapping_count(), rss0 = resident_bytes();
  for (int i = 0; i < 2000; ++i) {
    native::LoadedObject lo = native::load_object(object);
    REQUIRE(bool(lo.entry));
  }
  const std::size_t maps1 = mapping_count(), rss1 = resident_bytes();
  INFO("mappings ", maps0, " -> ", maps1, ", resident ", rss0 >> 10, " KiB -> ", rss1 >> 10, " KiB");
  CHECK(native::loaded_object_count() == loaded0);
  // Leaking 2 mappings and ~22 KB per kernel (before) would add 4,000 mappings and ~44 MB.
  CHECK(maps1 <= maps0 + 16);
  CHECK(rss1 <= rss0 + (8u << 20));
}

TEST_CASE("the memory level is an LRU bounded by NEURON_CACHE_MEMORY_ENTRIES") {
  clear_native_kernels();
  Env cache("NEURON_CACHE", "off");  // the memory levels alone; nothing written to disk
  Env bound("NEURON_CACHE_MEMORY_ENTRIES", "8");
  const std::size_t loaded0 = loaded_native_kernels();
  // A kernel held by the caller keeps working after the memory level evicted it.
  NativeKernel held = compile_native(small_kernel(1), kCheap);
  std::size_t maps_after_warmup = 0, rss_after_warmup = 0;
  for (int64_t f = 2; f <= 200; ++f) {
    NativeKernel k = compile_native(small_kernel(f), kCheap);
    REQUIRE(k.report().cache == "cold");
    if (f % 50 == 0) check_runs(k, f);
    // Loaded: the bound (8, `k` among them) plus the held kernel.
    REQUIRE(loaded_native_kernels() <= loaded0 + 9);
    if (f == 60) maps_after_warmup = mapping_count(), rss_after_warmup = resident_bytes();
  }
  INFO("mappings ", maps_after_warmup, " -> ", mapping_count(), ", resident ",
       rss_after_warmup >> 10, " KiB -> ", resident_bytes() >> 10, " KiB");
  CHECK(mapping_count() <= maps_after_warmup + 16);
  CHECK(resident_bytes() <= rss_after_warmup + (8u << 20));
  check_runs(held, 1);
  // Recently used kernels are memory hits; the evicted one is compiled again.
  CHECK(compile_native(small_kernel(200), kCheap).report().cache == "memory");
  CHECK(compile_native(small_kernel(1), kCheap).report().cache == "cold");
  // Releasing the held kernel unloads it once nothing else refers to it.
  held = NativeKernel();
  clear_native_kernels();
  CHECK(loaded_native_kernels() == loaded0);
}

TEST_CASE("NEURON_CACHE_MEMORY_ENTRIES is checked") {
  Env bound("NEURON_CACHE_MEMORY_ENTRIES", "many");
  try {
    config();
    FAIL("expected a config error");
  } catch (const UserError& e) {
    CHECK(e.rule() == "config");
    CHECK(e.message().find("NEURON_CACHE_MEMORY_ENTRIES='many'") != std::string::npos);
  }
}

// In a child process (it exhausts its own mappings): with every mapping of vm.max_map_count
// taken, loading a kernel is a UserError "jit-memory" that names the limit; once mappings are
// free again the same kernel loads and runs.
TEST_CASE("running out of mappings is a clear error, not an abort") {
  Env cache("NEURON_CACHE", "off");
  Compiled c = small_kernel(4);
  compile_native(c, kCheap);  // the object is now in the compile cache's memory level
  clear_native_kernels();     // unloaded: the next compile_native only loads
  const char* codes =
      "10 mmap failed, 11 limit not reached, 12 loaded anyway, 13 wrong error, 14 other "
      "exception, 15 wrong result after recovery, 16 recovery failed";
  check_child_succeeds(codes, [&] {
    int code = 0;
    const long page = sysconf(_SC_PAGESIZE);
    const std::size_t pages = 1 << 17;  // 512 MiB of address space, never touched
    char* filler = static_cast<char*>(
        mmap(nullptr, pages * page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0));
    if (filler == MAP_FAILED) _exit(10);
    // Every other page PROT_NONE splits the mapping until the kernel refuses (ENOMEM).
    std::size_t i = 1;
    for (; i < pages; i += 2)
      if (mprotect(filler + i * page, page, PROT_NONE) != 0) break;
    if (i >= pages || errno != ENOMEM) _exit(11);  // the limit was not reached
    try {
      compile_native(c, kCheap);
      code = 12;  // loaded although no mapping was left
    } catch (const UserError& e) {
      const std::string m = e.message();
      if (e.rule() != "jit-memory" || m.find("vm.max_map_count") == std::string::npos ||
          m.find("'vector_add'") == std::string::npos)
        code = 13;
    } catch (...) {
      code = 14;
    }
    munmap(filler, pages * page);
    if (code == 0) {
      try {
        NativeKernel k = compile_native(c, kCheap);
        std::vector<float> v(128 * 4, 1.0f);
        Tensor t = Tensor::from_floats(v, {128, 4}, DType::float32);
        if (k({t, t})[0].get(77) != 2.0f) code = 15;
      } catch (...) {
        code = 16;
      }
    }
    return code;
  });
}

// Maps PROT_NONE fillers into every gap between the process's mappings above `floor`, so the
// next small mmap can only land where the caller leaves a hole.
static bool fill_gaps_above(uintptr_t floor) {
  std::ifstream f("/proc/self/maps");
  std::vector<std::pair<uintptr_t, uintptr_t>> ranges;
  for (std::string line; std::getline(f, line);) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx", &lo, &hi) == 2) ranges.push_back({lo, hi});
  }
  for (size_t i = 0; i + 1 < ranges.size(); ++i) {
    const uintptr_t lo = ranges[i].second, hi = ranges[i + 1].first;
    if (lo < floor || hi <= lo || hi > (uintptr_t(1) << 47)) continue;  // user space only
    void* p = mmap(reinterpret_cast<void*>(lo), hi - lo, PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
    if (p == MAP_FAILED) return false;
  }
  return true;
}

// Kernels are compiled for the small code model: code reaches its constants by 32-bit offsets.
// With code, constants and data mapped separately, a small constant pool could land in a hole
// high in the address space and the code gigabytes below it; the offset was truncated and the
// kernel crashed (vLLM's paged attention did). Here the only holes above a 3 GiB barrier are a
// few pages: each object's sections now share one mapping, so they land together below it.
TEST_CASE("a kernel's code and constants stay within reach when memory is fragmented") {
  Env cache("NEURON_CACHE", "off");
  // exp's polynomial and the scales are constant-pool loads; 24 distinct steps make the code
  // far larger than the hole.
  Kernel k = trace(
      "exp_chain",
      [](nl::tensor x) {
        auto out = nl::ndarray(x.shape(), x.dtype(), nl::shared_hbm);
        auto t = nl::load(x);
        for (int i = 0; i < 24; ++i) t = nl::exp(t * (0.01f * float(i + 1))) + float(i);
        nl::store(out, t);
        return out;
      },
      {{{128, 64}, DType::float32}});
  Compiled c = compile(k, default_compile_options());
  const NativeCompileOptions opts{};
  std::vector<float> xv(128 * 64);
  for (size_t i = 0; i < xv.size(); ++i) xv[i] = float(i % 7) * 0.1f;
  const Tensor x = Tensor::from_floats(xv, {128, 64}, DType::float32);
  const float want = compile_native(c, opts)({x})[0].get(100);  // the object is now cached
  clear_native_kernels();
  const char* codes =
      "killed by a signal (a wild constant-pool address) if not exited; exit 10-12: the "
      "address-space setup failed, 13 wrong result, 14 exception";
  check_child_succeeds(codes, [&] {
    const size_t page = size_t(sysconf(_SC_PAGESIZE)), gib = size_t(1) << 30;
    void* barrier = mmap(nullptr, 3 * gib, PROT_NONE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (barrier == MAP_FAILED) _exit(10);
    const uintptr_t top = reinterpret_cast<uintptr_t>(barrier) + 3 * gib;
    void* hole = mmap(nullptr, 4 * page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (hole == MAP_FAILED || reinterpret_cast<uintptr_t>(hole) < top) _exit(11);
    if (!fill_gaps_above(top)) _exit(12);
    munmap(hole, 4 * page);  // now the only gap above the barrier
    int code = 0;
    try {
      NativeKernel nk = compile_native(c, opts);  // loads the cached object
      if (nk({x})[0].get(100) != want) code = 13;
    } catch (...) {
      code = 14;
    }
    return code;
  });
}
