// Bindings for the IR area: Span, Affine (loop indices), DType, Memory, Kernel, print/parse.
#include <pybind11/operators.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bindings.hpp"
#include "neuron/ir/equality.hpp"
#include "neuron/ir/ir.hpp"
#include "neuron/ir/printer.hpp"

namespace py = pybind11;

namespace neuron::python {

void init_ir(py::module_& m) {
  py::class_<Span>(m, "Span")
      .def(py::init([](std::string file, int line, int column) {
             return Span{std::move(file), line, column};
           }),
           py::arg("file") = "", py::arg("line") = 0, py::arg("column") = 0)
      .def_readwrite("file", &Span::file)
      .def_readwrite("line", &Span::line)
      .def_readwrite("column", &Span::column)
      .def("__str__", &Span::str);

  py::enum_<DType> dtype(m, "DType");
#define X(e, name, bytes, is_float, is_signed) dtype.value(#e, DType::e);
  NEURON_DTYPES(X)
#undef X
  dtype.def_property_readonly("name_", [](DType t) { return std::string(dtype_name(t)); })
      .def_property_readonly("itemsize", [](DType t) { return dtype_bytes(t); })
      .def_property_readonly("is_float", [](DType t) { return dtype_is_float(t); })
      .def_property_readonly("is_signed", [](DType t) { return dtype_is_signed(t); });
  m.def("dtype_from_name", [](const std::string& s) { return dtype_from_name(s); });

  py::enum_<Memory>(m, "Memory")
      .value("sbuf", Memory::sbuf)
      .value("psum", Memory::psum)
      .value("hbm", Memory::hbm)
      .value("shared_hbm", Memory::shared_hbm);

  // Loop indices and program ids: integer affine expressions.
  py::class_<Affine>(m, "Affine")
      .def(py::init<int64_t>())
      .def_static("var", &Affine::var, py::arg("name"), py::arg("coeff") = 1)
      .def_readonly("constant", &Affine::constant)
      .def("is_constant", &Affine::is_constant)
      .def("__str__", &Affine::str)
      .def("__repr__", [](const Affine& a) { return "Affine(" + a.str() + ")"; })
      .def(py::self + py::self)
      .def(py::self - py::self)
      .def(py::self + int64_t())
      .def(py::self - int64_t())
      .def(int64_t() + py::self)
      .def("__rsub__", [](const Affine& a, int64_t k) { return Affine(k) - a; })
      .def(py::self * int64_t())
      .def(int64_t() * py::self)
      .def(-py::self)
      .def("same", [](const Affine& a, const Affine& b) { return a == b; });

  py::class_<Kernel>(m, "Kernel")
      .def_readonly("name", &Kernel::name)
      .def_property_readonly("inputs",
                             [](const Kernel& k) {
                               std::vector<std::string> v;
                               for (auto& b : k.inputs) v.push_back(b->name);
                               return v;
                             })
      .def_property_readonly("output_shapes",
                             [](const Kernel& k) {
                               std::vector<std::pair<std::vector<int64_t>, DType>> v;
                               for (auto& b : k.outputs) v.emplace_back(b->shape, b->dtype);
                               return v;
                             })
      .def("__str__", [](const Kernel& k) { return print(k); })
      .def("__eq__", [](const Kernel& a, const Kernel& b) { return equal(a, b); });
  m.def("print_kernel", [](const Kernel& k) { return print(k); });
  m.def("parse_kernel", [](const std::string& text, const std::string& source) {
    return parse_kernel(text, source);
  }, py::arg("text"), py::arg("source_name") = "<ir>");
}

}  // namespace neuron::python
