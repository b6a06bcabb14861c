// Concurrency end to end: threads and processes tracing, compiling (LLVM ORC) and running kernels
// at once, natively and on the simulator, against one compile cache; and cache folders that are
// read-only or full, with real native kernels. Every result is checked against a plain C++ loop.
//
// Child processes re-execute this binary (/proc/self/exe) with a doctest filter on the
// "concurrency child:" cases below, which are marked skip (they run only with --no-skip) and
// read what to do from NEURON_TEST_CHILD.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <latch>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "cache_test_util.hpp"
#include "neuron/kernels/matmul.hpp"
#include "neuron/kernels/softmax.hpp"
#include "neuron/runtime/native/native.hpp"
#include "neuron/runtime/run.hpp"
#include "tolerance.hpp"
#include "vector_add.hpp"

using namespace neuron;
using namespace neuron::cache_test;

namespace {

constexpr DType f32 = DType::float32;
namespace nl = neuron::nl;

// A small DSL kernel with a rolled loop: out = max(x, 0) * 0.5 + 1, 32 columns per iteration.
nl::tensor relu_affine(nl::tensor x) {
  auto out = nl::ndarray(x.shape(), x.dtype(), nl::shared_hbm, "out");
  const int64_t P = x.shape()[0], F = x.shape()[1];
  for (nl::index j : nl::affine_range(F / 32)) {
    auto t = nl::load(x(nl::ds(0, P), nl::ds(j * 32, 32)));
    nl::store(out(nl::ds(0, P), nl::ds(j * 32, 32)), nl::maximum(t, 0.0) * 0.5 + 1.0);
  }
  return out;
}

// One kernel the tests trace, compile and run: its inputs, grid and an independent reference.
struct Case {
  std::string name;
  std::function<Kernel()> trace;
  std::vector<std::vector<int64_t>> inputs;
  std::vector<int64_t> grid;
  // reference(inputs as floats, output index) in double precision
  std::function<double(const std::vector<std::vector<float>>&, int64_t)> reference;
  testing::Tolerance tol{0, 0};
  float input_scale = 2.0f;  // inputs are uniform in [-scale, scale]
};

std::vector<Case> make_cases() {
  std::vector<Case> cs;
  auto add = [](int64_t n, int64_t f) {
    return Case{fmt::format("vector_add {}x{}", n, f),
                [=] {
                  return trace("vector_add", examples::vector_add,
                               {{{n, f}, f32}, {{n, f}, f32}});
                },
                {{n, f}, {n, f}},
                {n / 128},
                // fp32 add, one rounding: exact against the float sum.
                [](const std::vector<std::vector<float>>& in, int64_t i) {
                  return double(in[0][size_t(i)] + in[1][size_t(i)]);
                },
                {0, 0}};
  };
  auto softmax = [](int64_t n, int64_t f) {
    return Case{fmt::format("softmax {}x{}", n, f),
                [=] {
                  const kernels::SoftmaxConfig cfg{n / 128};
                  return trace(
                      "softmax", [cfg](nl::tensor x) { return kernels::softmax(x, cfg); },
                      {{{n, f}, f32}});
                },
                {{n, f}},
                {n / 128},
                [f](const std::vector<std::vector<float>>& in, int64_t i) {
                  const auto& x = in[0];
                  int64_t r = i / f;
                  double mx = -INFINITY, sum = 0;
                  for (int64_t j = 0; j < f; ++j) mx = std::fmax(mx, x[size_t(r * f + j)]);
                  for (int64_t j = 0; j < f; ++j) sum += std::exp(double(x[size_t(r * f + j)]) - mx);
                  return std::exp(double(x[size_t(i)]) - mx) / sum;
                },
                testing::tolerance_for(f32)};
  };
  auto matmul = [](int64_t k, int64_t m, int64_t n) {
    return Case{fmt::format("matmul {}x{}x{}", m, k, n),
                [=] {
                  kernels::MatmulConfig cfg;
                  cfg.transpose_a = true;  // lhsT [K, M]
                  return trace(
                      "matmul",
                      [cfg](nl::tensor a, nl::tensor b) { return kernels::matmul(a, b, cfg); },
                      {{{k, m}, f32}, {{k, n}, f32}});
                },
                {{k, m}, {k, n}},
                {1},
                [=](const std::vector<std::vector<float>>& in, int64_t i) {
                  int64_t r = i / n, c = i % n;
                  double s = 0;
                  for (int64_t kk = 0; kk < k; ++kk)
                    s += double(in[0][size_t(kk * m + r)]) * in[1][size_t(kk * n + c)];
                  return s;
                },
                // fp32 accumulation over K <= 256 products of at most 0.25 in magnitude.
                {1e-5, 1e-4},
                0.5f};
  };
  auto relu = [](int64_t p, int64_t f) {
    return Case{fmt::format("relu_affine {}x{}", p, f),
                [=] { return trace("relu_affine", relu_affine, {{{p, f}, f32}}); },
                {{p, f}},
                {1},
                [](const std::vector<std::vector<float>>& in, int64_t i) {
                  // Each step is exact or rounded once in fp32, like the engine.
                  float v = std::fmax(in[0][size_t(i)], 0.0f) * 0.5f;
                  return double(v + 1.0f);
                },
                {0, 0}};
  };
  cs.push_back(add(256, 64));
  cs.push_back(add(384, 48));
  cs.push_back(softmax(128, 96));
  cs.push_back(softmax(256, 40));
  cs.push_back(matmul(128, 128, 128));
  cs.push_back(matmul(256, 128, 128));
  cs.push_back(relu(128, 96));
  cs.push_back(relu(64, 64));
  return cs;
}

std::vector<Tensor> make_inputs(const Case& c, unsigned seed) {
  std::vector<Tensor> ts;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-c.input_scale, c.input_scale);
  for (auto& shape : c.inputs) {
    Tensor t = Tensor::empty(shape, f32);
    for (int64_t i = 0; i < t.elements(); ++i) t.set(i, u(rng));
    ts.push_back(t);
  }
  return ts;
}

// "" when `out` matches the case's reference, else a description of the first bad element.
std::string check_reference(const Case& c, const std::vector<Tensor>& inputs, const Tensor& out) {
  std::vector<std::vector<float>> in;
  for (auto& t : inputs) in.push_back(t.to_floats());
  auto cmp = testing::compare(
      out.elements(), [&](int64_t i) { return double(out.get(i)); },
      [&](int64_t i) { return c.reference(in, i); }, c.tol);
  if (cmp.bad == 0) return "";
  return fmt::format("{}: {} bad elements, {}", c.name, cmp.bad, cmp.first);
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         std::memcmp(a.data(), b.data(), a.bytes()) == 0;
}

// Errors found on worker threads, reported on the test's thread (doctest asserts stay there).
struct Errors {
  std::mutex mutex;
  std::vector<std::string> list;
  void add(std::string e) {
    std::lock_guard lock(mutex);
    list.push_back(std::move(e));
  }
  void report() {
    for (auto& e : list) FAIL_CHECK(e);
  }
};

// Temp files left in a cache folder (an interrupted or failed store).
int temp_files(const fs::path& dir) {
  int n = 0;
  for (auto& e : fs::directory_iterator(dir)) n += e.path().filename().string().starts_with(".tmp.");
  return n;
}

// Every entry in `dir` is a current, loadable entry of one of `keys`, one per key.
void check_cache_consistent(const TempDir& dir, const std::set<std::string>& keys) {
  Warnings w;
  CompileCache fresh(options_in(dir.str(), &w));
  auto entries = fresh.list();
  std::set<std::string> listed;
  for (auto& e : entries) {
    CHECK(e.header_ok);
    CHECK(e.current_build);
    listed.insert(e.key);
    CacheLevel level;
    auto blob = fresh.lookup(e.key, &level);
    CHECK(blob.has_value());
    CHECK(level == CacheLevel::disk);
    if (blob) CHECK(blob->size() == e.payload_bytes);
  }
  CHECK(entries.size() == listed.size());
  CHECK(listed == keys);
  CHECK(w.size() == 0);
  CHECK(fresh.stats().corrupt_entries == 0);
  CHECK(temp_files(dir.path) == 0);
}

// Forgets everything this process compiled, as if it were a new process (the disk remains).
void forget_compiled() {
  clear_native_kernels();
  CompileCache::global().clear_memory();
}

// Warnings of the process-wide cache: captured while a Capture is alive, else on stderr as usual.
struct GlobalWarnings {
  std::mutex mutex;
  Warnings* sink = nullptr;
  static GlobalWarnings& get() {
    static GlobalWarnings* g = [] {
      auto* g = new GlobalWarnings;
      CacheOptions o = CompileCache::global().options();
      o.warn = [g](const std::string& line) {
        std::lock_guard lock(g->mutex);
        if (g->sink) {
          std::lock_guard l2(g->sink->mutex);
          g->sink->lines.push_back(line);
        } else {
          fmt::print(stderr, "{}\n", line);
        }
      };
      CompileCache::global().reconfigure(o);  // later reconfigurations keep this hook
      return g;
    }();
    return *g;
  }
  struct Capture {
    Warnings w;
    Capture() {
      auto& g = get();
      std::lock_guard lock(g.mutex);
      g.sink = &w;
    }
    ~Capture() {
      auto& g = get();
      std::lock_guard lock(g.mutex);
      g.sink = nullptr;
    }
  };
};

// ---- child processes ------------------------------------------------------------------------

struct Child {
  pid_t pid = -1;
  std::string log;
};

// Re-executes this test binary running only `test_case`, with extra environment variables;
// stdout and stderr go to `log`. `drop_root`: when running as root, the child becomes `nobody`
// first, so file permissions apply to it.
Child spawn_self(const std::string& test_case, const std::map<std::string, std::string>& env,
                 const std::string& log, bool drop_root = false) {
  // Everything the child needs is built before fork: only async-signal-safe calls after it.
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e) {
    std::string s(*e);
    std::string name = s.substr(0, s.find('='));
    if (!env.count(name)) env_strings.push_back(s);
  }
  for (auto& [k, v] : env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string exe = fs::read_symlink("/proc/self/exe").string();
  std::string filter = "--test-case=" + test_case;
  std::vector<std::string> arg_strings = {exe, "--no-skip", filter, "--no-version", "--minimal"};
  std::vector<char*> argv;
  for (auto& s : arg_strings) argv.push_back(s.data());
  argv.push_back(nullptr);
  const bool drop = drop_root && geteuid() == 0;

  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) _exit(126);
    dup2(fd, 1);
    dup2(fd, 2);
    if (drop && (setgroups(0, nullptr) != 0 || setgid(65534) != 0 || setuid(65534) != 0)) {
      (void)!write(2, "cannot become nobody", 20);
      _exit(125);
    }
    execve(exe.c_str(), argv.data(), envp.data());
    const char* why = strerror(errno);
    (void)!write(2, "exec failed: ", 13);
    (void)!write(2, why, strlen(why));
    _exit(125);  // could not run the binary (as nobody: a folder on its path is not readable)
  }
  return Child{pid, log};
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The child's exit status (-1: killed after `timeout`), its log on failure.
int wait_child(const Child& c, std::chrono::seconds timeout = std::chrono::seconds(120)) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  int st = 0;
  while (true) {
    pid_t r = waitpid(c.pid, &st, WNOHANG);
    if (r == c.pid) break;
    if (std::chrono::steady_clock::now() > deadline) {
      kill(c.pid, SIGKILL);
      waitpid(c.pid, &st, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : 200 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

// Compiles and runs every case natively (in `threads` threads), checks each result against its
// reference; returns the compile reports' cache levels by case name (several threads may see a
// kernel at different levels).
using Levels = std::map<std::string, std::set<std::string>>;
Levels compile_and_run_all(const std::vector<Case>& cases, int threads, Errors& errors) {
  std::mutex mutex;
  Levels levels;
  std::vector<std::thread> pool;
  std::latch start(threads);
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      start.arrive_and_wait();
      for (size_t i = 0; i < cases.size(); ++i) {
        const Case& c = cases[(i + size_t(t)) % cases.size()];
        try {
          NativeKernel k = compile_native(compile(c.trace(), default_compile_options()));
          auto in = make_inputs(c, unsigned(t * 100 + i));
          NativeOptions o;
          o.threads = 1;
          std::string bad = check_reference(c, in, k(in, c.grid, o)[0]);
          if (!bad.empty()) errors.add(bad);
          std::lock_guard lock(mutex);
          levels[c.name].insert(k.report().cache);
        } catch (const std::exception& e) {
          errors.add(fmt::format("{}: {}", c.name, e.what()));
        }
      }
    });
  for (auto& th : pool) th.join();
  return levels;
}

}  // namespace

TEST_CASE("eight threads trace, compile and run different and identical kernels at once") {
  TempDir dir;
  EnvGuard cache_dir("NEURON_CACHE_DIR", dir.str().c_str());
  EnvGuard mode("NEURON_CACHE", "on");
  EnvGuard max("NEURON_CACHE_MAX_BYTES", nullptr);
  EnvGuard kernels("NEURON_NATIVE_KERNELS", nullptr);
  GlobalWarnings::Capture warnings;
  forget_compiled();
  const CacheStats before = CompileCache::global().stats();

  const std::vector<Case> cases = make_cases();
  constexpr int kThreads = 8, kRounds = 3;
  // One fixed input set per case: identical kernels on identical inputs must give identical
  // bits in every thread, natively and on the simulator.
  std::vector<std::vector<Tensor>> inputs;
  for (size_t i = 0; i < cases.size(); ++i) inputs.push_back(make_inputs(cases[i], unsigned(i)));

  Errors errors;
  std::mutex mutex;
  std::set<std::string> keys;
  std::map<std::string, std::string> key_of;  // case name -> key (identical kernels: one key)
  std::map<std::string, Tensor> first_result;  // case name -> first native output
  std::atomic<int> cold{0}, runs{0}, sim_runs{0};
  std::latch start(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      start.arrive_and_wait();  // all threads begin together: identical kernels collide
      for (int round = 0; round < kRounds; ++round)
        for (size_t j = 0; j < cases.size(); ++j) {
          // Even threads walk the cases forwards, odd ones backwards from another start, so
          // different kernels compile side by side and each kernel is hit by several threads.
          size_t i = t % 2 == 0 ? (j + size_t(t) / 2) % cases.size()
                                : (cases.size() - 1 - (j + size_t(t) / 2) % cases.size());
          const Case& c = cases[i];
          try {
            Kernel k = c.trace();  // tracing state is per thread
            NativeKernel nk;
            Compiled compiled = compile(k, default_compile_options());
            if ((t + round) % 2 == 0)
              nk = compile_native(k);  // the by-source path
            else
              nk = compile_native(compiled);
            if (nk.report().cache == "cold") ++cold;
            NativeOptions o;
            o.threads = 1 + (t % 2);
            Tensor out = nk(inputs[i], c.grid, o)[0];
            ++runs;
            std::string bad = check_reference(c, inputs[i], out);
            if (!bad.empty()) errors.add(fmt::format("thread {} native {}", t, bad));
            if ((t + int(j)) % 4 == 0) {  // the simulator too, on the same inputs
              Tensor sim = simulate(compiled, inputs[i], c.grid)[0];
              ++sim_runs;
              if (!same_bits(sim, out))
                errors.add(fmt::format("thread {} {}: simulator and native differ", t, c.name));
            }
            std::lock_guard lock(mutex);
            keys.insert(nk.report().key);
            auto [it, fresh] = key_of.emplace(c.name, nk.report().key);
            if (!fresh && it->second != nk.report().key)
              errors.add(fmt::format("{}: two keys for one kernel", c.name));
            auto [r, first] = first_result.emplace(c.name, out);
            if (!first && !same_bits(r->second, out))
              errors.add(fmt::format("thread {} {}: native results differ between threads", t,
                                     c.name));
          } catch (const std::exception& e) {
            errors.add(fmt::format("thread {} {}: {}", t, c.name, e.what()));
          }
        }
    });
  for (auto& th : threads) th.join();
  errors.report();
  CHECK(runs == kThreads * kRounds * int(cases.size()));
  CHECK(sim_runs > 0);
  INFO("cold compiles: ", cold.load(), " for ", keys.size(), " kernels");
  CHECK(keys.size() == cases.size());  // the cases are all different kernels
  CHECK(cold >= int(keys.size()));     // each compiled at least once ...
  CHECK(cold <= kThreads * int(keys.size()));  // ... and never more than once per thread

  // The process-wide cache and the folder end consistent: one valid entry per key, no temp
  // files, no warnings, nothing reported corrupt or unwritable.
  const CacheStats after = CompileCache::global().stats();
  CHECK(after.corrupt_entries == before.corrupt_entries);
  CHECK(after.disk_store_failures == before.disk_store_failures);
  CHECK(warnings.w.size() == 0);
  check_cache_consistent(dir, keys);

  // A "new process" loads every kernel from disk and gets the same bits.
  forget_compiled();
  for (size_t i = 0; i < cases.size(); ++i) {
    CAPTURE(cases[i].name);
    NativeKernel nk = compile_native(compile(cases[i].trace(), default_compile_options()));
    CHECK(nk.report().cache == "disk");
    CHECK(same_bits(nk(inputs[i], cases[i].grid)[0], first_result.at(cases[i].name)));
  }
}

TEST_CASE("a kernel is run from many threads at once with different inputs") {
  // One NativeKernel object shared by 8 threads ("safe to run from several threads at once").
  TempDir dir;
  EnvGuard cache_dir("NEURON_CACHE_DIR", dir.str().c_str());
  const Case c = make_cases()[0];
  NativeKernel nk = compile_native(compile(c.trace(), default_compile_options()));
  Compiled compiled = compile(c.trace(), default_compile_options());
  Errors errors;
  std::latch start(8);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      start.arrive_and_wait();
      for (int r = 0; r < 6; ++r) {
        try {
          auto in = make_inputs(c, unsigned(1000 + t * 10 + r));
          NativeOptions o;
          o.threads = 1 + r % 2;
          Tensor out = nk(in, c.grid, o)[0];
          std::string bad = check_reference(c, in, out);
          if (!bad.empty()) errors.add(fmt::format("thread {}: {}", t, bad));
          if (r % 3 == 0 && !same_bits(simulate(compiled, in, c.grid)[0], out))
            errors.add(fmt::format("thread {}: simulator and native differ", t));
        } catch (const std::exception& e) {
          errors.add(fmt::format("thread {}: {}", t, e.what()));
        }
      }
    });
  for (auto& th : threads) th.join();
  errors.report();
}

// The three kernels the cache-folder tests use: one element-wise, one with reductions, one loop.
static std::vector<Case> folder_cases() {
  const std::vector<Case> all = make_cases();
  return {all[0], all[2], all[6]};
}

// The kernels two processes compile at once: one of each kind.
static std::vector<Case> shared_cases() {
  const std::vector<Case> all = make_cases();
  return {all[0], all[2], all[4], all[6]};
}

TEST_CASE("a cache folder too small for any entry: kernels compile and run, nothing is kept") {
  const std::vector<Case> cases = folder_cases();
  TempDir tiny;
  EnvGuard mode("NEURON_CACHE", "on");
  EnvGuard kernels("NEURON_NATIVE_KERNELS", nullptr);
  EnvGuard d("NEURON_CACHE_DIR", tiny.str().c_str());
  EnvGuard max("NEURON_CACHE_MAX_BYTES", "1K");
  GlobalWarnings::Capture warnings;
  forget_compiled();
  const CacheStats before = CompileCache::global().stats();
  Errors errors;
  compile_and_run_all(cases, 4, errors);
  errors.report();
  const CacheStats after = CompileCache::global().stats();
  // Documented (docs/cache.md, "Size bound and eviction"): the entry just stored is evicted
  // last, so it goes too when it alone is over the bound; stores succeed, nothing stays.
  CHECK(after.disk_stores - before.disk_stores >= cases.size());
  CHECK(after.disk_evictions - before.disk_evictions >= after.disk_stores - before.disk_stores);
  CHECK(after.disk_store_failures == before.disk_store_failures);
  CHECK(CompileCache(options_in(tiny.str())).list().empty());
  CHECK(temp_files(tiny.path) == 0);
  // One warning says why nothing is kept (once per folder, however many kernels).
  REQUIRE(warnings.w.size() == 1);
  CHECK(warnings.w.last().find("larger than the disk cache bound") != std::string::npos);
  // A "new process" compiles again and is still right.
  forget_compiled();
  Levels levels = compile_and_run_all(cases, 2, errors);
  errors.report();
  for (auto& [name, seen] : levels) {
    CAPTURE(name);
    CHECK(seen.count("cold") == 1);
    CHECK(seen.count("disk") == 0);
  }
}

TEST_CASE("a full cache folder: the least recently used native kernel is evicted, then rebuilt") {
  const std::vector<Case> cases = folder_cases();
  EnvGuard mode("NEURON_CACHE", "on");
  EnvGuard kernels("NEURON_NATIVE_KERNELS", nullptr);
  GlobalWarnings::Capture warnings;
  // The entries' sizes, with room to spare.
  TempDir roomy;
  std::map<std::string, std::uint64_t> size_of;
  {
    EnvGuard d("NEURON_CACHE_DIR", roomy.str().c_str());
    EnvGuard max("NEURON_CACHE_MAX_BYTES", nullptr);
    forget_compiled();
    Errors errors;
    compile_and_run_all(cases, 1, errors);
    errors.report();
    for (auto& e : CompileCache(options_in(roomy.str())).list()) size_of[e.key] = e.file_bytes;
    REQUIRE(size_of.size() == cases.size());
  }
  std::uint64_t total = 0;
  for (auto& [k, s] : size_of) total += s;
  // Room for all but one entry.
  TempDir full;
  std::string bound = std::to_string(total - 1);
  EnvGuard d("NEURON_CACHE_DIR", full.str().c_str());
  EnvGuard max("NEURON_CACHE_MAX_BYTES", bound.c_str());
  forget_compiled();
  Errors errors;
  auto run = [&](const Case& c) {
    NativeKernel nk = compile_native(compile(c.trace(), default_compile_options()));
    auto in = make_inputs(c, 7);
    std::string bad = check_reference(c, in, nk(in, c.grid)[0]);
    if (!bad.empty()) errors.add(bad);
    return nk.report();
  };
  std::vector<std::string> keys;
  for (const Case& c : cases) keys.push_back(run(c).key);  // cases[0] is the oldest store
  std::set<std::string> left;
  for (auto& e : CompileCache(options_in(full.str())).list()) left.insert(e.key);
  CHECK(left == std::set<std::string>(keys.begin() + 1, keys.end()));
  // A "new process" uses the newest first (disk hits refresh them), then rebuilds the evicted
  // one, which in turn evicts the least recently used: cases[2].
  forget_compiled();
  CHECK(run(cases[2]).cache == "disk");
  CHECK(run(cases[1]).cache == "disk");
  CHECK(run(cases[0]).cache == "cold");
  errors.report();
  left.clear();
  for (auto& e : CompileCache(options_in(full.str())).list()) left.insert(e.key);
  CHECK(left == std::set<std::string>{keys[0], keys[1]});
  CHECK(temp_files(full.path) == 0);
  CHECK(warnings.w.size() == 0);
}

TEST_CASE("a read-only cache folder: native kernels load from it, compile past it, warn once") {
  MESSAGE("'concurrency child: read-only cache' is skipped in this process on purpose: this test "
          "runs it in a child process");
  const std::vector<Case> cases = folder_cases();
  TempDir ro, logs;
  EnvGuard mode("NEURON_CACHE", "on");
  EnvGuard max("NEURON_CACHE_MAX_BYTES", nullptr);
  EnvGuard kernels("NEURON_NATIVE_KERNELS", nullptr);
  {
    // Warm it with one kernel; the child finds that one and must compile the two others.
    EnvGuard d("NEURON_CACHE_DIR", ro.str().c_str());
    forget_compiled();
    compile_native(compile(cases[0].trace(), default_compile_options()));
    REQUIRE(CompileCache(options_in(ro.str())).list().size() == 1);
  }
  // As root, the child runs as nobody (root ignores permission bits): the folder is readable
  // and enterable by everyone but writable only by its owner. Otherwise it is made 0555.
  fs::permissions(ro.path, geteuid() == 0 ? fs::perms(0755) : fs::perms(0555),
                  fs::perm_options::replace);
  fs::permissions(logs.path, fs::perms(0755), fs::perm_options::replace);
  std::string log = (logs.path / "child.log").string();
  Child c = spawn_self("concurrency child: read-only cache",
                       {{"NEURON_TEST_CHILD", "readonly"}, {"NEURON_CACHE_DIR", ro.str()}}, log,
                       /*drop_root=*/true);
  int status = wait_child(c);
  std::string text = read_text(log);
  if (status == 125) {
    MESSAGE("skipped: the child could not run this binary as nobody (", text, ")");
    return;
  }
  INFO("child log:\n", text);
  CHECK(status == 0);
  // One warning for the two failed stores, naming the folder and the reason.
  CHECK(count(text, "neuron: warning: compile cache: cannot write to " + ro.str()) == 1);
  CHECK(count(text, "neuron: warning") == 1);
  // The folder is unchanged: the warm entry only.
  fs::permissions(ro.path, fs::perms::owner_all, fs::perm_options::add);
  CHECK(CompileCache(options_in(ro.str())).list().size() == 1);
  CHECK(temp_files(ro.path) == 0);
}

TEST_CASE("two processes compile the same native kernels into one cache folder at once") {
  MESSAGE("'concurrency child: shared cache' is skipped in this process on purpose: this test "
          "runs it in two child processes");
  TempDir shared, logs;
  EnvGuard mode("NEURON_CACHE", "on");
  EnvGuard max("NEURON_CACHE_MAX_BYTES", nullptr);
  EnvGuard kernels("NEURON_NATIVE_KERNELS", nullptr);
  std::vector<Child> children;
  for (int i = 0; i < 2; ++i)
    children.push_back(spawn_self(
        "concurrency child: shared cache",
        {{"NEURON_TEST_CHILD", "shared"}, {"NEURON_CACHE_DIR", shared.str()}},
        (logs.path / fmt::format("child{}.log", i)).string()));
  for (auto& c : children) {
    int status = wait_child(c);
    INFO("child log:\n", read_text(c.log));
    CHECK(status == 0);
    CHECK(count(read_text(c.log), "neuron: warning") == 0);
  }
  // One valid entry per kernel; this process loads them all from disk and gets right results.
  EnvGuard d("NEURON_CACHE_DIR", shared.str().c_str());
  forget_compiled();
  const std::vector<Case> cases = shared_cases();
  std::set<std::string> keys;
  Errors errors;
  for (const Case& c : cases) {
    CAPTURE(c.name);
    NativeKernel nk = compile_native(compile(c.trace(), default_compile_options()));
    CHECK(nk.report().cache == "disk");
    keys.insert(nk.report().key);
    auto in = make_inputs(c, 99);
    std::string bad = check_reference(c, in, nk(in, c.grid)[0]);
    if (!bad.empty()) errors.add(bad);
  }
  errors.report();
  check_cache_consistent(shared, keys);
}

// ---- the children (run only by the tests above, through --no-skip and NEURON_TEST_CHILD) -----

TEST_CASE("concurrency child: read-only cache" * doctest::skip()) {
  const char* mode = std::getenv("NEURON_TEST_CHILD");
  REQUIRE(mode != nullptr);
  REQUIRE(std::string(mode) == "readonly");
  const std::vector<Case> cases = folder_cases();  // cases[0] is on disk already
  const CacheStats before = CompileCache::global().stats();
  Errors errors;
  Levels levels = compile_and_run_all(cases, 2, errors);
  errors.report();
  CHECK(levels.at(cases[0].name).count("disk") == 1);
  CHECK(levels.at(cases[0].name).count("cold") == 0);
  CHECK(levels.at(cases[1].name).count("cold") == 1);
  CHECK(levels.at(cases[2].name).count("cold") == 1);
  const CacheStats after = CompileCache::global().stats();
  CHECK(after.disk_store_failures - before.disk_store_failures >= 2);
  CHECK(after.disk_stores == before.disk_stores);
}

TEST_CASE("concurrency child: shared cache" * doctest::skip()) {
  const char* mode = std::getenv("NEURON_TEST_CHILD");
  REQUIRE(mode != nullptr);
  REQUIRE(std::string(mode) == "shared");
  Errors errors;
  compile_and_run_all(shared_cases(), 3, errors);
  errors.report();
  CHECK(CompileCache::global().stats().corrupt_entries == 0);
}
