// The functional NeuronCore simulator: executes an engine program over an SPMD grid.
#pragma once
#include <cstdint>
#include <iosfwd>
#include <vector>

#include "neuron/codegen/program.hpp"
#include "neuron/runtime/tensor.hpp"

namespace neuron {

struct Profile;  // runtime/profile.hpp

struct SimOptions {
  std::ostream* print = nullptr;  // device_print output; null means std::cout
  // When set, the timing model (runtime/timing.hpp) runs alongside and fills *profile.
  Profile* profile = nullptr;
  // false: timing only. No data is computed and no bounds are checked, so large kernels
  // profile in seconds; `tensors` may then be empty (only the program's declarations are used).
  bool execute = true;
};

// `tensors` holds the program's inputs then its outputs (Program::tensors order, shapes and
// dtypes must match: a mismatch is a UserError with rule "call-signature"). The grid has 1 to
// 4 dims; every program id runs with its own SBUF/PSUM. An access outside a tensor or tile is a
// UserError (rule "out-of-bounds") naming the instruction's source line. SPMD programs are timed
// back to back on one NeuronCore.
// The call validation both executors share: tensor count, shapes, dtypes and data (rule
// "call-signature", skipped when !check_tensors) and the grid (rule "grid").
void check_call(const Program& p, const std::vector<Tensor>& tensors,
                const std::vector<int64_t>& grid, bool check_tensors = true);

void simulate(const Program& p, const std::vector<Tensor>& tensors,
              const std::vector<int64_t>& grid = {1}, const SimOptions& opts = {});

}  // namespace neuron
