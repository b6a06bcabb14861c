// The self-contained HTML profile report: summary, hints, an interactive timeline (script in
// profile_html_script.cpp), utilization and memory charts, per-engine table, the kernel's source
// beside its per-line cost, and a comparison with another profile. Nothing is fetched.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <set>

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

// A JSON string that is also safe inside <script> (no "</").
std::string js_str(std::string_view v) {
  std::string o = "\"";
  for (char c : v) {
    switch (c) {
      case '"': o += "\\\""; break;
      case '\\': o += "\\\\"; break;
      case '\n': o += "\\n"; break;
      case '<': o += "\\u003c"; break;
      case '>': o += "\\u003e"; break;
      case '&': o += "\\u0026"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20)
          o += fmt::format("\\u{:04x}", static_cast<int>(c));
        else
          o += c;
    }
  }
  return o + "\"";
}

constexpr size_t kMaxEvents = 400000;  // keeps the page usable; the summary covers them all

// The profile as the script's data (P).
std::string script_data(const Profile& p) {
  std::string s;
  auto out = std::back_inserter(s);
  fmt::format_to(out, "const P = {{total: {:.1f}, units: [", p.total_ns);
  for (size_t u = 0; u < p.units.size(); ++u)
    fmt::format_to(out, "{}{}", u ? "," : "", js_str(p.units[u]));
  fmt::format_to(out, "],\ninstrs: [");
  for (size_t i = 0; i < p.instrs.size(); ++i) {
    const ProfileInstr& in = p.instrs[i];
    fmt::format_to(out, "{}[{},{},{},{},{}]", i ? ",\n" : "", js_str(in.opcode),
                   js_str(engine_name(in.engine)), js_str(in.span.file), in.span.line,
                   js_str(in.operands));
  }
  fmt::format_to(out, "],\nev: [");
  const size_t n = std::min(p.events.size(), kMaxEvents);
  for (size_t i = 0; i < n; ++i) {
    const InstrEvent& e = p.events[i];
    const int64_t wait_on = e.wait_on >= 0 && static_cast<size_t>(e.wait_on) < n ? e.wait_on : -1;
    fmt::format_to(out, "{}[{},{},{:.1f},{:.1f},{:.1f},{},{:.1f},{},\"{}\",{},{},{:.0f},{:.0f}]",
                   i ? (i % 8 ? "," : ",\n") : "", e.instr, e.unit, e.start_ns, e.end_ns,
                   e.occupancy_ns, wait_on, wait_on >= 0 ? e.wait_ns : 0.0,
                   static_cast<int>(e.wait_kind), memory_name(e.wait_memory), e.program, e.bytes,
                   e.flops, e.table_load_ns);
  }
  fmt::format_to(out, "]}};\n");
  return s;
}

// The kernel's source files, each line with its engine time, waits, executions and opcodes.
std::string source_view(const Profile& p, const ProfileStats& st) {
  std::map<std::string, std::map<int, const ProfileStats::Line*>> files;
  for (auto& l : st.top_lines)
    if (!l.file.empty() && l.line > 0) files[l.file][l.line] = &l;
  double most = 1;
  for (auto& l : st.top_lines) most = std::max(most, l.busy_ns);
  std::string h;
  for (auto& [file, lines] : files) {
    std::vector<std::string> text;
    std::ifstream f(file);
    for (std::string line; std::getline(f, line);) text.push_back(line);
    const int first = std::max(1, lines.begin()->first - 3);
    const int last = text.empty() ? lines.rbegin()->first
                                  : std::min<int>(static_cast<int>(text.size()),
                                                  lines.rbegin()->first + 3);
    h += fmt::format("<h3>{}</h3>\n<table class='src'><tr><th>line</th><th class='l'>engine time"
                     "</th><th>busy (us)</th><th>waiting (us)</th><th>runs</th><th class='l'>"
                     "instructions</th><th class='l'>source</th></tr>\n",
                     esc(file));
    for (int n = first; n <= last; ++n) {
      auto it = lines.find(n);
      const std::string code = n - 1 < static_cast<int>(text.size()) ? text[n - 1] : "";
      if (it == lines.end()) {
        if (text.empty()) continue;
        h += fmt::format("<tr id='L{}:{}'><td>{}</td><td></td><td></td><td></td><td></td><td></td>"
                         "<td class='l code'>{}</td></tr>\n",
                         esc(file), n, n, esc(code));
        continue;
      }
      const ProfileStats::Line& l = *it->second;
      h += fmt::format("<tr id='L{}:{}' class='hot'><td>{}</td><td class='l'><div class='bar' "
                       "style='width:{:.0f}px'></div></td><td>{:.2f}</td><td>{:.2f}</td><td>{}</td>"
                       "<td class='l'>{}</td><td class='l code'>{}</td></tr>\n",
                       esc(file), n, n, 120 * l.busy_ns / most, l.busy_ns / 1000,
                       l.wait_ns / 1000, l.count, esc(l.what), esc(code));
    }
    h += "</table>\n";
  }
  return h;
}

std::string compare_table(const ProfileDiff& d) {
  auto row = [](const ProfileDiff::Row& r) {
    std::string change = r.before_ns > 0 && r.after_ns > 0
                             ? fmt::format("x{:.2f}", r.after_ns / r.before_ns)
                             : r.before_ns > 0 ? "gone" : "new";
    const char* cls = r.after_ns < r.before_ns * 0.995 ? "faster"
                      : r.after_ns > r.before_ns * 1.005 ? "slower" : "";
    return fmt::format("<tr><td class='l'>{}</td><td>{:.2f}</td><td>{:.2f}</td>"
                       "<td class='{}'>{}</td></tr>\n",
                       esc(r.what), r.before_ns / 1000, r.after_ns / 1000, cls, change);
  };
  std::string h = fmt::format(
      "<h2>Comparison: {} &rarr; {}</h2>\n<div>{:.2f} us &rarr; {:.2f} us (x{:.2f}); verdict "
      "{} &rarr; {}</div>\n<table><tr><th class='l'>unit</th><th>{} (us)</th><th>{} (us)</th>"
      "<th>change</th></tr>\n",
      esc(d.before_label), esc(d.after_label), d.before_ns / 1000, d.after_ns / 1000,
      d.before_ns > 0 ? d.after_ns / d.before_ns : 0.0, esc(d.before_verdict),
      esc(d.after_verdict), esc(d.before_label), esc(d.after_label));
  for (auto& r : d.units) h += row(r);
  h += "</table>\n<table><tr><th class='l'>source line</th><th>before (us)</th><th>after (us)"
       "</th><th>change</th></tr>\n";
  int n = 0;
  for (auto& r : d.lines) {
    if (n++ == 30) break;
    h += row(r);
  }
  return h + "</table>\n";
}

}  // namespace

const char* profile_html_script();  // profile_html_script.cpp

std::string html_report(const Profile& p, const ProfileDiff* compare) {
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
h3 {{ font-size: 13px; margin: 12px 0 4px; }}
.verdict {{ font-size: 15px; font-weight: bold; color: #b02a2a; }}
pre {{ background: #f5f5f5; padding: 8px; font-size: 12px; overflow-x: auto; }}
.chart {{ display: block; background: #fcfcfc; border: 1px solid #ddd; }}
.label {{ font-size: 11px; fill: #333; }} .tick {{ font-size: 10px; fill: #777; }}
.legend {{ font-size: 11px; }} .grid {{ stroke: #e4e4e4; stroke-width: 1; }}
table {{ border-collapse: collapse; font-size: 12px; margin-bottom: 8px; }}
td, th {{ border: 1px solid #ddd; padding: 2px 8px; text-align: right; }}
td.l, th.l {{ text-align: left; }}
.src td {{ border: none; border-bottom: 1px solid #f0f0f0; }}
.code {{ font-family: monospace; white-space: pre; }}
tr.hot {{ background: #fff7e6; }}
.bar {{ height: 9px; background: #e8912d; }}
.hint {{ background: #fff3f3; border-left: 3px solid #d62728; padding: 4px 8px; margin: 4px 0; }}
#details {{ min-height: 48px; padding: 6px 8px; background: #f5f7fb; border: 1px solid #dde; }}
.waited {{ color: #b02a2a; }} .faster {{ color: #2a7a2a; }} .slower {{ color: #b02a2a; }}
#tlbox {{ border: 1px solid #ddd; cursor: crosshair; }}
</style></head><body>
<h1>{0} on {1}{2}</h1>
<div>device time {3:.2f} us (+ {8:.2f} us launch floor) &middot; TensorE HFU {4:.1f}% &middot;
HBM {5:.1f} GB/s of {6:.1f} GB/s &middot; DMA engines {9:.1f}% busy</div>
<div class="verdict">verdict: {7}</div>
)",
                 esc(p.kernel), esc(p.target), p.executed ? "" : " (timing only)", p.total_ns / 1000,
                 100 * st.tensor_hfu, st.hbm_gbps, p.hbm_gbps, esc(st.verdict), p.launch_ns / 1000,
                 100 * st.dma_engine_busy);
  if (!st.hints.empty()) {
    h += "<h2>Costly patterns the compiler inserted</h2>\n";
    for (auto& hint : st.hints)
      h += fmt::format("<div class='hint'><a href='#L{0}:{1}'>{2}:{1}</a>: {3}</div>\n",
                       esc(hint.file), hint.line, esc(hint.file.substr(hint.file.rfind('/') + 1)),
                       esc(hint.message));
  }
  if (compare) h += compare_table(*compare);
  h += "<h2>Timeline</h2>\n<div>One row per engine and DMA track; red: waiting on a dependence. "
       "Wheel or buttons to zoom, drag to pan, click an instruction for its details. "
       "<button id='zin'>zoom in</button> <button id='zout'>zoom out</button> "
       "<button id='zreset'>all</button> view: <span id='view'></span></div>\n"
       "<div id='tlbox'><canvas id='tl' height='200'></canvas></div>\n<div id='details'></div>\n";
  if (p.events.size() > kMaxEvents)
    h += fmt::format("<div>The timeline shows the first {} of {} instructions.</div>\n", kMaxEvents,
                     p.events.size());
  h += "<h2>Utilization over time</h2>\n";
  h += line_chart(useries, {"#3b78c3", "#e8912d", "#8e5bb5", "#8c6d46", "#3a9a5b"}, total,
                  "busy");
  h += "<h2>SBUF / PSUM live data over time (share of capacity per partition)</h2>\n";
  h += line_chart({{"SBUF", sb}, {"PSUM", ps}}, {"#3a9a5b", "#d62728"}, total, "full");
  h += "<h2>Engines</h2>\n<table><tr><th class='l'>unit</th><th>active (us)</th><th>active</th>"
       "<th>engine time (us)</th><th>waiting (us)</th><th>instructions</th></tr>\n";
  for (size_t u = 0; u < p.units.size(); ++u) {
    if (u >= static_cast<size_t>(p.first_dma_unit) && st.unit_count[u] == 0) continue;
    h += fmt::format("<tr><td class='l'>{}</td><td>{:.2f}</td><td>{:.1f}%</td><td>{:.2f}</td>"
                     "<td>{:.2f}</td><td>{}</td></tr>\n",
                     esc(p.units[u]), st.unit_busy_ns[u] / 1000, 100 * st.unit_busy_ns[u] / total,
                     st.unit_occupancy_ns[u] / 1000, st.unit_wait_ns[u] / 1000, st.unit_count[u]);
  }
  h += "</table>\n<h2>Source and per-line cost</h2>\n" + source_view(p, st);
  h += "<h2>Summary</h2>\n<pre>" + esc(summary_text(p)) + "</pre>\n";
  h += "<script>\n" + script_data(p) + profile_html_script() + "</script>\n</body></html>\n";
  return h;
}

}  // namespace neuron
