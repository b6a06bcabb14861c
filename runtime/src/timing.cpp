// The timing model: static instruction costs, dependence tracking over byte ranges, in-order
// engines and DMA queues, and a fluid model of the core's HBM bandwidth.
#include "neuron/runtime/timing.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace neuron {

namespace {

constexpr int kEngineUnits = 4;  // TensorE, VectorE, ScalarE, GpSimdE; DMA queues follow
constexpr double kHbmBinNs = 100;  // granularity of the HBM bandwidth fluid model

int engine_unit(Engine e) {
  switch (e) {
    case Engine::tensor: return 0;
    case Engine::vector: return 1;
    case Engine::scalar: return 2;
    case Engine::gpsimd: return 3;
    default: return -1;
  }
}

bool is_fp8(DType d) { return d == DType::float8_e4m3 || d == DType::float8_e5m2; }
bool is_half(DType d) { return d == DType::bfloat16 || d == DType::float16; }

int64_t per_partition(const AccessPattern& ap) {
  if (ap.dims.empty()) return 1;
  int64_t p = std::max<int64_t>(ap.dims[0].size, 1);
  return ap.elements() / p;
}

// TensorE: the moving tile streams one column per cycle with a 64-cycle floor ([perf]).
double matmul_cycles(int64_t n, DType a, DType b, const Target& t) {
  if (a == DType::float32 || b == DType::float32 || !(is_half(a) || is_fp8(a)))
    return static_cast<double>(std::max<int64_t>(n, t.matmul_min_cycles)) * t.matmul_fp32_slowdown;
  if (is_fp8(a) && is_fp8(b))
    return std::max(static_cast<double>(n) / t.matmul_fp8_speedup,
                    static_cast<double>(t.matmul_min_cycles));
  return static_cast<double>(std::max<int64_t>(n, t.matmul_min_cycles));
}

// Does the innermost non-trivial dim of an access step more than `limit` bytes?
bool strided(const AccessPattern& ap, int64_t limit) {
  size_t first = is_on_chip(ap.memory) ? 1 : 0;
  for (size_t i = ap.dims.size(); i-- > first;) {
    if (ap.dims[i].size <= 1) continue;
    return std::llabs(ap.dims[i].stride) * dtype_bytes(ap.dtype) > limit;
  }
  return false;
}

std::string operand_str(const AccessPattern& ap) {
  return fmt::format("[{}] {}{}", fmt::join(ap.shape(), ", "), dtype_name(ap.dtype),
                     ap.memory == Memory::psum ? " psum" : is_on_chip(ap.memory) ? "" : " hbm");
}

}  // namespace

InstrCost instr_cost(const Instr& in, const Target& t) {
  InstrCost c;
  if (in.engine == Engine::none) return c;  // device_print, registers: the sequencer
  int64_t bytes = in.dst.elements() * dtype_bytes(in.dst.dtype);
  for (auto& s : in.src) bytes += s.elements() * dtype_bytes(s.dtype);
  if (in.engine == Engine::dma || in.op == Opcode::dma_copy) {
    c.dma = true;
    const AccessPattern& src = in.src.at(0);
    c.bytes = std::max(src.elements() * dtype_bytes(src.dtype),
                       in.dst.elements() * dtype_bytes(in.dst.dtype));
    c.hbm = !is_on_chip(src.memory) || !is_on_chip(in.dst.memory);
    bool slow = strided(src, t.dma_strided_bytes) || strided(in.dst, t.dma_strided_bytes);
    c.effective_bytes = static_cast<double>(c.bytes) / (slow ? t.dma_strided_efficiency : 1.0);
    c.ns = t.dma_latency_ns + c.effective_bytes / t.dma_queue_gbps;  // GB/s == bytes/ns
    return c;
  }
  c.engine_unit = engine_unit(in.engine);
  c.bytes = bytes;
  double overhead = static_cast<double>(t.engine_overhead_cycles), ghz = 1;
  switch (in.engine) {
    case Engine::tensor: {
      // nc_matmul streams `moving` (src 1); nc_transpose streams its data through an identity.
      const AccessPattern& moving = in.src.size() > 1 ? in.src[1] : in.src.at(0);
      const AccessPattern& stat = in.src.at(0);
      int64_t n = per_partition(moving);
      c.cycles = matmul_cycles(n, stat.dtype, moving.dtype, t);
      int64_t k = moving.dims.empty() ? 1 : moving.dims[0].size;
      int64_t m = in.src.size() > 1 ? per_partition(stat) : k;
      c.flops = 2.0 * static_cast<double>(k) * static_cast<double>(m) * static_cast<double>(n);
      ghz = t.tensor_ghz;
      c.dependent_cycles = c.cycles;
      c.ns = c.cycles / ghz;
      return c;
    }
    case Engine::vector: {
      const AccessPattern& data = in.src.empty() ? in.dst : in.src[0];
      int64_t elems = std::max(per_partition(data), per_partition(in.dst));
      bool two_inputs = opcode_streamed_inputs(in.op) == 2;
      bool half = is_half(in.dst.dtype) || is_fp8(in.dst.dtype);
      for (auto& s : in.src) half = half && (is_half(s.dtype) || is_fp8(s.dtype));
      double rate = !two_inputs && half ? t.vector_perf_mode_elems_per_cycle
                                        : t.vector_elems_per_cycle;
      double stream = std::ceil(static_cast<double>(elems) / rate) *
                      (two_inputs ? t.two_input_slowdown : 1.0);
      c.cycles = overhead + stream;
      c.dependent_cycles = static_cast<double>(t.vector_dependent_overhead_cycles) + stream;
      c.flops = static_cast<double>(elems * (data.dims.empty() ? 1 : data.dims[0].size));
      ghz = t.vector_ghz;
      break;
    }
    case Engine::scalar: {
      const AccessPattern& data = in.src.empty() ? in.dst : in.src[0];
      int64_t elems = std::max(per_partition(data), per_partition(in.dst));
      double rate = is_half(data.dtype) && is_half(in.dst.dtype) ? t.scalar_bf16_elems_per_cycle
                                                                 : t.scalar_elems_per_cycle;
      c.cycles = overhead + std::ceil(static_cast<double>(elems) / rate);
      c.flops = static_cast<double>(elems * (data.dims.empty() ? 1 : data.dims[0].size));
      ghz = t.scalar_ghz;
      break;
    }
    case Engine::gpsimd: {
      int64_t elems = per_partition(in.dst);
      c.cycles = overhead + std::ceil(static_cast<double>(elems) / t.gpsimd_elems_per_cycle);
      c.flops = static_cast<double>(elems * (in.dst.dims.empty() ? 1 : in.dst.dims[0].size));
      ghz = t.gpsimd_ghz;
      break;
    }
    default:
      return InstrCost{};
  }
  if (c.dependent_cycles == 0) c.dependent_cycles = c.cycles;
  c.ns = c.cycles / ghz;
  return c;
}

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
  std::vector<bool> hbm_written;
  std::vector<double> unit_free;
  std::vector<int64_t> last_event;  // per unit
  int next_queue = 0;
  std::vector<double> hbm_used;  // bytes per bin of kHbmBinNs
  std::vector<int> hbm_streams;  // transfers active per bin
  struct Rec {
    Footprint fp;
    bool write = false;
    int64_t event = 0;
    double start = 0, end = 0, last_read = 0;
  };
  std::vector<std::vector<Rec>> spaces;  // by Footprint::space

  Impl(const Target& target, Profile& o) : t(target), out(o) {}

  std::vector<Rec>& space(int s) {
    if (static_cast<size_t>(s) >= spaces.size()) spaces.resize(static_cast<size_t>(s) + 1);
    return spaces[static_cast<size_t>(s)];
  }
  bool tracked(const Footprint& f) const {
    if (f.space < 2) return true;
    size_t tensor = static_cast<size_t>(f.space - 2);
    return tensor >= hbm_written.size() || hbm_written[tensor];
  }

  void retire(const Rec& r) {
    if (!r.write || r.fp.space >= 2) return;
    double bytes = static_cast<double>(r.fp.hi - r.fp.lo) * static_cast<double>(r.fp.p_hi - r.fp.p_lo) /
                   static_cast<double>(t.partitions);
    out.live.push_back(LiveRange{r.fp.space == 0 ? Memory::sbuf : Memory::psum, r.start,
                                 std::max(r.end, r.last_read), bytes});
  }

  // Moves `bytes` from `start` at the queue's rate, within the core's HBM bandwidth: each bin
  // of kHbmBinNs has a byte capacity. Transfers are placed in program order, not time order, so
  // a newcomer is guaranteed at least a fair share (capacity / streams in the bin) even where
  // earlier-placed transfers took the rest: sixteen simultaneous loads then end together near
  // bytes / share instead of the last ones crawling after the first ones finish.
  double hbm_transfer(double start, double bytes, double qrate) {
    const double cap_rate = t.hbm_gbps_per_core, cap = cap_rate * kHbmBinNs;
    double now = start;
    while (bytes > 1e-9) {
      size_t b = static_cast<size_t>(now / kHbmBinNs);
      if (b >= hbm_used.size()) {
        hbm_used.resize(std::max(b + 1, hbm_used.size() * 2), 0.0);
        hbm_streams.resize(hbm_used.size(), 0);
      }
      double bin_end = static_cast<double>(b + 1) * kHbmBinNs;
      double avail = bin_end - now;
      if (avail <= 1e-9) {
        now = bin_end;
        continue;
      }
      double left = std::max(0.0, cap - hbm_used[b]);
      double rate = std::min(qrate, std::max(left / avail, cap_rate / (hbm_streams[b] + 1)));
      ++hbm_streams[b];
      if (rate * avail >= bytes) {
        hbm_used[b] += bytes;
        return now + bytes / rate;
      }
      hbm_used[b] += rate * avail;
      bytes -= rate * avail;
      now = bin_end;
    }
    return now;
  }

  // DMA queue choice, made when the transfer is issued (program order), like a compiler that
  // balances queues: the queue that lets it start soonest; among queues already free by then,
  // the one that became free last (best fit), so queues free earlier stay available for
  // transfers later in program order that are ready sooner; then round-robin order.
  int pick_queue(double ready) {
    int best = -1;
    double best_start = 0, best_free = 0;
    for (int i = 0; i < t.dma_queues; ++i) {
      int q = (next_queue + i) % t.dma_queues;
      double free = unit_free[static_cast<size_t>(kEngineUnits + q)];
      double start = std::max(free, ready);
      if (best < 0 || start < best_start || (start == best_start && free > best_free)) {
        best = q;
        best_start = start;
        best_free = free;
      }
    }
    next_queue = (best + 1) % t.dma_queues;
    return kEngineUnits + best;
  }

  void issue(int instr, const std::vector<Footprint>& reads, const std::vector<Footprint>& writes,
             int64_t program) {
    const InstrCost& c = costs[static_cast<size_t>(instr)];
    if (c.engine_unit < 0 && !c.dma) return;
    int unit = c.engine_unit;
    const int64_t me = static_cast<int64_t>(out.events.size());

    // Operands ready: the latest end among the producers (RAW), earlier readers (WAR) and
    // earlier writers (WAW) of overlapping bytes.
    double ready = 0;
    int64_t dep = -1;
    DepKind kind = DepKind::none;
    int dep_space = 0;
    bool fed_by_own_previous = false;
    auto consider = [&](const Rec& r, DepKind k) {
      if (r.end > ready) {
        ready = r.end;
        dep = r.event;
        kind = k;
        dep_space = r.fp.space;
      }
      if (k == DepKind::raw && unit >= 0 && r.event == last_event[static_cast<size_t>(unit)])
        fed_by_own_previous = true;
    };
    for (auto& f : reads) {
      if (!tracked(f)) continue;
      for (auto& r : space(f.space))
        if (r.write && overlaps(r.fp, f)) consider(r, DepKind::raw);
    }
    for (auto& f : writes)
      for (auto& r : space(f.space))
        if (overlaps(r.fp, f)) consider(r, r.write ? DepKind::waw : DepKind::war);

    if (c.dma) unit = pick_queue(ready);
    const double free = unit_free[static_cast<size_t>(unit)];
    const double start = std::max(free, ready);
    double end;
    if (c.dma) {
      double data_start = start + t.dma_latency_ns;
      end = c.hbm ? hbm_transfer(data_start, c.effective_bytes, t.dma_queue_gbps)
                  : data_start + c.effective_bytes / t.dma_queue_gbps;
    } else {
      double ghz = unit == 0 ? t.tensor_ghz : unit == 1 ? t.vector_ghz
                 : unit == 2 ? t.scalar_ghz : t.gpsimd_ghz;
      end = start + (fed_by_own_previous ? c.dependent_cycles : c.cycles) / ghz;
    }
    unit_free[static_cast<size_t>(unit)] = end;
    last_event[static_cast<size_t>(unit)] = me;

    InstrEvent ev;
    ev.instr = instr;
    ev.unit = unit;
    ev.program = program;
    ev.start_ns = start;
    ev.end_ns = end;
    ev.bytes = c.bytes;
    ev.flops = c.flops;
    if (ready > free && dep >= 0) {
      ev.wait_on = dep;
      ev.wait_kind = kind;
      ev.wait_memory = dep_space == 0 ? Memory::sbuf : dep_space == 1 ? Memory::psum
                                                                      : Memory::shared_hbm;
      ev.wait_ns = ready - free;
    }
    out.events.push_back(ev);
    out.total_ns = std::max(out.total_ns, end);

    // Record this instruction's accesses; drop older records it makes redundant (a later
    // access that covers them finishes no earlier, so it is what dependents must wait for).
    for (auto& f : reads) {
      if (!tracked(f)) continue;
      auto& recs = space(f.space);
      for (auto& r : recs)
        if (r.write && overlaps(r.fp, f)) r.last_read = std::max(r.last_read, end);
      std::erase_if(recs, [&](const Rec& r) { return !r.write && r.end <= end && covers(f, r.fp); });
      recs.push_back(Rec{f, false, me, start, end, end});
    }
    for (auto& f : writes) {
      auto& recs = space(f.space);
      std::erase_if(recs, [&](const Rec& r) {
        if (!covers(f, r.fp)) return false;
        retire(r);
        return true;
      });
      recs.push_back(Rec{f, true, me, start, end, end});
    }
  }
};

TimingModel::TimingModel(const Target& t, const Program& prog, Profile& out)
    : impl_(std::make_unique<Impl>(t, out)) {
  out.kernel = prog.name;
  out.target = t.name;
  out.units = {"TensorE", "VectorE", "ScalarE", "GpSimdE"};
  for (int q = 0; q < t.dma_queues; ++q) out.units.push_back(fmt::format("DMA q{}", q));
  out.first_dma_unit = kEngineUnits;
  out.sbuf_alloc_bytes = prog.sbuf_bytes;
  out.psum_alloc_bytes = prog.psum_bytes;
  out.sbuf_capacity = t.sbuf_bytes_per_partition;
  out.psum_capacity = t.psum_bytes_per_partition;
  out.tensor_peak_flops = t.tensor_peak_flops();
  out.hbm_gbps = t.hbm_gbps_per_core;
  impl_->unit_free.assign(out.units.size(), 0.0);
  impl_->last_event.assign(out.units.size(), -1);
}

TimingModel::~TimingModel() = default;

int TimingModel::add_instr(const Instr& in) {
  impl_->costs.push_back(instr_cost(in, impl_->t));
  ProfileInstr pi;
  pi.hbm = impl_->costs.back().hbm;
  pi.id = in.id;
  pi.opcode = std::string(opcode_name(in.op));
  pi.engine = in.engine;
  pi.span = in.span;
  std::vector<std::string> srcs;
  for (auto& s : in.src) srcs.push_back(operand_str(s));
  pi.operands = !has_dst(in.op)
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
  impl_->issue(instr, reads, writes, program);
}

void TimingModel::finish() {
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
