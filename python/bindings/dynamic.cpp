// Bindings for the dynamic half of the DSL (language.hpp, isa.hpp): registers, runtime loops,
// access patterns, indirect DMA rows with oob_mode, nc_n_gather and local_gather. Loop bodies
// are Python callables that the C++ loops trace once.
#include <memory>

#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bindings.hpp"
#include "neuron/dsl/builder.hpp"
#include "neuron/dsl/emit.hpp"
#include "neuron/isa.hpp"
#include "neuron/language.hpp"

namespace py = pybind11;

namespace neuron::python {

namespace {

// A Python value used as an index (an int, or an Affine: loop index, program id, register).
nl::index as_index(const py::handle& v, const char* what, const Span& span) {
  if (py::isinstance<Affine>(v)) return v.cast<Affine>();
  if (py::isinstance<py::int_>(v) && !py::isinstance<py::bool_>(v)) return v.cast<int64_t>();
  user_error(span, "register", "{} must be a register or an int, got {} ({})", what,
             std::string(py::repr(v)), std::string(py::str(v.get_type().attr("__name__"))));
}

// An open nl.dynamic_range loop: the C++ loop_range, closed by close() (or when dropped).
struct DynamicRange {
  std::unique_ptr<nl::loop_range> range;
  nl::index value;
};

}  // namespace

void init_dynamic(py::module_& m) {
  py::enum_<nl::oob_mode>(m, "oob_mode")
      .value("error", nl::oob_mode::error)
      .value("skip", nl::oob_mode::skip);

  // ---- registers ----
  m.def("register_alloc", [](int64_t init, const Span& span) {
    return nl::register_alloc(init, span);
  });
  m.def("register_load", [](const Affine& reg, const nl::tensor& src, const Span& span) {
    nl::register_load(reg, src, span);
  });
  m.def("register_store", [](const nl::tensor& dst, const Affine& reg, const Span& span) {
    nl::register_store(dst, reg, span);
  });
  m.def("register_move", [](const Affine& reg, const Affine& value, const Span& span) {
    nl::register_move(reg, value, span);
  });

  // ---- runtime loops ----
  m.def("fori_loop", [](const Affine& lower, const Affine& upper, const py::function& body,
                        int64_t step, const Span& span) {
    nl::fori_loop(lower, upper, [&](const nl::index& i) { body(i); }, step, span);
  });
  m.def("while_loop", [](const Affine& init, const py::function& body, const Span& span) {
    nl::while_loop(
        init,
        [&](const nl::index& r) {
          return as_index(body(r), "the value nl.while_loop's body_fun returns (the register's "
                                   "next value)", span);
        },
        span);
  });
  py::class_<DynamicRange>(m, "DynamicRange")
      .def_readonly("index", &DynamicRange::value)
      // Ends the loop (the body has been traced).
      .def("close", [](DynamicRange& r) { r.range.reset(); })
      // Forgets the loop without closing it: its trace was abandoned (an exception).
      .def("abandon", [](DynamicRange& r) { (void)r.range.release(); });
  // Opens a runtime loop over range(start, stop, step); the loop is open until close().
  m.def("open_dynamic_range", [](const Affine& start, const Affine& stop, int64_t step,
                                 const Span& span) {
    DynamicRange r;
    r.range = std::make_unique<nl::loop_range>(start, stop, step, span);
    auto it = r.range->begin();
    r.value = *it;
    return r;
  });

  // ---- access patterns and indirect rows ----
  m.def("ap", [](const nl::tensor& t, const std::vector<std::pair<int64_t, int64_t>>& pattern,
                 std::optional<Affine> offset, std::optional<Affine> scalar_offset,
                 int64_t indirect_dim, const Span& span) {
    return nl::ap(t, pattern, offset, scalar_offset, indirect_dim, span);
  });
  m.def("ap_as", [](const nl::tensor& t, DType dtype,
                    const std::vector<std::pair<int64_t, int64_t>>& pattern,
                    std::optional<Affine> offset, const Span& span) {
    return nl::ap_as(t, dtype, pattern, offset, span);
  });
  // t with size-1 dim `dim` repeated `size` times (step 0): NkiTensor.broadcast.
  m.def("broadcast_view", [](const nl::tensor& t, int64_t dim, int64_t size, const Span& span) {
    auto shape = t.shape();
    shape.at(static_cast<size_t>(dim)) = size;
    return nl::tensor(dsl::broadcast_view(dsl::view_of(t, span), shape, span));
  });
  m.def("storage_shape", [](const nl::tensor& t) {
    return t.valid() ? t.access().buffer->shape : std::vector<int64_t>{};
  });
  // (start, size, step, kept) of each storage dim of a view whose starts are constants (eager
  // mode applies .ap() views to NumPy arrays with them).
  m.def("view_dims", [](const nl::tensor& t) {
    std::vector<std::tuple<int64_t, int64_t, int64_t, bool>> out;
    for (auto& d : t.access().dims) {
      if (!d.start.is_constant())
        throw py::value_error("view_dims: the view starts at '" + d.start.str() + "'");
      out.emplace_back(d.start.constant, d.size, d.step, d.keep);
    }
    return out;
  });
  // The storage shape a view walks when it is not the buffer's own (ir.hpp Access::storage),
  // and the whole buffer seen with a storage shape: eager mode replays t.ap() views with them.
  m.def("view_storage", [](const nl::tensor& t) { return t.access().storage; });
  // Are two views of one buffer (a kernel input seen again through a reshape chain)?
  m.def("same_buffer", [](const nl::tensor& a, const nl::tensor& b) {
    return a.valid() && b.valid() && a.access().buffer == b.access().buffer;
  });
  // A transposing view's dims (ir.hpp Access::order: storage dims in view order; empty: storage
  // order), and a view given that order: eager mode replays t.ap() views with them.
  m.def("view_order", [](const nl::tensor& t) { return t.access().order; });
  m.def("ordered_view", [](const nl::tensor& t, const std::vector<int>& order) {
    Access a = t.access();
    a.order = order;
    a.normalize_order();
    return nl::tensor(a);
  });
  // A view's walk without its start: [(stride, count)] over its dims (view order), in elements of the
  // storage it walks (views.py checks that a tile view is dense per partition with it).
  m.def("view_walk", [](const nl::tensor& t) {
    const Access& a = t.access();
    std::vector<std::pair<int64_t, int64_t>> out;
    std::vector<int64_t> R = row_strides(a.storage_shape());
    if (is_on_chip(a.buffer->memory)) R[0] = a.buffer->free_elements();  // a partition's step
    for (size_t d : a.kept()) out.emplace_back(a.dims[d].step * R[d], a.dims[d].size);
    return out;
  });
  m.def("view_origin", [](const nl::tensor& t) { return t.access().origin; });
  // Does the view start at a value read at run time (a register: select with an index tile,
  // .ap(scalar_offset=)), one of NKI's indirect views?
  m.def("starts_at_register", [](const nl::tensor& t) {
    for (auto& d : t.access().dims)
      for (auto& term : d.start.terms)
        if (is_register_var(term.var)) return true;
    return false;
  });
  m.def("view_as_dtype", [](const nl::tensor& t) { return t.access().as_dtype; });
  // (eager mode re-applies a recorded ap(): `dtype` set for a reinterpreting one, ir.hpp)
  m.def("storage_view", [](const nl::tensor& t, const std::vector<int64_t>& shape,
                           int64_t origin, std::optional<DType> dtype) {
    Access a = Access::whole(t.access().buffer);
    a.as_dtype = dtype;
    if (!dtype && (shape.empty() || (shape == a.buffer->shape && origin == 0)))
      return nl::tensor(a);
    a.storage = shape;
    a.origin = origin;
    a.dims.clear();
    for (auto d : shape) a.dims.push_back(DimSlice{Affine(0), d, 1, true});
    return nl::tensor(a);
  }, py::arg("t"), py::arg("shape"), py::arg("origin") = 0, py::arg("dtype") = std::nullopt);
  m.def("load_rows", [](const nl::tensor& src, const nl::tensor& rows, nl::oob_mode oob,
                        std::optional<DType> dtype, const Span& span) {
    return nl::load_rows(src, rows, oob, dtype, span);
  });
  m.def("store_rows", [](const nl::tensor& dst, const nl::tensor& rows, const nl::tensor& value,
                         nl::oob_mode oob, const Span& span) {
    nl::store_rows(dst, rows, value, oob, span);
  });
  m.def("dma_copy_rows", [](const nl::tensor& dst, const nl::tensor& src, const nl::tensor& rows,
                            bool rows_of_src, nl::oob_mode oob, const Span& span) {
    isa::dma_copy_rows(dst, src, rows, rows_of_src, oob, span);
  });

  // ---- gathers ----
  m.def("nc_n_gather", [](const nl::tensor& dst, const nl::tensor& data, const nl::tensor& indices,
                          const Span& span) { isa::nc_n_gather(dst, data, indices, span); });
  m.def("local_gather", [](const nl::tensor& dst, const nl::tensor& src, const nl::tensor& index,
                           int64_t num_elem_per_idx, int64_t num_valid_indices, const Span& span) {
    isa::local_gather(dst, src, index, num_elem_per_idx, num_valid_indices, span);
  });
}

}  // namespace neuron::python
