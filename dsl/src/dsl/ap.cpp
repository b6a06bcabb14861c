// NKI's access patterns (t.ap(...)): an explicit [[stride, count], ...] walk over a tensor's
// storage, mapped onto one slice per buffer dim so that it is an ordinary view (language.hpp).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "neuron/dsl/builder.hpp"
#include "neuron/dsl/emit.hpp"
#include "neuron/language.hpp"

namespace neuron::nl {

namespace {

std::string pattern_str(const std::vector<std::pair<int64_t, int64_t>>& p) {
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
  // Element strides of the row-major storage.
  std::vector<int64_t> R(n, 1);
  for (size_t k = n - 1; k > 0; --k) R[k - 1] = R[k] * S[k];

  index off = 0;
  if (offset) {
    off = *offset;
  } else {
    for (size_t k = 0; k < n; ++k) off = off + v.dims[k].start * R[k];
  }
  if (scalar_offset) {
    if (indirect_dim < 0 || indirect_dim >= static_cast<int64_t>(n))
      fail(fmt::format("indirect_dim {} is not a dim of the storage (0..{})", indirect_dim, n - 1));
    off = off + *scalar_offset * R[static_cast<size_t>(indirect_dim)];
  }
  // The offset as per-dim starts: its constant in mixed radix, each symbolic term (loop index,
  // program id, register) on the outermost dim whose stride divides its coefficient.
  if (off.constant < 0) fail(fmt::format("the offset {} is negative", off.constant));
  std::vector<index> start(n, index(0));
  int64_t c = off.constant;
  for (size_t k = 0; k < n; ++k) {
    start[k] = c / R[k];
    c %= R[k];
  }
  for (auto& term : off.terms) {
    size_t k = 0;
    while (term.coeff % R[k] != 0) ++k;  // R[n - 1] == 1 divides everything
    start[k] = start[k] + index::var(term.var, term.coeff / R[k]);
  }

  if (pattern.empty() || pattern.size() > n)
    fail(fmt::format("the pattern has {} entries; each walks one of the {} dims of the storage "
                     "(splitting or merging dims is not supported)",
                     pattern.size(), n));
  const bool on_chip = is_on_chip(b.memory);
  std::vector<int> dim_of(pattern.size(), -1);
  std::vector<int64_t> step_of(pattern.size(), 1);
  std::vector<int> walker(n, -1);  // the entry walking each dim
  bool broadcast = false;          // some entry has stride 0
  // Entries with a count > 1 take dims in order: the first (outermost) dim whose stride
  // divides theirs and inside which they stay.
  size_t next = 0;
  for (size_t j = 0; j < pattern.size(); ++j) {
    auto [st, cnt] = pattern[j];
    if (cnt < 1) fail(fmt::format("entry {} has count {}; counts are positive", j, cnt));
    if (on_chip && j == 0) {
      if (cnt > 1 && st != R[0])
        fail(fmt::format("on {} the first entry walks the partitions, so its stride must be {} "
                         "(the elements per partition), got {}",
                         memory_name(b.memory), R[0], st));
      dim_of[0] = 0;
      next = 1;
      continue;
    }
    if (cnt == 1) continue;
    if (st == 0) {  // a broadcast: the entry repeats a size-1 dim (a view for reading)
      for (size_t k = next; k < n && dim_of[j] < 0; ++k)
        if (S[k] == 1) {
          dim_of[j] = static_cast<int>(k);
          step_of[j] = 0;
          broadcast = true;
        }
      if (dim_of[j] < 0)
        fail(fmt::format("entry {} [0, {}] repeats an element, which needs a size-1 dim of the "
                         "storage after dim {} to repeat",
                         j, cnt, static_cast<int64_t>(next) - 1));
      next = static_cast<size_t>(dim_of[j]) + 1;
      continue;
    }
    for (size_t k = next; k < n && dim_of[j] < 0; ++k)
      if (st > 0 && st % R[k] == 0 && (st / R[k]) * (cnt - 1) < S[k]) {
        dim_of[j] = static_cast<int>(k);
        step_of[j] = st / R[k];
      }
    if (dim_of[j] < 0)
      fail(fmt::format("entry {} [{}, {}] walks no single dim after dim {}: its stride must be a "
                       "positive multiple of one dim's stride ([{}]) and stay inside that dim "
                       "(splitting or merging dims is not supported)",
                       j, st, cnt, static_cast<int64_t>(next) - 1, fmt::join(R, ", ")));
    next = static_cast<size_t>(dim_of[j]) + 1;
  }
  // Count-1 entries keep an unwalked dim (size 1) between their neighbours' dims.
  for (size_t j = 0; j < pattern.size(); ++j) {
    if (dim_of[j] >= 0) {
      walker[static_cast<size_t>(dim_of[j])] = static_cast<int>(j);
      continue;
    }
    int lo = 0, hi = static_cast<int>(n);
    for (size_t i = 0; i < j; ++i) lo = std::max(lo, dim_of[i] + 1);
    for (size_t i = j + 1; i < pattern.size(); ++i)
      if (dim_of[i] >= 0) hi = std::min(hi, dim_of[i]);
    for (int k = lo; k < hi && dim_of[j] < 0; ++k)
      if (walker[static_cast<size_t>(k)] < 0) dim_of[j] = k;
    if (dim_of[j] < 0)
      fail(fmt::format("entry {} [{}, 1] has no dim left to keep as size 1", j, pattern[j].first));
    walker[static_cast<size_t>(dim_of[j])] = static_cast<int>(j);
  }

  std::vector<subscript> subs;
  for (size_t k = 0; k < n; ++k) {
    const int j = walker[k];
    if (j < 0) {
      subs.emplace_back(start[k], span);
      continue;
    }
    const int64_t cnt = pattern[static_cast<size_t>(j)].second;
    const int64_t step = step_of[static_cast<size_t>(j)];
    if (step == 0) {
      subs.emplace_back(ds(start[k], 1), span);  // broadcast below
    } else if (step == 1 || cnt == 1) {
      subs.emplace_back(ds(start[k], cnt), span);
    } else {
      if (!start[k].is_constant())
        fail(fmt::format("dim {} is walked with step {} from '{}'; a strided walk needs a "
                         "constant start",
                         k, step, start[k].str()));
      const int64_t s0 = start[k].constant;
      subs.emplace_back(slice(s0, s0 + step * (cnt - 1) + 1, step), span);
    }
  }
  tensor view = index_n(tensor(Access::whole(v.buffer)), subs);
  if (!broadcast) return view;
  // One view dim per entry, in order: the stride-0 ones repeat their size-1 dim.
  std::vector<int64_t> shape;
  for (auto& [st, cnt] : pattern) shape.push_back(cnt);
  return tensor(dsl::broadcast_view(dsl::view_of(view, span), shape, span));
}

}  // namespace neuron::nl
