// Internals of NativeKernel shared by native.cpp (compile, cache) and native_run.cpp (grid).
#pragma once
#include <memory>

#include "neuron/codegen/program.hpp"
#include "neuron/codegen/jit.hpp"
#include "neuron/runtime/native/native.hpp"
#include "neuron/codegen/plan.hpp"

namespace neuron {

struct NativeKernel::Impl {
  Program program;  // owns the instructions `bounds` points into
  native::ProgramBounds bounds;
  native::FirstReads first_reads;  // what a worker clears between programs
  native::Pitch pitch;  // must match what the lowering used (physical_pitch)
  bool prints = false;  // has device_print: runs on one thread, in program order
  bool flags = true;    // reads the PSUM flags (reads_psum_flags): clear them per program
  native::KernelEntry entry = nullptr;
  std::shared_ptr<void> owner;
};

}  // namespace neuron
