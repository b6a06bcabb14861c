// Glue between the pipeline and the simulator for callers that just want outputs.
#include "neuron/runtime/run.hpp"

#include <fmt/format.h>

#include <atomic>

#include "neuron/base/error.hpp"
#include "neuron/base/config.hpp"

namespace neuron {

CompileOptions default_compile_options() {
  Config cfg = config();
  CompileOptions o;
  o.target = cfg.target;
  o.dump_ir = cfg.dump_ir;
  return o;
}

SimResult simulate_profiled(const Compiled& c, const std::vector<Tensor>& inputs,
                            const std::vector<int64_t>& grid, SimOptions opts) {
  SimResult r;
  opts.profile = &r.profile;
  if (!opts.execute && inputs.empty()) {
    simulate(c.program, {}, grid, opts);
    return r;
  }
  std::vector<Tensor> all = inputs;
  for (auto& t : c.program.tensors) {
    if (t.role != TensorDecl::Role::output) continue;
    r.outputs.push_back(Tensor::empty(t.shape, t.dtype));
    all.push_back(r.outputs.back());
  }
  simulate(c.program, all, grid, opts);
  return r;
}

std::vector<Tensor> simulate(const Compiled& c, const std::vector<Tensor>& inputs,
                             const std::vector<int64_t>& grid, const SimOptions& opts) {
  // NEURON_PROFILE=dir: profile every simulated kernel, numbering files per process.
  std::string dir = opts.profile ? std::string() : config().profile_dir;
  if (!dir.empty()) {
    static std::atomic<int> counter{0};
    SimResult r = simulate_profiled(c, inputs, grid, opts);
    write_profile(r.profile, dir, fmt::format("{}-{}", c.program.name, counter++));
    return std::move(r.outputs);
  }
  std::vector<Tensor> all = inputs;
  std::vector<Tensor> outputs;
  for (auto& t : c.program.tensors) {
    if (t.role != TensorDecl::Role::output) continue;
    outputs.push_back(Tensor::empty(t.shape, t.dtype));
    all.push_back(outputs.back());
  }
  simulate(c.program, all, grid, opts);
  return outputs;
}

std::vector<Tensor> simulate(const Kernel& k, const std::vector<Tensor>& inputs,
                             const std::vector<int64_t>& grid, const SimOptions& opts) {
  return simulate(compile(k, default_compile_options()), inputs, grid, opts);
}

}  // namespace neuron
