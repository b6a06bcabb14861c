// Bindings for the compile pipeline: compile a Kernel for a target, with per-pass reports.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bindings.hpp"
#include "neuron/base/target.hpp"
#include "neuron/codegen/pipeline.hpp"
#include "neuron/ir/printer.hpp"

namespace py = pybind11;

namespace neuron::python {

void init_compile(py::module_& m) {
  py::class_<PassReport>(m, "PassReport")
      .def_readonly("name", &PassReport::name)
      .def_readonly("ms", &PassReport::ms)
      .def_readonly("changed", &PassReport::changed)
      .def("__repr__", [](const PassReport& p) {
        return fmt::format("PassReport({}, {:.3f} ms, changed={})", p.name, p.ms, p.changed);
      });
  py::class_<Compiled>(m, "Compiled")
      .def_readonly("kernel", &Compiled::kernel)
      .def_readonly("passes", &Compiled::passes);
  m.def("compile", [](const Kernel& k, const std::string& target) {
    CompileOptions o;
    o.target = target;
    return compile(k, o);
  }, py::arg("kernel"), py::arg("target") = "trn2");
  // The hardware numbers Python's nl.tile_size and friends show, from the one C++ table.
  py::dict limits;
  limits["pmax"] = tile_limits::pmax;
  limits["psum_fmax"] = tile_limits::psum_fmax;
  limits["gemm_stationary_fmax"] = tile_limits::gemm_stationary_fmax;
  limits["gemm_moving_fmax"] = tile_limits::gemm_moving_fmax;
  limits["bn_stats_fmax"] = tile_limits::bn_stats_fmax;
  m.attr("tile_limits") = limits;
  m.def("sbuf_bytes_per_partition", [](const std::string& target) {
    return target_by_name(target).sbuf_bytes_per_partition;
  }, py::arg("target") = "trn2");
}

}  // namespace neuron::python
