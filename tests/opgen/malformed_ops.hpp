// A malformed operator for the neuron-opgen error test: a tensor after a parameter.
#pragma once
#include <neuron/neuron.hpp>
#include <neuron/op.hpp>

namespace opgen_bad {
namespace nl = neuron::nl;

NEURON_OP(opgen_bad)
inline nl::tensor late_tensor(nl::tensor x, double alpha, nl::tensor y) {
  return x;
}

}  // namespace opgen_bad
