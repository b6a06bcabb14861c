// Two profiles of one kernel side by side: device time, verdict, and what got faster or slower
// per unit and per source line.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "neuron/runtime/profile.hpp"

namespace neuron {

namespace {

std::string where(const std::string& file, int line) {
  if (file.empty()) return "<unknown>";
  auto slash = file.find_last_of('/');
  return fmt::format("{}:{}", slash == std::string::npos ? file : file.substr(slash + 1), line);
}

// Per-unit active time with the DMA tracks folded, and per-line engine time.
void tally(const Profile& p, std::map<std::string, double>& units,
           std::map<std::string, double>& lines, std::vector<std::string>& order) {
  ProfileStats st = analyze(p);
  for (int u = 0; u < p.first_dma_unit; ++u) {
    units[p.units[static_cast<size_t>(u)]] = st.unit_busy_ns[static_cast<size_t>(u)];
    if (std::find(order.begin(), order.end(), p.units[static_cast<size_t>(u)]) == order.end())
      order.push_back(p.units[static_cast<size_t>(u)]);
  }
  units["DMA (any transfer in flight)"] = st.dma_active_ns;
  units["DMA engines (moving data)"] = st.dma_engine_busy * p.total_ns;
  for (auto& l : st.top_lines)
    lines[fmt::format("{}  {}", where(l.file, l.line), l.what)] += l.busy_ns;
}

}  // namespace

ProfileDiff compare_profiles(const Profile& before, const Profile& after,
                             const std::string& before_label, const std::string& after_label) {
  ProfileDiff d;
  d.kernel = after.kernel;
  d.before_label = before_label;
  d.after_label = after_label;
  d.before_ns = before.total_ns;
  d.after_ns = after.total_ns;
  d.before_verdict = analyze(before).verdict;
  d.after_verdict = analyze(after).verdict;
  std::map<std::string, double> bu, au, bl, al;
  std::vector<std::string> order;
  tally(before, bu, bl, order);
  tally(after, au, al, order);
  order.push_back("DMA (any transfer in flight)");
  order.push_back("DMA engines (moving data)");
  for (auto& u : order) d.units.push_back({u, bu[u], au[u]});
  std::set<std::string> keys;
  for (auto& [k, v] : bl) keys.insert(k);
  for (auto& [k, v] : al) keys.insert(k);
  for (auto& k : keys) d.lines.push_back({k, bl[k], al[k]});
  std::sort(d.lines.begin(), d.lines.end(), [](auto& a, auto& b) {
    return std::fabs(a.after_ns - a.before_ns) > std::fabs(b.after_ns - b.before_ns);
  });
  return d;
}

std::string compare_text(const ProfileDiff& d) {
  auto us = [](double ns) { return fmt::format("{:.2f} us", ns / 1000.0); };
  auto change = [](double b, double a) {
    if (b <= 0 && a <= 0) return std::string("=");
    if (b <= 0) return std::string("new");
    if (a <= 0) return std::string("gone");
    double r = a / b;
    if (std::fabs(r - 1) < 0.005) return std::string("=");
    return fmt::format("x{:.2f} {}", r, r < 1 ? "faster" : "slower");
  };
  std::string s;
  auto out = std::back_inserter(s);
  fmt::format_to(out, "kernel {}: {} {} -> {} {} ({})\n", d.kernel, d.before_label,
                 us(d.before_ns), d.after_label, us(d.after_ns), change(d.before_ns, d.after_ns));
  fmt::format_to(out, "verdict: {} -> {}\n", d.before_verdict, d.after_verdict);
  fmt::format_to(out, "by unit (active time):\n");
  for (auto& r : d.units)
    fmt::format_to(out, "  {:<30} {:>14} {:>14}  {}\n", r.what, us(r.before_ns), us(r.after_ns),
                   change(r.before_ns, r.after_ns));
  fmt::format_to(out, "by source line (engine time, largest changes first):\n");
  int n = 0;
  for (auto& r : d.lines) {
    if (n++ == 12) break;
    fmt::format_to(out, "  {:<44} {:>14} {:>14}  {}\n", r.what, us(r.before_ns), us(r.after_ns),
                   change(r.before_ns, r.after_ns));
  }
  return s;
}

}  // namespace neuron
