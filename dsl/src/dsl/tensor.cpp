// nl::tensor accessors and numpy-style indexing of views (NKI rules for on-chip tiles).
#include "neuron/dsl/tensor.hpp"

#include "neuron/dsl/builder.hpp"

namespace neuron::nl {

namespace {

const Buffer& buffer_of(const Access& a) {
  if (!a.buffer)
    user_error(Span{}, "empty-handle", "use of a default-constructed nl::tensor handle");
  return *a.buffer;
}

}  // namespace

DType tensor::dtype() const {
  return view_.dtype();
}
Memory tensor::buffer() const {
  return buffer_of(view_).memory;
}
const std::string& tensor::name() const {
  return buffer_of(view_).name;
}

tensor tensor::operator()(subscript s0, subscript s1) const {
  return index_with({s0, s1});
}
tensor tensor::operator()(subscript s0, subscript s1, subscript s2) const {
  return index_with({s0, s1, s2});
}
tensor tensor::operator()(subscript s0, subscript s1, subscript s2, subscript s3) const {
  return index_with({s0, s1, s2, s3});
}
tensor tensor::operator()(subscript s0, subscript s1, subscript s2, subscript s3,
                          subscript s4) const {
  return index_with({s0, s1, s2, s3, s4});
}
tensor tensor::operator()(subscript s0, subscript s1, subscript s2, subscript s3, subscript s4,
                          subscript s5) const {
  return index_with({s0, s1, s2, s3, s4, s5});
}

// Subscripts apply to the view's kept dims in order (so views of views compose). A scalar
// subscript selects one element: on HBM the dim is dropped; on chip (NKI rule) the partition
// dim stays with size 1, and a free dim is dropped unless that would leave fewer than 2 dims,
// in which case the last scalar-indexed free dims stay as size 1.
tensor tensor::index_with(const std::vector<subscript>& subs) const {
  const Span& span = subs.front().span();
  dsl::require_trace(span);
  const Buffer& buf = buffer_of(view_);
  const std::vector<size_t> kept = view_.kept();  // positions in view_.dims of the view's dims
  if (subs.size() > kept.size())
    user_error(span, "index", "{} subscripts given for '{}' of shape [{}] ({} dims)", subs.size(),
               buf.name, fmt::join(shape(), ", "), kept.size());

  Access out = view_;
  std::vector<size_t> dropped;  // positions indexed by a scalar, candidates for dropping
  for (size_t k = 0; k < subs.size(); ++k) {
    const subscript& s = subs[k];
    DimSlice& d = out.dims[kept[k]];
    int64_t n = d.size;
    // An empty slice (size 0) is a view like any other (NKI code takes `nl.ds(offset, 0)` of a
    // shard that a core does not own); only an instruction that uses it is an error (verify.cpp).
    auto check_range = [&](const index& start, int64_t size) {
      if (size < 0)
        user_error(s.span(), "index", "dim {} of '{}': slice size must not be negative, got {}",
                   k, buf.name, size);
      if (start.is_constant() && (start.constant < 0 || start.constant + size > n))
        user_error(s.span(), "index",
                   "dim {} of '{}' has size {}; subscript covers [{}, {}) which is out of range", k,
                   buf.name, n, start.constant, start.constant + size);
    };
    switch (s.kind()) {
      case subscript::Kind::all:
        break;
      case subscript::Kind::scalar:
        check_range(s.start(), 1);
        d.start = d.start + s.start() * d.step;
        d.size = 1;
        d.step = 1;
        dropped.push_back(kept[k]);
        break;
      case subscript::Kind::ds:
        if (s.step() <= 0)
          user_error(s.span(), "index", "dim {} of '{}': slice step must be positive, got {}", k,
                     buf.name, s.step());
        check_range(s.start(), s.size() > 0 ? (s.size() - 1) * s.step() + 1 : s.size());
        d.start = d.start + s.start() * d.step;
        d.size = s.size();
        d.step = d.step * s.step();
        break;
      case subscript::Kind::slice: {
        const slice_t& sl = s.slice();
        if (sl.step <= 0)
          user_error(s.span(), "index", "dim {} of '{}': slice step must be positive, got {}", k,
                     buf.name, sl.step);
        int64_t size = sl.stop > sl.start ? (sl.stop - sl.start + sl.step - 1) / sl.step : 0;
        if (sl.start < 0 || sl.start > n || (size > 0 && sl.stop > n))
          user_error(s.span(), "index", "dim {} of '{}' has size {}; slice {}:{} is out of range",
                     k, buf.name, n, sl.start, sl.stop);
        d.start = d.start + index(sl.start) * d.step;
        d.size = size;
        d.step = d.step * sl.step;
        break;
      }
    }
  }

  bool on_chip = is_on_chip(buf.memory);
  for (size_t pos : dropped)
    if (!(on_chip && pos == 0)) out.dims[pos].keep = false;
  // Never fall below 2 dims on chip (1 dim on HBM): re-keep the last dropped dims.
  size_t min_rank = on_chip ? 2 : 1;
  auto rank = [&] {
    size_t r = 0;
    for (auto& d : out.dims) r += d.keep;
    return r;
  };
  for (auto it = dropped.rbegin(); it != dropped.rend() && rank() < min_rank; ++it)
    out.dims[*it].keep = true;
  out.normalize_order();
  return tensor(std::move(out));
}

}  // namespace neuron::nl
