// Malformed operators for a neuron-opgen error test: an overloaded operator and a template.
#pragma once
#include <neuron/neuron.hpp>
#include <neuron/op.hpp>

namespace opgen_overloaded {
namespace nl = neuron::nl;

NEURON_OP(opgen_overloaded)
inline nl::tensor twice(nl::tensor x) {
  return x;
}

NEURON_OP(opgen_overloaded)
inline nl::tensor twice(nl::tensor x, double alpha) {
  return x;
}

template <class T>
NEURON_OP(opgen_overloaded)
inline nl::tensor typed(nl::tensor x, T alpha) {
  return x;
}

}  // namespace opgen_overloaded
