// One-call execution of a traced kernel: compile it and run it on the simulator.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "neuron/codegen/pipeline.hpp"
#include "neuron/runtime/profile.hpp"
#include "neuron/runtime/sim.hpp"
#include "neuron/runtime/tensor.hpp"

namespace neuron {

// Compile options filled from the environment (runtime/include/neuron/runtime/config.hpp).
CompileOptions default_compile_options();

// Allocates the program's outputs (zero-filled) and simulates it over `grid`.
std::vector<Tensor> simulate(const Compiled& c, const std::vector<Tensor>& inputs,
                             const std::vector<int64_t>& grid = {1}, const SimOptions& opts = {});

// Outputs plus the timing model's profile (trace_json / summary_text / html_report /
// write_profile in runtime/profile.hpp turn it into files). opts.profile is ignored.
// opts.execute = false profiles without computing: `inputs` may then be empty and the outputs
// are left empty.
struct SimResult {
  std::vector<Tensor> outputs;
  Profile profile;
};
SimResult simulate_profiled(const Compiled& c, const std::vector<Tensor>& inputs,
                            const std::vector<int64_t>& grid = {1}, SimOptions opts = {});

// NEURON_PROFILE=dir (runtime/config.hpp) makes every profiled simulation, and every simulate()
// above, write <dir>/<kernel>-<n>.json, .txt and .html.

// The C++ side of neuron.profile(): compiles `k` for `target` (the default target when empty)
// and runs it with the timing model. timing_only (the default) computes no data, so full-size
// kernels profile in seconds and `inputs` may be empty; otherwise the outputs are computed too.
struct ProfileOptions {
  std::string target;
  bool timing_only = true;
  std::vector<int64_t> grid = {1};
};
SimResult profile(const Kernel& k, const std::vector<Tensor>& inputs = {},
                  const ProfileOptions& o = {});

// compile() with default_compile_options(), then simulate.
std::vector<Tensor> simulate(const Kernel& k, const std::vector<Tensor>& inputs,
                             const std::vector<int64_t>& grid = {1}, const SimOptions& opts = {});

}  // namespace neuron
