// The self-contained HTML profile report: inline SVG timeline, utilization and memory charts,
// source-line table. No scripts and no network, so it opens anywhere.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "neuron/runtime/profile.hpp"

namespace neuron {

namespace {

std::string esc(std::string_view s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '&': o += "&amp;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

const char* color_of(Engine e) {
  switch (e) {
    case Engine::tensor: return "#3b78c3";
    case Engine::vector: return "#e8912d";
    case Engine::scalar: return "#8e5bb5";
    case Engine::gpsimd: return "#8c6d46";
    case Engine::dma: return "#3a9a5b";
    default: return "#888888";
  }
}

constexpr double kLeft = 90, kWidth = 1180, kRow = 16;

std::string time_axis(double total, double y, double height) {
  std::string s;
  double step = std::pow(10.0, std::floor(std::log10(std::max(total, 1.0) / 5)));
  if (total / step > 10) step *= 2;
  if (total / step > 10) step *= 2.5;
  for (double t = 0; t <= total + 1e-9; t += step) {
    double x = kLeft + kWidth * t / total;
    s += fmt::format("<line x1='{0:.1f}' x2='{0:.1f}' y1='{1}' y2='{2}' class='grid'/>"
                     "<text x='{0:.1f}' y='{3}' class='tick'>{4:.{5}f} us</text>\n",
                     x, y, y + height, y + height + 12, t / 1000.0,
                     step >= 1000 ? 0 : step >= 100 ? 1 : step >= 10 ? 2 : 3);
  }
  return s;
}

// One row per unit with slices merged when they touch at the chart's resolution.
std::string timeline(const Profile& p, double total) {
  std::vector<size_t> rows;
  std::vector<bool> used(p.units.size(), false);
  for (auto& e : p.events) used[static_cast<size_t>(e.unit)] = true;
  for (size_t u = 0; u < p.units.size(); ++u)
    if (u < static_cast<size_t>(p.first_dma_unit) || used[u]) rows.push_back(u);
  std::vector<int> row_of(p.units.size(), -1);
  for (size_t r = 0; r < rows.size(); ++r) row_of[rows[r]] = static_cast<int>(r);
  const double height = kRow * static_cast<double>(rows.size());
  std::string s = fmt::format("<svg width='{}' height='{}' class='chart'>\n", kLeft + kWidth + 10,
                              height + 20);
  for (size_t r = 0; r < rows.size(); ++r)
    s += fmt::format("<text x='4' y='{:.1f}' class='label'>{}</text>\n",
                     kRow * static_cast<double>(r) + 12, esc(p.units[rows[r]]));
  s += time_axis(total, 0, height);
  auto px = [&](double t) { return kLeft + kWidth * t / total; };
  struct Run {
    double x0 = 0, x1 = -1;
    int instr = -1, count = 0;
  };
  std::vector<Run> busy(p.units.size()), wait(p.units.size());
  auto flush = [&](size_t u, Run& r, bool is_wait) {
    if (r.count == 0) return;
    double y = kRow * row_of[u] + 2;
    const ProfileInstr& in = p.instrs[static_cast<size_t>(r.instr)];
    std::string title = fmt::format("{} at {}:{}{}", in.opcode, in.span.file, in.span.line,
                                    r.count > 1 ? fmt::format(" (+{} more)", r.count - 1) : "");
    if (is_wait)
      s += fmt::format("<rect x='{:.2f}' y='{:.1f}' width='{:.2f}' height='{}' class='wait'>"
                       "<title>waiting before {}</title></rect>\n",
                       r.x0, y + kRow - 6, std::max(r.x1 - r.x0, 0.6), 3, esc(title));
    else
      s += fmt::format("<rect x='{:.2f}' y='{:.1f}' width='{:.2f}' height='{}' fill='{}'>"
                       "<title>{}</title></rect>\n",
                       r.x0, y, std::max(r.x1 - r.x0, 0.6), kRow - 5, color_of(in.engine),
                       esc(title));
    r = Run{};
  };
  auto add = [&](size_t u, Run& r, double x0, double x1, int instr, bool is_wait) {
    bool same = r.count > 0 && x0 - r.x1 < 0.5 &&
                (is_wait || p.instrs[static_cast<size_t>(r.instr)].engine ==
                                p.instrs[static_cast<size_t>(instr)].engine);
    if (!same) {
      flush(u, r, is_wait);
      r.x0 = x0;
      r.instr = instr;
    }
    r.x1 = std::max(r.x1, x1);
    ++r.count;
  };
  for (auto& e : p.events) {
    size_t u = static_cast<size_t>(e.unit);
    if (e.wait_ns > 0) add(u, wait[u], px(e.start_ns - e.wait_ns), px(e.start_ns), e.instr, true);
    add(u, busy[u], px(e.start_ns), px(e.end_ns), e.instr, false);
  }
  for (size_t u = 0; u < p.units.size(); ++u) {
    flush(u, busy[u], false);
    flush(u, wait[u], true);
  }
  return s + "</svg>\n";
}

// Lines over time from per-bin values in [0, 1].
std::string line_chart(const std::vector<std::pair<std::string, std::vector<double>>>& series,
                       const std::vector<const char*>& colors, double total, const char* unit) {
  const double h = 120, top = 10;
  std::string s = fmt::format("<svg width='{}' height='{}' class='chart'>\n", kLeft + kWidth + 10,
                              h + top + 40);
  s += time_axis(total, top, h);
  for (int pct : {0, 50, 100})
    s += fmt::format("<text x='4' y='{:.1f}' class='tick'>{}% {}</text>\n",
                     top + h - h * pct / 100.0 + 4, pct, unit);
  for (size_t i = 0; i < series.size(); ++i) {
    auto& v = series[i].second;
    std::string pts;
    for (size_t b = 0; b < v.size(); ++b) {
      double x0 = kLeft + kWidth * static_cast<double>(b) / static_cast<double>(v.size());
      double x1 = kLeft + kWidth * static_cast<double>(b + 1) / static_cast<double>(v.size());
      double y = top + h - h * std::clamp(v[b], 0.0, 1.0);
      pts += fmt::format("{:.1f},{:.1f} {:.1f},{:.1f} ", x0, y, x1, y);
    }
    s += fmt::format("<polyline points='{}' fill='none' stroke='{}' stroke-width='1.5'/>\n", pts,
                     colors[i % colors.size()]);
    s += fmt::format("<text x='{:.0f}' y='{}' class='legend' fill='{}'>{}</text>\n",
                     kLeft + 160.0 * static_cast<double>(i), top + h + 32, colors[i % colors.size()],
                     esc(series[i].first));
  }
  return s + "</svg>\n";
}

}  // namespace

std::string html_report(const Profile& p) {
  ProfileStats st = analyze(p);
  const double total = p.total_ns > 0 ? p.total_ns : 1;
  constexpr size_t kBins = 240;
  const double bin = total / kBins;
  // Busy fraction per bin: engines individually, DMA queues averaged.
  std::vector<std::vector<double>> util(5, std::vector<double>(kBins, 0.0));
  int queues = static_cast<int>(p.units.size()) - p.first_dma_unit;
  for (auto& e : p.events) {
    size_t row = static_cast<size_t>(std::min(e.unit, p.first_dma_unit));
    double w = e.unit >= p.first_dma_unit ? 1.0 / std::max(queues, 1) : 1.0;
    for (size_t b = static_cast<size_t>(e.start_ns / bin); b < kBins; ++b) {
      double lo = static_cast<double>(b) * bin, hi = lo + bin;
      if (lo >= e.end_ns) break;
      util[row][b] += w * (std::min(hi, e.end_ns) - std::max(lo, e.start_ns)) / bin;
    }
  }
  std::vector<std::pair<std::string, std::vector<double>>> useries;
  for (int u = 0; u < p.first_dma_unit; ++u)
    useries.emplace_back(p.units[static_cast<size_t>(u)], util[static_cast<size_t>(u)]);
  useries.emplace_back("DMA queues (average)", util[4]);
  // Live SBUF/PSUM bytes per partition per bin, as a fraction of capacity.
  std::vector<double> sb(kBins, 0.0), ps(kBins, 0.0);
  for (auto& r : p.live) {
    auto& v = r.memory == Memory::sbuf ? sb : ps;
    double cap = static_cast<double>(r.memory == Memory::sbuf ? p.sbuf_capacity : p.psum_capacity);
    if (cap <= 0) continue;
    for (size_t b = static_cast<size_t>(r.start_ns / bin); b < kBins; ++b) {
      double lo = static_cast<double>(b) * bin, hi = lo + bin;
      if (lo >= r.end_ns) break;
      v[b] += r.bytes_per_partition / cap * (std::min(hi, r.end_ns) - std::max(lo, r.start_ns)) / bin;
    }
  }

  std::string h;
  auto out = std::back_inserter(h);
  fmt::format_to(out, R"(<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>neuron profile: {0}</title>
<style>
body {{ font: 13px -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 16px; color: #222; }}
h1 {{ font-size: 18px; margin: 0 0 4px; }} h2 {{ font-size: 15px; margin: 18px 0 6px; }}
.verdict {{ font-size: 15px; font-weight: bold; color: #b02a2a; }}
pre {{ background: #f5f5f5; padding: 8px; font-size: 12px; overflow-x: auto; }}
.chart {{ display: block; background: #fcfcfc; border: 1px solid #ddd; }}
.label {{ font-size: 11px; fill: #333; }} .tick {{ font-size: 10px; fill: #777; }}
.legend {{ font-size: 11px; }} .grid {{ stroke: #e4e4e4; stroke-width: 1; }}
.wait {{ fill: #d62728; opacity: 0.8; }}
table {{ border-collapse: collapse; font-size: 12px; }}
td, th {{ border: 1px solid #ddd; padding: 3px 8px; text-align: right; }}
td.l, th.l {{ text-align: left; }}
</style></head><body>
<h1>{0} on {1}{2}</h1>
<div>total {3:.2f} us &middot; TensorE HFU {4:.1f}% &middot; HBM {5:.1f} GB/s of {6:.1f} GB/s</div>
<div class="verdict">verdict: {7}</div>
)",
                 esc(p.kernel), esc(p.target), p.executed ? "" : " (timing only)", p.total_ns / 1000,
                 100 * st.tensor_hfu, st.hbm_gbps, p.hbm_gbps, esc(st.verdict));
  h += "<h2>Timeline (one row per engine and DMA queue; red bars: waiting on a dependence)</h2>\n";
  h += timeline(p, total);
  h += "<h2>Utilization over time</h2>\n";
  h += line_chart(useries, {"#3b78c3", "#e8912d", "#8e5bb5", "#8c6d46", "#3a9a5b"}, total,
                  "busy");
  h += "<h2>SBUF / PSUM live data over time (share of capacity per partition)</h2>\n";
  h += line_chart({{"SBUF", sb}, {"PSUM", ps}}, {"#3a9a5b", "#d62728"}, total, "full");
  h += "<h2>Source lines by time</h2>\n<table><tr><th class='l'>source</th><th class='l'>"
       "instructions</th><th>busy (us)</th><th>waiting (us)</th><th>executions</th></tr>\n";
  int n = 0;
  for (auto& l : st.top_lines) {
    if (n++ == 40) break;
    h += fmt::format("<tr><td class='l'>{}:{}</td><td class='l'>{}</td><td>{:.2f}</td>"
                     "<td>{:.2f}</td><td>{}</td></tr>\n",
                     esc(l.file), l.line, esc(l.what), l.busy_ns / 1000, l.wait_ns / 1000, l.count);
  }
  h += "</table>\n<h2>Summary</h2>\n<pre>" + esc(summary_text(p)) + "</pre>\n</body></html>\n";
  return h;
}

}  // namespace neuron
