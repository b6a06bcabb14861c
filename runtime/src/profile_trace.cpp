// Chrome trace event JSON for a Profile (opens in Perfetto's UI and chrome://tracing).
#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "neuron/runtime/profile.hpp"

namespace neuron {

namespace {

std::string json_str(std::string_view s) {
  std::string o = "\"";
  for (char c : s) {
    switch (c) {
      case '"': o += "\\\""; break;
      case '\\': o += "\\\\"; break;
      case '\n': o += "\\n"; break;
      case '\t': o += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20)
          o += fmt::format("\\u{:04x}", static_cast<int>(c));
        else
          o += c;
    }
  }
  return o + "\"";
}

constexpr size_t kMaxFlows = 20000;  // keeps big traces loadable; the longest waits are kept

}  // namespace

std::string trace_json(const Profile& p) {
  std::string s;
  auto out = std::back_inserter(s);
  fmt::format_to(out, "{{\"displayTimeUnit\":\"ns\",\"otherData\":{{\"kernel\":{},\"target\":{},"
                 "\"total_ns\":{:.3f},\"timing_only\":{}}},\"traceEvents\":[\n",
                 json_str(p.kernel), json_str(p.target), p.total_ns, p.executed ? "false" : "true");
  fmt::format_to(out, "{{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,\"tid\":0,\"args\":"
                 "{{\"name\":{}}}}}",
                 json_str(fmt::format("{} on {} (NeuronCore)", p.kernel, p.target)));
  for (size_t u = 0; u < p.units.size(); ++u) {
    fmt::format_to(out, ",\n{{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":{},\"args\":"
                   "{{\"name\":{}}}}}",
                   u + 1, json_str(p.units[u]));
    fmt::format_to(out, ",\n{{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":1,\"tid\":{},"
                   "\"args\":{{\"sort_index\":{}}}}}",
                   u + 1, u);
  }
  for (size_t i = 0; i < p.events.size(); ++i) {
    const InstrEvent& e = p.events[i];
    const ProfileInstr& in = p.instrs[static_cast<size_t>(e.instr)];
    std::string wait;
    if (e.wait_on >= 0) {
      const InstrEvent& prod = p.events[static_cast<size_t>(e.wait_on)];
      const ProfileInstr& pin = p.instrs[static_cast<size_t>(prod.instr)];
      wait = fmt::format(",\"waited_ns\":{:.1f},\"waited_for\":{},\"dependence\":{},"
                         "\"resource\":{}",
                         e.wait_ns,
                         json_str(fmt::format("{} at {}:{} on {}", pin.opcode, pin.span.file,
                                              pin.span.line, p.units[static_cast<size_t>(prod.unit)])),
                         json_str(dep_kind_name(e.wait_kind)), json_str(memory_name(e.wait_memory)));
    }
    fmt::format_to(out, ",\n{{\"name\":{},\"cat\":{},\"ph\":\"X\",\"pid\":1,\"tid\":{},"
                   "\"ts\":{:.3f},\"dur\":{:.3f},\"args\":{{\"instr\":{},\"operands\":{},"
                   "\"bytes\":{},\"flops\":{:.0f},\"source\":{},\"program\":{}{}}}}}",
                   json_str(in.opcode), json_str(engine_name(in.engine)), e.unit + 1,
                   e.start_ns / 1000.0, (e.end_ns - e.start_ns) / 1000.0, in.id,
                   json_str(in.operands), e.bytes, e.flops,
                   json_str(fmt::format("{}:{}", in.span.file, in.span.line)), e.program, wait);
  }
  // Flow arrows from the producer's slice to the waiter's, longest waits first.
  std::vector<size_t> waited;
  for (size_t i = 0; i < p.events.size(); ++i)
    if (p.events[i].wait_on >= 0) waited.push_back(i);
  if (waited.size() > kMaxFlows) {
    std::partial_sort(waited.begin(), waited.begin() + kMaxFlows, waited.end(),
                      [&](size_t a, size_t b) { return p.events[a].wait_ns > p.events[b].wait_ns; });
    waited.resize(kMaxFlows);
  }
  for (size_t i : waited) {
    const InstrEvent& e = p.events[i];
    const InstrEvent& prod = p.events[static_cast<size_t>(e.wait_on)];
    // The start binds inside the producer's slice, just before its end.
    double ts = prod.end_ns - std::min(1.0, (prod.end_ns - prod.start_ns) / 2);
    fmt::format_to(out, ",\n{{\"name\":\"wait\",\"cat\":\"dependence\",\"ph\":\"s\",\"id\":{},"
                   "\"pid\":1,\"tid\":{},\"ts\":{:.3f}}}",
                   i, prod.unit + 1, ts / 1000.0);
    fmt::format_to(out, ",\n{{\"name\":\"wait\",\"cat\":\"dependence\",\"ph\":\"f\",\"bp\":\"e\","
                   "\"id\":{},\"pid\":1,\"tid\":{},\"ts\":{:.3f}}}",
                   i, e.unit + 1, e.start_ns / 1000.0);
  }
  s += "\n]}\n";
  return s;
}

}  // namespace neuron
