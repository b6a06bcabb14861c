// Fresh tiles, numpy broadcasting as step-0 views, and operand values for the DSL ops.
#include "neuron/dsl/emit.hpp"

#include <algorithm>
#include <cmath>

namespace neuron::dsl {

namespace {

std::string shape_text(const std::vector<int64_t>& s) {
  return fmt::format("[{}]", fmt::join(s, ", "));
}

}  // namespace

const Access& view_of(const nl::tensor& t, const Span& span) {
  if (!t.valid())
    user_error(span, "empty-handle", "use of a default-constructed nl::tensor handle");
  return t.access();
}

nl::tensor new_tile(std::vector<int64_t> shape, DType dtype, Memory memory, const Span& span,
                    const std::string& name) {
  return nl::tensor(Access::whole(new_buffer(name, memory, std::move(shape), dtype, span)));
}

std::vector<int64_t> broadcast_shape(const std::vector<std::vector<int64_t>>& shapes,
                                     const Span& span, bool pad_ranks) {
  if (shapes.empty()) internal_error("broadcast_shape of no shapes");
  size_t rank = 0;
  for (auto& s : shapes) rank = std::max(rank, s.size());
  std::vector<int64_t> out = shapes.front();
  if (pad_ranks) out.insert(out.begin(), rank - out.size(), 1);
  for (auto s : shapes) {
    if (pad_ranks) s.insert(s.begin(), rank - s.size(), 1);
    if (s.size() != out.size())
      user_error(span, "broadcast",
                 "operands of shapes {} and {} have different ranks; tiles broadcast only "
                 "between equal ranks (size-1 dims expand)",
                 shape_text(shapes.front()), shape_text(s));
    for (size_t d = 0; d < s.size(); ++d) {
      if (s[d] == out[d] || s[d] == 1) continue;
      if (out[d] == 1) {
        out[d] = s[d];
        continue;
      }
      std::vector<std::string> all;
      for (auto& t : shapes) all.push_back(shape_text(t));
      user_error(span, "broadcast", "shapes {} do not broadcast (dim {}: {} vs {})",
                 fmt::join(all, " and "), d, out[d], s[d]);
    }
  }
  return out;
}

Access broadcast_view(const Access& a, const std::vector<int64_t>& shape, const Span& span) {
  Access out = a;
  std::vector<int64_t> have = a.shape();
  if (have.size() != shape.size())
    user_error(span, "broadcast", "cannot broadcast '{}' of shape {} to {}: ranks differ",
               a.buffer->name, shape_text(have), shape_text(shape));
  size_t k = 0;
  for (size_t s : a.kept()) {
    DimSlice& d = out.dims[s];
    if (d.size != shape[k]) {
      if (d.size != 1)
        user_error(span, "broadcast", "cannot broadcast '{}' of shape {} to {} (dim {})",
                   a.buffer->name, shape_text(have), shape_text(shape), k);
      d.size = shape[k];
      d.step = 0;
    }
    ++k;
  }
  return out;
}

Value operand_value(const nl::operand& x, const std::vector<int64_t>& shape, const Span& span) {
  if (!x.is_tile()) return x.scalar();
  return broadcast_view(view_of(x.tile(), span), shape, span);
}

Value fill_value(double v, DType dtype) {
  if (!dtype_is_float(dtype) && std::nearbyint(v) == v) return static_cast<int64_t>(v);
  return v;
}

}  // namespace neuron::dsl
