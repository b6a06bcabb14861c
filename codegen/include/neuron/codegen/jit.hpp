// The LLVM-free face of the LLVM backend (codegen/llvm): engine program -> object file -> loaded
// entry point. LLVM headers stay inside codegen/llvm/*.cpp.
#pragma once
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "neuron/codegen/program.hpp"

namespace neuron::native {

// void entry(void** tensors, const int64_t* pids, const int64_t* npids, char* sbuf, char* psum,
//            uint8_t* psum_written): one SPMD program. tensors: Program::tensors order.
using KernelEntry = void (*)(void** tensors, const int64_t* pids, const int64_t* npids, char* sbuf,
                             char* psum, uint8_t* psum_written);

struct JitOptions {
  // true: instruction kernels linked in from embedded bitcode and specialized; false: calls to
  // the library's compiled copies (absolute symbols). NEURON_NATIVE_KERNELS.
  bool bitcode_kernels = true;
  int opt_level = 2;  // 0..3, new pass manager default pipeline
  // Runs of partition-local instructions go a block of partitions at a time (lower_program.cpp).
  // NEURON_PARTITION_BLOCKS.
  bool partition_blocks = true;
  // Run-local temporaries of those runs live in a buffer of one block's rows, tiles filled only
  // by partition broadcasts in one row (folded_sbuf.cpp). NEURON_SBUF_FOLDING.
  bool sbuf_folding = true;
  // Consecutive element-wise instructions of those runs, each reading the one before, run as one
  // loop over the elements (fused_chains.cpp). NEURON_FUSED_CHAINS.
  bool fused_chains = true;
  // `nc_transpose; copy; nc_matmul` of a tile's transpose runs as one product reading the
  // tile's rows (transposed_matmul.cpp). NEURON_TRANSPOSED_MATMUL.
  bool transposed_matmul = true;
  // A chain whose last step writes a kernel output of at least this many bytes writes it with
  // non-temporal stores (lower_program.cpp streams); 0: never. NEURON_STREAM_STORES_MIN_BYTES.
  int64_t stream_store_bytes = 0;
  // Every instruction call timed into the running thread's profile table (instr_kernels.hpp
  // set_profile_table); NativeCompileOptions::profile.
  bool profile = false;
  // Features applied after the host's, e.g. "-avx512f" or "-avx512bf16": code for a CPU with
  // less, which this host can still run (the paths such CPUs take, tested here; docs/native.md).
  // Empty: the host's. NativeCompileOptions::cpu_features.
  std::string cpu_features;
  // Text of everything above, for cache keys.
  std::string str() const;
};

// "x86_64-unknown-linux-gnu/<cpu>/<+features>": what the machine code is specialized for.
const std::string& host_target_id();

struct ObjectCode {
  std::vector<std::uint8_t> bytes;
  double lower_ms = 0, optimize_ms = 0, codegen_ms = 0;
};
// Lowers `p` (already checked by check_program) to one LLVM module, optimizes it for the host
// and emits a relocatable object whose entry symbol is "neuron_entry".
ObjectCode compile_object(const Program& p, const JitOptions& opts);

// LLVM IR text of the lowered (optimize=false) or optimized module, for debugging and tests.
std::string program_llvm_ir(const Program& p, const JitOptions& opts, bool optimize);

struct LoadedObject {
  KernelEntry entry = nullptr;
  // Owns the JIT'd code: when the last copy goes, the kernel's JITDylib is removed and its
  // code and data pages are unmapped.
  std::shared_ptr<void> owner;
  double load_ms = 0;
};

// Loading failed. `out_of_memory`: the JIT could not map pages for the code (mmap or mprotect
// failed: the address space, RLIMIT_AS or vm.max_map_count is exhausted), so unloading
// kernels may help; otherwise it is a toolkit bug. what() has LLVM's messages.
struct JitLoadError : std::runtime_error {
  JitLoadError(const std::string& what, bool oom) : std::runtime_error(what), out_of_memory(oom) {}
  bool out_of_memory;
};

// Adds the object to the process-wide LLJIT (its own JITDylib) and resolves the entry.
// Throws JitLoadError.
LoadedObject load_object(const std::vector<std::uint8_t>& object);

// Kernels whose code is loaded now (loaded and not yet released by their last owner).
std::size_t loaded_object_count();

}  // namespace neuron::native
