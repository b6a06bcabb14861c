// Native execution on the host CPU: compile a kernel's engine program with the LLVM ORC JIT
// (cached in memory and on disk) and run its SPMD grid on worker threads. docs/native.md.
#pragma once
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "neuron/codegen/pipeline.hpp"
#include "neuron/base/instr_kernels.hpp"
#include "neuron/runtime/tensor.hpp"

namespace neuron {

// What a compilation did and how long each phase took: preparation, never execution.
struct CompileReport {
  struct Phase {
    std::string name;  // "trace", "pass <name>", "key", "llvm lower", "llvm optimize",
                       // "machine code", "load"
    double ms = 0;
  };
  std::string kernel;
  std::string cache = "cold";  // "memory" (loaded kernel reused), "disk" (object reused), "cold"
  std::string key;             // the compile-cache key
  std::string options;         // JIT options text
  std::vector<Phase> phases;
  double total_ms() const;
  double phase_ms(std::string_view name) const;  // 0 when absent
  std::string str() const;                       // one line per phase, for NEURON_LOG=compile
};

// Execution of one launch, reported apart from preparation.
struct RunReport {
  double check_ms = 0;  // call validation and per-launch bounds checks
  double run_ms = 0;    // the grid itself
  int threads = 1;
  int64_t programs = 0;
  bool openmp_team = false;  // the grid ran on the process's OpenMP team (docs/native.md)
  // SBUF/PSUM scratches this launch had to map (0: each worker reused one an earlier launch
  // of a kernel with the same on-chip extent returned; docs/native.md "Scratch").
  int scratch_made = 0;
  std::string str() const;
};

struct NativeOptions {
  // Worker threads; 0: NEURON_THREADS, else the number of cores. Never more than programs.
  // A program that uses device_print runs on one thread, so output keeps grid order.
  int threads = 0;
  std::ostream* print = nullptr;  // device_print output; null: std::cout
  RunReport* report = nullptr;    // filled after the run when set
  // For a kernel compiled with NativeCompileOptions::profile: per instruction (index Instr::id),
  // the nanoseconds and calls of this run are added here, summed over the worker threads.
  std::vector<native::InstrTicks>* profile = nullptr;
};

struct NativeCompileOptions {
  std::string kernels;  // "bitcode" or "host"; empty: NEURON_NATIVE_KERNELS (default bitcode)
  int opt_level = 2;
  double trace_ms = -1;  // a trace time the caller measured, shown in the report
  // Time every instruction call (NativeOptions::profile collects it): a separately cached
  // variant with two clock reads per instruction call; the arithmetic is unchanged.
  bool profile = false;
  // Features applied after the host's ("-avx512f", "-avx512bf16"): code for a CPU with less,
  // which this host can run (native::JitOptions::cpu_features; part of the cache key).
  std::string cpu_features;
};

// A compiled, loaded kernel. Cheap to copy; safe to run from several threads at once.
class NativeKernel {
 public:
  struct Impl;
  NativeKernel() = default;

  const CompileReport& report() const { return report_; }
  const Program& program() const;

  // `tensors`: inputs then outputs (Program::tensors order, scratch excluded), used in place.
  // Same validation as the simulator (rules "call-signature", "grid") and bounds checks before
  // any program runs (rule "out-of-bounds").
  void run(const std::vector<Tensor>& tensors, const std::vector<int64_t>& grid = {1},
           const NativeOptions& opts = {}) const;
  // Allocates the outputs, runs, returns them. Outputs start zeroed as on the simulator; one
  // the kernel never reads and provably overwrites entirely (outputs_to_zero) skips the fill.
  std::vector<Tensor> operator()(const std::vector<Tensor>& inputs,
                                 const std::vector<int64_t>& grid = {1},
                                 const NativeOptions& opts = {}) const;
  // Per tensor of program() (Program::tensors order): whether an output must start zeroed for
  // a run over `grid` (false for inputs, scratch, and outputs the kernel provably overwrites
  // entirely before reading). For callers that allocate the outputs they pass to run().
  std::vector<bool> outputs_to_zero(const std::vector<int64_t>& grid) const;

 private:
  friend NativeKernel compile_native(const Compiled&, const NativeCompileOptions&);
  friend NativeKernel compile_native(const Kernel&, const NativeCompileOptions&);
  friend NativeKernel compile_native(const Program&, const NativeCompileOptions&);
  friend NativeKernel compile_program(const Program&, const std::string&,
                                      const NativeCompileOptions&, CompileReport);
  std::shared_ptr<const Impl> impl_;
  CompileReport report_;
};

// Compiles (or finds in the memory cache, then the disk cache) the native code of `c`.
NativeKernel compile_native(const Compiled& c, const NativeCompileOptions& opts = {});
// The pipeline (default_compile_options()) and then compile_native; a kernel seen before in
// this process skips both.
NativeKernel compile_native(const Kernel& k, const NativeCompileOptions& opts = {});

// An engine program without its Kernel IR (hand-built programs in tests): compiled cold every
// time, never cached (the cache key is the Kernel IR text).
NativeKernel compile_native(const Program& p, const NativeCompileOptions& opts = {});

// Mirrors neuron::simulate: allocate outputs, run natively, return them.
std::vector<Tensor> run_native(const Compiled& c, const std::vector<Tensor>& inputs,
                               const std::vector<int64_t>& grid = {1},
                               const NativeOptions& opts = {});
std::vector<Tensor> run_native(const Kernel& k, const std::vector<Tensor>& inputs,
                               const std::vector<int64_t>& grid = {1},
                               const NativeOptions& opts = {});

// Empties the memory level (the next compile_native loads from the compile cache or compiles).
// Kernels no NativeKernel holds are unloaded.
void clear_native_kernels();

// Kernels whose machine code is loaded in this process now: at most NEURON_CACHE_MEMORY_ENTRIES
// per memory level, plus those evicted but still held by NativeKernel objects.
std::size_t loaded_native_kernels();

// How many SBUF/PSUM worker scratches the pool keeps between launches (least recently returned
// out first): 64, or 16 launches' worth at the most threads a launch has used.
std::size_t native_scratch_pool_capacity();

}  // namespace neuron
