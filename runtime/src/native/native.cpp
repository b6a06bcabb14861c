// Native kernels: compile through the cache (memory of loaded kernels, then the compile cache's
// object files, then LLVM), and the compile report. Running the grid is in native_run.cpp.
#include "neuron/runtime/native/native.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iostream>
#include <mutex>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "lru.hpp"
#include "native_impl.hpp"
#include "neuron/base/error.hpp"
#include "neuron/ir/printer.hpp"
#include "neuron/runtime/cache.hpp"
#include "neuron/base/config.hpp"
#include "neuron/codegen/jit.hpp"
#include "neuron/codegen/plan.hpp"
#include "neuron/runtime/run.hpp"
#include "neuron/base/target.hpp"

namespace neuron {

namespace {

bool uses_print(const std::vector<ProgNode>& body) {
  for (auto& n : body)
    if (n.kind == ProgNode::Kind::loop ? uses_print(n.body) : n.instr.op == Opcode::device_print)
      return true;
  return false;
}

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// An LLVM compile makes many allocations, and the few it keeps (the loaded code's tables, the
// cache's object blob) land inside the large blocks the caller freed just before (its previous
// inputs and outputs). glibc then cannot reuse those blocks for the next large tensor and keeps
// the rest of them resident: a loop compiling kernels over 14 MB tensors held 13 MB more per
// kernel, 2 GB after 150 kernels, all of it free. Handing free pages back after each LLVM
// compile keeps resident memory at what is live (about 1 ms, against a compile of 20 ms or more).
void release_free_heap_pages() {
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}

struct LoadedCode {
  native::KernelEntry entry = nullptr;
  std::shared_ptr<void> owner;
};

// The memory level: loaded code by cache key, and whole kernels by their source IR (with
// spans, so errors name the caller's lines) for compile_native(Kernel). Both are LRUs bounded
// by NEURON_CACHE_MEMORY_ENTRIES. Entries share ownership of the code with every NativeKernel
// handed out, so an evicted kernel keeps working for its holders and is unloaded after the
// last one lets go.
struct LoadedKernels {
  std::mutex mutex;
  native::Lru<std::string, LoadedCode> code;
  native::Lru<std::string, NativeKernel> by_source;
};
LoadedKernels& memory() {
  static LoadedKernels* m = new LoadedKernels;
  return *m;
}

// Evicted entries are destroyed by the caller after unlocking (destruction may unload code).
struct Evicted {
  std::vector<LoadedCode> code;
  std::vector<NativeKernel> kernels;
};

native::JitOptions jit_options(const NativeCompileOptions& o, const Program& p) {
  native::JitOptions j;
  std::string k = o.kernels.empty() ? config().native_kernels : o.kernels;
  const bool very_long = k.empty() && p.num_instrs > config().host_kernels_above;
  if (k.empty()) k = very_long ? "host" : "bitcode";
  if (k != "bitcode" && k != "host")
    user_error(Span{}, "config", "native kernels '{}' is not one of bitcode, host", k);
  j.bitcode_kernels = k == "bitcode";
  // A very long program's own code is address arithmetic around host kernel calls: LLVM's
  // optimizer makes it no faster and took 221 of the 266 s of nki-samples' pipelined attention
  // (docs/native.md), so it is compiled unoptimized.
  j.opt_level = very_long ? 0 : o.opt_level;
  j.partition_blocks = config().partition_blocks;
  j.sbuf_folding = config().sbuf_folding;
  j.fused_chains = config().fused_chains;
  j.transposed_matmul = config().transposed_matmul;
  j.stream_store_bytes = static_cast<int64_t>(
      std::min<std::uint64_t>(config().stream_store_bytes, INT64_MAX));
  j.profile = o.profile;
  // Only removals: code using a feature this CPU lacks would stop on an illegal instruction.
  for (size_t at = 0; at < o.cpu_features.size();) {
    const size_t end = std::min(o.cpu_features.find(',', at), o.cpu_features.size());
    const std::string f = o.cpu_features.substr(at, end - at);
    if (f.size() < 2 || f[0] != '-')
      user_error(Span{}, "config",
                 "cpu_features '{}': '{}' does not remove a feature; write each entry as "
                 "'-name' (e.g. '-avx512f'), since code for features this CPU lacks could not run",
                 o.cpu_features, f);
    at = end + 1;
  }
  j.cpu_features = o.cpu_features;
  return j;
}

// Lines of /proc/self/maps (memory mappings of this process), for the exhaustion message.
std::size_t mapping_count() {
  std::ifstream f("/proc/self/maps");
  std::size_t n = 0;
  for (std::string line; std::getline(f, line);) ++n;
  return n;
}

std::string max_map_count() {
  std::ifstream f("/proc/sys/vm/max_map_count");
  std::string s;
  return std::getline(f, s) ? s : std::string("unknown");
}

void log_report(const CompileReport& r) {
  if (config().log_compile) std::cerr << r.str();
}

}  // namespace

double CompileReport::total_ms() const {
  double t = 0;
  for (auto& p : phases) t += p.ms;
  return t;
}

double CompileReport::phase_ms(std::string_view name) const {
  for (auto& p : phases)
    if (p.name == name) return p.ms;
  return 0;
}

std::string CompileReport::str() const {
  std::string s = fmt::format("[neuron] compile '{}': {} ({}), {:.3f} ms, key {}\n", kernel, cache,
                              options, total_ms(), key.substr(0, 16));
  for (auto& p : phases) s += fmt::format("[neuron]   {:<28} {:9.3f} ms\n", p.name, p.ms);
  return s;
}

std::string RunReport::str() const {
  return fmt::format(
      "[neuron] run: {} programs on {} threads{}, checks {:.3f} ms, run {:.3f} ms{}\n", programs,
      threads, openmp_team ? " (OpenMP team)" : "", check_ms, run_ms,
      scratch_made ? fmt::format(", {} new scratch", scratch_made) : "");
}

const Program& NativeKernel::program() const {
  NEURON_ASSERT(impl_, "NativeKernel used before compile_native");
  return impl_->program;
}

// Loads an object; when the JIT cannot map memory, drops the memory level (unloading every
// kernel no caller holds) and tries once more, then reports a UserError naming the numbers.
static native::LoadedObject load(const Blob& blob, const std::string& kernel) {
  try {
    return native::load_object(blob);
  } catch (const native::JitLoadError& e) {
    if (!e.out_of_memory) internal_error("loading kernel '{}': {}", kernel, e.what());
  }
  clear_native_kernels();
  try {
    return native::load_object(blob);
  } catch (const native::JitLoadError& e) {
    if (!e.out_of_memory) internal_error("loading kernel '{}': {}", kernel, e.what());
    user_error(Span{}, "jit-memory",
               "cannot load the native code of kernel '{}': the JIT could not map memory for it "
               "({}). {} kernels are still loaded, all held by NativeKernel objects of the caller "
               "(the memory level was dropped and the load retried); this process has {} memory "
               "mappings (vm.max_map_count: {}). Release kernels that are no longer needed, or "
               "raise the limit",
               kernel, e.what(), native::loaded_object_count(), mapping_count(),
               max_map_count());
  }
}

// Shared by every compile_native: `key` empty means no caching at any level.
NativeKernel compile_program(const Program& program, const std::string& ir_text,
                             const NativeCompileOptions& opts, CompileReport rep) {
  NativeKernel nk;
  const native::JitOptions jo = jit_options(opts, program);
  rep.kernel = program.name;
  rep.options = jo.str();
  auto t0 = Clock::now();
  // The engine program follows from the allocated IR and the target; the machine code also
  // depends on the host CPU's features and the JIT options.
  if (!ir_text.empty())
    rep.key = cache_key(ir_text, program.target + "|" + native::host_target_id(), rep.options);
  auto impl = std::make_shared<NativeKernel::Impl>();
  impl->program = program;
  native::check_program(impl->program);
  impl->bounds = native::analyze_bounds(impl->program);
  const Target& target = program.target.empty() ? default_target() : target_by_name(program.target);
  impl->first_reads = native::first_reads(impl->program, impl->bounds, target);
  impl->pitch = native::physical_pitch(impl->program, impl->bounds, target);
  impl->prints = uses_print(impl->program.body);
  impl->flags = native::reads_psum_flags(impl->program);
  {
    // Accesses that do not depend on program ids are checked now, at compile time.
    native::ProgramBounds fixed;
    for (auto& a : impl->bounds.accesses)
      if (a.pid == std::array<int64_t, 4>{} && a.npid == std::array<int64_t, 4>{} &&
          a.ppid == std::array<int64_t, 4>{} && a.pnpid == std::array<int64_t, 4>{})
        fixed.accesses.push_back(a);
    std::vector<int64_t> elements;
    for (auto& d : impl->program.tensors) {
      int64_t n = 1;
      for (int64_t x : d.shape) n *= x;
      elements.push_back(n);
    }
    native::check_launch(impl->program, fixed, target, elements, {1});
  }
  rep.phases.push_back({"key and checks", ms_since(t0)});

  LoadedKernels& mem = memory();
  if (!rep.key.empty()) {
    std::lock_guard lock(mem.mutex);
    if (LoadedCode* hit = mem.code.find(rep.key)) {
      impl->entry = hit->entry;
      impl->owner = hit->owner;
      rep.cache = "memory";
    }
  }
  if (!impl->entry) {
    CacheLevel level = CacheLevel::none;
    native::ObjectCode obj;
    auto cold = [&] {
      obj = native::compile_object(impl->program, jo);
      return Blob(obj.bytes.begin(), obj.bytes.end());
    };
    Blob blob = rep.key.empty() ? cold()
                                : CompileCache::global().get_or_compile(rep.key, cold, &level,
                                                                        program.name, Span{});
    if (level == CacheLevel::none) {
      rep.cache = "cold";
      rep.phases.push_back({"llvm lower", obj.lower_ms});
      rep.phases.push_back({"llvm optimize", obj.optimize_ms});
      rep.phases.push_back({"machine code", obj.codegen_ms});
    } else {
      rep.cache = std::string(to_string(level));
    }
    native::LoadedObject lo = load(blob, program.name);
    rep.phases.push_back({"load", lo.load_ms});
    if (level == CacheLevel::none) {
      auto t = Clock::now();
      release_free_heap_pages();
      rep.phases.push_back({"release free memory", ms_since(t)});
    }
    impl->entry = lo.entry;
    impl->owner = lo.owner;
    if (!rep.key.empty()) {
      Evicted evicted;
      std::lock_guard lock(mem.mutex);
      mem.code.put(rep.key, LoadedCode{impl->entry, impl->owner}, config().cache_memory_entries,
                   &evicted.code);
    }
  }
  nk.impl_ = std::move(impl);
  nk.report_ = std::move(rep);
  log_report(nk.report_);
  return nk;
}

NativeKernel compile_native(const Compiled& c, const NativeCompileOptions& opts) {
  CompileReport rep;
  if (opts.trace_ms >= 0) rep.phases.push_back({"trace", opts.trace_ms});
  for (auto& p : c.passes) rep.phases.push_back({"pass " + p.name, p.ms});
  return compile_program(c.program, print(c.kernel), opts, std::move(rep));
}

NativeKernel compile_native(const Program& p, const NativeCompileOptions& opts) {
  return compile_program(p, "", opts, CompileReport{});
}

NativeKernel compile_native(const Kernel& k, const NativeCompileOptions& opts) {
  auto t0 = Clock::now();
  CompileOptions co = default_compile_options();
  // The options as far as they do not depend on the program, and the bound they use.
  const std::string src =
      fmt::format("{}|{}|{}|{}", co.target, jit_options(opts, Program{}).str(),
                  config().host_kernels_above, print(k, PrintOptions{.spans = true}));
  LoadedKernels& mem = memory();
  {
    std::lock_guard lock(mem.mutex);
    if (NativeKernel* hit = mem.by_source.find(src)) {
      NativeKernel nk = *hit;
      nk.report_.cache = "memory";
      nk.report_.phases = {{"lookup", ms_since(t0)}};
      log_report(nk.report_);
      return nk;
    }
  }
  Compiled c = compile(k, co);
  NativeKernel nk = compile_native(c, opts);
  Evicted evicted;
  std::lock_guard lock(mem.mutex);
  mem.by_source.put(src, nk, config().cache_memory_entries, &evicted.kernels);
  return nk;
}

std::vector<bool> NativeKernel::outputs_to_zero(const std::vector<int64_t>& grid) const {
  std::lock_guard lock(impl_->zero_mutex);
  auto it = impl_->zero_outputs.find(grid);
  if (it == impl_->zero_outputs.end()) {
    if (impl_->zero_outputs.size() >= 64) impl_->zero_outputs.clear();
    it = impl_->zero_outputs.emplace(grid, native::outputs_to_zero(program(), grid)).first;
  }
  return it->second;  // a copy: another thread's call may clear the map
}

std::vector<Tensor> NativeKernel::operator()(const std::vector<Tensor>& inputs,
                                             const std::vector<int64_t>& grid,
                                             const NativeOptions& opts) const {
  std::vector<Tensor> all = inputs, outputs;
  // An output the kernel provably overwrites entirely skips the zero-fill (a memset pass as
  // dear as the kernel's own store for a memory-bound op).
  const std::vector<bool> zero = outputs_to_zero(grid);
  for (size_t i = 0; i < program().tensors.size(); ++i) {
    const TensorDecl& t = program().tensors[i];
    if (t.role != TensorDecl::Role::output) continue;
    outputs.push_back(zero[i] ? Tensor::empty(t.shape, t.dtype)
                              : Tensor::uninitialized(t.shape, t.dtype));
    all.push_back(outputs.back());
  }
  run(all, grid, opts);
  return outputs;
}

std::vector<Tensor> run_native(const Compiled& c, const std::vector<Tensor>& inputs,
                               const std::vector<int64_t>& grid, const NativeOptions& opts) {
  return compile_native(c)(inputs, grid, opts);
}

std::vector<Tensor> run_native(const Kernel& k, const std::vector<Tensor>& inputs,
                               const std::vector<int64_t>& grid, const NativeOptions& opts) {
  return compile_native(k)(inputs, grid, opts);
}

void clear_native_kernels() {
  LoadedKernels& mem = memory();
  Evicted evicted;
  std::lock_guard lock(mem.mutex);
  mem.code.shrink(0, &evicted.code);
  mem.by_source.shrink(0, &evicted.kernels);
}

std::size_t loaded_native_kernels() { return native::loaded_object_count(); }

}  // namespace neuron
