// What a native run must zero (plan.hpp): the on-chip bytes a program may read before writing
// them (first_reads), and the outputs some element of which may stay unwritten
// (outputs_to_zero).
//
// Every program starts from zeroed SBUF and PSUM (the simulator's rule). A native worker reuses
// its memories from program to program, so it must clear what the last program left behind,
// but only where the next one could see it: bytes read before being written. Clearing
// everything written instead cost a layer_norm 3.5 MiB of memset per 128-row program, more
// than the arithmetic. The walk follows program order over the first iteration of each loop
// and matches views symbolically: a read is covered when an earlier write, of an instruction
// that writes every element of its destination, spans it at the same symbolic address (same
// loop and program-id terms, so the same bytes in every iteration), or spans every iteration
// of the enclosing loops the read moves with and the write does not. After a loop, what all
// its iterations wrote stays covered (a panel loaded a row an iteration). Anything not provably
// covered counts as read first, with its full range over all iterations.
#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "neuron/codegen/plan.hpp"
#include "neuron/ir/ir.hpp"

namespace neuron::native {

bool overwrites_dst(const Instr& in) {
  if (opcode_writes_whole_dst(in.op)) return true;
  switch (in.op) {
    case Opcode::nc_matmul:
      return in.args.accumulate == 0;
    case Opcode::dma_copy:
      return in.args.indirect == InstrArgs::Indirect::none && !in.args.oob_skip;
    default:
      return false;
  }
}

namespace {

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

// Bytes surely written: `e` past `offset` and `partition`, at `rotation`'s slot.
struct Cover {
  Memory memory;
  Rotation rotation;
  Affine offset, partition;
  Extent e;
};

// What a loop's writes cover once it has run: the ones that do not move with it as they are,
// and one that moves its offset by a step no wider than its extent as the span of every
// iteration (a panel loaded a row at a time: off = i * 1024, 1024 bytes each). None when the
// write moves otherwise (its partitions or slot with the loop, or leaving gaps between steps).
std::optional<Cover> after_loop(Cover c, const std::string& var, int64_t extent) {
  if (c.partition.uses(var) || c.rotation.var == var) return std::nullopt;
  const int64_t step = c.offset.coeff_of(var);
  if (step == 0) return c;
  if (std::abs(step) > c.e.hi - c.e.lo + 1) return std::nullopt;
  const int64_t reach = step * (extent - 1);
  (reach < 0 ? c.e.lo : c.e.hi) += reach;
  c.offset = c.offset.substitute(var, Affine(0));
  return c;
}

struct Walk {
  std::vector<Cover> covers;
  std::set<const AccessPattern*> first;  // views read before written
  std::map<std::string, int64_t> loops;  // the enclosing affine loops' extents

  bool covered(const AccessPattern& r) const {
    if (has_register(r.offset) || has_register(r.partition)) return false;
    const Extent extent = extent_of(r);
    // The newest kLookBack writes, newest first: a read is most often of what an instruction
    // just wrote, and an unrolled program has hundreds of thousands of writes (vLLM's paged
    // attention spent 38 s of its compile scanning them all for every read). A read covered
    // only by an older write counts as read first: its bytes are zeroed at the program's start
    // and then overwritten by that write, so the result is the same.
    constexpr size_t kLookBack = 512;
    const size_t oldest = covers.size() > kLookBack ? covers.size() - kLookBack : 0;
    for (size_t i = covers.size(); i-- > oldest;) {
      const Cover& c = covers[i];
      if (c.memory != r.memory || !(c.rotation == r.rotation) ||
          !same_terms(c.partition, r.partition))
        continue;
      Extent re = extent;
      if (!same_terms(c.offset, r.offset) && !widened(r.offset, c.offset, re)) continue;
      const int64_t db = r.offset.constant - c.offset.constant;
      const int64_t dp = r.partition.constant - c.partition.constant;
      if (db + re.lo >= c.e.lo && db + re.hi <= c.e.hi && dp + re.plo >= c.e.plo &&
          dp + re.phi <= c.e.phi)
        return true;
    }
    return false;
  }
  // A read whose offset moves with enclosing loops a write's does not, as the span of all
  // their iterations (`re` widened): a panel written whole before a loop that reads a row of
  // it an iteration. False when the offsets differ otherwise.
  bool widened(const Affine& read, const Affine& write, Extent& re) const {
    for (auto& t : write.terms)
      if (read.coeff_of(t.var) != t.coeff) return false;
    for (auto& t : read.terms) {
      if (write.uses(t.var)) continue;
      auto loop = loops.find(t.var);
      if (loop == loops.end()) return false;
      const int64_t reach = t.coeff * (loop->second - 1);
      (reach < 0 ? re.lo : re.hi) += reach;
    }
    return true;
  }

  void read(const AccessPattern& r) {
    if (is_on_chip(r.memory) && !covered(r)) first.insert(&r);
  }
  void write(const AccessPattern& w) {
    if (is_on_chip(w.memory) && dense(w) && !has_register(w.offset) &&
        !has_register(w.partition))
      covers.push_back({w.memory, w.rotation, w.offset, w.partition, extent_of(w)});
  }

  void body(const std::vector<ProgNode>& nodes) {
    for (auto& n : nodes) {
      if (n.kind == ProgNode::Kind::loop) {
        const bool dynamic = n.loop_kind == LoopKind::dynamic;
        if (!dynamic && n.extent <= 0) continue;  // never runs (analyze_bounds skips it too)
        const size_t before = covers.size();
        if (!dynamic) loops[n.var] = n.extent;
        body(n.body);
        loops.erase(n.var);
        // After the loop, a write made inside counts only when the loop surely ran, for what
        // all its iterations wrote (after_loop).
        std::vector<Cover> inside(covers.begin() + static_cast<std::ptrdiff_t>(before),
                                  covers.end());
        covers.resize(before);
        if (!dynamic)
          for (Cover& c : inside)
            if (auto all = after_loop(std::move(c), n.var, n.extent)) covers.push_back(*all);
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

// Byte ranges [lo, hi) with the partitions [0, parts) each needs: sorted, overlapping ones
// merged (clearing the union on the most partitions of any clears a superset).
struct Cleared {
  int64_t lo, hi, parts;
  bool operator<(const Cleared& o) const { return lo < o.lo || (lo == o.lo && hi < o.hi); }
};
void merged(std::vector<Cleared> r, std::vector<std::pair<int64_t, int64_t>>& ranges,
            std::vector<int64_t>& parts) {
  std::sort(r.begin(), r.end());
  for (auto& x : r) {
    if (!ranges.empty() && x.lo <= ranges.back().second) {
      ranges.back().second = std::max(ranges.back().second, x.hi);
      parts.back() = std::max(parts.back(), x.parts);
    } else {
      ranges.push_back({x.lo, x.hi});
      parts.push_back(x.parts);
    }
  }
}

}  // namespace

FirstReads first_reads(const Program& p, const ProgramBounds& b, const Target& t) {
  Walk w;
  w.body(p.body);
  std::vector<Cleared> sbuf, psum;
  for (const AccessBound& ab : b.accesses) {
    if (!w.first.count(ab.ap)) continue;
    const Memory m = ab.ap->memory;
    auto& out = m == Memory::sbuf ? sbuf : psum;
    bool moves = ab.dynamic, moves_partition = ab.dynamic;
    for (size_t a = 0; a < 4; ++a) {
      moves |= ab.pid[a] != 0 || ab.npid[a] != 0;
      moves_partition |= ab.ppid[a] != 0 || ab.pnpid[a] != 0;
    }
    const AccessPattern& ap = *ab.ap;
    // A read at fixed partitions needs only those cleared: a [2, 32000] tile of a softmax over
    // two rows a program is 256 KiB, not 16 MiB on every partition.
    const int64_t parts =
        moves_partition ? t.partitions : std::min<int64_t>(t.partitions, ab.phi + 1);
    if (ab.dynamic && ap.alloc.known()) {  // kept inside its tile when it runs
      out.push_back(
          {ap.alloc.lo, tile_end(ap), std::min<int64_t>(t.partitions, ap.alloc.partitions)});
    } else if (moves) {  // anywhere, depending on the launch or on registers
      out.push_back({0, bytes_per_partition(t, m), t.partitions});
    } else {
      out.push_back({std::max<int64_t>(0, ab.lo), ab.hi + 1, parts});
    }
  }
  FirstReads fr;
  merged(std::move(sbuf), fr.sbuf, fr.sbuf_partitions);
  merged(std::move(psum), fr.psum, fr.psum_partitions);
  return fr;
}

namespace {

// An access of an output whose elements can be listed: outside dynamic loops, at an address of
// program ids and affine loops only, not indirect. A write counts towards covering the output
// when its instruction overwrites its destination; a read is harmless when writes of earlier
// top-level nodes of the same program cover it.
struct OutputAccess {
  const AccessPattern* ap;
  std::vector<std::pair<std::string, int64_t>> loops;  // enclosing loops its offset uses
  size_t top;                                          // index of the top-level node it is in
};

struct OutputWalk {
  std::vector<bool> zero;  // per tensor: must be zeroed whatever the writes
  std::vector<std::vector<OutputAccess>> writes, reads;
  std::vector<std::pair<std::string, int64_t>> loops;
  int dynamic_depth = 0;
  size_t top = 0;

  OutputAccess access(const AccessPattern& ap) const {
    OutputAccess a{&ap, {}, top};
    for (auto& [var, extent] : loops)
      if (ap.offset.uses(var)) a.loops.push_back({var, extent});
    return a;
  }

  void body(const std::vector<ProgNode>& nodes) {
    for (size_t i = 0; i < nodes.size(); ++i) {
      const ProgNode& n = nodes[i];
      if (loops.empty()) top = i;
      if (n.kind == ProgNode::Kind::loop) {
        const bool dyn = n.loop_kind == LoopKind::dynamic;
        if (!dyn && n.extent <= 0) continue;
        dynamic_depth += dyn;
        loops.push_back({n.var, dyn ? -1 : n.extent});
        body(n.body);
        loops.pop_back();
        dynamic_depth -= dyn;
        continue;
      }
      const Instr& in = n.instr;
      auto hbm = [](const AccessPattern& ap) { return !is_on_chip(ap.memory) && ap.tensor >= 0; };
      const bool listable = dynamic_depth == 0 && in.args.indirect == InstrArgs::Indirect::none;
      for (auto& src : in.src) {
        if (!hbm(src)) continue;
        if (listable && !has_register(src.offset))
          reads[static_cast<size_t>(src.tensor)].push_back(access(src));
        else
          zero[static_cast<size_t>(src.tensor)] = true;  // read anywhere: keep its zeros
      }
      if (!opcode_has_dst(in.op) || !hbm(in.dst)) continue;
      const size_t t = static_cast<size_t>(in.dst.tensor);
      if (!overwrites_dst(in)) {
        zero[t] = true;
        continue;
      }
      if (dynamic_depth > 0 || has_register(in.dst.offset)) continue;  // may not run
      writes[t].push_back(access(in.dst));
    }
  }
};

using Ranges = std::vector<std::pair<int64_t, int64_t>>;  // [first, last + 1)

// Appends the element ranges `a` touches in the program whose ids `env` holds, over every
// iteration of its loops; false once more than `budget` ranges were listed in all.
bool append_ranges(const OutputAccess& a, std::map<std::string, int64_t>& env, Ranges& out,
                   int64_t& budget) {
  const AccessPattern& ap = *a.ap;
  if (ap.dims.empty()) return true;
  // The innermost dim as one run when its stride is 1, else element by element.
  const AccessPattern::Dim last = ap.dims.back();
  const bool run = last.stride == 1;
  int64_t per = 1, iters = 1, count = 0;
  bool huge = false;
  for (size_t d = 0; d + (run ? 1 : 0) < ap.dims.size(); ++d)
    huge |= __builtin_mul_overflow(per, ap.dims[d].size, &per);
  for (auto& l : a.loops) huge |= __builtin_mul_overflow(iters, l.second, &iters);
  if (huge || __builtin_mul_overflow(iters, per, &count) || count > budget) return false;
  if (per <= 0 || iters <= 0) return true;
  budget -= count;
  const size_t nd = ap.dims.size() - (run ? 1 : 0);
  for (int64_t it = 0; it < iters; ++it) {
    int64_t r = it;
    for (size_t l = a.loops.size(); l-- > 0;) {
      env[a.loops[l].first] = r % a.loops[l].second;
      r /= a.loops[l].second;
    }
    const int64_t base = ap.offset.eval(env);
    for (int64_t e = 0; e < per; ++e) {
      int64_t off = base, q = e;
      for (size_t d = nd; d-- > 0;) {
        off += (q % ap.dims[d].size) * ap.dims[d].stride;
        q /= ap.dims[d].size;
      }
      out.push_back({off, off + (run ? last.size : 1)});
    }
  }
  return true;
}

// The sorted ranges merged into disjoint ones.
Ranges merged_ranges(Ranges r) {
  std::sort(r.begin(), r.end());
  Ranges out;
  for (auto& [lo, hi] : r) {
    if (lo >= hi) continue;
    if (!out.empty() && lo <= out.back().second)
      out.back().second = std::max(out.back().second, hi);
    else
      out.push_back({lo, hi});
  }
  return out;
}

// Whether disjoint sorted `cover` contains every range of `r`.
bool contains(const Ranges& cover, const Ranges& r) {
  for (auto& [lo, hi] : r) {
    if (lo >= hi) continue;
    auto it = std::upper_bound(cover.begin(), cover.end(), std::make_pair(lo, INT64_MAX));
    if (it == cover.begin() || std::prev(it)->second < hi) return false;
  }
  return true;
}

// Whether, on `grid`, the writes cover every one of `elements` elements and each read of a
// program lies within what that program's earlier top-level nodes wrote, listing ranges per
// program and loop iteration (false past `limit` ranges: too dear to prove).
bool written_before_read(const std::vector<OutputAccess>& writes,
                         const std::vector<OutputAccess>& reads, int64_t elements,
                         const std::vector<int64_t>& grid, int64_t limit) {
  std::map<std::string, int64_t> env;
  for (size_t a = 0; a < 4; ++a) {
    env["pid" + std::to_string(a)] = 0;
    env["npid" + std::to_string(a)] = a < grid.size() ? grid[a] : 1;
  }
  int64_t programs = 1;
  for (int64_t g : grid)
    if (g < 1 || __builtin_mul_overflow(programs, g, &programs) || programs > limit) return false;
  Ranges all;
  int64_t budget = limit;
  for (int64_t flat = 0; flat < programs; ++flat) {
    int64_t rest = flat;
    for (int a = static_cast<int>(grid.size()) - 1; a >= 0; --a) {
      env["pid" + std::to_string(a)] = rest % grid[static_cast<size_t>(a)];
      rest /= grid[static_cast<size_t>(a)];
    }
    for (const OutputAccess& w : writes)
      if (!append_ranges(w, env, all, budget)) return false;
    for (const OutputAccess& r : reads) {
      Ranges before, read;
      for (const OutputAccess& w : writes)
        if (w.top < r.top && !append_ranges(w, env, before, budget)) return false;
      if (!append_ranges(r, env, read, budget) || !contains(merged_ranges(std::move(before)), read))
        return false;
    }
  }
  const Ranges covered = merged_ranges(std::move(all));
  return covered.size() == 1 && covered[0].first <= 0 && covered[0].second >= elements;
}

}  // namespace

std::vector<bool> outputs_to_zero(const Program& p, const std::vector<int64_t>& grid,
                                  int64_t limit) {
  OutputWalk w;
  w.zero.assign(p.tensors.size(), false);
  w.writes.resize(p.tensors.size());
  w.reads.resize(p.tensors.size());
  w.body(p.body);
  std::vector<bool> out(p.tensors.size(), false);
  for (size_t t = 0; t < p.tensors.size(); ++t) {
    const TensorDecl& d = p.tensors[t];
    if (d.role != TensorDecl::Role::output) continue;
    int64_t n = 1;
    for (int64_t x : d.shape) n *= x;
    out[t] = n > 0 && (w.zero[t] || !written_before_read(w.writes[t], w.reads[t], n, grid, limit));
  }
  return out;
}

}  // namespace neuron::native
