// Shape helpers for views shared by the passes (verify, legalize, allocate, lower).
#pragma once
#include <fmt/format.h>

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "neuron/ir/ir.hpp"
#include "neuron/ir/visitor.hpp"

namespace neuron::passes {

// The buffers a statement reads or writes, nested statements included.
class Uses : public IRVisitor {
 public:
  std::set<const Buffer*> buffers;
  void visit_Op(const Op& op) override {
    for (auto& a : op.args)
      if (auto v = std::get_if<Access>(&a.value)) buffers.insert(v->buffer.get());
  }
};

// The shape an engine sees: for an on-chip view the partition count followed by the kept free
// dims (the partition dim is always walked, even when indexed by a scalar); for HBM the kept
// dims. Reduction axes and matmul shapes are counted in this shape.
inline std::vector<int64_t> pattern_shape(const Access& a) {
  if (!a.buffer || !is_on_chip(a.buffer->memory) || a.dims.empty()) return a.shape();
  std::vector<int64_t> s{a.dims[0].size};
  for (size_t d : a.kept())
    if (d != 0) s.push_back(a.dims[d].size);
  return s;
}

inline bool is_hbm(Memory m) {
  return m == Memory::hbm || m == Memory::shared_hbm;
}

inline int64_t product(const std::vector<int64_t>& v, size_t from = 0) {
  int64_t n = 1;
  for (size_t i = from; i < v.size(); ++i) n *= v[i];
  return n;
}

inline int64_t partitions(const Access& a) {
  return a.dims.empty() ? 1 : a.dims[0].size;
}

// Elements per partition of an on-chip view (product of its free sizes).
inline int64_t free_elements(const Access& a) {
  return product(pattern_shape(a), 1);
}

inline int64_t view_elements(const Access& a) {
  return product(pattern_shape(a));
}

// A view reading one partition for every partition of the result (dim 0 step 0).
inline bool broadcasts_partitions(const Access& a) {
  return a.buffer && is_on_chip(a.buffer->memory) && !a.dims.empty() && a.dims[0].step == 0 &&
         a.dims[0].size > 1;
}

// `self`, an Op, with each view of a buffer that `to` maps pointed at its replacement (self
// itself when none is): allocate's placed buffers, tile_versions' versions.
inline StmtPtr rebind_buffers(const Op& n, const StmtPtr& self,
                              const std::map<const Buffer*, BufferPtr>& to) {
  std::vector<Arg> args = n.args;
  bool changed = false;
  for (auto& a : args)
    if (auto v = std::get_if<Access>(&a.value))
      if (auto it = to.find(v->buffer.get()); it != to.end() && it->second != v->buffer) {
        v->buffer = it->second;
        changed = true;
      }
  return changed ? Op::make(n.code, std::move(args), n.span) : self;
}

// A view whose every free dim repeats one element: a per-partition scalar column.
inline bool is_column(const Access& a) {
  bool any = false;
  for (size_t d = 1; d < a.dims.size(); ++d) {
    if (a.dims[d].size == 1) continue;
    if (a.dims[d].step != 0) return false;
    any = true;
  }
  return any || free_elements(a) == 1;
}

inline bool broadcasts_free(const Access& a) {
  for (size_t d = 1; d < a.dims.size(); ++d)
    if (a.dims[d].step == 0 && a.dims[d].size > 1) return true;
  return false;
}

// The dim an indirect DMA's row index selects: the HBM view's first kept dim (its rows move to
// the partitions of the on-chip side).
inline size_t rows_dim(const Access& hbm) {
  const std::vector<size_t> k = hbm.kept();
  return k.empty() ? 0 : k[0];
}

inline std::string shape_str(const std::vector<int64_t>& s) {
  return fmt::format("[{}]", fmt::join(s, ", "));
}

inline std::string buffer_str(const Buffer& b) {
  return fmt::format("{} {}{}", b.name, dtype_name(b.dtype), shape_str(b.shape));
}

}  // namespace neuron::passes
