// The LLVM-free face of the LLVM backend (codegen/llvm): engine program -> object file -> loaded
// entry point. LLVM headers stay inside codegen/llvm/*.cpp.
#pragma once
#include <cstdint>
#include <memory>
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
  std::shared_ptr<void> owner;  // keeps the JIT'd code alive
  double load_ms = 0;
};
// Adds the object to the process-wide LLJIT (its own JITDylib) and resolves the entry.
LoadedObject load_object(const std::vector<std::uint8_t>& object);

}  // namespace neuron::native
