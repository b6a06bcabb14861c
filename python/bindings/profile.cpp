// Bindings for profiles: a simulator run with the timing model (optionally timing only) and the
// Profile it fills, with its views (summary text, Perfetto JSON, HTML) and its tables as data.
#include <memory>
#include <new>
#include <sstream>

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bindings.hpp"
#include "neuron/runtime/profile.hpp"
#include "neuron/runtime/run.hpp"

namespace py = pybind11;

namespace neuron::python {

void init_profile(py::module_& m) {
  py::class_<Profile, std::shared_ptr<Profile>>(m, "Profile")
      .def_readonly("kernel", &Profile::kernel)
      .def_readonly("target", &Profile::target)
      .def_readonly("total_ns", &Profile::total_ns)
      .def_readonly("executed", &Profile::executed)
      .def_readonly("programs", &Profile::programs)
      .def_readonly("units", &Profile::units)
      .def("summary_text", [](const Profile& p) { return summary_text(p); })
      .def("trace_json", [](const Profile& p) { return trace_json(p); })
      .def("html", [](const Profile& p) { return html_report(p); })
      .def("write", [](const Profile& p, const std::string& dir, const std::string& stem) {
        return write_profile(p, dir, stem);
      })
      // Static instructions: (opcode, engine, file, line, operands).
      .def_property_readonly("instrs", [](const Profile& p) {
        py::list out;
        for (auto& in : p.instrs)
          out.append(py::make_tuple(in.opcode, std::string(engine_name(in.engine)), in.span.file,
                                    in.span.line, in.operands));
        return out;
      })
      // Dynamic instructions in walk order: (instr, unit, start_ns, end_ns, wait_on, wait_ns).
      .def_property_readonly("events", [](const Profile& p) {
        py::list out;
        for (auto& e : p.events)
          out.append(py::make_tuple(e.instr, e.unit, e.start_ns, e.end_ns, e.wait_on, e.wait_ns));
        return out;
      });

  // Simulates a compiled kernel with the timing model; returns (outputs, device_print text,
  // Profile). execute=False: timing only (no data computed; `inputs` may be empty).
  m.def("simulate_profiled", [](const Compiled& c, const std::vector<Tensor>& inputs,
                                const std::vector<int64_t>& grid, bool execute) {
    std::ostringstream printed;
    SimOptions o;
    o.print = &printed;
    o.execute = execute;
    auto prof = std::make_shared<Profile>();
    std::vector<Tensor> outs;
    {
      py::gil_scoped_release release;
      SimResult r = simulate_profiled(c, inputs, grid, o);
      outs = std::move(r.outputs);
      *prof = std::move(r.profile);
    }
    return std::make_tuple(outs, printed.str(), prof);
  }, py::arg("compiled"), py::arg("inputs"), py::arg("grid"), py::arg("execute") = true);
}

}  // namespace neuron::python
