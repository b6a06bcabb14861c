// The timing model's scheduler: dependence tracking over byte ranges, list scheduling over a
// lookahead window (each instruction goes into the first idle gap of its engine that its
// operands allow), DMA transfers split over the DMA engines, and the live ranges of on-chip data.
// Costs come from timing_cost.cpp; the figures from the target table (dsl/base/src/target.cpp).
#include "neuron/runtime/timing.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <numeric>

#include "neuron/base/error.hpp"

namespace neuron {

namespace {

constexpr int kEngineUnits = 4;  // TensorE, VectorE, ScalarE, GpSimdE; DMA queue tracks follow
// The vendor compiler schedules each engine's instruction stream across loop iterations, so an
// instruction whose operands are ready runs before earlier ones (in program order) that still
// wait, and loads are issued ahead of the compute that needs them. We model its scheduler as
// list scheduling: the model reads kLookahead instructions ahead in program order; of each
// engine's (and the DMA queues') first kPerUnit instructions there that depend on nothing
// unplaced, the one that can start soonest is placed next ([model] choices, docs/profiling.md).
constexpr size_t kLookahead = 512;
constexpr int kPerUnit = 32;
constexpr double kEps = 1e-6;

// One unit's busy intervals; placement finds the first idle gap at or after a time.
class Timeline {
 public:
  // The earliest start >= t of an idle gap `d` long.
  double fit(double t, double d) const {
    auto it = std::upper_bound(busy_.begin() + static_cast<std::ptrdiff_t>(head_), busy_.end(), t,
                               [](double v, const std::pair<double, double>& b) {
                                 return v < b.second;
                               });
    for (; it != busy_.end(); ++it) {
      if (t + d <= it->first + kEps) return t;
      t = std::max(t, it->second);
    }
    return t;
  }

  void occupy(double s, double e) {
    if (e - s <= kEps) return;
    auto it = std::lower_bound(busy_.begin() + static_cast<std::ptrdiff_t>(head_), busy_.end(),
                               std::pair{s, e});
    it = busy_.insert(it, {s, e});
    // Merge with touching neighbours, which keeps the list short for back-to-back work.
    if (it + 1 != busy_.end() && (it + 1)->first <= it->second + kEps) {
      it->second = std::max(it->second, (it + 1)->second);
      busy_.erase(it + 1);
    }
    if (it != busy_.begin() + static_cast<std::ptrdiff_t>(head_) &&
        (it - 1)->second + kEps >= it->first) {
      (it - 1)->second = std::max((it - 1)->second, it->second);
      busy_.erase(it);
    }
  }

  // The end of the last busy interval ending at or before t (the unit idles from there to t).
  double idle_since(double t) const {
    auto it = std::upper_bound(busy_.begin() + static_cast<std::ptrdiff_t>(head_), busy_.end(), t,
                               [](double v, const std::pair<double, double>& b) {
                                 return v < b.second;
                               });
    return it == busy_.begin() + static_cast<std::ptrdiff_t>(head_) ? 0.0 : (it - 1)->second;
  }

  // Nothing will be placed before `t` any more: forget what ends before it.
  void prune(double t) {
    while (head_ < busy_.size() && busy_[head_].second <= t) ++head_;
    if (head_ > 4096) {
      busy_.erase(busy_.begin(), busy_.begin() + static_cast<std::ptrdiff_t>(head_));
      head_ = 0;
    }
  }

 private:
  std::vector<std::pair<double, double>> busy_;  // sorted, disjoint
  size_t head_ = 0;
};

// The earliest start >= t free on every timeline in `tls` for `d`.
double joint_fit(const std::vector<Timeline*>& tls, double t, double d) {
  for (int guard = 0; guard < 1000; ++guard) {
    double s = t;
    for (auto* tl : tls) s = std::max(s, tl->fit(s, d));
    bool all = true;
    for (auto* tl : tls) all = all && tl->fit(s, d) <= s + kEps;
    if (all) return s;
    t = s;
  }
  return t;
}

std::string operand_str(const AccessPattern& ap) {
  return fmt::format("[{}] {}{}", fmt::join(ap.shape(), ", "), dtype_name(ap.dtype),
                     ap.memory == Memory::psum ? " psum" : is_on_chip(ap.memory) ? "" : " hbm");
}

int64_t touched(const Footprint& f) { return f.bytes > 0 ? f.bytes : f.hi - f.lo; }

}  // namespace

bool overlaps(const Footprint& a, const Footprint& b) {
  if (a.space != b.space || a.p_hi <= b.p_lo || b.p_hi <= a.p_lo || a.hi <= b.lo || b.hi <= a.lo)
    return false;
  if (a.row_stride > 0 && a.row_stride == b.row_stride) {
    int64_t ar = a.lo / a.row_stride, br = b.lo / b.row_stride;
    if (ar + a.rows <= br || br + b.rows <= ar) return false;
    return a.col_lo < b.col_hi && b.col_lo < a.col_hi;
  }
  return true;
}

bool covers(const Footprint& o, const Footprint& i) {
  if (o.space != i.space || o.p_lo > i.p_lo || o.p_hi < i.p_hi || o.lo > i.lo || o.hi < i.hi)
    return false;
  if (o.row_stride == 0) return true;  // a contiguous range
  if (i.row_stride != o.row_stride) return false;
  int64_t orow = o.lo / o.row_stride, irow = i.lo / i.row_stride;
  return orow <= irow && irow + i.rows <= orow + o.rows && o.col_lo <= i.col_lo &&
         i.col_hi <= o.col_hi;
}

struct TimingModel::Impl {
  const Target& t;
  Profile& out;
  std::vector<InstrCost> costs;
  std::vector<bool> matmul_like;  // nc_matmul / nc_transpose: src 0 is the stationary
  std::vector<bool> hbm_written;
  std::vector<Timeline> engines;  // TensorE, VectorE, ScalarE, GpSimdE
  std::vector<Timeline> dma;      // the DMA engines
  Timeline psum_port, sbuf_port;  // NC-v2 shared access ports
  std::vector<double> track_end;  // DMA display tracks
  double last_trigger = 0;        // the previous transfer's trigger
  int table = -1;                 // ScalarE's loaded activation table
  Footprint stationary;           // TensorE's loaded stationary
  bool have_stationary = false;

  struct Rec {
    Footprint fp;
    bool write = false;
    int64_t event = 0;
    int unit = -1;
    double start = 0;
    double done = 0;  // reads finished / the engine let go (issue order for pipelined writes)
    double end = 0;   // writes visible; reads: = done
    double last_read = 0;
    double live = 0, live_since = 0;  // bytes per partition (average over 128) still live
  };
  std::vector<std::vector<Rec>> spaces;  // by Footprint::space

  // A dynamic instruction in the scheduler's window.
  struct Item {
    int instr = 0;
    int64_t program = 0;
    std::vector<Footprint> reads, writes;
    int blockers = 0;          // earlier items in the window it depends on
    std::vector<Item*> blocks;  // later items that depend on it
    double floor = 0;          // it starts no earlier than this
    bool deps_known = false;   // all its producers are placed: the fields below are final
    double ready = 0, stat_ready = 0;
    int64_t dep = -1;
    DepKind kind = DepKind::none;
    int dep_space = 0;
  };
  std::vector<std::unique_ptr<Item>> window;  // program order
  std::deque<double> recent_starts;           // starts of the last kLookahead placements
  double floor = 0;  // no new instruction starts before the one kLookahead placements back

  Impl(const Target& target, Profile& o) : t(target), out(o) {
    engines.resize(kEngineUnits);
    dma.resize(static_cast<size_t>(t.dma_engines));
    track_end.assign(static_cast<size_t>(t.dma_engines), 0.0);
  }

  std::vector<Rec>& space(int s) {
    if (static_cast<size_t>(s) >= spaces.size()) spaces.resize(static_cast<size_t>(s) + 1);
    return spaces[static_cast<size_t>(s)];
  }
  bool tracked(const Footprint& f) const {
    if (f.space < 2) return true;
    size_t tensor = static_cast<size_t>(f.space - 2);
    return tensor >= hbm_written.size() || hbm_written[tensor];
  }

  double live_bytes(const Footprint& f) const {
    return static_cast<double>(touched(f)) * static_cast<double>(f.p_hi - f.p_lo) /
           static_cast<double>(t.partitions);
  }

  // Ends a write's live range: at its last read, or when `cut` overwrote all of it.
  void retire(const Rec& r, double cut = std::numeric_limits<double>::infinity()) {
    if (!r.write || r.fp.space >= 2 || r.live <= 0) return;
    double end = std::min(std::max(r.end, r.last_read), cut);
    out.live.push_back(LiveRange{r.fp.space == 0 ? Memory::sbuf : Memory::psum, r.live_since,
                                 std::max(end, r.live_since), r.live});
  }
  // A write that overwrites part of an older one: the overwritten part stops being live.
  void shrink(Rec& r, const Footprint& f, double now) {
    if (r.fp.space >= 2 || r.live <= 0) return;
    const double span = static_cast<double>(std::max<int64_t>(r.fp.hi - r.fp.lo, 1));
    const double density = static_cast<double>(touched(r.fp)) / span;
    const double bytes = static_cast<double>(std::min(r.fp.hi, f.hi) - std::max(r.fp.lo, f.lo)) *
                         density *
                         static_cast<double>(std::min(r.fp.p_hi, f.p_hi) -
                                             std::max(r.fp.p_lo, f.p_lo)) /
                         static_cast<double>(t.partitions);
    if (bytes <= 0) return;
    if (now > r.live_since)
      out.live.push_back(LiveRange{r.fp.space == 0 ? Memory::sbuf : Memory::psum, r.live_since,
                                   now, r.live});
    r.live = std::max(0.0, r.live - bytes);
    r.live_since = std::max(r.live_since, now);
  }

  // Does `later` depend on `earlier` (true, anti or output dependence through their bytes)?
  bool conflicts(const Item& earlier, const Item& later) const {
    for (auto& w : earlier.writes) {
      if (!tracked(w)) continue;
      for (auto& r : later.reads)
        if (overlaps(w, r)) return true;
      for (auto& x : later.writes)
        if (overlaps(w, x)) return true;
    }
    for (auto& r : earlier.reads) {
      if (!tracked(r)) continue;
      for (auto& x : later.writes)
        if (overlaps(r, x)) return true;
    }
    return false;
  }

  // Operands ready: the latest among the producers (RAW, results visible), earlier readers
  // (WAR, reads done) and earlier writers (WAW) of overlapping bytes, each plus the semaphore
  // wake-up; TensorE writes into PSUM behind TensorE writes pipeline (accumulation groups).
  void find_deps(Item& it) {
    const InstrCost& c = costs[static_cast<size_t>(it.instr)];
    const bool stationary_first = matmul_like[static_cast<size_t>(it.instr)];
    auto consider = [&](const Rec& r, DepKind k, bool stationary_operand) {
      double at;
      if (c.engine_unit == 0 && r.unit == 0 && r.fp.space == 1 && k != DepKind::raw)
        at = r.done;
      else
        at = (k == DepKind::war ? r.done : r.end) + t.semaphore_ns;
      if (at > it.ready) {
        it.ready = at;
        it.dep = r.event;
        it.kind = k;
        it.dep_space = r.fp.space;
      }
      if (stationary_operand) it.stat_ready = std::max(it.stat_ready, at);
    };
    for (size_t i = 0; i < it.reads.size(); ++i) {
      const Footprint& f = it.reads[i];
      if (!tracked(f)) continue;
      for (auto& r : space(f.space))
        if (r.write && overlaps(r.fp, f)) consider(r, DepKind::raw, stationary_first && i == 0);
    }
    for (auto& f : it.writes)
      for (auto& r : space(f.space))
        if (overlaps(r.fp, f)) consider(r, r.write ? DepKind::waw : DepKind::war, false);
    it.deps_known = true;
  }

  // Where an engine instruction would go now: its occupancy (with a table load) and start.
  struct Slot {
    double start = 0, occ = 0, table_ns = 0;
    std::vector<Timeline*> tls;
  };
  Slot engine_slot(const Item& it) {
    const InstrCost& c = costs[static_cast<size_t>(it.instr)];
    const int engine = c.engine_unit;
    Slot sl;
    sl.occ = c.ns;
    if (engine == 2 && c.act_table >= 0 && c.act_table != table) sl.table_ns = t.act_table_load_ns;
    sl.occ += sl.table_ns;
    double earliest = std::max(it.ready, it.floor);
    if (matmul_like[static_cast<size_t>(it.instr)] && !same_stationary(it))
      earliest = std::max(earliest, it.stat_ready + c.stationary_ns);
    sl.tls.push_back(&engines[static_cast<size_t>(engine)]);
    if (t.psum_port_shared && c.psum_access && (engine == 1 || engine == 2))
      sl.tls.push_back(&psum_port);
    if (t.sbuf_port_vector_gpsimd_shared && c.sbuf_access && (engine == 1 || engine == 3))
      sl.tls.push_back(&sbuf_port);
    sl.start = joint_fit(sl.tls, earliest, sl.occ);
    return sl;
  }
  // A matmul whose stationary is already loaded needs no LoadStationary.
  bool same_stationary(const Item& it) const {
    if (!have_stationary || it.reads.empty()) return false;
    const Footprint& st = it.reads[0];
    return st.space == stationary.space && st.p_lo == stationary.p_lo &&
           st.p_hi == stationary.p_hi && st.lo == stationary.lo && st.hi == stationary.hi;
  }

  // Does a newer write in `recs` cover the bytes `f` reads of recs[i]? Then the read sees that
  // write's data, not recs[i]'s (whose live range must not be stretched by it). On chip only.
  static bool overwritten(const std::vector<Rec>& recs, size_t i, const Footprint& f) {
    const Footprint& o = recs[i].fp;
    if (o.space >= 2) return false;
    Footprint inter = o;
    inter.p_lo = std::max(o.p_lo, f.p_lo);
    inter.p_hi = std::min(o.p_hi, f.p_hi);
    inter.lo = std::max(o.lo, f.lo);
    inter.hi = std::min(o.hi, f.hi);
    for (size_t j = i + 1; j < recs.size(); ++j)
      if (recs[j].write && covers(recs[j].fp, inter)) return true;
    return false;
  }

  // The DMA engines a transfer's packets go to: all of them, or the `n` that can start soonest.
  std::vector<int> pick_engines(int n, double at, double d) const {
    std::vector<int> all(dma.size());
    std::iota(all.begin(), all.end(), 0);
    if (n >= static_cast<int>(dma.size())) return all;
    std::vector<std::pair<double, int>> by;
    for (int e : all) by.emplace_back(dma[static_cast<size_t>(e)].fit(at, d), e);
    std::stable_sort(by.begin(), by.end(), [](auto& a, auto& b) { return a.first < b.first; });
    std::vector<int> chosen;
    for (int i = 0; i < n; ++i) chosen.push_back(by[static_cast<size_t>(i)].second);
    return chosen;
  }

  void add(int instr, const std::vector<Footprint>& reads, const std::vector<Footprint>& writes,
           int64_t program) {
    const InstrCost& c = costs[static_cast<size_t>(instr)];
    if (c.engine_unit < 0 && !c.dma) return;
    auto it = std::make_unique<Item>();
    it->instr = instr;
    it->program = program;
    it->reads = reads;
    it->writes = writes;
    it->floor = floor;
    for (auto& p : window)
      if (conflicts(*p, *it)) {
        p->blocks.push_back(it.get());
        ++it->blockers;
      }
    window.push_back(std::move(it));
    if (window.size() > kLookahead) place_next();
  }

  // List scheduling: of each unit's first kPerUnit instructions in the window that wait for
  // nothing else in it, place the one that can start soonest (program order breaks ties).
  void place_next() {
    size_t best = window.size();
    double best_start = 0;
    int seen[kEngineUnits + 1] = {};
    for (size_t i = 0; i < window.size(); ++i) {
      Item& it = *window[i];
      const int cls = costs[static_cast<size_t>(it.instr)].dma
                          ? kEngineUnits
                          : costs[static_cast<size_t>(it.instr)].engine_unit;
      if (seen[cls]++ >= kPerUnit || it.blockers > 0) continue;
      if (!it.deps_known) find_deps(it);
      const InstrCost& c = costs[static_cast<size_t>(it.instr)];
      double s = c.dma ? std::max(it.ready, it.floor) : engine_slot(it).start;
      if (best == window.size() || s < best_start - kEps) {
        best = i;
        best_start = s;
      }
    }
    NEURON_ASSERT(best < window.size(), "timing: a dependence cycle in the scheduling window");
    std::unique_ptr<Item> it = std::move(window[best]);
    window.erase(window.begin() + static_cast<std::ptrdiff_t>(best));
    place(*it);
    for (Item* b : it->blocks) --b->blockers;
    // Nothing placed from now on starts before the oldest window entry's floor.
    double horizon = floor;
    for (auto& w : window) horizon = std::min(horizon, w->floor);
    for (auto& tl : engines) tl.prune(horizon);
    for (auto& tl : dma) tl.prune(horizon);
    psum_port.prune(horizon);
    sbuf_port.prune(horizon);
  }

  void place(const Item& it) {
    const InstrCost& c = costs[static_cast<size_t>(it.instr)];
    const int engine = c.engine_unit;  // -1 for DMA
    const int64_t me = static_cast<int64_t>(out.events.size());
    InstrEvent ev;
    ev.instr = it.instr;
    ev.program = it.program;
    ev.bytes = c.bytes;
    ev.flops = c.flops;
    double start, done, end;
    if (c.dma) {
      // Triggered when its operands allow; the first byte moves dma_latency_ns later, on the
      // engines' next idle gaps; completion is seen dma_completion_ns after the last byte.
      start = std::max(it.ready, it.floor);
      const double data_at = start + t.dma_latency_ns;
      double first = std::numeric_limits<double>::infinity(), last = data_at;
      for (int e : pick_engines(c.dma_engines, data_at, c.engine_ns)) {
        Timeline& tl = dma[static_cast<size_t>(e)];
        double s = tl.fit(data_at, c.engine_ns);
        tl.occupy(s, s + c.engine_ns);
        out.dma_engine_busy_ns[static_cast<size_t>(e)] += c.engine_ns;
        first = std::min(first, s);
        last = std::max(last, s + c.engine_ns);
      }
      done = last;
      end = last + t.dma_completion_ns;
      ev.occupancy_ns = last - first;
      // Display: the lowest track free at the trigger, else the one that frees first.
      size_t track = 0;
      for (size_t q = 0; q < track_end.size(); ++q) {
        if (track_end[q] <= start + kEps) {
          track = q;
          break;
        }
        if (track_end[q] < track_end[track]) track = q;
      }
      track_end[track] = std::max(track_end[track], end);
      ev.unit = kEngineUnits + static_cast<int>(track);
      // A wait: the trigger came after the previous transfer's because of a dependence.
      if (it.dep >= 0 && it.ready > last_trigger + kEps) {
        ev.wait_ns = it.ready - last_trigger;
        ev.wait_on = it.dep;
      }
      last_trigger = std::max(last_trigger, start);
    } else {
      Slot sl = engine_slot(it);
      start = sl.start;
      if (sl.table_ns > 0) {
        ev.table_load_ns = sl.table_ns;  // ACT_TABLE_LOAD before the activation
        table = c.act_table;
      }
      if (matmul_like[static_cast<size_t>(it.instr)] && !it.reads.empty()) {
        stationary = it.reads[0];
        have_stationary = true;
      }
      // A wait: the engine idled right before this instruction until its operands were ready.
      const double idle = std::max(engines[static_cast<size_t>(engine)].idle_since(start), it.floor);
      for (auto* tl : sl.tls) tl->occupy(start, start + sl.occ);
      done = start + sl.occ;
      end = done + c.latency_ns;
      ev.unit = engine;
      ev.occupancy_ns = sl.occ;
      if (it.dep >= 0 && start > idle + kEps && it.ready > idle + kEps) {
        ev.wait_ns = std::min(start, it.ready) - idle;
        ev.wait_on = it.dep;
      }
    }
    ev.start_ns = start;
    ev.end_ns = end;
    if (ev.wait_on >= 0) {
      ev.wait_kind = it.kind;
      ev.wait_memory = it.dep_space == 0 ? Memory::sbuf : it.dep_space == 1 ? Memory::psum
                                                                            : Memory::shared_hbm;
    }
    out.events.push_back(ev);
    out.total_ns = std::max(out.total_ns, end);
    recent_starts.push_back(start);
    if (recent_starts.size() > kLookahead) {
      floor = std::max(floor, recent_starts.front());
      recent_starts.pop_front();
    }

    // Record the accesses; drop older records they make redundant (a later access that covers
    // them finishes no earlier, so it is what dependents must wait for).
    for (auto& f : it.reads) {
      if (!tracked(f)) continue;
      auto& recs = space(f.space);
      for (size_t i = 0; i < recs.size(); ++i)
        if (recs[i].write && overlaps(recs[i].fp, f) && !overwritten(recs, i, f))
          recs[i].last_read = std::max(recs[i].last_read, done);
      std::erase_if(recs, [&](const Rec& r) { return !r.write && r.end <= done && covers(f, r.fp); });
      recs.push_back(Rec{f, false, me, engine, start, done, done, done, 0, 0});
    }
    for (auto& f : it.writes) {
      auto& recs = space(f.space);
      std::erase_if(recs, [&](Rec& r) {
        if (!covers(f, r.fp)) {
          if (r.write && overlaps(r.fp, f)) shrink(r, f, start);
          return false;
        }
        retire(r, start);
        return true;
      });
      recs.push_back(Rec{f, true, me, engine, start, done, end, end, live_bytes(f), start});
    }
  }
};

TimingModel::TimingModel(const Target& t, const Program& prog, Profile& out)
    : impl_(std::make_unique<Impl>(t, out)) {
  out.kernel = prog.name;
  out.target = t.name;
  out.units = {"TensorE", "VectorE", "ScalarE", "GpSimdE"};
  for (int q = 0; q < t.dma_engines; ++q) out.units.push_back(fmt::format("DMA q{}", q));
  out.first_dma_unit = kEngineUnits;
  out.sbuf_alloc_bytes = prog.sbuf_bytes;
  out.psum_alloc_bytes = prog.psum_bytes;
  out.sbuf_capacity = t.sbuf_bytes_per_partition;
  out.psum_capacity = t.psum_bytes_per_partition;
  out.tensor_peak_flops = t.tensor_peak_flops();
  out.hbm_gbps = t.hbm_gbps_per_core;
  out.launch_ns = t.launch_ns;
  out.dma_engine_busy_ns.assign(static_cast<size_t>(t.dma_engines), 0.0);
}

TimingModel::~TimingModel() = default;

int TimingModel::add_instr(const Instr& in) {
  impl_->costs.push_back(instr_cost(in, impl_->t));
  impl_->matmul_like.push_back(in.op == Opcode::nc_matmul || in.op == Opcode::nc_transpose);
  ProfileInstr pi;
  pi.hbm = impl_->costs.back().hbm;
  pi.id = in.id;
  pi.opcode = std::string(opcode_name(in.op));
  pi.engine = in.engine;
  pi.span = in.span;
  pi.dst_memory = in.dst.memory;
  std::vector<std::string> srcs;
  for (auto& s : in.src) {
    srcs.push_back(operand_str(s));
    pi.src_memory.push_back(s.memory);
  }
  if (in.op == Opcode::tensor_tensor || in.op == Opcode::tensor_scalar)
    pi.op = std::string(alu_op_name(in.args.op0));
  else if (in.op == Opcode::activation)
    pi.op = std::string(act_func_name(in.args.func));
  pi.operands = !opcode_has_dst(in.op)
                    ? fmt::format("{}", fmt::join(srcs, ", "))
                    : fmt::format("{} <- {}", operand_str(in.dst), fmt::join(srcs, ", "));
  impl_->out.instrs.push_back(std::move(pi));
  return static_cast<int>(impl_->costs.size()) - 1;
}

void TimingModel::set_hbm_written(std::vector<bool> written) {
  impl_->hbm_written = std::move(written);
}

void TimingModel::issue(int instr, const std::vector<Footprint>& reads,
                        const std::vector<Footprint>& writes, int64_t program) {
  impl_->add(instr, reads, writes, program);
}

void TimingModel::finish() {
  while (!impl_->window.empty()) impl_->place_next();
  for (auto& recs : impl_->spaces) {
    for (auto& r : recs) impl_->retire(r);
    recs.clear();
  }
}

std::string_view dep_kind_name(DepKind k) {
  switch (k) {
    case DepKind::raw: return "true (read after write)";
    case DepKind::war: return "anti (write after read)";
    case DepKind::waw: return "output (write after write)";
    default: return "none";
  }
}

}  // namespace neuron
