// Compiling a traced kernel: the pass pipeline (codegen/src/pipeline.cpp) and its result.
#pragma once
#include <string>
#include <vector>

#include "neuron/codegen/program.hpp"
#include "neuron/ir/ir.hpp"

namespace neuron {

struct CompileOptions {
  std::string target = "trn2";
  // Print the IR after each pass ("unchanged" when a pass did nothing) and per-pass times.
  // Defaults from NEURON_DUMP_IR (see runtime/include/neuron/runtime/config.hpp).
  bool dump_ir = false;
};

struct PassReport {
  std::string name;
  double ms = 0;
  bool changed = false;
};

struct Compiled {
  Kernel kernel;    // the IR after the last IR-to-IR pass (allocated, ISA only)
  Program program;  // the engine program
  std::vector<PassReport> passes;
};

// Runs verify -> legalize -> fresh_psum -> verify ISA -> allocate -> lower. Rule violations are
// UserErrors.
Compiled compile(const Kernel& k, const CompileOptions& opts = {});

// The individual passes (one file each in codegen/src), exposed for pass tests.
void verify(const Kernel& k, const std::string& target);  // throws UserError
Kernel legalize(const Kernel& k);                          // nl helpers -> ISA instructions
Kernel fresh_psum(const Kernel& k);  // clears PSUM tiles that auto-accumulating matmuls target
// When the kernel does not fit SBUF/PSUM as written, compile() makes room with these two first.
// A new buffer from each statement that overwrites a whole tile (rows an oob_mode=skip DMA
// skipped: kept, so it does not count, or undefined, so it does):
enum class SkippedRows { kept, undefined };
Kernel tile_versions(const Kernel& k, SkippedRows skipped = SkippedRows::kept);
Kernel early_psum_reads(const Kernel& k);  // PSUM readers right after what they depend on
Kernel allocate(const Kernel& k, const std::string& target);  // SBUF/PSUM offsets and slots
Program lower(const Kernel& k, const std::string& target);    // IR -> engine program

}  // namespace neuron
