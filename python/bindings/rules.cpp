// Bindings for the C++ rules the Python package applies outside a trace, so that it never
// keeps a copy of them: dtype promotion, broadcasting, reduction shapes (keepdims), loop trip
// counts and the rendering of diagnostics.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bindings.hpp"
#include "neuron/base/error.hpp"
#include "neuron/dsl/emit.hpp"
#include "neuron/language.hpp"

namespace py = pybind11;

namespace neuron::python {

void init_rules(py::module_& m) {
  m.def("promote", &nl::promote, "the dtype of a binary op's result (NKI_API.md 3.3)");
  m.def("broadcast_shape", &dsl::broadcast_shape, py::arg("shapes"), py::arg("span"),
        py::arg("pad_ranks") = false);
  m.def(
      "reduction",
      [](const std::vector<int64_t>& shape, const std::vector<int64_t>& axes, bool keepdims,
         const Span& span) {
        nl::Reduction r = nl::reduction(shape, axes, keepdims, span);
        return py::make_tuple(r.axes, r.shape, r.kept);
      },
      "(axes, result shape with reduced dims as 1, dims the result view keeps)");
  m.def("trip_count", &nl::trip_count);
  m.def("render_diagnostic", &render_diagnostic);
}

}  // namespace neuron::python
