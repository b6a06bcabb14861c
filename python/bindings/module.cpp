// The neuron._C extension module: UserError translation and the per-area binding files.
#include <pybind11/pybind11.h>

#include "bindings.hpp"
#include "neuron/base/error.hpp"
#include "neuron/dsl/syntax.hpp"

namespace py = pybind11;

PYBIND11_MODULE(_C, m) {
  m.doc() = "neuron C++ toolkit bindings (used by the pure-Python neuron package)";
  // A user error keeps its rule, message and span as attributes so the Python side can
  // point at the user's line; str() is the full rendered diagnostic.
  static py::handle user_error_type =
      py::exception<neuron::UserError>(m, "UserError", PyExc_Exception).release();
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const neuron::UserError& e) {
      py::object inst = py::reinterpret_borrow<py::object>(user_error_type)(e.what());
      inst.attr("rule") = e.rule();
      inst.attr("message") = e.message();
      inst.attr("file") = e.span().file;
      inst.attr("line") = e.span().line;
      inst.attr("column") = e.span().column;
      PyErr_SetObject(user_error_type.ptr(), inst.ptr());
    } catch (const neuron::InternalError& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what());
    }
  });
  // Messages quote code as Python outside C++ kernels (a trace of a C++ kernel from Python
  // still uses C++: its errors point at C++ source).
  neuron::dsl::set_default_syntax(neuron::dsl::Syntax::python);
  neuron::python::init_ir(m);
  neuron::python::init_trace(m);
  neuron::python::init_compile(m);
  neuron::python::init_runtime(m);
  neuron::python::init_profile(m);
  neuron::python::init_registry(m);
  neuron::python::init_rules(m);
  neuron::python::init_dynamic(m);
  neuron::python::init_random(m);
  neuron::python::init_mx(m);
}
