// Bindings for the kernel registry (neuron/registry.hpp): listing registered C++ kernels and
// tracing one by name with parameters converted from Python values by their declared kind.
#include "neuron/registry.hpp"

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bindings.hpp"

// Every kernel registered in these headers is in the module's registry (NEURON_KERNEL runs in
// each program that includes the header): the examples. The kernel library's operators are
// registered by the code neuron-opgen writes from neuron/kernels/registered.hpp, compiled into
// the module (CMakeLists.txt, "neuron-opgen").
#include "profile_matmul.hpp"
#include "scaled_activation.hpp"
#include "softmax.hpp"
#include "vector_add.hpp"
#if __has_include(<neuron/kernels.hpp>)
#include <neuron/kernels.hpp>
#endif

namespace py = pybind11;

namespace neuron::python {

namespace {

py::object to_python(const ParamValue& v) {
  return std::visit([](const auto& x) -> py::object { return py::cast(x); }, v);
}

std::string type_name(const py::handle& v) {
  return py::str(v.get_type().attr("__name__"));
}

// A Python value as the parameter's kind; TypeError when it is not one (bool is not an int,
// an int is a float's value, an enum parameter takes one of its names).
ParamValue from_python(const RegisteredKernel& k, const ParamInfo& p, const py::handle& v) {
  auto wrong = [&]() {
    throw py::type_error(fmt::format(
        "parameter '{}' of kernel '{}' is {} {}{}; got {} ({})", p.name, k.name,
        p.kind == ParamKind::integer ? "an" : "a", param_kind_name(p.kind),
        p.kind == ParamKind::choice ? fmt::format(" ('{}')", fmt::join(p.choices, "', '"))
                                    : std::string(),
        std::string(py::repr(v)), type_name(v)));
  };
  const bool is_bool = py::isinstance<py::bool_>(v);
  switch (p.kind) {
    case ParamKind::boolean:
      if (!is_bool) wrong();
      return v.cast<bool>();
    case ParamKind::integer:
      if (is_bool || !py::isinstance<py::int_>(v)) wrong();
      try {
        return v.cast<int64_t>();
      } catch (const py::cast_error&) {
        throw py::value_error(
            fmt::format("parameter '{}' of kernel '{}': {} does not fit an "
                        "int64",
                        p.name, k.name, std::string(py::repr(v))));
      }
    case ParamKind::real:
      if (is_bool || !(py::isinstance<py::int_>(v) || py::isinstance<py::float_>(v))) wrong();
      return v.cast<double>();
    case ParamKind::string:
    case ParamKind::choice:
      if (!py::isinstance<py::str>(v)) wrong();
      return v.cast<std::string>();
    case ParamKind::dtype:
      if (!py::isinstance<DType>(v)) wrong();
      return v.cast<DType>();
  }
  wrong();
  return {};
}

}  // namespace

void init_registry(py::module_& m) {
  py::enum_<ParamKind>(m, "ParamKind")
      .value("bool", ParamKind::boolean)
      .value("int", ParamKind::integer)
      .value("float", ParamKind::real)
      .value("str", ParamKind::string)
      .value("dtype", ParamKind::dtype)
      .value("choice", ParamKind::choice);
  py::class_<ParamInfo>(m, "ParamInfo")
      .def_readonly("name", &ParamInfo::name)
      .def_readonly("kind", &ParamInfo::kind)
      .def_property_readonly("required", [](const ParamInfo& p) { return !p.default_value; })
      .def_property_readonly("default",
                             [](const ParamInfo& p) {
                               return p.default_value ? to_python(*p.default_value) : py::none();
                             })
      .def_readonly("doc", &ParamInfo::doc)
      .def_readonly("choices", &ParamInfo::choices)
      .def_readonly("min", &ParamInfo::min)
      .def_readonly("max", &ParamInfo::max);
  py::class_<RegisteredKernel>(m, "RegisteredKernel")
      .def_readonly("name", &RegisteredKernel::name)
      .def_readonly("doc", &RegisteredKernel::doc)
      .def_readonly("inputs", &RegisteredKernel::inputs)
      .def_readonly("params", &RegisteredKernel::params)
      .def_readonly("span", &RegisteredKernel::span);

  m.def("registry_list", [] {
    std::vector<RegisteredKernel> out;
    for (auto* k : Registry::global().list()) out.push_back(*k);
    return out;
  });
  m.def("registry_find", [](const std::string& name) -> std::optional<RegisteredKernel> {
    if (auto* k = Registry::global().find(name)) return *k;
    return std::nullopt;
  });
  // Traces a registered kernel; params: {name: Python value}, the missing ones take their
  // defaults. Errors from the kernel's own rules point at its C++ source, in C++ syntax.
  m.def("registry_trace", [](const std::string& name, std::vector<TensorSpec> specs,
                             const py::dict& params, const Span& span) {
    const RegisteredKernel* k = Registry::global().find(name);
    std::map<std::string, ParamValue, std::less<>> values;
    if (k) {
      for (auto [key, value] : params) {
        std::string n = py::str(key);
        for (auto& p : k->params)
          if (p.name == n) values[n] = from_python(*k, p, value);
        if (!values.count(n)) values[n] = false;  // unknown: trace_registered names it
      }
    }
    return trace_registered(name, std::move(specs), values, span);
  });
}

}  // namespace neuron::python
