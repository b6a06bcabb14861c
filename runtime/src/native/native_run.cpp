// Running a native kernel: call validation, per-launch bounds checks, and the SPMD grid on
// worker threads, each with its own SBUF/PSUM scratch (reused across programs and runs).
#include <dlfcn.h>
#include <fmt/format.h>
#include <link.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <thread>

#include "native_impl.hpp"
#include "neuron/base/config.hpp"
#include "neuron/base/error.hpp"
#include "neuron/base/print.hpp"
#include "neuron/base/target.hpp"
#include "neuron/codegen/fault.hpp"
#include "neuron/runtime/sim.hpp"

namespace neuron {
namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// One worker's on-chip memories, mapped anonymously: the OS hands out zero pages lazily, so a
// 24 MiB SBUF costs only what programs touch. (Not calloc: once glibc has freed a large block it
// serves blocks of up to 32 MiB from its heap, and calloc then clears all of them, ~1 ms for an
// SBUF, on every new scratch.) `*_dirty`: bytes per partition possibly nonzero.
struct Scratch {
  struct Unmap {
    size_t bytes = 0;
    void operator()(void* p) const { munmap(p, bytes); }
  };
  template <typename T>
  using Mapped = std::unique_ptr<T, Unmap>;
  Mapped<char> sbuf, psum;
  Mapped<uint8_t> flags;
  int partitions = 0;
  int64_t sbuf_pb = 0, psum_pb = 0;
  int64_t sbuf_dirty = 0, psum_dirty = 0;
  bool flags_dirty = false;  // the last program run on this scratch may have set flags

  template <typename T>
  static Mapped<T> zeroed(int64_t n) {
    const size_t bytes = static_cast<size_t>(std::max<int64_t>(n, 1));
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    return Mapped<T>(static_cast<T*>(p), Unmap{bytes});
  }
  Scratch(const Target& t, const native::Pitch& pitch)
      : sbuf(zeroed<char>(t.partitions * pitch.sbuf)),
        psum(zeroed<char>(t.partitions * pitch.psum)),
        flags(zeroed<uint8_t>(t.partitions * pitch.psum)),
        partitions(t.partitions),
        sbuf_pb(pitch.sbuf),
        psum_pb(pitch.psum) {}
  bool fits(const Target& t, const native::Pitch& pitch) const {
    return partitions == t.partitions && sbuf_pb == pitch.sbuf && psum_pb == pitch.psum;
  }
  // Every program starts from zeroed memories, like the simulator's: before each program the
  // worker clears, of what earlier programs may have left nonzero, the bytes the coming program
  // may read before writing (`first`, first_reads). The rest it overwrites before reading.
  // `with_flags`: the coming program reads (so also writes) the PSUM flags. Code compiled for a
  // program that does not read them never writes them, so they need clearing only after one
  // that does.
  void reset(const native::LaunchExtent& ext, const native::FirstReads& first, bool with_flags) {
    auto clear = [&](char* mem, int64_t pb, int64_t dirty,
                     const std::vector<std::pair<int64_t, int64_t>>& ranges,
                     const std::vector<int64_t>& parts) {
      for (size_t r = 0; r < ranges.size(); ++r) {
        auto [lo, hi] = ranges[r];
        hi = std::min(hi, dirty);
        if (lo >= hi) continue;
        const int64_t np = r < parts.size() ? std::min<int64_t>(parts[r], partitions) : partitions;
        for (int64_t p = 0; p < np; ++p)
          std::memset(mem + p * pb + lo, 0, static_cast<size_t>(hi - lo));
      }
    };
    clear(sbuf.get(), sbuf_pb, sbuf_dirty, first.sbuf, first.sbuf_partitions);
    clear(psum.get(), psum_pb, psum_dirty, first.psum, first.psum_partitions);
    if (flags_dirty)
      for (int p = 0; p < partitions; ++p)
        std::memset(flags.get() + p * psum_pb, 0, static_cast<size_t>(psum_dirty));
    // Bytes past the cleared ranges may still hold an earlier program's values.
    sbuf_dirty = std::max(sbuf_dirty, ext.sbuf_written);
    psum_dirty = std::max(psum_dirty, ext.psum_written);
    flags_dirty = with_flags;
  }
};

// Scratch is kept between runs (a fresh one per run would fault in its pages every time).
// Least recently returned first out: a process that has run more kernels than the pool holds
// (a model's dozens of operators, forward and backward) keeps the scratch of those it runs now.
// It holds 64, or 16 launches' worth at the most threads a launch has used (a launch on 64
// threads takes 64 scratches).
struct ScratchPool {
  static constexpr size_t kMinCapacity = 64, kLaunchesKept = 16;
  size_t capacity = kMinCapacity;
  std::mutex mutex;
  std::deque<std::unique_ptr<Scratch>> free;  // most recently returned last

  // The scratch and whether it was made now (a launch reports how many it made).
  std::pair<std::unique_ptr<Scratch>, bool> take(const Target& t, const native::Pitch& pitch) {
    {
      std::lock_guard lock(mutex);
      for (auto it = free.rbegin(); it != free.rend(); ++it)
        if ((*it)->fits(t, pitch)) {
          auto s = std::move(*it);
          free.erase(std::next(it).base());
          return {std::move(s), false};
        }
    }
    return {std::make_unique<Scratch>(t, pitch), true};
  }
  void give(std::unique_ptr<Scratch> s, int threads) {
    std::unique_ptr<Scratch> evicted;  // unmapped outside the lock
    std::lock_guard lock(mutex);
    capacity = std::max(capacity, kLaunchesKept * static_cast<size_t>(threads));
    free.push_back(std::move(s));
    if (free.size() > capacity) {
      evicted = std::move(free.front());
      free.pop_front();
    }
  }
};
ScratchPool& pool() {
  static ScratchPool* p = new ScratchPool;
  return *p;
}



// Worker threads kept across runs (starting threads cost ~30-50 us a launch). A launch posts
// its helpers' share as tasks and works on the grid itself; it then waits only for tasks that
// started, and a task that starts after the launch finished its grid does nothing. So a busy
// pool (another launch, another Python thread) never delays a launch past its own work, and a
// forked child, which has the pool's state but not its threads, runs its grids on the calling
// thread (a new pool is made for it on its next launch).
class WorkerPool {
 public:
  static WorkerPool& get() {
    static std::mutex m;
    static WorkerPool* pool = nullptr;
    std::lock_guard lock(m);
    if (!pool || pool->pid_ != getpid()) pool = new WorkerPool;  // leaked: threads never exit
    return *pool;
  }
  // Runs `task` on a pool thread, starting threads until there are at least `wanted`.
  void post(std::function<void()> task, size_t wanted) {
    std::lock_guard lock(mutex_);
    while (started_ < wanted) {
      std::thread([this] { loop(); }).detach();
      ++started_;
    }
    tasks_.push_back(std::move(task));
    ready_.notify_one();
  }

 private:
  WorkerPool() : pid_(getpid()) {}
  void loop() {
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock lock(mutex_);
        ready_.wait(lock, [&] { return !tasks_.empty(); });
        task = std::move(tasks_.front());
        tasks_.pop_front();
      }
      task();
    }
  }
  pid_t pid_;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::function<void()>> tasks_;
  size_t started_ = 0;
};

// The GNU OpenMP runtime's team launch, when the process has one loaded (PyTorch's CPU build
// brings libgomp): its threads are already there, and after each PyTorch operator they spin for
// a while waiting for the next parallel region. Threads of our own would compete with them for
// the cores (on 2 cores a layer_norm backward right after a PyTorch reduction ran 7.5-8.3 ms
// instead of 4.3-4.9 ms, the time OMP_WAIT_POLICY=PASSIVE gives), so a launch hands its grid to
// that team instead: the spinning threads take programs at once. Only in the process that
// found it (a forked child's libgomp has no threads behind its pool: the child uses our path).
using GompParallel = void (*)(void (*)(void*), void*, unsigned, unsigned);

// The team's launch function, or null: looked up among the loaded libraries again only when a
// library was loaded since the last look (dl_iterate_phdr's load count), so a launch pays one
// cheap call once it is known; null in a forked child and with NEURON_OPENMP_TEAM=0.
GompParallel openmp_team() {
  static std::mutex m;
  static GompParallel found = nullptr;
  static pid_t found_in = 0;
  static unsigned long long adds_seen = ~0ull;
  if (!config_openmp_team()) return nullptr;
  std::lock_guard lock(m);
  if (found) return found_in == getpid() ? found : nullptr;
  unsigned long long adds = 0;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* out) {
        *static_cast<unsigned long long*>(out) = info->dlpi_adds;
        return 1;  // the count is the same in every entry
      },
      &adds);
  if (adds == adds_seen) return nullptr;
  adds_seen = adds;
  std::string path;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* out) {
        const char* name = info->dlpi_name ? std::strrchr(info->dlpi_name, '/') : nullptr;
        if (name && std::strncmp(name + 1, "libgomp", 7) == 0) {
          *static_cast<std::string*>(out) = info->dlpi_name;
          return 1;
        }
        return 0;
      },
      &path);
  if (path.empty()) return nullptr;
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);  // already loaded: no new copy
  if (!lib) return nullptr;
  found = reinterpret_cast<GompParallel>(dlsym(lib, "GOMP_parallel"));
  found_in = getpid();
  return found;
}

// What a launch shares with the tasks it posted: how many are running, and whether the launch
// is past its grid (then a task that has not started yet does nothing).
struct LaunchState {
  std::mutex mutex;
  std::condition_variable idle;
  int running = 0;
  bool closed = false;
};

int default_threads() {
  int n = config_threads();
  if (n > 0) return n;
  // Read once: glibc opens /sys/devices/system/cpu/online on every call (~10 us a run).
  static const int cores = [] {
    unsigned hc = std::thread::hardware_concurrency();
    return hc ? static_cast<int>(hc) : 1;
  }();
  return cores;
}

}  // namespace

void NativeKernel::run(const std::vector<Tensor>& tensors, const std::vector<int64_t>& grid,
                       const NativeOptions& opts) const {
  NEURON_ASSERT(impl_, "NativeKernel used before compile_native");
  const Impl& k = *impl_;
  const Program& p = k.program;
  auto t0 = Clock::now();
  check_call(p, tensors, grid);
  const Target& target = p.target.empty() ? default_target() : target_by_name(p.target);
  std::vector<int64_t> elements;
  size_t next = 0;
  for (auto& d : p.tensors) {
    int64_t n = 1;
    for (int64_t s : d.shape) n *= s;
    elements.push_back(d.role == TensorDecl::Role::scratch ? n : tensors[next++].elements());
  }
  const native::LaunchExtent ext = native::check_launch(p, k.bounds, target, elements, grid);
  int64_t total = 1;
  for (int64_t g : grid) total *= g;
  int threads = opts.threads > 0 ? opts.threads : default_threads();
  if (k.prints) threads = 1;
  threads = static_cast<int>(std::min<int64_t>(threads, total));
  const double check_ms = ms_since(t0);

  t0 = Clock::now();
  int64_t npids[4] = {1, 1, 1, 1};
  for (size_t a = 0; a < grid.size(); ++a) npids[a] = grid[a];
  std::atomic<int64_t> counter{0};
  std::atomic<int> scratch_made{0};
  // A worker that fails (out of memory for its scratch) stops the others; the caller rethrows.
  std::mutex error_mutex;
  std::exception_ptr error;
  auto work = [&] {
    auto [s, made] = pool().take(target, k.pitch);
    if (made) scratch_made.fetch_add(1, std::memory_order_relaxed);
    native::set_print_stream(opts.print);
    std::vector<native::InstrTicks> ticks;
    native::set_profile_table(opts.profile ? &ticks : nullptr);
    // Host tensors zero-copy; HBM scratch tensors private to the worker, zeroed per program.
    std::vector<void*> ptrs;
    std::vector<Tensor> scratch;
    size_t in = 0;
    for (auto& d : p.tensors) {
      if (d.role == TensorDecl::Role::scratch) {
        scratch.push_back(Tensor::empty(d.shape, d.dtype));
        ptrs.push_back(scratch.back().data());
      } else {
        ptrs.push_back(tensors[in++].data());
      }
    }
    bool first = true;
    for (int64_t flat; (flat = counter.fetch_add(1, std::memory_order_relaxed)) < total;) {
      int64_t pids[4] = {0, 0, 0, 0}, rest = flat;
      for (int a = static_cast<int>(grid.size()) - 1; a >= 0; --a) {
        pids[a] = rest % grid[static_cast<size_t>(a)];
        rest /= grid[static_cast<size_t>(a)];
      }
      s->reset(ext, k.first_reads, k.flags);
      if (!first)
        for (auto& t : scratch) std::memset(t.data(), 0, t.bytes());
      first = false;
      k.entry(ptrs.data(), pids, npids, s->sbuf.get(), s->psum.get(), s->flags.get());
      // An index read at run time out of range: the kernels skipped it and recorded a fault.
      const native::Fault f = native::take_fault();
      if (f.kind != native::kFaultNone) {
        native::set_profile_table(nullptr);
        pool().give(std::move(s), threads);
        std::string where;
        for (size_t a = 0; a < grid.size(); ++a)
          where += fmt::format("{}pid{}={}", a ? ", " : "", a, pids[a]);
        native::raise_fault(p, f, where);
      }
    }
    native::stream_fence();
    native::set_print_stream(nullptr);
    native::set_profile_table(nullptr);
    if (opts.profile) {
      std::lock_guard lock(error_mutex);
      if (opts.profile->size() < ticks.size()) opts.profile->resize(ticks.size());
      for (size_t i = 0; i < ticks.size(); ++i) {
        (*opts.profile)[i].ns += ticks[i].ns;
        (*opts.profile)[i].calls += ticks[i].calls;
      }
    }
    pool().give(std::move(s), threads);
  };
  auto worker = [&] {
    try {
      work();
    } catch (...) {
      counter.store(total, std::memory_order_relaxed);
      std::lock_guard lock(error_mutex);
      if (!error) error = std::current_exception();
    }
  };
  const GompParallel team = threads > 1 ? openmp_team() : nullptr;
  if (team) {
    // Every team thread (the caller first among them) takes programs until none are left.
    team([](void* w) { (*static_cast<decltype(worker)*>(w))(); }, &worker,
         static_cast<unsigned>(threads), 0);
  } else {
    auto state = std::make_shared<LaunchState>();
    for (int t = 1; t < threads; ++t)
      WorkerPool::get().post(
          [state, &worker] {
            {
              std::lock_guard lock(state->mutex);
              if (state->closed) return;  // the launch is over: `worker` is gone
              ++state->running;
            }
            worker();
            std::lock_guard lock(state->mutex);
            if (--state->running == 0) state->idle.notify_all();
          },
          static_cast<size_t>(threads - 1));
    worker();
    std::unique_lock lock(state->mutex);
    state->closed = true;
    state->idle.wait(lock, [&] { return state->running == 0; });
  }
  if (error) std::rethrow_exception(error);
  if (opts.report) {
    opts.report->check_ms = check_ms;
    opts.report->run_ms = ms_since(t0);
    opts.report->threads = threads;
    opts.report->programs = total;
    opts.report->openmp_team = team != nullptr;
    opts.report->scratch_made = scratch_made.load();
  }
}

std::size_t native_scratch_pool_capacity() {
  std::lock_guard lock(pool().mutex);
  return pool().capacity;
}

}  // namespace neuron
