// Operators for the neuron-opgen test (tests/opgen/test_opgen.cpp): the tool reads this header
// and registers what is marked NEURON_OP.
#pragma once
#include <neuron/neuron.hpp>
#include <neuron/op.hpp>

namespace opgen_test {
namespace nl = neuron::nl;

enum class Act { none, relu, tanh };

// out = act(x * alpha + y) over [N <= 128, F] tensors.
NEURON_OP(opgen_test)
inline nl::tensor scaled_add(nl::tensor x, nl::tensor y,
                             // the multiplier of x
                             double alpha = 0.5, Act act = Act::relu, bool negate = false) {
  auto out = nl::ndarray(x.shape(), x.dtype(), nl::shared_hbm, "out");
  auto t = nl::add(nl::multiply(nl::load(x), negate ? -alpha : alpha), nl::load(y));
  if (act == Act::relu) t = nl::relu(t);
  if (act == Act::tanh) t = nl::tanh(t);
  nl::store(out, t);
  return out;
}

// Row sums and row maxima of x [N <= 128, F]: two outputs [N, 1].
NEURON_OP(opgen_test)
inline std::tuple<nl::tensor, nl::tensor> row_stats(nl::tensor x) {
  auto sum = nl::ndarray({x.shape()[0], 1}, x.dtype(), nl::shared_hbm, "sum");
  auto max = nl::ndarray({x.shape()[0], 1}, x.dtype(), nl::shared_hbm, "max");
  auto t = nl::load(x);
  nl::store(sum, nl::sum(t, 1));
  nl::store(max, nl::max(t, 1));
  return {sum, max};
}

// Row reductions of x [N <= 128, F] by `mode` ("sum" or "max"), times `times`, plus `shift`: a
// string default and multi-word integer types.
NEURON_OP(opgen_test)
inline nl::tensor row_reduce(nl::tensor x, std::string mode = "max", unsigned times = 2u,
                             long long shift = -3) {
  auto out = nl::ndarray({x.shape()[0], 1}, x.dtype(), nl::shared_hbm, "out");
  auto t = nl::load(x);
  auto r = mode == "sum" ? nl::sum(t, 1) : nl::max(t, 1);
  nl::store(out, nl::add(nl::multiply(r, double(times)), double(shift)));
  return out;
}

// Not an operator: neuron-opgen leaves it alone.
inline nl::tensor helper(nl::tensor x) {
  return x;
}

}  // namespace opgen_test
