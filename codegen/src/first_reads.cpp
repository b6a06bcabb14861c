// Which on-chip bytes a program may read before writing them (plan.hpp first_reads).
//
// Every program starts from zeroed SBUF and PSUM (the simulator's rule). A native worker reuses
// its memories from program to program, so it must clear what the last program left behind,
// but only where the next one could see it: bytes read before being written. Clearing
// everything written instead cost a layer_norm 3.5 MiB of memset per 128-row program, more
// than the arithmetic. The walk follows program order over the first iteration of each loop
// and matches views symbolically: a read is covered when an earlier write, of an instruction
// that writes every element of its destination, spans it at the same symbolic address (same
// loop and program-id terms, so the same bytes in every iteration). Anything not provably
// covered counts as read first, with its full range over all iterations.
#include <algorithm>
#include <set>

#include "neuron/codegen/plan.hpp"
#include "neuron/ir/ir.hpp"

namespace neuron::native {
namespace {

// Whether `in` writes every element of its destination (and reduce_res) without reading it.
// Others (an accumulating matmul, a predicated copy, an indirect or skipping DMA, the rest)
// count as reading their destination too.
bool overwrites_dst(const Instr& in) {
  switch (in.op) {
    case Opcode::tensor_tensor:
    case Opcode::tensor_scalar:
    case Opcode::activation:
    case Opcode::tensor_reduce:
    case Opcode::tensor_copy:
    case Opcode::memset:
    case Opcode::iota:
    case Opcode::affine_select:
    case Opcode::nc_transpose:
      return true;
    case Opcode::nc_matmul:
      return in.args.accumulate == 0;
    case Opcode::dma_copy:
      return in.args.indirect == InstrArgs::Indirect::none && !in.args.oob_skip;
    default:
      return false;
  }
}

bool has_register(const Affine& a) {
  for (auto& t : a.terms)
    if (is_register_var(t.var)) return true;
  return false;
}

// Same variable terms (the constants may differ).
bool same_terms(const Affine& a, const Affine& b) {
  for (auto& t : a.terms)
    if (b.coeff_of(t.var) != t.coeff) return false;
  for (auto& t : b.terms)
    if (a.coeff_of(t.var) != t.coeff) return false;
  return true;
}

// A view's extent relative to its symbolic address: bytes [lo, hi] of a partition past
// `offset`, partitions [plo, phi] past `partition`.
struct Extent {
  int64_t lo = 0, hi = 0, plo = 0, phi = 0;
};

Extent extent_of(const AccessPattern& ap) {
  Extent e;
  const int64_t es = dtype_bytes(ap.dtype);
  for (size_t i = 0; i < ap.dims.size(); ++i) {
    const int64_t span = ap.dims[i].stride * (ap.dims[i].size - 1);
    if (i == 0) {
      (span < 0 ? e.plo : e.phi) += span;
    } else {
      (span < 0 ? e.lo : e.hi) += span * es;
    }
  }
  e.hi += es - 1;
  return e;
}

// Whether the view touches every byte of its extent (consecutive partitions, and free dims
// that tile a contiguous run of elements).
bool dense(const AccessPattern& ap) {
  if (ap.dims.empty()) return false;
  if (ap.dims[0].size > 1 && ap.dims[0].stride != 1) return false;
  std::vector<AccessPattern::Dim> free;
  for (size_t i = 1; i < ap.dims.size(); ++i)
    if (ap.dims[i].size > 1) free.push_back(ap.dims[i]);
  std::sort(free.begin(), free.end(),
            [](auto& a, auto& b) { return std::abs(a.stride) < std::abs(b.stride); });
  int64_t expect = 1;
  for (auto& d : free) {
    if (d.stride != expect) return false;
    expect *= d.size;
  }
  return true;
}

struct Cover {
  const AccessPattern* ap;
  Extent e;
};

struct Walk {
  std::vector<Cover> covers;
  std::set<const AccessPattern*> first;  // views read before written

  bool covered(const AccessPattern& r) const {
    if (has_register(r.offset) || has_register(r.partition)) return false;
    const Extent re = extent_of(r);
    for (const Cover& c : covers) {
      const AccessPattern& w = *c.ap;
      if (w.memory != r.memory || !(w.rotation == r.rotation) ||
          !same_terms(w.offset, r.offset) || !same_terms(w.partition, r.partition))
        continue;
      const int64_t db = r.offset.constant - w.offset.constant;
      const int64_t dp = r.partition.constant - w.partition.constant;
      if (db + re.lo >= c.e.lo && db + re.hi <= c.e.hi && dp + re.plo >= c.e.plo &&
          dp + re.phi <= c.e.phi)
        return true;
    }
    return false;
  }
  void read(const AccessPattern& r) {
    if (is_on_chip(r.memory) && !covered(r)) first.insert(&r);
  }
  void write(const AccessPattern& w) {
    if (is_on_chip(w.memory) && dense(w) && !has_register(w.offset) &&
        !has_register(w.partition))
      covers.push_back({&w, extent_of(w)});
  }

  void body(const std::vector<ProgNode>& nodes) {
    for (auto& n : nodes) {
      if (n.kind == ProgNode::Kind::loop) {
        const bool dynamic = n.loop_kind == LoopKind::dynamic;
        if (!dynamic && n.extent <= 0) continue;  // never runs (analyze_bounds skips it too)
        const size_t before = covers.size();
        body(n.body);
        // After the loop, a write made inside counts only when the loop surely ran and its
        // address does not move with the loop.
        auto moves = [&](const Cover& c) {
          return c.ap->offset.uses(n.var) || c.ap->partition.uses(n.var) ||
                 c.ap->rotation.var == n.var;
        };
        if (dynamic)
          covers.resize(before);
        else
          covers.erase(std::remove_if(covers.begin() + static_cast<std::ptrdiff_t>(before),
                                      covers.end(), moves),
                       covers.end());
        // Writes from before the loop keep their meaning (their variables are outer ones).
        continue;
      }
      const Instr& in = n.instr;
      for (auto& s : in.src) read(s);
      const bool full = overwrites_dst(in);
      if (opcode_has_dst(in.op)) {
        if (!full) read(in.dst);
        if (full) write(in.dst);
      }
      if (in.has_reduce_res) {
        if (!full) read(in.reduce_res);
        if (full) write(in.reduce_res);
      }
    }
  }
};

std::vector<std::pair<int64_t, int64_t>> merged(std::vector<std::pair<int64_t, int64_t>> r) {
  std::sort(r.begin(), r.end());
  std::vector<std::pair<int64_t, int64_t>> out;
  for (auto& x : r) {
    if (!out.empty() && x.first <= out.back().second)
      out.back().second = std::max(out.back().second, x.second);
    else
      out.push_back(x);
  }
  return out;
}

}  // namespace

FirstReads first_reads(const Program& p, const ProgramBounds& b, const Target& t) {
  Walk w;
  w.body(p.body);
  std::vector<std::pair<int64_t, int64_t>> sbuf, psum;
  for (const AccessBound& ab : b.accesses) {
    if (!w.first.count(ab.ap)) continue;
    const Memory m = ab.ap->memory;
    auto& out = m == Memory::sbuf ? sbuf : psum;
    bool moves = ab.dynamic;
    for (size_t a = 0; a < 4; ++a) moves |= ab.pid[a] != 0 || ab.npid[a] != 0;
    if (moves)  // anywhere, depending on the launch or on registers
      out.push_back({0, bytes_per_partition(t, m)});
    else
      out.push_back({std::max<int64_t>(0, ab.lo), ab.hi + 1});
  }
  return {merged(std::move(sbuf)), merged(std::move(psum))};
}

}  // namespace neuron::native
