// Shared by codegen/llvm/*.cpp only (it includes LLVM headers): the host target machine, the
// embedded instruction-kernel bitcode, and the lowering entry point.
#pragma once
#include <llvm/ADT/ArrayRef.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/Target/TargetMachine.h>

#include <memory>

#include "neuron/codegen/program.hpp"
#include "neuron/codegen/jit.hpp"

namespace neuron::native {

// A target machine for the host CPU with the host's features (LLVM 14 names Zen 5 "generic",
// so features, not the CPU name, decide AVX-512 and AVX512-BF16), then `cpu_features`
// (JitOptions::cpu_features).
std::unique_ptr<llvm::TargetMachine> host_target_machine(int opt_level,
                                                         const std::string& cpu_features = "");

// The instruction kernels as a lazily loaded module in `ctx` (dsl/base/src/kernels/
// instr_kernels.cpp compiled to bitcode at build time and embedded in the library).
std::unique_ptr<llvm::Module> load_kernel_bitcode(llvm::LLVMContext& ctx);

// The engine program as a module with one entry "neuron_entry" (see KernelEntry). Instruction
// kernels are linked in (bitcode_kernels) or left as declarations resolved by the JIT.
std::unique_ptr<llvm::Module> lower_program(const Program& p, const JitOptions& opts,
                                            llvm::LLVMContext& ctx, llvm::TargetMachine& tm);

// The metadata on each instruction-kernel call: how many times a program makes it (the product
// of the trip counts of the loops around it).
inline constexpr const char* kTripsMetadata = "neuron.trips";

// Fills view slot `slot` (an NView) field by field: base, flags (null pointers for nullptr),
// then each size and stride as a constant. The one form both the lowering and the call wrappers
// write, and the form outline_repeated_calls reads back (outline_calls.cpp, slot_fields).
void store_view_fields(llvm::IRBuilder<>& b, llvm::StructType* view_ty, llvm::Value* slot,
                       llvm::Value* base, llvm::Value* flags, llvm::ArrayRef<int64_t> sizes,
                       llvm::ArrayRef<int64_t> strides);

// Calls of one instruction kernel that agree on every constant become calls of one wrapper per
// signature (outline_calls.cpp), for signatures with at least `min_repeats` calls each made at
// most `max_trips` times. Returns the number of wrappers made.
int outline_repeated_calls(llvm::Module& m, llvm::StructType* view_ty, size_t min_repeats,
                           int64_t max_trips);

}  // namespace neuron::native
