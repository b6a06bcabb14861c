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

namespace {

// NEURON_PROFILE=dir: every profiled simulation writes its files, numbered per process.
void write_if_asked(const Profile& p, const std::string& name) {
  std::string dir = config().profile_dir;
  if (dir.empty()) return;
  static std::atomic<int> counter{0};
  write_profile(p, dir, fmt::format("{}-{}", name, counter++));
}

}  // namespace

SimResult simulate_profiled(const Compiled& c, const std::vector<Tensor>& inputs,
                            const std::vector<int64_t>& grid, SimOptions opts) {
  SimResult r;
  opts.profile = &r.profile;
  if (!opts.execute && inputs.empty()) {
    simulate(c.program, {}, grid, opts);
    write_if_asked(r.profile, c.program.name);
    return r;
  }
  std::vector<Tensor> all = inputs;
  for (auto& t : c.program.tensors) {
    if (t.role != TensorDecl::Role::output) continue;
    r.outputs.push_back(Tensor::empty(t.shape, t.dtype));
    all.push_back(r.outputs.back());
  }
  simulate(c.program, all, grid, opts);
  write_if_asked(r.profile, c.program.name);
  return r;
}

SimResult profile(const Kernel& k, const std::vector<Tensor>& inputs, const ProfileOptions& o) {
  CompileOptions co = default_compile_options();
  if (!o.target.empty()) co.target = o.target;
  SimOptions so;
  so.execute = !o.timing_only;
  return simulate_profiled(compile(k, co), o.timing_only ? std::vector<Tensor>{} : inputs, o.grid,
                           so);
}

std::vector<Tensor> simulate(const Compiled& c, const std::vector<Tensor>& inputs,
                             const std::vector<int64_t>& grid, const SimOptions& opts) {
  // NEURON_PROFILE=dir: profile every simulated kernel (simulate_profiled writes the files).
  if (!opts.profile && !config().profile_dir.empty())
    return simulate_profiled(c, inputs, grid, opts).outputs;
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
