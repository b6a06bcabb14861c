// Bindings for the random-number instructions (isa.hpp "random numbers"). `state` is None in a
// traced kernel (the kernel's own state tile) or the tile eager mode keeps per launch.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bindings.hpp"
#include "neuron/isa.hpp"
#include "neuron/language.hpp"

namespace py = pybind11;

namespace neuron::python {

namespace {

using State = std::optional<nl::tensor>;
using Operand = std::variant<nl::tensor, double>;

nl::operand to_operand(const Operand& v, const Span& span) {
  if (auto* t = std::get_if<nl::tensor>(&v)) return nl::operand(*t, span);
  return nl::operand(std::get<double>(v), span);
}

}  // namespace

void init_random(py::module_& m) {
  m.def("rng", [](const nl::tensor& dst, const State& state, const Span& span) {
    isa::rng(dst, state, span);
  });
  m.def("rand2", [](const nl::tensor& dst, double low, double high, const State& state,
                    const Span& span) { isa::rand2(dst, low, high, state, span); });
  m.def("dropout", [](const nl::tensor& dst, const nl::tensor& data, const Operand& prob,
                      const State& state, const Span& span) {
    isa::dropout(dst, data, to_operand(prob, span), state, span);
  });
  m.def("set_rng_seed", [](const Operand& seeds, const State& state, const Span& span) {
    isa::set_rng_seed(to_operand(seeds, span), state, span);
  });
  m.def("rand_get_state", [](const nl::tensor& dst, const State& state, const Span& span) {
    isa::rand_get_state(dst, state, span);
  });
  m.def("rand_set_state", [](const nl::tensor& src, const State& state, const Span& span) {
    isa::rand_set_state(src, state, span);
  });
}

}  // namespace neuron::python
