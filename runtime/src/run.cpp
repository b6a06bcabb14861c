// Glue between the pipeline and the simulator for callers that just want outputs.
#include "neuron/runtime/run.hpp"

#include "neuron/error.hpp"
#include "neuron/runtime/config.hpp"

namespace neuron {

CompileOptions default_compile_options() {
  Config cfg = config();
  CompileOptions o;
  o.target = cfg.target;
  o.dump_ir = cfg.dump_ir;
  return o;
}

std::vector<Tensor> simulate(const Compiled& c, const std::vector<Tensor>& inputs,
                             const std::vector<int64_t>& grid, const SimOptions& opts) {
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
