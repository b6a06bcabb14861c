// Profile analysis (activity, HFU, bandwidth, verdict, waits, source lines) and the text summary.
#include "neuron/runtime/profile.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <tuple>

namespace neuron {

namespace {

// Largest value of a sum of intervals [start, end) with weights, swept in time order.
double peak_of(const std::vector<LiveRange>& live, Memory mem) {
  std::vector<std::pair<double, double>> deltas;
  for (auto& r : live)
    if (r.memory == mem) {
      deltas.emplace_back(r.start_ns, r.bytes_per_partition);
      deltas.emplace_back(r.end_ns, -r.bytes_per_partition);
    }
  std::sort(deltas.begin(), deltas.end());  // frees sort before allocations at equal times
  double cur = 0, peak = 0;
  for (auto& [t, d] : deltas) peak = std::max(peak, cur += d);
  return peak;
}

std::string where(const Span& s) {
  if (s.file.empty()) return "<unknown>";
  auto slash = s.file.find_last_of('/');
  return fmt::format("{}:{}", slash == std::string::npos ? s.file : s.file.substr(slash + 1),
                     s.line);
}

std::string us(double ns) { return fmt::format("{:.2f} us", ns / 1000.0); }

// Total length of the union of intervals (sorted in place).
double union_ns(std::vector<std::pair<double, double>>& iv) {
  std::sort(iv.begin(), iv.end());
  double sum = 0, cur_s = 0, cur_e = -1;
  for (auto& [s, e] : iv) {
    if (s > cur_e) {
      sum += std::max(0.0, cur_e - cur_s);
      cur_s = s;
      cur_e = e;
    } else {
      cur_e = std::max(cur_e, e);
    }
  }
  return sum + std::max(0.0, cur_e - cur_s);
}

}  // namespace

ProfileStats analyze(const Profile& p) {
  ProfileStats st;
  st.unit_busy_ns.assign(p.units.size(), 0.0);
  st.unit_occupancy_ns.assign(p.units.size(), 0.0);
  st.unit_wait_ns.assign(p.units.size(), 0.0);
  st.unit_count.assign(p.units.size(), 0);
  // A unit is active while any of its instructions runs (start to results visible), as the
  // vendor profiler counts it; pipelined instructions overlap, so this is a union.
  std::vector<std::vector<std::pair<double, double>>> per_unit(p.units.size());
  std::vector<std::pair<double, double>> dma;
  for (auto& e : p.events) {
    const size_t u = static_cast<size_t>(e.unit);
    per_unit[u].emplace_back(e.start_ns, e.end_ns);
    st.unit_occupancy_ns[u] += e.occupancy_ns;
    st.unit_wait_ns[u] += e.wait_ns;
    ++st.unit_count[u];
    if (e.unit == 0) st.tensor_flops += e.flops;
    if (e.unit >= p.first_dma_unit) {
      dma.emplace_back(e.start_ns, e.end_ns);
      if (p.instrs[static_cast<size_t>(e.instr)].hbm) st.hbm_bytes += e.bytes;
    }
  }
  for (size_t u = 0; u < per_unit.size(); ++u) st.unit_busy_ns[u] = union_ns(per_unit[u]);
  st.dma_active_ns = union_ns(dma);
  const double total = p.total_ns > 0 ? p.total_ns : 1;
  double engines_busy = 0;
  for (double b : p.dma_engine_busy_ns) engines_busy += b;
  st.dma_engine_busy = p.dma_engine_busy_ns.empty()
                           ? 0
                           : engines_busy / static_cast<double>(p.dma_engine_busy_ns.size()) / total;
  st.tensor_hfu = p.tensor_peak_flops > 0 ? st.tensor_flops / (total * 1e-9 * p.tensor_peak_flops)
                                          : 0;
  st.hbm_gbps = static_cast<double>(st.hbm_bytes) / total;  // bytes/ns == GB/s
  st.sbuf_live_peak = peak_of(p.live, Memory::sbuf);
  st.psum_live_peak = peak_of(p.live, Memory::psum);

  // Waits, grouped by what was waited for and who waited (DMA queues fold into one).
  std::map<std::tuple<int, int, int, int>, ProfileStats::Wait> waits;
  for (auto& e : p.events) {
    if (e.wait_on < 0 || e.wait_ns <= 0) continue;
    const InstrEvent& prod = p.events[static_cast<size_t>(e.wait_on)];
    int waiter = std::min(e.unit, p.first_dma_unit);
    auto& w = waits[{prod.instr, waiter, static_cast<int>(e.wait_kind),
                     static_cast<int>(e.wait_memory)}];
    w.producer_instr = prod.instr;
    w.waiter_unit = waiter;
    w.kind = e.wait_kind;
    w.memory = e.wait_memory;
    w.total_ns += e.wait_ns;
    ++w.count;
  }
  // The busiest engine is the one whose stalls cost the kernel time; other engines mostly wait
  // on it (VectorE evacuating PSUM waits on TensorE) and DMA queues wait for free buffers. Busy
  // here is the time it issued (its occupancy): a dependent chain keeps an engine "active" while
  // each result drains, yet the engine mostly idles.
  int busiest = 0;
  for (int u = 1; u < p.first_dma_unit; ++u)
    if (st.unit_occupancy_ns[static_cast<size_t>(u)] >
        st.unit_occupancy_ns[static_cast<size_t>(busiest)])
      busiest = u;
  double busiest_wait_on_dma = 0, busiest_wait_on_engine = 0;
  for (auto& e : p.events)
    if (e.unit == busiest && e.wait_on >= 0)
      (p.events[static_cast<size_t>(e.wait_on)].unit >= p.first_dma_unit ? busiest_wait_on_dma
                                                                         : busiest_wait_on_engine) +=
          e.wait_ns;
  for (auto& [k, w] : waits) st.top_waits.push_back(w);
  auto rank = [&](const ProfileStats::Wait& w) {
    return w.waiter_unit == busiest ? 0 : w.waiter_unit < p.first_dma_unit ? 1 : 2;
  };
  std::sort(st.top_waits.begin(), st.top_waits.end(), [&](auto& a, auto& b) {
    return rank(a) != rank(b) ? rank(a) < rank(b) : a.total_ns > b.total_ns;
  });

  std::map<std::pair<std::string, int>, ProfileStats::Line> lines;
  std::map<std::pair<std::string, int>, std::set<std::string>> ops;
  for (auto& e : p.events) {
    const ProfileInstr& in = p.instrs[static_cast<size_t>(e.instr)];
    auto key = std::pair{in.span.file, in.span.line};
    auto& l = lines[key];
    l.file = in.span.file;
    l.line = in.span.line;
    l.busy_ns += e.occupancy_ns;  // engine time (DMA: its data movement)
    l.wait_ns += e.wait_ns;
    ++l.count;
    ops[key].insert(in.opcode);
  }
  for (auto& [k, l] : lines) {
    l.what = fmt::format("{}", fmt::join(ops[k], ", "));
    st.top_lines.push_back(l);
  }
  std::sort(st.top_lines.begin(), st.top_lines.end(),
            [](auto& a, auto& b) { return a.busy_ns > b.busy_ns; });
  st.hints = profile_hints(p);

  // Verdict, from measured activity: an engine issuing >= 90% of the time is compute-bound; DMA
  // engines >= 60% busy moving data is DMA-bound on bandwidth; DMA in flight >= 90% of the time,
  // or the busiest engine waiting mostly on DMA-produced data, is DMA-bound on transfer latency
  // (too few transfers in flight, or too small ones); anything else waits on dependences.
  const double busiest_frac = st.unit_occupancy_ns[static_cast<size_t>(busiest)] / total;
  const std::string busiest_name = p.units[static_cast<size_t>(busiest)];
  if (p.events.empty())
    st.verdict = "empty (no timed instructions)";
  else if (busiest_frac >= 0.9 && busiest_frac >= st.dma_engine_busy)
    st.verdict = fmt::format("compute-bound on {}", busiest_name);
  else if (st.dma_engine_busy >= 0.6)
    st.verdict = "DMA-bound (bandwidth)";
  else if (busiest_frac >= 0.9)
    st.verdict = fmt::format("compute-bound on {}", busiest_name);
  else if (st.dma_active_ns / total >= 0.9 || busiest_wait_on_dma > busiest_wait_on_engine)
    st.verdict = "DMA-bound (latency: transfers in flight leave the DMA engines idle)";
  else
    st.verdict = "latency/dependence-bound";
  return st;
}

std::string summary_text(const Profile& p) {
  ProfileStats st = analyze(p);
  const double total = p.total_ns > 0 ? p.total_ns : 1;
  std::string s;
  auto out = std::back_inserter(s);
  fmt::format_to(out, "kernel {} on {}{}: {} program{}, {} instructions, {} executed\n", p.kernel,
                 p.target, p.executed ? "" : " (timing only)", p.programs,
                 p.programs == 1 ? "" : "s", p.instrs.size(), p.events.size());
  fmt::format_to(out, "total time        {} on the device, {} with the {} launch floor\n",
                 us(p.total_ns), us(p.total_ns + p.launch_ns), us(p.launch_ns));
  fmt::format_to(out, "engines active    ");
  for (int u = 0; u < p.first_dma_unit; ++u)
    fmt::format_to(out, "{} {:.1f}%{}", p.units[static_cast<size_t>(u)],
                   100 * st.unit_busy_ns[static_cast<size_t>(u)] / total,
                   u + 1 < p.first_dma_unit ? ", " : " (instruction start to results visible)\n");
  fmt::format_to(out, "engines issuing   ");
  for (int u = 0; u < p.first_dma_unit; ++u)
    fmt::format_to(out, "{} {:.1f}%{}", p.units[static_cast<size_t>(u)],
                   100 * st.unit_occupancy_ns[static_cast<size_t>(u)] / total,
                   u + 1 < p.first_dma_unit ? ", " : "\n");
  int queues = 0;
  for (size_t u = static_cast<size_t>(p.first_dma_unit); u < p.units.size(); ++u)
    queues += st.unit_busy_ns[u] > 0;
  fmt::format_to(out, "DMA active        {:.1f}% (any transfer in flight), engines {:.1f}% busy "
                 "moving data ({} tracks of transfers)\n",
                 100 * st.dma_active_ns / total, 100 * st.dma_engine_busy, queues);
  fmt::format_to(out, "TensorE HFU       {:.1f}% of the {:.1f} TFLOPS bf16 peak ({:.3g} GFLOP)\n",
                 100 * st.tensor_hfu, p.tensor_peak_flops / 1e12, st.tensor_flops / 1e9);
  fmt::format_to(out, "HBM bandwidth     {:.1f} GB/s achieved of the core's {:.1f} GB/s ({:.1f}%), "
                 "{:.2f} MiB moved\n",
                 st.hbm_gbps, p.hbm_gbps, 100 * st.hbm_gbps / p.hbm_gbps,
                 static_cast<double>(st.hbm_bytes) / (1 << 20));
  fmt::format_to(out, "verdict           {}\n", st.verdict);
  fmt::format_to(out, "top waits:\n");
  int n = 0;
  for (auto& w : st.top_waits) {
    if (n++ == 6) break;
    const ProfileInstr& in = p.instrs[static_cast<size_t>(w.producer_instr)];
    std::string waiter = w.waiter_unit >= p.first_dma_unit
                             ? "DMA queues"
                             : p.units[static_cast<size_t>(w.waiter_unit)];
    fmt::format_to(out, "  {:<10} waited {:>12} ({}x) for {} at {} ({} dependence on {})\n", waiter,
                   us(w.total_ns), w.count, in.opcode, where(in.span),
                   dep_kind_name(w.kind).substr(0, dep_kind_name(w.kind).find(' ')),
                   memory_name(w.memory));
  }
  if (st.top_waits.empty()) fmt::format_to(out, "  none\n");
  fmt::format_to(out, "top source lines by time:\n");
  n = 0;
  for (auto& l : st.top_lines) {
    if (n++ == 8) break;
    fmt::format_to(out, "  {:<24} {:>12} busy {:>12} waiting  {:>7}x  {}\n",
                   where(Span{l.file, l.line, 0}), us(l.busy_ns), us(l.wait_ns), l.count, l.what);
  }
  if (!st.hints.empty()) fmt::format_to(out, "costly patterns the compiler inserted:\n");
  for (auto& h : st.hints)
    fmt::format_to(out, "  {}: {}\n", where(Span{h.file, h.line, 0}), h.message);
  fmt::format_to(out, "SBUF              {} of {} bytes per partition allocated ({:.1f}%), live "
                 "data peak {:.0f} bytes per partition\n",
                 p.sbuf_alloc_bytes, p.sbuf_capacity,
                 p.sbuf_capacity ? 100.0 * static_cast<double>(p.sbuf_alloc_bytes) /
                                       static_cast<double>(p.sbuf_capacity)
                                 : 0.0,
                 st.sbuf_live_peak);
  fmt::format_to(out, "PSUM              {} of {} bytes per partition allocated ({:.1f}%), live "
                 "data peak {:.0f} bytes per partition\n",
                 p.psum_alloc_bytes, p.psum_capacity,
                 p.psum_capacity ? 100.0 * static_cast<double>(p.psum_alloc_bytes) /
                                       static_cast<double>(p.psum_capacity)
                                 : 0.0,
                 st.psum_live_peak);
  return s;
}

std::vector<std::string> write_profile(const Profile& p, const std::string& dir,
                                       const std::string& stem) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    user_error(Span{}, "profile-dir", "cannot create profile directory '{}': {}", dir,
               ec.message());
  std::vector<std::string> paths;
  auto put = [&](const std::string& ext, const std::string& text) {
    std::string path = (std::filesystem::path(dir) / (stem + ext)).string();
    std::ofstream f(path, std::ios::binary);
    f << text;
    if (!f)
      user_error(Span{}, "profile-dir", "cannot write profile file '{}'", path);
    paths.push_back(path);
  };
  put(".json", trace_json(p));
  put(".txt", summary_text(p));
  put(".html", html_report(p));
  return paths;
}

}  // namespace neuron
