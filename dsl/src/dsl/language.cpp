// neuron::nl: allocation, data movement, matmul/transpose, reductions and program ids.
// Element-wise functions and operators are in elementwise.cpp.
#include "neuron/language.hpp"

#include <algorithm>

#include "neuron/dsl/emit.hpp"

namespace neuron::nl {

using dsl::view_of;

namespace {

tensor fill(std::vector<int64_t> shape, double value, DType dtype, Memory buffer,
            const std::string& name, const Span& span) {
  dsl::require_trace(span);
  if (!is_on_chip(buffer))
    user_error(span, "hbm-init",
               "HBM tensors cannot be created with an initial value (buffer {}); create it with "
               "{} and store into it",
               memory_name(buffer), dsl::spell("nl::ndarray", "nl.ndarray"));
  tensor t = dsl::new_tile(std::move(shape), dtype, buffer, span, name);
  dsl::emit(Opcode::memset, {{"dst", t.access()}, {"value", dsl::fill_value(value, dtype)}}, span);
  return t;
}

std::string shape_text(const std::vector<int64_t>& s) {
  return fmt::format("[{}]", fmt::join(s, ", "));
}

}  // namespace

tensor ndarray(std::vector<int64_t> shape, DType dtype, Memory buffer, const std::string& name,
               Span span) {
  dsl::require_trace(span);
  return dsl::new_tile(std::move(shape), dtype, buffer, span, name);
}

tensor zeros(std::vector<int64_t> shape, DType dtype, Memory buffer, const std::string& name,
             Span span) {
  return fill(std::move(shape), 0.0, dtype, buffer, name, span);
}

tensor ones(std::vector<int64_t> shape, DType dtype, Memory buffer, const std::string& name,
            Span span) {
  return fill(std::move(shape), 1.0, dtype, buffer, name, span);
}

tensor full(std::vector<int64_t> shape, double fill_value, DType dtype, Memory buffer,
            const std::string& name, Span span) {
  return fill(std::move(shape), fill_value, dtype, buffer, name, span);
}

tensor zeros_like(const tensor& x, std::optional<DType> dtype, std::optional<Memory> buffer,
                  const std::string& name, Span span) {
  dsl::require_trace(span);
  const Access& v = view_of(x, span);
  return fill(v.shape(), 0.0, dtype.value_or(x.dtype()), buffer.value_or(x.buffer()), name, span);
}

tensor load(const tensor& src, std::optional<DType> dtype, Span span) {
  dsl::require_trace(span);
  const Access& v = view_of(src, span);
  tensor dst = dsl::new_tile(v.shape(), dtype.value_or(src.dtype()), Memory::sbuf, span);
  dsl::emit(Opcode::nl_load, {{"dst", dst.access()}, {"src", v}}, span);
  return dst;
}

void store(const tensor& dst, const tensor& value, Span span) {
  dsl::require_trace(span);
  const Access& d = view_of(dst, span);
  Access src = dsl::broadcast_view(view_of(value, span), d.shape(), span);
  dsl::emit(Opcode::nl_store, {{"dst", d}, {"src", std::move(src)}}, span);
}

tensor broadcast_to(const tensor& x, std::vector<int64_t> shape, Span span) {
  dsl::require_trace(span);
  Access src = dsl::broadcast_view(view_of(x, span), shape, span);
  tensor dst = dsl::new_tile(std::move(shape), x.dtype(), Memory::sbuf, span);
  dsl::emit(Opcode::nl_copy, {{"dst", dst.access()}, {"src", std::move(src)}}, span);
  return dst;
}

void device_print(const std::string& prefix, const tensor& x, Span span) {
  dsl::require_trace(span);
  dsl::emit(Opcode::device_print, {{"src", view_of(x, span)}, {"prefix", prefix}}, span);
}

tensor matmul(const tensor& x, const tensor& y, bool transpose_x, Span span) {
  dsl::require_trace(span);
  auto xs = view_of(x, span).shape(), ys = view_of(y, span).shape();
  if (xs.size() != 2 || ys.size() != 2)
    user_error(span, "matmul-rank", "{} takes 2-D tiles, got x {} and y {}",
               dsl::spell("nl::matmul", "nl.matmul"), shape_text(xs), shape_text(ys));
  int64_t m = transpose_x ? xs[1] : xs[0];
  int64_t k = transpose_x ? xs[0] : xs[1];
  if (k != ys[0])
    user_error(span, "matmul-shape",
               "contraction sizes differ: x {}{} contracts over {} but y {} has {} rows",
               shape_text(xs), transpose_x ? " (transpose_x)" : "", k, shape_text(ys), ys[0]);
  tensor dst = dsl::new_tile({m, ys[1]}, DType::float32, Memory::psum, span);
  dsl::emit(Opcode::nl_matmul,
            {{"dst", dst.access()},
             {"x", x.access()},
             {"y", y.access()},
             {"transpose_x", int64_t{transpose_x ? 1 : 0}}},
            span);
  return dst;
}

tensor transpose(const tensor& x, std::optional<DType> dtype, Span span) {
  dsl::require_trace(span);
  auto xs = view_of(x, span).shape();
  if (xs.size() != 2)
    user_error(span, "transpose-rank", "{} takes a 2-D tile, got {}",
               dsl::spell("nl::transpose", "nl.transpose"), shape_text(xs));
  tensor dst = dsl::new_tile({xs[1], xs[0]}, dtype.value_or(x.dtype()), Memory::psum, span);
  dsl::emit(Opcode::nl_transpose, {{"dst", dst.access()}, {"src", x.access()}}, span);
  return dst;
}

Reduction reduction(const std::vector<int64_t>& xs, const std::vector<int64_t>& axes,
                    bool keepdims, const Span& span) {
  const int64_t rank = static_cast<int64_t>(xs.size());
  std::vector<int64_t> ax;
  for (int64_t a : axes) {
    int64_t n = a < 0 ? a + rank : a;
    if (n == 0)
      user_error(span, "reduce-axis",
                 "cannot reduce over axis {} of {}: axis 0 is the partition dimension; "
                 "reductions run over free axes only",
                 a, shape_text(xs));
    if (n < 0 || n >= rank)
      user_error(span, "reduce-axis", "axis {} is out of range for a tile of shape {}", a,
                 shape_text(xs));
    if (std::find(ax.begin(), ax.end(), n) != ax.end())
      user_error(span, "reduce-axis", "axis {} is listed twice", a);
    ax.push_back(n);
  }
  if (ax.empty()) user_error(span, "reduce-axis", "no reduction axis given");
  std::sort(ax.begin(), ax.end());
  Reduction r;
  r.axes = ax;
  r.shape = xs;
  for (auto a : ax) r.shape[a] = 1;
  // Drop reduced dims, keeping the last ones as size 1 when fewer than 2 dims would remain.
  size_t can_drop = keepdims ? 0 : ax.size();
  while (can_drop > 0 && xs.size() - can_drop < 2) --can_drop;
  for (int64_t d = 0; d < rank; ++d)
    if (std::find(ax.begin(), ax.begin() + can_drop, d) == ax.begin() + can_drop)
      r.kept.push_back(d);
  return r;
}

tensor reduce_fn::operator()(const tensor& x, axes axis, std::optional<DType> dtype, bool keepdims,
                             Span span) const {
  dsl::require_trace(span);
  Reduction r = reduction(view_of(x, span).shape(), axis.list, keepdims, span);
  DType out = dtype.value_or(x.dtype());
  if (!dtype && std::string_view(op) == "mean" && !dtype_is_float(x.dtype())) out = DType::float32;
  tensor dst = dsl::new_tile(r.shape, out, Memory::sbuf, span);
  dsl::emit(Opcode::nl_reduce,
            {{"dst", dst.access()}, {"x", x.access()}, {"op", std::string(op)}, {"axes", r.axes}},
            span);
  Access view = dst.access();
  for (size_t d = 0; d < view.dims.size(); ++d)
    view.dims[d].keep = std::find(r.kept.begin(), r.kept.end(), int64_t(d)) != r.kept.end();
  return tensor(std::move(view));
}

index program_id(int axis, Span span) {
  dsl::require_trace(span);
  if (axis < 0 || axis > 3)
    user_error(span, "program-axis", "program_id axis must be 0..3, got {}", axis);
  return index::var(program_id_var(axis));
}

index num_programs(int axis, Span span) {
  dsl::require_trace(span);
  if (axis < 0 || axis > 3)
    user_error(span, "program-axis", "num_programs axis must be 0..3, got {}", axis);
  return index::var(num_programs_var(axis));
}

}  // namespace neuron::nl
