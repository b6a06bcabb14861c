// The JIT's memory manager: all sections of a loaded kernel object in one mapping (why:
// jit_memory.cpp).
#pragma once
#include <llvm/ExecutionEngine/RuntimeDyld.h>

#include <memory>

namespace neuron::native {

std::unique_ptr<llvm::RuntimeDyld::MemoryManager> contiguous_memory_manager();

}  // namespace neuron::native
