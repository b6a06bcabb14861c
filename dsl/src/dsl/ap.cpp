// NKI's access patterns (t.ap(...)): an explicit [[stride, count], ...] walk over a tensor's
// storage, mapped onto one slice per buffer dim so that it is an ordinary view (language.hpp).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <functional>

#include "neuron/dsl/builder.hpp"
#include "neuron/dsl/emit.hpp"
#include "neuron/language.hpp"

namespace neuron::nl {

namespace {

using Pattern = std::vector<std::pair<int64_t, int64_t>>;

std::string pattern_str(const Pattern& p) {
  std::vector<std::string> parts;
  for (auto& [s, c] : p) parts.push_back(fmt::format("[{}, {}]", s, c));
  return fmt::format("[{}]", fmt::join(parts, ", "));
}

tensor index_n(const tensor& t, const std::vector<subscript>& s) {
  switch (s.size()) {
    case 1: return t(s[0]);
    case 2: return t(s[0], s[1]);
    case 3: return t(s[0], s[1], s[2]);
    case 4: return t(s[0], s[1], s[2], s[3]);
    case 5: return t(s[0], s[1], s[2], s[3], s[4]);
    default: return t(s[0], s[1], s[2], s[3], s[4], s[5]);
  }
}

// A pattern's view of storage seen with row-major shape S: a subscript per dim of S, or why
// there is none.
struct Mapping {
  std::vector<subscript> subs;
  bool broadcast = false;  // some entry has stride 0
  std::vector<int> order;  // the dim each entry walks, when not in storage order
  std::string error;
};

// `off` counts elements of the buffer; on chip a partition is `part` of them (the buffer's
// elements per partition), whatever S's free dims hold.
Mapping map_pattern(const std::vector<int64_t>& S, const index& off, const Pattern& pattern,
                    bool on_chip, int64_t part, Memory memory, const Span& span) {
  Mapping m;
  const size_t n = S.size();
  std::vector<int64_t> R = row_strides(S);
  if (on_chip) R[0] = part;
  auto fail = [&](std::string why) {
    m.error = std::move(why);
    return m;
  };
  // The offset as per-dim starts: its constant in mixed radix, each symbolic term (loop index,
  // program id, register) on the outermost dim whose stride divides its coefficient.
  std::vector<index> start(n, index(0));
  int64_t c = off.constant;
  for (size_t k = 0; k < n; ++k) {
    start[k] = c / R[k];
    c %= R[k];
    if (start[k].constant >= S[k] && k > 0)
      return fail(fmt::format("the offset {} lies outside the storage", off.constant));
  }
  for (auto& term : off.terms) {
    size_t k = 0;
    while (term.coeff % R[k] != 0) ++k;  // R[n - 1] == 1 divides everything
    start[k] = start[k] + index::var(term.var, term.coeff / R[k]);
  }
  if (pattern.size() > n)
    return fail(fmt::format("the pattern has {} entries; each walks one of the {} dims of the "
                            "storage",
                            pattern.size(), n));
  std::vector<int> dim_of(pattern.size(), -1);
  std::vector<int64_t> step_of(pattern.size(), 1);
  std::vector<int> walker(n, -1);  // the entry walking each dim
  // Entries with a count > 1 take dims in order where they can: the first (outermost) free dim
  // after the previous entry's whose stride divides theirs and inside which they stay, else
  // such a dim before it (a transposing walk: the view's dims leave storage order).
  size_t next = 0;
  auto take = [&](size_t j, auto&& fits) {
    for (size_t k = next; k < n && dim_of[j] < 0; ++k)
      if (walker[k] < 0 && fits(k)) dim_of[j] = static_cast<int>(k);
    for (size_t k = 0; k < next && dim_of[j] < 0; ++k)
      if (walker[k] < 0 && fits(k)) dim_of[j] = static_cast<int>(k);
    if (dim_of[j] >= 0) {
      walker[static_cast<size_t>(dim_of[j])] = static_cast<int>(j);
      next = static_cast<size_t>(dim_of[j]) + 1;
    }
    return dim_of[j] >= 0;
  };
  for (size_t j = 0; j < pattern.size(); ++j) {
    auto [st, cnt] = pattern[j];
    if (on_chip && j == 0) {
      if (cnt > 1 && st != R[0])
        return fail(fmt::format("on {} the first entry walks the partitions, so its stride must "
                                "be {} (the elements per partition), got {}",
                                memory_name(memory), R[0], st));
      dim_of[0] = walker[0] = 0;
      next = 1;
      continue;
    }
    if (cnt == 1) continue;
    if (st == 0) {  // a broadcast: the entry repeats a size-1 dim (a view for reading)
      if (!take(j, [&](size_t k) { return S[k] == 1; }))
        return fail(fmt::format("entry {} [0, {}] repeats an element, which needs a size-1 dim "
                                "of the storage to repeat",
                                j, cnt));
      step_of[j] = 0;
      m.broadcast = true;
      continue;
    }
    if (!take(j, [&](size_t k) {  // (from a constant start: the walk must not leave the dim)
          const int64_t first = start[k].is_constant() ? start[k].constant : 0;
          return st > 0 && st % R[k] == 0 && first + (st / R[k]) * (cnt - 1) < S[k];
        }))
      return fail(fmt::format("entry {} [{}, {}] walks no single dim: its stride must be a "
                              "positive multiple of one dim's stride ([{}]) and stay inside that "
                              "dim",
                              j, st, cnt, fmt::join(R, ", ")));
    step_of[j] = st / R[static_cast<size_t>(dim_of[j])];
  }
  // Count-1 entries keep an unwalked dim (size 1), between their neighbours' dims if one is.
  for (size_t j = 0; j < pattern.size(); ++j) {
    if (dim_of[j] >= 0) continue;
    int lo = 0, hi = static_cast<int>(n);
    for (size_t i = 0; i < j; ++i) lo = std::max(lo, dim_of[i] + 1);
    for (size_t i = j + 1; i < pattern.size(); ++i)
      if (dim_of[i] >= 0) hi = std::min(hi, dim_of[i]);
    for (int k = lo; k < hi && dim_of[j] < 0; ++k)
      if (walker[static_cast<size_t>(k)] < 0) dim_of[j] = k;
    for (int k = 0; k < static_cast<int>(n) && dim_of[j] < 0; ++k)
      if (walker[static_cast<size_t>(k)] < 0) dim_of[j] = k;
    if (dim_of[j] < 0)
      return fail(fmt::format("entry {} [{}, 1] has no dim left to keep as size 1", j,
                              pattern[j].first));
    walker[static_cast<size_t>(dim_of[j])] = static_cast<int>(j);
  }
  if (!std::is_sorted(dim_of.begin(), dim_of.end())) m.order = dim_of;

  for (size_t k = 0; k < n; ++k) {
    const int j = walker[k];
    if (j < 0) {
      m.subs.emplace_back(start[k], span);
      continue;
    }
    const int64_t cnt = pattern[static_cast<size_t>(j)].second;
    const int64_t step = step_of[static_cast<size_t>(j)];
    if (step == 0) {
      m.subs.emplace_back(ds(start[k], 1), span);  // broadcast below
    } else if (step == 1 || cnt == 1) {
      m.subs.emplace_back(ds(start[k], cnt), span);
    } else {
      if (!start[k].is_constant())
        return fail(fmt::format("dim {} is walked with step {} from '{}'; a strided walk needs a "
                                "constant start",
                                k, step, start[k].str()));
      const int64_t s0 = start[k].constant;
      m.subs.emplace_back(slice(s0, s0 + step * (cnt - 1) + 1, step), span);
    }
  }
  return m;
}

// A row-major shape of the elements from `origin` on (of `total`; on chip `partitions` rows kept
// and `origin` counted per partition) with one dim per pattern entry: the walking entries'
// strides, largest first (each dim the entry of that stride; the outermost as long as the
// elements allow, its last step possibly partial), a last dim of stride 1 for what remains, and a size-1 dim for each count-1
// or repeating (stride 0) entry. The shape in which a pattern that splits or merges the
// buffer's dims walks one dim per entry; empty when the strides do not nest (each a multiple of
// the next) or repeat.
std::vector<int64_t> pattern_storage(int64_t total, int64_t partitions, const Pattern& pattern,
                                     bool on_chip, int64_t origin) {
  std::vector<int64_t> strides;
  size_t size_one = 0;  // count-1 and repeating entries: a size-1 dim each
  for (size_t j = on_chip ? 1 : 0; j < pattern.size(); ++j) {
    auto [st, cnt] = pattern[j];
    if (cnt == 1 || st == 0) ++size_one;
    else if (st > 0) strides.push_back(st);
    else return {};
  }
  std::sort(strides.begin(), strides.end(), std::greater<>());
  if (std::adjacent_find(strides.begin(), strides.end()) != strides.end()) return {};  // overlap
  std::vector<int64_t> shape;
  int64_t outer = total;  // the elements (per partition) from the origin on, then each stride
  if (on_chip) {
    shape.push_back(partitions);
    outer = total / partitions;
  }
  outer -= origin;
  for (size_t i = 0; i < strides.size(); ++i) {
    const int64_t st = strides[i];
    if (st > outer || (i > 0 && outer % st != 0)) return {};
    // The outermost dim: as many strides as start inside the elements (its last one may run
    // past their end; the verifier checks the elements the view touches).
    shape.push_back(i == 0 ? (outer + st - 1) / st : outer / st);
    outer = st;
  }
  if (outer > 1) shape.push_back(outer);
  shape.insert(shape.end(), size_one, 1);
  return shape;
}

// The view of `base` (a whole buffer, or a whole tile read as another dtype: its storage then
// counts that dtype's elements) walking `pattern` from element `off`.
tensor walk(const Access& base, const Pattern& pattern, index off, const Span& span,
            const std::function<void(const std::string&)>& fail) {
  const Buffer& b = *base.buffer;
  const std::vector<int64_t>& S = base.storage_shape();
  const std::vector<int64_t> R = row_strides(S);
  const bool on_chip = is_on_chip(b.memory);
  int64_t total = 1;
  for (int64_t d : S) total *= d;
  if (off.constant < 0) fail(fmt::format("the offset {} is negative", off.constant));
  if (!on_chip && off.constant >= total)
    fail(fmt::format("the offset {} is past the last of its {} elements", off.constant, total));
  if (pattern.empty()) fail("the pattern is empty");
  for (size_t j = 0; j < pattern.size(); ++j)
    if (pattern[j].second < 1)
      fail(fmt::format("entry {} has count {}; counts are positive", j, pattern[j].second));

  // In the storage's own shape when the pattern walks one dim per entry there, else in the
  // shape whose dims are the pattern's strides (a split or merge of dims; Access::storage):
  // from the storage's first element, or from the offset's (its constant part, per partition on
  // chip) when the walk does not start on that shape's dim boundaries.
  Access whole = base;
  Mapping m = map_pattern(S, off, pattern, on_chip, R[0], b.memory, span);
  if (!m.error.empty()) {
    const int64_t from = on_chip ? off.constant % R[0] : off.constant;
    std::vector<int64_t> origins{0};
    if (from != 0) origins.push_back(from);
    Mapping split;
    std::vector<int64_t> shape;
    for (int64_t origin : origins) {
      std::vector<int64_t> s = pattern_storage(total, S[0], pattern, on_chip, origin);
      if (s.empty() || (s == S && origin == 0)) continue;
      index rest = off;
      rest.constant -= origin;
      Mapping tried = map_pattern(s, rest, pattern, on_chip, R[0], b.memory, span);
      if (!tried.error.empty()) continue;
      split = std::move(tried);
      shape = std::move(s);
      whole.origin = origin;
      break;
    }
    if (shape.empty())
      fail(m.error + "; nor does it walk one dim per entry of any reshape of the storage (that "
                     "needs strides that nest, each a multiple of the next smaller one, and "
                     "entries that stay inside their dims without overlapping)");
    m = std::move(split);
    whole.storage = shape;
    whole.dims.clear();
    for (auto d : shape) whole.dims.push_back(DimSlice{Affine(0), d, 1, true});
  }
  tensor view = index_n(tensor(whole), m.subs);
  if (!m.order.empty()) {  // the view's dims in entry order (ir.hpp Access::order)
    Access a = view.access();
    a.order = m.order;
    a.normalize_order();
    view = tensor(std::move(a));
  }
  if (!m.broadcast) return view;
  // One view dim per entry, in order: the stride-0 ones repeat their size-1 dim.
  std::vector<int64_t> shape;
  for (auto& [st, cnt] : pattern) shape.push_back(cnt);
  return tensor(dsl::broadcast_view(dsl::view_of(view, span), shape, span));
}

// t's first element, counted in the storage of its buffer (R: that storage's row strides).
index first_element(const Access& v, const std::vector<int64_t>& R, bool on_chip) {
  std::vector<int64_t> RV = row_strides(v.storage_shape());
  if (on_chip) RV[0] = R[0];
  index off = index(v.origin);
  for (size_t k = 0; k < v.dims.size(); ++k) off = off + v.dims[k].start * RV[k];
  return off;
}

}  // namespace

tensor ap(const tensor& t, const std::vector<std::pair<int64_t, int64_t>>& pattern,
          std::optional<index> offset, std::optional<index> scalar_offset, int64_t indirect_dim,
          Span span) {
  dsl::require_trace(span);
  const Access& v = dsl::view_of(t, span);
  const Buffer& b = *v.buffer;
  const std::vector<int64_t>& S = b.shape;
  const size_t n = S.size();
  auto fail = [&](const std::string& why) {
    user_error(span, "access-pattern", "ap({}) of '{}' (storage shape [{}]): {}",
               pattern_str(pattern), b.name, fmt::join(S, ", "), why);
  };
  const std::vector<int64_t> R = row_strides(S);
  const bool on_chip = is_on_chip(b.memory);
  if (v.as_dtype)
    fail(fmt::format("it is read as {}; call ap(..., dtype=...) on the tile itself",
                     dtype_name(*v.as_dtype)));
  index off = offset ? *offset : first_element(v, R, on_chip);
  if (scalar_offset) {
    if (indirect_dim < 0 || indirect_dim >= static_cast<int64_t>(n))
      fail(fmt::format("indirect_dim {} is not a dim of the storage (0..{})", indirect_dim, n - 1));
    off = off + *scalar_offset * R[static_cast<size_t>(indirect_dim)];
  }
  return walk(Access::whole(v.buffer), pattern, off, span, fail);
}

tensor ap_as(const tensor& t, DType dtype, const std::vector<std::pair<int64_t, int64_t>>& pattern,
             std::optional<index> offset, Span span) {
  dsl::require_trace(span);
  const Access& v = dsl::view_of(t, span);
  const Buffer& b = *v.buffer;
  auto fail = [&](const std::string& why) {
    user_error(span, "access-pattern", "ap({}, dtype={}) of '{}' ({}[{}] in {}): {}",
               pattern_str(pattern), dtype_name(dtype), b.name, dtype_name(b.dtype),
               fmt::join(b.shape, ", "), memory_name(b.memory), why);
  };
  if (!is_on_chip(b.memory))
    fail("reinterpreting views of HBM tensors are DMA operands (the Python layer's BitcastView)");
  if (v.as_dtype) fail("it is already read as another dtype; call it on the tile itself");
  const int64_t row_bytes = b.free_elements() * dtype_bytes(b.dtype), size = dtype_bytes(dtype);
  if (row_bytes % size != 0)
    fail(fmt::format("a partition holds {} bytes, not a whole number of {}-byte elements",
                     row_bytes, size));
  // Each partition's bytes as row_bytes / size elements of dtype: pattern and offset count them.
  Access base = Access::whole(v.buffer);
  base.as_dtype = dtype;
  base.storage = {b.shape[0], row_bytes / size};
  base.dims = {DimSlice{Affine(0), b.shape[0], 1, true},
               DimSlice{Affine(0), row_bytes / size, 1, true}};
  index off = 0;
  if (offset) {
    off = *offset;
  } else {  // t's first element: a whole number of dtype elements into its partition
    const std::vector<int64_t> R = row_strides(b.shape);
    index first = first_element(v, R, true);
    const int64_t es = dtype_bytes(b.dtype);
    bool whole_elements = true;
    for (auto& term : first.terms) whole_elements &= (term.coeff * es) % size == 0;
    const int64_t in_row = first.constant % R[0];
    whole_elements &= (in_row * es) % size == 0;
    if (!whole_elements)
      fail(fmt::format("the view starts at '{}' {} elements, not on a {} element boundary; pass "
                       "offset=", first.str(), dtype_name(b.dtype), dtype_name(dtype)));
    // Partition p's element j of the tile is byte j * es of its row: in dtype elements, the
    // partition part keeps the new row length.
    off = index(first.constant / R[0] * (row_bytes / size) + in_row * es / size);
    for (auto& term : first.terms) {
      const int64_t c = term.coeff % R[0] == 0 ? term.coeff / R[0] * (row_bytes / size)
                                               : term.coeff * es / size;
      off = off + index::var(term.var, c);
    }
  }
  return walk(base, pattern, off, span, fail);
}

}  // namespace neuron::nl
