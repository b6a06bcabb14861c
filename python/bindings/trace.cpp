// Bindings for the DSL: tracing a Python function with the C++ builder, nl::tensor views, and
// every nl / isa call. The Python side passes the user's Span; the C++ DSL records the same IR
// it records for a C++ kernel.
#include <map>

#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bindings.hpp"
#include "neuron/dsl/builder.hpp"
#include "neuron/ir/visitor.hpp"
#include "neuron/isa.hpp"
#include "neuron/language.hpp"
#include "neuron/trace.hpp"

namespace py = pybind11;

namespace neuron::python {

namespace {

using Operand = std::variant<nl::tensor, double>;

// Does k write some HBM tensor both where the program id picks the place and where it does not
// (every core clears a shared output, then each stores its shard)? Programs run one after
// another would let the second's clear erase the first's shard; cores running concurrently
// do not (kernel.py traces such an LNC kernel per program, its cores in lock step).
bool writes_shared_and_sharded(const Kernel& k) {
  struct Finder : IRVisitor {
    std::map<const Buffer*, int> kinds;  // per HBM tensor: 1 written everywhere, 2 per program
    void visit_Op(const Op& op) override {
      const Access* dst = op.access("dst");
      if (dst == nullptr || is_on_chip(dst->buffer->memory)) return;
      bool per_program = false;
      for (auto& d : dst->dims)
        for (auto& t : d.start.terms) per_program |= t.var.rfind("pid", 0) == 0;
      kinds[dst->buffer.get()] |= per_program ? 2 : 1;
    }
  } finder;
  finder.visit(k.body);
  for (auto& [b, kind] : finder.kinds)
    if (kind == 3) return true;
  return false;
}

nl::operand to_operand(const Operand& v, const Span& span) {
  if (auto* t = std::get_if<nl::tensor>(&v)) return nl::operand(*t, span);
  return nl::operand(std::get<double>(v), span);
}

// The nl element-wise functions, straight from the operator tables (ops.hpp): every
// activation function but copy is a unary function (with its ALU twin where one exists: abs,
// rsqrt, reciprocal), every two-operand ALU operator a binary one.
const std::map<std::string, nl::unary_fn>& unary_fns() {
  static const std::map<std::string, nl::unary_fn> m = [] {
    std::map<std::string, nl::unary_fn> r;
#define X(e, name)                                                                  \
  if (ActFunc::e != ActFunc::copy) {                                                \
    auto alu = alu_op_from_name(name);                                              \
    if (alu && alu_op_arity(*alu) != 1) alu.reset();                                \
    r.emplace(name, nl::unary_fn{ActFunc::e, alu});                                 \
  }
    NEURON_ACT_FUNCS(X)
#undef X
    return r;
  }();
  return m;
}

const std::map<std::string, nl::binary_fn>& binary_fns() {
  static const std::map<std::string, nl::binary_fn> m = [] {
    std::map<std::string, nl::binary_fn> r;
#define X(e, name, arity) \
  if (arity == 2) r.emplace(name, nl::binary_fn{AluOp::e});
    NEURON_ALU_OPS(X)
#undef X
    return r;
  }();
  return m;
}

const std::map<std::string, nl::reduce_fn>& reduce_fns() {
  static const std::map<std::string, nl::reduce_fn> m = {
      {"sum", nl::sum}, {"max", nl::max}, {"min", nl::min}, {"mean", nl::mean}};
  return m;
}

template <typename M>
const typename M::mapped_type& lookup(const M& m, const std::string& name, const char* what) {
  auto it = m.find(name);
  if (it == m.end()) throw py::value_error(fmt::format("unknown {} function '{}'", what, name));
  return it->second;
}

// An ISA ALU operator named by the nl function the user passed (or "bypass").
isa::alu alu_named(const std::string& name) {
  if (name == "bypass") return isa::alu(nl::bypass);
  if (auto it = binary_fns().find(name); it != binary_fns().end()) return isa::alu(it->second);
  if (auto it = unary_fns().find(name); it != unary_fns().end()) return isa::alu(it->second);
  if (auto it = reduce_fns().find(name); it != reduce_fns().end()) return isa::alu(it->second);
  throw py::value_error(fmt::format("'{}' is not an nl function usable as an ALU operator", name));
}

isa::act act_named(const std::string& name) {
  if (name == "copy") return isa::act(nl::copy);
  if (auto it = unary_fns().find(name); it != unary_fns().end()) return isa::act(it->second);
  throw py::value_error(fmt::format("'{}' is not an nl activation function", name));
}

// A Python subscript, already classified by the Python side.
nl::subscript make_sub(const std::string& kind, const Affine& start, int64_t a, int64_t b,
                       const Span& span) {
  if (kind == "scalar") return nl::subscript(start, span);
  if (kind == "ds") return nl::subscript(nl::ds(start, a, b > 0 ? b : 1), span);
  if (kind == "slice") {
    if (!start.terms.empty())
      user_error(span, "index", "a strided slice start must be a constant, got '{}'", start.str());
    return nl::subscript(nl::slice(start.constant, a, b), span);
  }
  return nl::subscript(nl::all, span);
}

nl::tensor index_tensor(const nl::tensor& t, const std::vector<nl::subscript>& s) {
  switch (s.size()) {
    case 1: return t(s[0]);
    case 2: return t(s[0], s[1]);
    case 3: return t(s[0], s[1], s[2]);
    case 4: return t(s[0], s[1], s[2], s[3]);
    case 5: return t(s[0], s[1], s[2], s[3], s[4]);
    case 6: return t(s[0], s[1], s[2], s[3], s[4], s[5]);
  }
  user_error(s.empty() ? Span{} : s[0].span(), "index",
             "{} subscripts given; a tensor has at most 6 dims", s.size());
}

// Runs fn with one tensor per spec inside a trace scope (the C++ neuron::trace, for Python).
Kernel trace_python(const std::string& name, const py::function& fn,
                    const std::vector<TensorSpec>& specs, const Span& span) {
  dsl::TraceScope scope(name, span, dsl::Syntax::python);
  std::vector<nl::tensor> inputs = scope.inputs(specs);
  py::tuple args(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) args[i] = py::cast(inputs[i]);
  py::object r = fn(*args);
  std::optional<std::vector<nl::tensor>> outputs;
  if (py::isinstance<nl::tensor>(r)) {
    outputs = std::vector<nl::tensor>{r.cast<nl::tensor>()};
  } else if (py::isinstance<py::tuple>(r) || py::isinstance<py::list>(r)) {
    outputs = std::vector<nl::tensor>{};
    for (auto item : r) {
      if (!py::isinstance<nl::tensor>(item))
        user_error(span, "kernel-output", "kernel '{}' returned a {} among its outputs", name,
                   std::string(py::str(item.get_type().attr("__name__"))));
      outputs->push_back(item.cast<nl::tensor>());
    }
  } else if (!r.is_none()) {
    user_error(span, "kernel-output",
               "kernel '{}' returned a {}; return nl.ndarray(..., buffer=nl.shared_hbm) tensors "
               "or nothing",
               name, std::string(py::str(r.get_type().attr("__name__"))));
  }
  return scope.finish(outputs);
}

}  // namespace

void init_trace(py::module_& m) {
  py::class_<TensorSpec>(m, "TensorSpec")
      .def(py::init([](std::vector<int64_t> shape, DType dtype, std::string name) {
             return TensorSpec{std::move(shape), dtype, std::move(name)};
           }),
           py::arg("shape"), py::arg("dtype"), py::arg("name") = "")
      .def_readonly("shape", &TensorSpec::shape)
      .def_readonly("dtype", &TensorSpec::dtype)
      .def_readonly("name", &TensorSpec::name);

  py::class_<nl::subscript>(m, "Subscript");
  m.def("subscript", &make_sub);

  py::class_<nl::tensor>(m, "Tensor")
      // A tuple, as in NKI and NumPy (`assert t.shape == (128, 512)`).
      .def_property_readonly("shape",
                             [](const nl::tensor& t) { return py::tuple(py::cast(t.shape())); })
      .def_property_readonly("ndim", &nl::tensor::ndim)
      .def_property_readonly("dtype", &nl::tensor::dtype)
      .def_property_readonly("buffer", &nl::tensor::buffer)
      .def_property_readonly("name", &nl::tensor::name)
      .def("__repr__", [](const nl::tensor& t) {
        if (!t.valid()) return std::string("<nl tensor (empty)>");
        return fmt::format("<nl tensor {} [{}] {} in {}>", t.name(), fmt::join(t.shape(), ", "),
                           dtype_name(t.dtype()), memory_name(t.buffer()));
      });
  m.def("index", &index_tensor);

  m.def("trace", &trace_python, py::arg("name"), py::arg("fn"), py::arg("specs"),
        py::arg("span"));
  m.def("tracing", &dsl::tracing);
  m.def("trace_serial", &dsl::trace_serial);
  // Opens a rolled loop; returns (var, id, extent), extent 0 meaning no loop was opened.
  m.def("open_loop", [](int64_t start, int64_t stop, int64_t step, bool sequential,
                        const Span& span) {
    dsl::require_trace(span);
    int64_t extent = nl::trip_count(start, stop, step, span);
    if (extent == 0) return std::make_tuple(std::string(), -1, int64_t{0});
    auto [var, id] =
        dsl::open_loop(extent, sequential ? LoopKind::sequential : LoopKind::affine, span);
    return std::make_tuple(var, id, extent);
  });
  m.def("close_loop", &dsl::close_loop);
  m.def("seal_segment", &dsl::seal_segment);
  m.def("seal_statements", &dsl::seal_statements);
  m.def("note_returned_input", &dsl::note_returned_input);
  m.def("order_segments", &dsl::order_segments);
  m.def("set_core", &dsl::set_core);
  m.def("writes_shared_and_sharded", &writes_shared_and_sharded);
  m.def("require_trace", &dsl::require_trace);

  // ---- nl ----
  m.def("ndarray", [](std::vector<int64_t> shape, DType dtype, Memory buffer,
                      const std::string& name, const Span& span) {
    return nl::ndarray(std::move(shape), dtype, buffer, name, span);
  });
  m.def("full", [](std::vector<int64_t> shape, double value, DType dtype, Memory buffer,
                   const std::string& name, const Span& span) {
    return nl::full(std::move(shape), value, dtype, buffer, name, span);
  });
  m.def("zeros", [](std::vector<int64_t> shape, DType dtype, Memory buffer,
                    const std::string& name, const Span& span) {
    return nl::zeros(std::move(shape), dtype, buffer, name, span);
  });
  m.def("ones", [](std::vector<int64_t> shape, DType dtype, Memory buffer,
                   const std::string& name, const Span& span) {
    return nl::ones(std::move(shape), dtype, buffer, name, span);
  });
  m.def("zeros_like", [](const nl::tensor& x, std::optional<DType> dtype,
                         std::optional<Memory> buffer, const std::string& name, const Span& span) {
    return nl::zeros_like(x, dtype, buffer, name, span);
  });
  m.def("load", [](const nl::tensor& src, std::optional<DType> dtype, const Span& span) {
    return nl::load(src, dtype, span);
  });
  m.def("store", [](const nl::tensor& dst, const nl::tensor& value, const Span& span) {
    nl::store(dst, value, span);
  });
  m.def("broadcast_to", [](const nl::tensor& x, std::vector<int64_t> shape, const Span& span) {
    return nl::broadcast_to(x, std::move(shape), span);
  });
  m.def("device_print", [](const std::string& prefix, const nl::tensor& x, const Span& span) {
    nl::device_print(prefix, x, span);
  });
  m.def("matmul", [](const nl::tensor& x, const nl::tensor& y, bool transpose_x,
                     const Span& span) { return nl::matmul(x, y, transpose_x, span); });
  m.def("transpose", [](const nl::tensor& x, std::optional<DType> dtype, const Span& span) {
    return nl::transpose(x, dtype, span);
  });
  m.def("copy", [](const nl::tensor& x, std::optional<DType> dtype, const Span& span) {
    return nl::copy(x, dtype, span);
  });
  m.def("unary", [](const std::string& name, const nl::tensor& x, std::optional<DType> dtype,
                    const Span& span) {
    return lookup(unary_fns(), name, "unary")(x, dtype, span);
  });
  m.def("binary", [](const std::string& name, const Operand& x, const Operand& y,
                     std::optional<DType> dtype, const Span& span) {
    return lookup(binary_fns(), name, "binary")(to_operand(x, span), to_operand(y, span), dtype,
                                                span);
  });
  m.def("reduce", [](const std::string& name, const nl::tensor& x, std::vector<int64_t> axis,
                     std::optional<DType> dtype, bool keepdims, const Span& span) {
    return lookup(reduce_fns(), name, "reduction")(x, nl::axes(std::move(axis)), dtype, keepdims,
                                                   span);
  });
  // The names of the element-wise functions (neuron.language defines one object per name).
  m.def("unary_function_names", [] {
    std::vector<std::string> r;
    for (const auto& [name, fn] : unary_fns()) r.push_back(name);
    return r;
  });
  m.def("binary_function_names", [] {
    std::vector<std::string> r;
    for (const auto& [name, fn] : binary_fns()) r.push_back(name);
    return r;
  });
  m.def("where", [](const nl::tensor& c, const Operand& x, const Operand& y,
                    std::optional<DType> dtype, const Span& span) {
    return nl::where(c, to_operand(x, span), to_operand(y, span), dtype, span);
  });
  // t op= x: the C++ compound assignment (an in-place update of t's view).
  m.def("update", [](nl::tensor t, const std::string& op, const Operand& x, const Span& span) {
    nl::operand o = to_operand(x, span);
    if (op == "add") t += o;
    else if (op == "subtract") t -= o;
    else if (op == "multiply") t *= o;
    else if (op == "divide") t /= o;
    else throw py::value_error("unsupported in-place operator " + op);
    return t;
  });
  m.def("program_id", [](int axis, const Span& span) { return nl::program_id(axis, span); });
  m.def("num_programs", [](int axis, const Span& span) { return nl::num_programs(axis, span); });

  // ---- isa (dst first, nothing returned) ----
  m.def("nc_matmul", [](const nl::tensor& dst, const nl::tensor& st, const nl::tensor& mv,
                        int64_t accumulate, const Span& span) {
    isa::nc_matmul(dst, st, mv, accumulate, span);
  });
  m.def("nc_transpose", [](const nl::tensor& dst, const nl::tensor& data, const Span& span) {
    isa::nc_transpose(dst, data, span);
  });
  m.def("nc_transpose_tensor", [](const nl::tensor& dst, const nl::tensor& data,
                                  const Span& span) {
    isa::nc_transpose(dst, data, false, span);
  });
  m.def("nc_transpose_vector", [](const nl::tensor& dst, const nl::tensor& data,
                                  const Span& span) {
    isa::nc_transpose(dst, data, true, span);
  });
  m.def("activation", [](const nl::tensor& dst, const std::string& op, const nl::tensor& data,
                         std::optional<nl::tensor> bias, const Operand& scale,
                         std::optional<std::string> reduce_op,
                         std::optional<nl::tensor> reduce_res, const Span& span) {
    std::optional<isa::alu> rop;
    if (reduce_op) rop = alu_named(*reduce_op);
    isa::activation(dst, act_named(op), data, bias, to_operand(scale, span), rop, reduce_res,
                    span);
  });
  m.def("tensor_tensor", [](const nl::tensor& dst, const nl::tensor& a, const nl::tensor& b,
                            const std::string& op, const Span& span) {
    isa::tensor_tensor(dst, a, b, alu_named(op), span);
  });
  m.def("tensor_tensor_scan", [](const nl::tensor& dst, const nl::tensor& data0,
                                 const nl::tensor& data1, const Operand& initial,
                                 const std::string& op0, const std::string& op1, bool reverse0,
                                 bool reverse1, const Span& span) {
    isa::tensor_tensor_scan(dst, data0, data1, to_operand(initial, span), alu_named(op0),
                            alu_named(op1), reverse0, reverse1, span);
  });
  m.def("tensor_scalar", [](const nl::tensor& dst, const nl::tensor& data, const std::string& op0,
                            const Operand& operand0, bool reverse0,
                            std::optional<std::string> op1, std::optional<Operand> operand1,
                            bool reverse1, const Span& span) {
    std::optional<isa::alu> o1;
    if (op1) o1 = alu_named(*op1);
    std::optional<nl::operand> v1;
    if (operand1) v1 = to_operand(*operand1, span);
    isa::tensor_scalar(dst, data, alu_named(op0), to_operand(operand0, span), reverse0, o1, v1,
                       reverse1, span);
  });
  m.def("tensor_reduce", [](const nl::tensor& dst, const std::string& op, const nl::tensor& data,
                            std::vector<int64_t> axis, bool negate, const Span& span) {
    isa::tensor_reduce(dst, alu_named(op), data, nl::axes(std::move(axis)), negate, span);
  });
  m.def("tensor_partition_reduce", [](const nl::tensor& dst, const std::string& op,
                                      const nl::tensor& data, const Span& span) {
    isa::tensor_partition_reduce(dst, alu_named(op), data, span);
  });
  m.def("max8", [](const nl::tensor& dst, const nl::tensor& src, const Span& span) {
    isa::max8(dst, src, span);
  });
  m.def("nc_find_index8", [](const nl::tensor& dst, const nl::tensor& data,
                             const nl::tensor& vals, const Span& span) {
    isa::nc_find_index8(dst, data, vals, span);
  });
  m.def(
      "nc_match_replace8",
      [](const nl::tensor& dst, const nl::tensor& data, const nl::tensor& vals, double imm,
         const Span& span, const std::optional<nl::tensor>& dst_idx) {
        if (dst_idx)
          isa::nc_match_replace8(dst, data, vals, imm, *dst_idx, span);
        else
          isa::nc_match_replace8(dst, data, vals, imm, span);
      },
      py::arg("dst"), py::arg("data"), py::arg("vals"), py::arg("imm"), py::arg("span"),
      py::arg("dst_idx") = py::none());
  m.def("bn_stats", [](const nl::tensor& dst, const nl::tensor& data, const Span& span) {
    isa::bn_stats(dst, data, span);
  });
  m.def("bn_aggr", [](const nl::tensor& dst, const nl::tensor& data, const Span& span) {
    isa::bn_aggr(dst, data, span);
  });
  m.def("nc_stream_shuffle", [](const nl::tensor& dst, const nl::tensor& src,
                                std::vector<int64_t> mask, const Span& span) {
    isa::nc_stream_shuffle(dst, src, std::move(mask), span);
  });
  m.def("tensor_copy", [](const nl::tensor& dst, const nl::tensor& src, const Span& span) {
    isa::tensor_copy(dst, src, span);
  });
  m.def("tensor_copy_predicated", [](const nl::tensor& dst, const nl::tensor& src,
                                     const nl::tensor& pred, const Span& span) {
    isa::tensor_copy_predicated(dst, src, pred, span);
  });
  m.def("memset", [](const nl::tensor& dst, double value, const Span& span) {
    isa::memset(dst, value, span);
  });
  // Eager mode's hand-over of PSUM "written by matmul" flags between its one-op kernels
  // (ops.hpp psum_flags_set/get): executor state, not NKI instructions.
  m.def("_psum_flags_set", [](const nl::tensor& dst, const nl::tensor& flags, const Span& span) {
    dsl::require_trace(span);
    dsl::emit(Opcode::psum_flags_set, {{"dst", dst.access()}, {"flags", flags.access()}}, span);
  });
  m.def("_psum_flags_get", [](const nl::tensor& dst, const nl::tensor& src, const Span& span) {
    dsl::require_trace(span);
    dsl::emit(Opcode::psum_flags_get, {{"dst", dst.access()}, {"src", src.access()}}, span);
  });
  m.def("iota", [](const nl::tensor& dst, const isa::pattern& pattern, int64_t offset,
                   int64_t channel_multiplier, const Span& span) {
    isa::iota(dst, pattern, offset, channel_multiplier, span);
  });
  m.def("affine_select", [](const nl::tensor& dst, const isa::pattern& pattern,
                            int64_t channel_multiplier, const nl::tensor& on_true,
                            double on_false, const std::string& cmp_op, int64_t offset,
                            const Span& span) {
    isa::affine_select(dst, pattern, channel_multiplier, on_true, on_false, alu_named(cmp_op),
                       offset, span);
  });
  m.def("dma_copy", [](const nl::tensor& dst, const nl::tensor& src, const Span& span) {
    isa::dma_copy(dst, src, span);
  });
  m.def("dma_copy_oob", [](const nl::tensor& dst, const nl::tensor& src, nl::oob_mode oob,
                           const Span& span) { isa::dma_copy(dst, src, oob, span); });
}

}  // namespace neuron::python
