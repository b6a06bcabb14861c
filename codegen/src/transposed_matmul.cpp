// Transposed matmuls: a matmul whose stationary operand is the evacuated result of a Tensor
// engine transpose, `nc_transpose(X <- S); copy(Y <- X); nc_matmul(D <- Y^T @ V)`, which the
// native backend runs as one product reading S's rows (neuron_matmul_f32_at; for bf16,
// neuron_matmul_bf16_at, whose AMX variant loads its left tiles from S's rows) instead of
// transposing S into PSUM and copying it to SBUF first. The Tensor engine contracts over
// partitions, so every kernel that multiplies by a tile's transpose writes this triple: flash
// attention's p @ v (p is [queries, keys] and the product needs keys on the partitions), its
// backward's ds^T @ q. On a CPU the transpose and the evacuation are two passes over the tile
// that the product does not need: its micro-kernel can broadcast A's values from S's rows as
// well as from a transposed copy.
//
// The results stay the simulator's bits (docs/native.md "Transposed matmuls"): the transpose
// moves bits, a tensor_copy within fp32 or bf16 moves bits, the Scalar engine's identity
// activation computes x * 1 + 0 (-0 becomes +0; neuron_matmul_f32_at's canonical_zero does the
// same; the bf16 rule's partial sums start at +0, so there a zero's sign never shows), and the
// product's arithmetic per element is the matmul's own. What the fused form does not do is
// write X and Y, so it applies only where nothing reads them again before they are overwritten
// (dead_after), and where the matmul's other operands cannot see the difference (no overlaps).
#include <algorithm>
#include <limits>
#include <map>
#include <set>

#include "neuron/codegen/plan.hpp"

namespace neuron::native {
namespace {

// What is known of the loop variables: the range [lo, hi] each takes (over every loop of that
// name), which are unknown (a loop running while a register is non-zero, bounds that read
// registers), and which belong to dynamic loops.
struct Extents {
  std::map<std::string, std::pair<int64_t, int64_t>> range;
  std::set<std::string> unknown, dynamic;
};

// [lo, hi] of an affine expression over the known ranges; nullopt when it depends on anything
// else (registers, unknown loops, program ids).
std::optional<std::pair<int64_t, int64_t>> range_of(const Affine& a, const Extents& ext) {
  int64_t lo = a.constant, hi = a.constant;
  for (const auto& t : a.terms) {
    auto it = ext.range.find(t.var);
    if (it == ext.range.end()) return std::nullopt;
    const int64_t x = t.coeff * it->second.first, y = t.coeff * it->second.second;
    lo += std::min(x, y);
    hi += std::max(x, y);
  }
  return std::pair{lo, hi};
}

// A static loop's variable takes [0, extent - 1]; a dynamic loop's [start, stop - 1] when its
// bounds are known from the loops around it (causal attention's `dynamic_range(0, i1)`).
void collect_extents(const std::vector<ProgNode>& body, Extents& out) {
  for (const ProgNode& n : body) {
    if (n.kind != ProgNode::Kind::loop) continue;
    std::optional<std::pair<int64_t, int64_t>> r;
    if (n.loop_kind != LoopKind::dynamic) {
      r = std::pair<int64_t, int64_t>{0, std::max<int64_t>(n.extent, 1) - 1};
    } else {
      out.dynamic.insert(n.var);
      const auto lo = range_of(n.start, out), hi = range_of(n.stop, out);
      if (n.cond.empty() && n.step > 0 && lo && hi)
        r = std::pair<int64_t, int64_t>{lo->first, std::max(lo->first, hi->second - 1)};
    }
    if (!r || out.unknown.count(n.var)) {
      out.unknown.insert(n.var);
      out.range.erase(n.var);
    } else if (auto it = out.range.find(n.var); it != out.range.end()) {
      it->second = {std::min(it->second.first, r->first), std::max(it->second.second, r->second)};
    } else {
      out.range[n.var] = *r;
    }
    collect_extents(n.body, out);
  }
}

// The partitions [lo, hi] and bytes [lo, hi) of a partition an on-chip pattern may touch over
// every iteration of the loops around it, one box per rotating slot.
struct Box {
  int64_t plo, phi, blo, bhi;
};
constexpr int64_t kMaxSlots = 16;  // more rotating slots than this: one box for all

std::optional<std::vector<Box>> boxes_of(const AccessPattern& ap, const Extents& ext) {
  if (!is_on_chip(ap.memory) || ap.dims.empty()) return std::nullopt;
  const auto part = range_of(ap.partition, ext), off = range_of(ap.offset, ext);
  Box b;
  if (part && off) {
    const int64_t es = dtype_bytes(ap.dtype);
    const Span1 s = extent(0, ap.dims, 1, es, es);
    b = {part->first, part->second, off->first + s.lo, off->second + s.hi};
    b.phi += ap.dims[0].stride == 0 ? 0 : ap.dims[0].size - 1;
  } else if (ap.alloc.known() && placed_at_run_time(ap, ext.dynamic)) {
    b = {0, ap.alloc.partitions - 1, ap.alloc.lo, ap.alloc.hi};  // its tile, checked when run
  } else {
    return std::nullopt;
  }
  const int64_t slots = ap.rotation.var.empty() ? 1 : std::max<int64_t>(ap.rotation.count, 1);
  if (slots > kMaxSlots) {
    b.blo += std::min<int64_t>(0, (slots - 1) * ap.rotation.bytes);
    b.bhi += std::max<int64_t>(0, (slots - 1) * ap.rotation.bytes);
    return std::vector<Box>{b};
  }
  std::vector<Box> out;
  for (int64_t r = 0; r < slots; ++r)
    out.push_back({b.plo, b.phi, b.blo + r * ap.rotation.bytes, b.bhi + r * ap.rotation.bytes});
  return out;
}

// Whether a and b can share bytes at any time (conservative).
bool may_share(const AccessPattern& a, const AccessPattern& b, const Extents& ext) {
  if (a.memory != b.memory) return false;
  if (!is_on_chip(a.memory)) return a.tensor == b.tensor;
  const auto xs = boxes_of(a, ext), ys = boxes_of(b, ext);
  if (!xs || !ys) return true;
  for (const Box& x : *xs)
    for (const Box& y : *ys)
      if (x.plo <= y.phi && y.plo <= x.phi && x.blo < y.bhi && y.blo < x.bhi) return true;
  return false;
}

// A [P, n] pattern: one contiguous free dim.
bool row_segment(const AccessPattern& ap) {
  return ap.dims.size() == 2 && ap.dims[1].stride == 1;
}

// The bytes of `piece` that a write of `w` leaves, as row segments: {piece} when they share
// none; else, when both are row segments over consecutive partitions and the same rotating
// slots, at offsets that differ by a constant (a write at the same iteration then touches the
// same slot of both), and w's edges fall on whole elements of piece (the dtypes may differ: a
// bf16 transpose and an fp32 product in one PSUM bank): the partitions w misses and, on the
// others, the bytes before and after w. nullopt when that cannot be told.
std::optional<std::vector<AccessPattern>> subtract(const AccessPattern& piece_in,
                                                   const AccessPattern& w_in, const Extents& ext) {
  if (!may_share(piece_in, w_in, ext)) return std::vector<AccessPattern>{piece_in};
  // A partition broadcast (step 0) touches its one partition.
  auto one_partition = [](AccessPattern ap) {
    if (!ap.dims.empty() && ap.dims[0].stride == 0) ap.dims[0] = {1, 1};
    return ap;
  };
  const AccessPattern piece = one_partition(piece_in), w = one_partition(w_in);
  if (!row_segment(piece) || !row_segment(w) || piece.dims[0].stride != 1 ||
      w.dims[0].stride != 1 || !(piece.rotation == w.rotation))
    return std::nullopt;
  const Affine dp = w.partition - piece.partition, db = w.offset - piece.offset;
  const int64_t es = dtype_bytes(piece.dtype), wbytes = w.dims[1].size * dtype_bytes(w.dtype);
  if (!dp.is_constant() || !db.is_constant() || db.constant % es != 0 || wbytes % es != 0)
    return std::nullopt;
  const int64_t np = piece.dims[0].size, n = piece.dims[1].size * es;
  const int64_t p0 = std::clamp<int64_t>(dp.constant, 0, np);
  const int64_t p1 = std::clamp<int64_t>(dp.constant + w.dims[0].size, 0, np);
  const int64_t w0 = std::clamp<int64_t>(db.constant, 0, n);
  const int64_t w1 = std::clamp<int64_t>(db.constant + wbytes, 0, n);
  std::vector<AccessPattern> parts;
  auto part = [&](int64_t plo, int64_t phi, int64_t lo, int64_t hi) {
    if (phi <= plo || hi <= lo) return;
    AccessPattern p = piece;
    p.partition = piece.partition + Affine(plo);
    p.dims[0].size = phi - plo;
    p.offset = piece.offset + Affine(lo);
    p.dims[1].size = (hi - lo) / es;
    parts.push_back(p);
  };
  part(0, p0, 0, n);
  part(p1, np, 0, n);
  part(p0, p1, 0, w0);
  part(p0, p1, w1, n);
  return parts;
}

// The views `in` certainly writes in full without reading them first.
std::vector<const AccessPattern*> overwritten_by(const Instr& in) {
  if (!overwrites_dst(in) || !opcode_has_dst(in.op)) return {};
  if (in.has_reduce_res) return {&in.dst, &in.reduce_res};
  return {&in.dst};
}

enum class Seen { nothing, read, overwritten };

// Walks body[from, to) for the bytes of `pieces`: a read of any of them stops the walk (read);
// writes that cover parts of them remove those parts, and when none is left the walk stops
// (overwritten). A read of what an earlier instruction of the walk wrote in full (`fresh`: at
// the same iteration, so the same rotating slot, whichever it is) reads no piece. The
// instructions in `group` (the transposed matmul itself) are skipped. Loops nested in the range
// are walked for reads, each trip with what it writes before them; their writes remove no
// piece (they may run no trip).
Seen scan(const std::vector<ProgNode>& body, size_t from, size_t to,
          std::vector<AccessPattern>& pieces, const std::vector<int>& group, const Extents& ext,
          std::vector<AccessPattern> fresh = {}, bool nested = false) {
  auto covered = [&](const AccessPattern& r) {
    for (const AccessPattern& w : fresh) {
      auto rest = subtract(r, w, ext);
      if (rest && rest->empty()) return true;
    }
    return false;
  };
  for (size_t k = from; k < to && k < body.size(); ++k) {
    const ProgNode& n = body[k];
    if (n.kind == ProgNode::Kind::loop) {
      if (scan(n.body, 0, n.body.size(), pieces, group, ext, fresh, true) == Seen::read)
        return Seen::read;
      continue;
    }
    if (std::find(group.begin(), group.end(), n.instr.id) != group.end()) continue;
    for (auto [ap, written] : in_order(n.instr)) {
      if (written || covered(*ap)) continue;
      for (const AccessPattern& p : pieces)
        if (may_share(*ap, p, ext)) return Seen::read;
    }
    for (const AccessPattern* w : overwritten_by(n.instr)) {
      fresh.push_back(*w);
      if (nested) continue;
      std::vector<AccessPattern> left;
      for (const AccessPattern& p : pieces) {
        auto rest = subtract(p, *w, ext);
        if (rest)
          left.insert(left.end(), rest->begin(), rest->end());
        else
          left.push_back(p);
      }
      pieces = std::move(left);
    }
    if (pieces.empty()) return Seen::overwritten;
  }
  return Seen::nothing;
}

// A body and a position in it: the instruction (innermost level) or the loop holding the
// levels below.
struct Level {
  const std::vector<ProgNode>* body;
  size_t pos;
};

// Whether, after the instruction `after` positions past levels.back(), nothing reads target's
// bytes before they are overwritten. From the instruction outwards: the rest of its body (an
// overwrite there is on every path); the loop's next trip up to the group (the group's own
// transpose and copy overwrite X and Y there); then the loop's exit, the rest of the body around
// it; and so on to the end of the program, where on-chip memory dies.
bool dead_after(const std::vector<Level>& levels, size_t after, const AccessPattern& target,
                const std::vector<int>& group, const Extents& ext) {
  std::vector<AccessPattern> pieces{target};  // what is still unwritten on every path
  size_t from = levels.back().pos + after;
  for (size_t L = levels.size(); L-- > 0;) {
    const std::vector<ProgNode>& body = *levels[L].body;
    const Seen rest = scan(body, from, body.size(), pieces, group, ext);
    if (rest == Seen::read) return false;
    if (rest == Seen::overwritten) return true;
    if (L == 0) return true;
    std::vector<AccessPattern> next_trip = pieces;  // only the next trip's path writes these
    if (scan(body, 0, levels[L].pos, next_trip, group, ext) == Seen::read) return false;
    from = levels[L - 1].pos + 1;
  }
  return true;
}

// Whether a view's place is known without running the program: no register, dynamic loop or
// program id in its partition and offset (a rotating slot of a dynamic loop stays inside the
// allocation, so that is allowed).
bool static_on_chip(const AccessPattern& ap, const Extents& ext) {
  return !set_at_run_time(ap.partition, ext.dynamic) && !set_at_run_time(ap.offset, ext.dynamic) &&
         boxes_of(ap, ext).has_value();
}

// The triple at body[i] if it has the shape and operands the fused form needs (fp32 or bf16, SBUF
// operands, a bit-exact evacuation, a matmul that overwrites or adds, no overlaps), with the
// views the fused form leaves unwritten: Y and X's bytes outside D (`dead`).
struct Candidate {
  TransposedMatmul tm;
  std::vector<AccessPattern> dead;
};
std::optional<Candidate> triple_at(const std::vector<ProgNode>& body, size_t i,
                                   const Extents& ext) {
  if (i + 2 >= body.size()) return std::nullopt;
  for (size_t k = i; k < i + 3; ++k)
    if (body[k].kind != ProgNode::Kind::instr) return std::nullopt;
  const Instr &t = body[i].instr, &c = body[i + 1].instr, &m = body[i + 2].instr;
  if (t.op != Opcode::nc_transpose || m.op != Opcode::nc_matmul) return std::nullopt;
  if (m.args.accumulate != 0 && m.args.accumulate != 1) return std::nullopt;
  bool canonical = false;
  if (c.op == Opcode::activation) {
    if (c.args.func != ActFunc::copy || c.args.scale != 1.0 || c.args.bias_tile ||
        c.args.scale_tile || c.has_reduce_res || c.src.size() != 1)
      return std::nullopt;
    canonical = true;
  } else if (c.op != Opcode::tensor_copy || c.src.size() != 1) {
    return std::nullopt;
  }
  const AccessPattern &S = t.src[0], &X = t.dst, &Y = c.dst, &V = m.src[1], &D = m.dst;
  if (!(c.src[0] == X) || !(m.src[0] == Y)) return std::nullopt;
  // fp32 throughout, or bf16 operands (S, X, Y, V) into fp32 PSUM: the products whose fused
  // forms exist (neuron_matmul_f32_at, neuron_matmul_bf16_at).
  const DType dt = S.dtype;
  if (dt != DType::float32 && dt != DType::bfloat16) return std::nullopt;
  for (const AccessPattern* ap : {&X, &Y, &V})
    if (ap->dtype != dt) return std::nullopt;
  if (D.dtype != DType::float32) return std::nullopt;
  if (S.memory != Memory::sbuf || Y.memory != Memory::sbuf || V.memory != Memory::sbuf ||
      D.memory != Memory::psum || S.dims.size() < 2 || S.dims.back().size < 1)
    return std::nullopt;
  // X and Y are not written, so their bounds are not checked at run time: only static ones.
  if (!static_on_chip(X, ext) || !static_on_chip(Y, ext)) return std::nullopt;
  // The fused product reads S and V after the transpose and copy would have written X and Y,
  // and writes D where the matmul would: none may share bytes with the skipped writes, except
  // a D inside X that the matmul overwrites (then only X's other bytes go unwritten).
  for (const AccessPattern* w : {&X, &Y})
    for (const AccessPattern* r : {&S, &V})
      if (may_share(*w, *r, ext)) return std::nullopt;
  if (may_share(Y, D, ext) || may_share(S, D, ext) || may_share(V, D, ext)) return std::nullopt;
  Candidate cand{{t.id, c.id, m.id, canonical}, {Y}};
  // A matmul that adds reads D: then D must not be where the transpose wrote.
  if (m.args.accumulate != 0 && may_share(X, D, ext)) return std::nullopt;
  auto rest = subtract(X, D, ext);
  if (!rest) return std::nullopt;
  for (const AccessPattern& r : *rest) {
    if (may_share(r, D, ext)) return std::nullopt;
    cand.dead.push_back(r);
  }
  return cand;
}

void find(const std::vector<ProgNode>& body, std::vector<Level>& levels, const Extents& ext,
          std::map<int, TransposedMatmul>& out) {
  for (size_t i = 0; i < body.size(); ++i) {
    levels.push_back({&body, i});
    if (body[i].kind == ProgNode::Kind::loop) {
      find(body[i].body, levels, ext, out);
    } else if (auto c = triple_at(body, i, ext)) {
      const std::vector<int> group{c->tm.transpose_id, c->tm.copy_id, c->tm.matmul_id};
      bool dead = true;
      for (const AccessPattern& ap : c->dead) dead = dead && dead_after(levels, 3, ap, group, ext);
      if (dead) {
        out[c->tm.transpose_id] = c->tm;
        i += 2;
      }
    }
    levels.pop_back();
  }
}

}  // namespace

std::map<int, TransposedMatmul> transposed_matmuls(const Program& p) {
  Extents ext;
  collect_extents(p.body, ext);
  std::vector<Level> levels;
  std::map<int, TransposedMatmul> out;
  find(p.body, levels, ext, out);
  return out;
}

}  // namespace neuron::native
