// SBUF ranges the native backend keeps in less memory than the simulator's tiles. Values are
// unchanged (the same instructions on the same data), so results stay the simulator's bits.
//
// Run-local ranges: the temporaries a partition-blocked run makes and uses up itself. A
// blocked run (lower_program.cpp, docs/native.md "Partition blocks") executes its
// instructions on partitions [0, B), then [B, 2B), ... Every tile still has its full address
// range, so a [128, 1024] fp32 temporary streams 512 KiB through the caches per run even though
// each block's rows are written and read back within microseconds. A range that only the run
// touches, and that the run writes in full before reading, holds nothing another block or
// instruction can see: the native backend gives it a per-block buffer of B rows instead (the
// storage folding of Halide's schedules), so the run's temporaries stay in L1.
//
// Broadcast rows: a tile that only partition-broadcast writes fill (a DMA whose source
// repeats one row on every partition: nl.broadcast_to, a norm's weight; a memset) holds the
// same row in every partition at all times, so one physical row serves them all: a [128, D]
// weight tile read row by row stays a 4 KiB row in L1 instead of 512 KiB in L2.
//
// Forwarded loads: a run-local range that a DMA fills from HBM rows laid out like its rows (the
// same dtype, or bf16/fp16 widened to fp32), and that nothing else writes, holds a copy of those
// rows: its readers read the rows themselves and the DMA is dropped. So a softmax or a norm
// reads its input in the instructions that compute with it, whose loads overlap their
// arithmetic as in a hand-written loop, instead of in a separate pass of copies. (Forwarding
// stores the same way, the writers writing HBM directly, was measured slower: a row copy of
// whole cache lines is cheaper than element-wise stores to lines not in the cache.)
#include <algorithm>
#include <optional>
#include <set>
#include <tuple>
#include <unordered_map>

#include "neuron/codegen/plan.hpp"

namespace neuron::native {

std::optional<std::pair<int64_t, int64_t>> byte_range(const AccessPattern& ap, bool dense,
                                                      bool any_step) {
  if (ap.memory != Memory::sbuf || ap.dims.empty() ||
      (ap.dims[0].stride != 1 && !(any_step && ap.dims[0].stride == 0)) ||
      !ap.offset.is_constant() || !ap.partition.is_constant())
    return std::nullopt;
  if (dense) {
    int64_t n = 1;  // elements inside dim d: a dense walk's stride there
    for (size_t d = ap.dims.size(); d-- > 1;) {
      if (ap.dims[d].size == 1) continue;
      if (ap.dims[d].stride != n) return std::nullopt;
      n *= ap.dims[d].size;
    }
  }
  const int64_t es = dtype_bytes(ap.dtype);
  const Span1 s = extent(ap.offset.constant, ap.dims, 1, es, es);
  return std::pair{s.lo, s.hi};
}

std::vector<std::pair<const AccessPattern*, bool>> in_order(const Instr& in) {
  std::vector<std::pair<const AccessPattern*, bool>> reads, writes;
  for (auto [ap, written] : operands_of(in)) (written ? writes : reads).push_back({ap, written});
  if (in.op == Opcode::tensor_copy_predicated) reads.push_back({&in.dst, false});
  reads.insert(reads.end(), writes.begin(), writes.end());
  return reads;
}

namespace {

// A pattern covering bytes [lo, hi) of partitions [partition, partition + count).
AccessPattern probe(int64_t partition, int64_t count, int64_t lo, int64_t hi) {
  AccessPattern p;
  p.memory = Memory::sbuf;
  p.dtype = DType::uint8;
  p.partition = Affine(partition);
  p.offset = Affine(lo);
  p.dims = {{1, count}, {1, hi - lo}};
  return p;
}

// Whether `ap`, written by `in`, writes every byte of every partition of its buffer (of its
// rotating slot: each iteration's slot is then written before it is read). An activation's
// reduce_res column is written whole (a row sum per partition); an MX quantize's scales are not.
bool writes_whole_buffer(const Instr& in, const AccessPattern& ap) {
  const bool whole_write = (&ap == &in.dst && overwrites_dst(in)) ||
                           (&ap == &in.reduce_res && in.op == Opcode::activation);
  if (!whole_write || !ap.alloc.known() || !ap.partition.is_constant() ||
      ap.partition.constant != 0 || ap.dims.empty() || ap.dims[0].size != ap.alloc.partitions)
    return false;
  const auto r = byte_range(ap, true);
  return r && r->first == ap.alloc.lo && r->second == ap.alloc.hi;
}

// The walk's state: instruction ids seen, buffers met, and the loops around the walk that may
// run no iteration (dynamic ones, or of extent 0), innermost last.
struct Walk {
  std::set<int> seen;
  std::unordered_set<int> met;
  std::vector<const ProgNode*> skippable;
  // Buffers first written whole inside a loop that may be skipped: self-initialized when every
  // later access lies inside that loop too, so each of its iterations writes them before they
  // are read, and a run that skips the loop never touches them (a FlexAttention key tile's
  // temporaries in its loop over the listed blocks).
  std::unordered_map<int, const ProgNode*> in_loop;
};

void collect(const std::vector<ProgNode>& body, Walk& w, SbufAccesses& out) {
  for (const ProgNode& n : body) {
    if (n.kind == ProgNode::Kind::loop) {
      if (n.loop_kind != LoopKind::dynamic && n.extent > 0) {
        auto [at, fresh] = out.loop_ranges.try_emplace(n.var, 0, n.extent - 1);
        if (!fresh) at->second.second = std::max(at->second.second, n.extent - 1);
      }
      if (n.loop_kind == LoopKind::dynamic) out.dynamic_loops.insert(n.var);
      const bool skippable = n.loop_kind == LoopKind::dynamic || n.extent <= 0;
      if (skippable) w.skippable.push_back(&n);
      collect(n.body, w, out);
      if (skippable) w.skippable.pop_back();
      continue;
    }
    if (!w.seen.insert(n.instr.id).second) out.unique_ids = false;
    for (auto [ap, written] : in_order(n.instr)) {  // an instruction reads before it writes
      if (ap->memory != Memory::sbuf || ap->alloc.buffer < 0) continue;
      const int buf = ap->alloc.buffer;
      if (w.met.insert(buf).second) {
        if (!written || !writes_whole_buffer(n.instr, *ap)) continue;
        if (w.skippable.empty())
          out.self_initialized.insert(buf);
        else
          w.in_loop[buf] = w.skippable.back();
      } else if (auto it = w.in_loop.find(buf);
                 it != w.in_loop.end() && std::find(w.skippable.begin(), w.skippable.end(),
                                                    it->second) == w.skippable.end()) {
        w.in_loop.erase(it);  // also touched where its loop may not have run
      }
    }
    for (auto [ap, written] : operands_of(n.instr)) {
      if (ap->memory != Memory::sbuf) continue;
      auto at = out.span.try_emplace(n.instr.id, out.list.size(), out.list.size()).first;
      at->second.second = out.list.size();
      out.pages.add(out.list.size(), *ap);
      out.list.push_back({n.instr.id, ap});
    }
  }
}

// Elements of one row of `ap` when its free dims walk one dense row-major run, else 0.
int64_t dense_row(const AccessPattern& ap) {
  int64_t n = 1;
  for (size_t d = ap.dims.size(); d-- > 1;) {
    if (ap.dims[d].size == 1) continue;
    if (ap.dims[d].stride != n) return 0;
    n *= ap.dims[d].size;
  }
  return n;
}

}  // namespace

void SbufPages::add(size_t index, const AccessPattern& ap) {
  if (ap.offset.is_constant() && !ap.dims.empty()) {
    const Span1 s = partition_bytes(ap);
    constexpr int64_t kMaxSpan = int64_t{1} << 24;  // wider: asked about every range
    if (s.lo >= 0 && s.hi > s.lo && s.hi - s.lo <= kMaxSpan) {
      const auto last = static_cast<size_t>((s.hi - 1) / kPage);
      if (pages_.size() <= last) pages_.resize(last + 1);
      for (int64_t pg = s.lo / kPage; pg * kPage < s.hi; ++pg)
        pages_[static_cast<size_t>(pg)].push_back(index);
      return;
    }
  }
  anywhere_.push_back(index);
}

SbufAccesses sbuf_accesses(const Program& p) {
  SbufAccesses all;
  Walk w;
  collect(p.body, w, all);
  for (const auto& [buf, loop] : w.in_loop) all.self_initialized.insert(buf);
  return all;
}

namespace {

// may_overlap, with a view whose offset moves with static loops bounded by their ranges (a
// matmul's stationary slice of a panel, panel[:, kt, :], reaches no other tile's bytes), and a
// view a register or a dynamic loop places bounded by its tile: the generated code checks it
// against the tile when it runs (docs/native.md "Bounds"). So FlexAttention's read of a block's
// first key, kcol[:, jj] in a loop over the listed blocks, no longer keeps every temporary of
// the loop body from being run-local (its fused chains then wrote each step's tile).
bool may_touch(const AccessPattern& whole, const AccessPattern& v, const SbufAccesses& all) {
  if (!may_overlap(whole, v)) return false;
  if (!whole.partition.is_constant() || !whole.offset.is_constant() || whole.dims.empty())
    return true;
  if (v.alloc.known() && placed_at_run_time(v, all.dynamic_loops)) {
    const Span1 w = partition_bytes(whole);
    return whole.partition.constant < v.alloc.partitions && w.lo < tile_end(v) && v.alloc.lo < w.hi;
  }
  const Affine::Ranges& loops = all.loop_ranges;
  if (v.offset.is_constant() || !v.partition.is_constant() || v.dims.empty()) return true;
  for (const Affine::Term& t : v.offset.terms)
    if (!loops.count(t.var)) return true;  // a register, a program id, a dynamic loop
  // The partitions are shared (may_overlap compared them: both constant here). v's bytes at
  // its constant offset, moved by the loop terms' least and greatest values.
  const auto [lo, hi] = v.offset.bounds(loops);
  const Span1 b = partition_bytes(v), w = partition_bytes(whole);
  const int64_t c = v.offset.constant;
  return b.lo - c + lo < w.hi && w.lo < b.hi - c + hi;
}

}  // namespace

std::vector<RunLocal> run_local_ranges(const Program& p, const std::vector<ProgNode>& body,
                                       size_t i, size_t j, const SbufAccesses* given) {
  SbufAccesses own;
  if (!given) own = sbuf_accesses(p);
  const SbufAccesses& all = given ? *given : own;
  if (!all.unique_ids) return {};  // the run's instructions cannot be told apart
  std::vector<std::pair<const AccessPattern*, bool>> run;
  std::set<int> ids;
  size_t first = all.list.size(), last = 0;  // the run's entries in all.list
  for (size_t k = i; k < j; ++k) {
    const Instr& in = body[k].instr;
    ids.insert(in.id);
    auto ops = in_order(in);
    run.insert(run.end(), ops.begin(), ops.end());
    if (auto at = all.span.find(in.id); at != all.span.end())
      first = std::min(first, at->second.first), last = std::max(last, at->second.second);
  }
  if (first > last) return {};  // the run touches no SBUF
  // Whether an instruction outside the run touches `whole` (a probe: bytes [lo, lo + n) of
  // its partitions), among the views near those bytes. A buffer the run does not touch that
  // writes all of its bytes before it reads any does not count: the allocator gave it these
  // bytes for a time when the run's buffers there are dead, and it never reads what the run
  // would have left in them. (Tiles of one loop body or of a kernel's two passes share bytes
  // so; a chunked norm backward's loads were copied, not forwarded, until this rule.)
  std::set<int> run_buffers;
  for (auto [ap, written] : run) run_buffers.insert(ap->alloc.buffer);
  auto touched_outside = [&](const AccessPattern& whole) {
    const int64_t lo = whole.offset.constant, hi = lo + whole.dims[1].size;
    return !all.pages.all_near(lo, hi, [&](size_t at) {
      const int other = all.list[at].second->alloc.buffer;
      return ids.count(all.list[at].first) || !may_touch(whole, *all.list[at].second, all) ||
             (other >= 0 && !run_buffers.count(other) && all.self_initialized.count(other));
    });
  };

  std::vector<RunLocal> ranges;
  for (size_t a = 0; a < run.size(); ++a) {
    auto [ap, written] = run[a];
    const auto r = written ? byte_range(*ap, true) : std::nullopt;
    if (!r) continue;
    // A rotating range (a tile allocated in a loop) spans all its slots.
    const bool rotates = !ap->rotation.var.empty() && ap->rotation.count > 1;
    const int64_t slots = rotates ? (ap->rotation.count - 1) * ap->rotation.bytes : 0;
    const AccessPattern whole = probe(ap->partition.constant, ap->dims[0].size, r->first,
                                      r->second + std::max<int64_t>(0, slots));
    // The write is the range's first access in the run, every later one lies inside it (the
    // same slot: the same rotation) with the same partitions, and nothing outside the run
    // touches it.
    bool ok = slots >= 0;
    for (size_t b = 0; b < run.size() && ok; ++b) {
      const AccessPattern& other = *run[b].first;
      if (b == a || !may_touch(whole, other, all)) continue;
      const auto o = byte_range(other, false);
      ok = b > a && o && o->first >= r->first && o->second <= r->second &&
           other.partition == ap->partition && other.dims[0].size == ap->dims[0].size &&
           (other.rotation == ap->rotation || (!rotates && other.rotation.count <= 1));
    }
    if (ok && touched_outside(whole)) ok = false;
    if (ok) ranges.push_back({ap->partition.constant, r->first, r->second});
  }
  return ranges;
}


namespace {

// A write that puts the same row in every partition of its destination: a memset, or a DMA
// whose source repeats one row (partition step 0) and does not overlap the destination.
bool broadcast_write(const Instr& in) {
  if (in.op == Opcode::memset) return true;
  if (in.op != Opcode::dma_copy || in.args.indirect != InstrArgs::Indirect::none ||
      in.src.empty() || in.src[0].dims.empty() || in.dst.dims.empty())
    return false;
  const AccessPattern& s = in.src[0];
  return s.dims[0].stride == 0 && s.dims[0].size == in.dst.dims[0].size &&
         !may_overlap(s, in.dst);
}

struct Access {
  const Instr* in;
  const AccessPattern* ap;
  bool written;
};

void all_accesses(const std::vector<ProgNode>& body, std::vector<Access>& out) {
  for (const ProgNode& n : body) {
    if (n.kind == ProgNode::Kind::loop) {
      all_accesses(n.body, out);
      continue;
    }
    for (auto [ap, written] : operands_of(n.instr))
      if (ap->memory == Memory::sbuf) out.push_back({&n.instr, ap, written});
  }
}

}  // namespace

std::vector<BroadcastRows> broadcast_rows(const Program& p) {
  std::vector<Access> all;
  all_accesses(p.body, all);
  SbufPages by_page;
  for (size_t i = 0; i < all.size(); ++i) by_page.add(i, *all[i].ap);
  std::vector<BroadcastRows> found;
  std::set<std::tuple<int64_t, int64_t, int64_t, int64_t>> decided;
  for (const Access& w : all) {
    if (!w.written || w.ap != &w.in->dst || !broadcast_write(*w.in)) continue;
    const AccessPattern& d = *w.ap;
    const auto r = byte_range(d, true);
    if (!r || d.dims[0].size < 2 || (!d.rotation.var.empty() && d.rotation.count > 1)) continue;
    const BroadcastRows cand{d.partition.constant, d.dims[0].size, r->first, r->second};
    // An unrolled kernel writes the same range many times: each is decided once.
    if (!decided.insert({cand.partition, cand.count, cand.lo, cand.hi}).second) continue;
    // Every write of the range is such a write of the whole range; every read lies inside it,
    // from its partitions, by an element-wise instruction (partition-local: the matmul and
    // transpose kernels' fast paths want rows apart).
    const AccessPattern whole = probe(cand.partition, cand.count, cand.lo, cand.hi);
    const bool ok = by_page.all_near(cand.lo, cand.hi, [&](size_t i) {
      const Access& a = all[i];
      if (!may_overlap(whole, *a.ap)) return true;
      if (a.written) {
        const auto o = a.ap == &a.in->dst ? byte_range(*a.ap, true) : std::nullopt;
        return o && broadcast_write(*a.in) && o->first == cand.lo && o->second == cand.hi &&
               a.ap->partition == d.partition && a.ap->dims[0].size == cand.count &&
               a.ap->rotation.count <= 1;
      }
      int64_t parts = 0;
      const AccessPattern& v = *a.ap;
      const auto o = byte_range(v, false, /*any_step=*/true);
      return o && partition_local(*a.in, parts) && v.rotation.count <= 1 &&
             o->first >= cand.lo && o->second <= cand.hi &&
             v.partition.constant >= cand.partition &&
             v.partition.constant + (v.dims[0].stride ? v.dims[0].size : 1) <=
                 cand.partition + cand.count;
    });
    if (ok) found.push_back(cand);
  }
  return found;
}

namespace {

// Whether a load may stand in for the fp32 tile it fills when its HBM rows hold `from`: the same
// dtype, or bf16 / fp16 widened to fp32 (exact, and every reader below takes float operands
// through the same widening, so reading the narrow rows gives the tile's values).
bool widens(DType from, DType to) {
  return from == to ||
         (to == DType::float32 && (from == DType::bfloat16 || from == DType::float16));
}

// Instructions that read a float operand only as its fp32 value (the element-wise kernels'
// load_f32), so a widened operand reads as the tile it replaces. A copy qualifies only into
// fp32: into the narrow dtype it would copy the bits (a NaN's payload) where the tile's copy
// rounds (the canonical NaN).
bool reads_values(const Instr& in) {
  switch (in.op) {
    case Opcode::tensor_tensor:
    case Opcode::tensor_scalar:
    case Opcode::activation:
    case Opcode::tensor_reduce:
      return true;
    case Opcode::tensor_copy:
    case Opcode::dma_copy:
      return in.dst.dtype == DType::float32;
    default:
      return false;
  }
}

// Whether `src`, the HBM source of a load filling run-local range r of `np` partitions, holds
// the range's rows: one row per partition, laid out densely like the range's bytes, at an
// offset known when the program starts (a register or runtime loop in it is left alone).
bool holds_rows(const Instr& load, const RunLocal& r, int64_t np, DType dtype,
                const std::function<bool(const Affine&)>& dynamic) {
  if (load.op != Opcode::dma_copy || load.args.indirect != InstrArgs::Indirect::none ||
      load.args.oob_skip || load.src.size() != 1)
    return false;
  const AccessPattern& src = load.src[0];
  const int64_t es = dtype_bytes(dtype);
  return !is_on_chip(src.memory) && src.tensor >= 0 && widens(src.dtype, dtype) &&
         !src.dims.empty() && src.dims[0].size == np && src.dims[0].stride >= 1 &&
         (r.hi - r.lo) % es == 0 && dense_row(src) == (r.hi - r.lo) / es &&
         !dynamic(src.offset);
}

// `v`, inside range r, as the same elements of the HBM rows `rows` holding r.
AccessPattern onto_rows(const AccessPattern& v, const RunLocal& r, const AccessPattern& rows) {
  AccessPattern h = v;
  h.memory = rows.memory;
  h.tensor = rows.tensor;
  h.dtype = rows.dtype;
  h.partition = Affine();
  h.offset = rows.offset + Affine((v.offset.constant - r.lo) / dtype_bytes(v.dtype));
  h.dims[0] = {rows.dims[0].stride, v.dims[0].size};
  h.rotation = {};
  h.alloc = rows.alloc;  // an HBM view: no on-chip allocation (so it compares equal to the rows)
  return h;
}

// The field of `copy` that is `ap` in `orig` (a copy of it).
AccessPattern& field(Instr& copy, const Instr& orig, const AccessPattern* ap) {
  if (ap == &orig.dst) return copy.dst;
  if (ap == &orig.reduce_res) return copy.reduce_res;
  return copy.src[static_cast<size_t>(ap - orig.src.data())];
}

}  // namespace

ForwardedRun forward_loads(const std::vector<ProgNode>& body, size_t i, size_t j,
                           std::vector<RunLocal>& ranges,
                           const std::function<bool(const Affine&)>& dynamic,
                           const SbufAccesses* all) {
  static const SbufAccesses none;
  struct Use {
    size_t k;  // instruction index in body
    const AccessPattern* ap;
    bool written;
  };
  ForwardedRun out;
  std::vector<Use> uses;  // every access of the run in execution order
  for (size_t k = i; k < j; ++k) {
    out.instrs.push_back(body[k].instr);
    for (auto [ap, written] : in_order(body[k].instr)) uses.push_back({k, ap, written});
  }
  out.dropped.assign(j - i, false);

  std::vector<RunLocal> kept;
  for (const RunLocal& r : ranges) {
    // The range's accesses: the first is its defining write (run_local_ranges), the load.
    std::vector<Use> mine;
    for (const Use& u : uses)
      if (u.ap->memory == Memory::sbuf && u.ap->partition.is_constant() &&
          u.ap->partition.constant == r.partition && u.ap->offset.is_constant() &&
          u.ap->offset.constant >= r.lo && u.ap->offset.constant < r.hi)
        mine.push_back(u);
    const Instr* load = mine.empty() ? nullptr : &body[mine[0].k].instr;
    bool ok = load && mine[0].written && mine[0].ap == &load->dst;
    const int64_t np = ok ? load->dst.dims[0].size : 0;
    const DType dtype = ok ? load->dst.dtype : DType::float32;
    ok = ok && holds_rows(*load, r, np, dtype, dynamic);
    // Every other access reads whole elements of the range's rows with its dtype, through an
    // instruction that takes their values.
    for (size_t m = 1; m < mine.size() && ok; ++m) {
      const AccessPattern& v = *mine[m].ap;
      ok = !mine[m].written && mine[m].k != mine[0].k && v.dtype == dtype &&
           v.dims[0].stride == 1 && v.dims[0].size == np &&
           (v.offset.constant - r.lo) % dtype_bytes(dtype) == 0 &&
           (load->src[0].dtype == dtype || reads_values(body[mine[m].k].instr));
    }
    // Nothing else of the run touches the range, and nothing writes the HBM rows, but for a
    // write of exactly those rows after the range's last read (an in-place update of an output:
    // the run goes block by block of partitions, so each block's rows are read before they are
    // written, and a later block's rows are not written yet).
    const AccessPattern whole = probe(r.partition, np, r.lo, r.hi);
    const size_t last_read = mine.empty() ? 0 : mine.back().k;
    for (const Use& u : uses) {
      if (!ok) break;
      bool listed = false;
      for (const Use& m : mine) listed = listed || m.ap == u.ap;
      const bool rewrite = u.written && *u.ap == load->src[0] && u.k > last_read;
      ok = !(u.written && !rewrite && may_overlap(load->src[0], *u.ap)) &&
           (listed || !may_touch(whole, *u.ap, all ? *all : none));
    }
    if (!ok) {
      kept.push_back(r);
      continue;
    }
    out.dropped[mine[0].k - i] = true;
    for (size_t m = 1; m < mine.size(); ++m)
      field(out.instrs[mine[m].k - i], body[mine[m].k].instr, mine[m].ap) =
          onto_rows(*mine[m].ap, r, load->src[0]);
    out.rows.push_back(load->src[0]);
  }
  ranges = std::move(kept);
  return out;
}

}  // namespace neuron::native
