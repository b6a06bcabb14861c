// Bindings for profiles: a simulator run with the timing model (optionally timing only) and the
// Profile it fills, with its views (summary text, Perfetto JSON, HTML) and its tables as data
// (python/neuron/profile.py wraps them).
#include <memory>
#include <new>
#include <sstream>

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bindings.hpp"
#include "neuron/runtime/profile.hpp"
#include "neuron/runtime/run.hpp"

namespace py = pybind11;

namespace neuron::python {

namespace {

std::string kind_word(DepKind k) {
  auto name = dep_kind_name(k);
  return std::string(name.substr(0, name.find(' ')));
}

// analyze() as plain Python data: summary figures, per-unit, per-line, waits and hints tables.
py::dict stats_dict(const Profile& p) {
  ProfileStats st = analyze(p);
  const double total = p.total_ns > 0 ? p.total_ns : 1;
  py::dict d;
  py::dict summary;
  summary["kernel"] = p.kernel;
  summary["target"] = p.target;
  summary["timing_only"] = !p.executed;
  summary["programs"] = p.programs;
  summary["instructions"] = p.instrs.size();
  summary["executed_instructions"] = p.events.size();
  summary["device_ns"] = p.total_ns;
  summary["launch_ns"] = p.launch_ns;
  summary["total_ns"] = p.total_ns + p.launch_ns;
  summary["verdict"] = st.verdict;
  summary["tensor_flops"] = st.tensor_flops;
  summary["tensor_hfu"] = st.tensor_hfu;
  summary["tensor_peak_flops"] = p.tensor_peak_flops;
  summary["dma_active"] = st.dma_active_ns / total;
  summary["dma_engine_busy"] = st.dma_engine_busy;
  summary["hbm_bytes"] = st.hbm_bytes;
  summary["hbm_gbps"] = st.hbm_gbps;
  summary["hbm_gbps_core"] = p.hbm_gbps;
  summary["sbuf_alloc_bytes"] = p.sbuf_alloc_bytes;
  summary["sbuf_capacity"] = p.sbuf_capacity;
  summary["sbuf_live_peak"] = st.sbuf_live_peak;
  summary["psum_alloc_bytes"] = p.psum_alloc_bytes;
  summary["psum_capacity"] = p.psum_capacity;
  summary["psum_live_peak"] = st.psum_live_peak;
  d["summary"] = summary;
  py::list units;
  for (size_t u = 0; u < p.units.size(); ++u) {
    if (u >= static_cast<size_t>(p.first_dma_unit) && st.unit_count[u] == 0) continue;
    py::dict r;
    r["unit"] = p.units[u];
    r["active_ns"] = st.unit_busy_ns[u];
    r["active"] = st.unit_busy_ns[u] / total;
    r["engine_ns"] = st.unit_occupancy_ns[u];
    r["wait_ns"] = st.unit_wait_ns[u];
    r["instructions"] = st.unit_count[u];
    units.append(r);
  }
  d["units"] = units;
  py::list engines;
  for (size_t e = 0; e < p.dma_engine_busy_ns.size(); ++e) engines.append(p.dma_engine_busy_ns[e]);
  d["dma_engine_busy_ns"] = engines;
  py::list lines;
  for (auto& l : st.top_lines) {
    py::dict r;
    r["file"] = l.file;
    r["line"] = l.line;
    r["instructions"] = l.what;
    r["engine_ns"] = l.busy_ns;
    r["wait_ns"] = l.wait_ns;
    r["count"] = l.count;
    lines.append(r);
  }
  d["lines"] = lines;
  py::list waits;
  for (auto& w : st.top_waits) {
    const ProfileInstr& in = p.instrs[static_cast<size_t>(w.producer_instr)];
    py::dict r;
    r["waiter"] = w.waiter_unit >= p.first_dma_unit ? std::string("DMA")
                                                    : p.units[static_cast<size_t>(w.waiter_unit)];
    r["for"] = in.opcode;
    r["file"] = in.span.file;
    r["line"] = in.span.line;
    r["dependence"] = kind_word(w.kind);
    r["memory"] = std::string(memory_name(w.memory));
    r["wait_ns"] = w.total_ns;
    r["count"] = w.count;
    waits.append(r);
  }
  d["waits"] = waits;
  py::list hints;
  for (auto& h : st.hints) {
    py::dict r;
    r["file"] = h.file;
    r["line"] = h.line;
    r["pattern"] = h.pattern;
    r["message"] = h.message;
    r["cost_ns"] = h.cost_ns;
    r["count"] = h.count;
    hints.append(r);
  }
  d["hints"] = hints;
  return d;
}

py::dict diff_dict(const ProfileDiff& d) {
  py::dict r;
  r["kernel"] = d.kernel;
  r["before_ns"] = d.before_ns;
  r["after_ns"] = d.after_ns;
  r["before_verdict"] = d.before_verdict;
  r["after_verdict"] = d.after_verdict;
  auto rows = [](const std::vector<ProfileDiff::Row>& v) {
    py::list l;
    for (auto& x : v) l.append(py::make_tuple(x.what, x.before_ns, x.after_ns));
    return l;
  };
  r["units"] = rows(d.units);
  r["lines"] = rows(d.lines);
  r["text"] = compare_text(d);
  return r;
}

}  // namespace

void init_profile(py::module_& m) {
  py::class_<Profile, std::shared_ptr<Profile>>(m, "Profile")
      .def_readonly("kernel", &Profile::kernel)
      .def_readonly("target", &Profile::target)
      .def_readonly("total_ns", &Profile::total_ns)
      .def_readonly("launch_ns", &Profile::launch_ns)
      .def_readonly("executed", &Profile::executed)
      .def_readonly("programs", &Profile::programs)
      .def_readonly("units", &Profile::units)
      .def("summary_text", [](const Profile& p) { return summary_text(p); })
      .def("trace_json", [](const Profile& p) { return trace_json(p); })
      .def("html", [](const Profile& p, std::shared_ptr<Profile> before,
                      const std::string& before_label, const std::string& after_label) {
        if (!before) return html_report(p);
        ProfileDiff d = compare_profiles(*before, p, before_label, after_label);
        return html_report(p, &d);
      }, py::arg("compare") = nullptr, py::arg("before_label") = "before",
         py::arg("after_label") = "after")
      .def("write", [](const Profile& p, const std::string& dir, const std::string& stem) {
        return write_profile(p, dir, stem);
      })
      .def("stats", &stats_dict)
      // Static instructions: (opcode, engine, file, line, operands).
      .def_property_readonly("instrs", [](const Profile& p) {
        py::list out;
        for (auto& in : p.instrs)
          out.append(py::make_tuple(in.opcode, std::string(engine_name(in.engine)), in.span.file,
                                    in.span.line, in.operands));
        return out;
      })
      // Dynamic instructions in placement order: (instr, unit, start_ns, end_ns, wait_on,
      // wait_ns, occupancy_ns).
      .def_property_readonly("events", [](const Profile& p) {
        py::list out;
        for (auto& e : p.events)
          out.append(py::make_tuple(e.instr, e.unit, e.start_ns, e.end_ns, e.wait_on, e.wait_ns,
                                    e.occupancy_ns));
        return out;
      });

  m.def("profile_live", [](const Profile& p) {
    py::list out;
    for (auto& r : p.live)
      out.append(py::make_tuple(std::string(memory_name(r.memory)), r.start_ns, r.end_ns,
                                r.bytes_per_partition));
    return out;
  });

  m.def("compare_profiles", [](const Profile& before, const Profile& after,
                               const std::string& before_label, const std::string& after_label) {
    return diff_dict(compare_profiles(before, after, before_label, after_label));
  }, py::arg("before"), py::arg("after"), py::arg("before_label") = "before",
     py::arg("after_label") = "after");

  // Simulates a compiled kernel with the timing model; returns (outputs, device_print text,
  // Profile). execute=False: timing only (no data computed; `inputs` may be empty).
  m.def("simulate_profiled", [](const Compiled& c, const std::vector<Tensor>& inputs,
                                const std::vector<int64_t>& grid, bool execute) {
    std::ostringstream printed;
    SimOptions o;
    o.print = &printed;
    o.execute = execute;
    auto prof = std::make_shared<Profile>();
    std::vector<Tensor> outs;
    {
      py::gil_scoped_release release;
      SimResult r = simulate_profiled(c, inputs, grid, o);
      outs = std::move(r.outputs);
      *prof = std::move(r.profile);
    }
    return std::make_tuple(outs, printed.str(), prof);
  }, py::arg("compiled"), py::arg("inputs"), py::arg("grid"), py::arg("execute") = true);
}

}  // namespace neuron::python
