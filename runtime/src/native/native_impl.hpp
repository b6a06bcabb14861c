// Internals of NativeKernel shared by native.cpp (compile, cache) and native_run.cpp (grid).
#pragma once
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "neuron/codegen/program.hpp"
#include "neuron/codegen/jit.hpp"
#include "neuron/runtime/native/native.hpp"
#include "neuron/codegen/plan.hpp"

namespace neuron {

struct NativeKernel::Impl {
  Program program;  // owns the instructions `bounds` points into
  native::ProgramBounds bounds;
  native::FirstReads first_reads;  // what a worker clears between programs
  // outputs_to_zero per grid, computed on first use (operator() allocates outputs with it).
  mutable std::mutex zero_mutex;
  mutable std::map<std::vector<int64_t>, std::vector<bool>> zero_outputs;
  native::Pitch pitch;  // must match what the lowering used (physical_pitch)
  bool prints = false;  // has device_print: runs on one thread, in program order
  bool flags = true;    // reads the PSUM flags (reads_psum_flags): clear them per program
  native::KernelEntry entry = nullptr;
  std::shared_ptr<void> owner;
};

}  // namespace neuron
