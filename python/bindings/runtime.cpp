// Bindings for the runtime: host tensors over NumPy memory and the simulator.
#include <chrono>
#include <cstring>
#include <cstdlib>
#include <functional>
#include <new>
#include <sstream>

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bindings.hpp"
#include "neuron/runtime/cache.hpp"
#include "neuron/base/config.hpp"
#include "neuron/base/matmul_kernel.hpp"
#include "neuron/codegen/plan.hpp"
#include "neuron/runtime/native/native.hpp"
#include "neuron/runtime/profile.hpp"
#include "neuron/runtime/run.hpp"

namespace py = pybind11;

namespace neuron::python {

namespace {

// std::bad_alloc would reach Python as a bare "MemoryError: std::bad_alloc". Say what the
// kernel asked for: outputs (and HBM scratch) too large for this machine's memory, which the
// tensor-size rule allows up to 2^48 bytes each. Called with the GIL held.
[[noreturn]] void out_of_memory(const Program& p) {
  std::string what;
  std::uint64_t total = 0;
  for (const TensorDecl& t : p.tensors) {
    if (t.role == TensorDecl::Role::input) continue;
    std::uint64_t n = std::uint64_t(dtype_bytes(t.dtype));
    for (int64_t d : t.shape) n *= std::uint64_t(d);
    total += n;
    what += fmt::format("{}'{}' {}[{}] ({} bytes)", what.empty() ? "" : ", ", t.name,
                        dtype_name(t.dtype), fmt::join(t.shape, ", "), n);
  }
  std::string msg = fmt::format(
      "out of host memory running kernel '{}': its outputs and HBM scratch need {} bytes: {}",
      p.name, total, what);
  PyErr_SetString(PyExc_MemoryError, msg.c_str());
  throw py::error_already_set();
}

}  // namespace

void init_runtime(py::module_& m) {
  // pybind11 (2.10) builds its NumPy API table in a function-local static whose initializer
  // imports numpy.core.multiarray, releasing the GIL while the import reads files. When two
  // threads make their first NumPy-typed call at once (to_numpy below), one blocks on the
  // static's guard while holding the GIL and the other waits for the GIL inside the import:
  // a deadlock. Build it now, during the module import, where only one thread runs.
  py::detail::npy_api::get();

  // The NEURON_* knobs, read from the environment on every call (runtime/config.hpp).
  py::class_<Config>(m, "Config")
      .def_readonly("target", &Config::target)
      .def_readonly("cache_dir", &Config::cache_dir)
      .def_readonly("threads", &Config::threads)
      .def_readonly("log_compile", &Config::log_compile)
      .def_readonly("profile_dir", &Config::profile_dir)
      .def_readonly("eager", &Config::eager)
      .def_readonly("strict", &Config::strict)
      .def_readonly("cache_memory_entries", &Config::cache_memory_entries);
  m.def("config", &config);
  py::class_<Tensor>(m, "HostTensor")
      .def_static("empty", &Tensor::empty)
      // Wraps memory the caller keeps alive (a C-contiguous NumPy array's data pointer).
      .def_static("borrow", [](uintptr_t ptr, std::vector<int64_t> shape, DType dtype) {
        return Tensor::borrow(reinterpret_cast<void*>(ptr), std::move(shape), dtype);
      })
      // Wraps a C-contiguous NumPy array's memory (the caller keeps the array alive); dtype is
      // the array's, as neuron names it (ml_dtypes arrays have no NumPy type number to read).
      .def_static("borrow_array", [](const py::array& a, DType dtype) {
        std::vector<int64_t> shape(a.shape(), a.shape() + a.ndim());
        return Tensor::borrow(const_cast<void*>(a.data()), std::move(shape), dtype);
      })
      .def_property_readonly("shape", &Tensor::shape)
      .def_property_readonly("dtype", &Tensor::dtype)
      .def_property_readonly("data_ptr",
                             [](const Tensor& t) { return reinterpret_cast<uintptr_t>(t.data()); })
      // A NumPy array over the tensor's memory (no copy); the array keeps the memory alive.
      .def("to_numpy", [](const Tensor& t, py::dtype dt) {
        auto* keep = new Tensor(t);
        py::capsule owner(keep, [](void* p) { delete static_cast<Tensor*>(p); });
        std::vector<py::ssize_t> shape(t.shape().begin(), t.shape().end());
        std::vector<py::ssize_t> strides(shape.size());
        // Not dt.itemsize(): pybind11 2.10 reads the NumPy 1.x descriptor layout.
        py::ssize_t step = dtype_bytes(t.dtype());
        for (size_t i = shape.size(); i-- > 0;) {
          strides[i] = step;
          step *= shape[i];
        }
        return py::array(dt, shape, strides, t.data(), owner);
      });

  // Runs a compiled kernel on the simulator; returns (outputs, device_print text, profile
  // summary or "").
  m.def("simulate", [](const Compiled& c, const std::vector<Tensor>& inputs,
                       const std::vector<int64_t>& grid, bool profile) {
    std::ostringstream printed;
    SimOptions o;
    o.print = &printed;
    std::vector<Tensor> outs;
    std::string summary;
    try {
      py::gil_scoped_release release;
      if (profile) {
        SimResult r = simulate_profiled(c, inputs, grid, o);
        outs = std::move(r.outputs);
        summary = summary_text(r.profile);
      } else {
        outs = simulate(c, inputs, grid, o);
      }
    } catch (const std::bad_alloc&) {
      out_of_memory(c.program);
    }
    return std::make_tuple(outs, printed.str(), summary);
  }, py::arg("compiled"), py::arg("inputs"), py::arg("grid"), py::arg("profile") = false);

  // A loaded native kernel, kept by the caller so later runs skip the compile cache's lookup
  // (printing and hashing the IR, copying and checking the program: ~100-300 us per call).
  py::class_<NativeKernel>(m, "NativeKernel")
      .def_property_readonly("report", [](const NativeKernel& k) { return k.report().str(); })
      // The report of a later run: the loaded kernel was reused, nothing was compiled.
      .def_property_readonly("reuse_report", [](const NativeKernel& k) {
        CompileReport r = k.report();
        r.cache = "memory";
        r.phases.clear();
        return r.str();
      });
  // The nc_matmul kernel variant this process uses (NEURON_MATMUL_ISA, else the fastest).
  m.def("matmul_isa", [] { return std::string(neuron_matmul_isa()); });
  // The variables that select other machine code for one compiled kernel (config.hpp), read
  // with getenv: a cached call checks them each time (os.environ costs ~1 us a variable).
  m.def("native_code_env", [] {
    auto get = [](const char* name) {
      const char* v = std::getenv(name);
      return std::string(v ? v : "");
    };
    return std::make_pair(get("NEURON_NATIVE_KERNELS"), get("NEURON_PARTITION_BLOCKS"));
  });
  m.def("compile_native", [](const Compiled& c) {
    py::gil_scoped_release release;
    return compile_native(c);
  });
  // Runs `c` natively `runs` times with every instruction call timed (NativeCompileOptions::
  // profile); returns ([(instruction id, opcode, source line, calls, ns)] of the instructions
  // that ran, summed over the runs and threads, wall ns of all the runs).
  m.def("native_profile", [](const Compiled& c, const std::vector<Tensor>& inputs,
                             const std::vector<int64_t>& grid, int runs) {
    std::ostringstream printed;
    std::vector<native::InstrTicks> ticks;
    NativeOptions o;
    o.print = &printed;
    o.profile = &ticks;
    NativeKernel k;
    double wall_ns = 0;
    try {
      py::gil_scoped_release release;
      NativeCompileOptions co;
      co.profile = true;
      k = compile_native(c, co);
      // The timed runs reuse one set of outputs, as a caller passing its own does (the torch
      // operators): fresh 16 MiB outputs would fault their pages in on every run and bill the
      // faults to whichever instruction first writes them (a store looked 4x dearer than it is).
      // A first, untimed run allocates them; outputs the kernel may read are re-zeroed
      // (untimed) before each run, as a fresh call would have them.
      std::vector<native::InstrTicks> warm_ticks;
      NativeOptions warm = o;
      warm.profile = &warm_ticks;
      std::vector<Tensor> all = inputs;
      for (const Tensor& t : k(inputs, grid, warm)) all.push_back(t);
      const std::vector<bool> zero = native::outputs_to_zero(k.program(), grid);
      for (int r = 0; r < runs; ++r) {
        for (size_t i = inputs.size(), t = 0; t < k.program().tensors.size(); ++t)
          if (k.program().tensors[t].role == TensorDecl::Role::output) {
            if (zero[t]) std::memset(all[i].data(), 0, all[i].bytes());
            ++i;
          }
        auto t0 = std::chrono::steady_clock::now();
        k.run(all, grid, o);
        wall_ns += std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0)
                       .count();
      }
    } catch (const std::bad_alloc&) {
      out_of_memory(c.program);
    }
    std::vector<const Instr*> by_id(ticks.size(), nullptr);
    std::function<void(const std::vector<ProgNode>&)> walk = [&](const auto& body) {
      for (auto& n : body) {
        if (n.kind == ProgNode::Kind::loop)
          walk(n.body);
        else if (n.instr.id >= 0 && static_cast<size_t>(n.instr.id) < by_id.size())
          by_id[static_cast<size_t>(n.instr.id)] = &n.instr;
      }
    };
    walk(k.program().body);
    py::list rows;
    for (size_t i = 0; i < ticks.size(); ++i) {
      if (!ticks[i].calls || !by_id[i]) continue;
      const Span& sp = by_id[i]->span;
      rows.append(py::make_tuple(static_cast<int>(i), std::string(opcode_name(by_id[i]->op)),
                                 sp.known() ? fmt::format("{}:{}", sp.file, sp.line) : "",
                                 ticks[i].calls, ticks[i].ns));
    }
    return py::make_tuple(rows, wall_ns);
  });

  // Runs a loaded kernel; returns (outputs, device_print text).
  m.def("run_native_kernel", [](const NativeKernel& k, const std::vector<Tensor>& inputs,
                                const std::vector<int64_t>& grid) {
    std::ostringstream printed;
    NativeOptions o;
    o.print = &printed;
    std::vector<Tensor> outs;
    try {
      py::gil_scoped_release release;
      outs = k(inputs, grid, o);
    } catch (const std::bad_alloc&) {
      out_of_memory(k.program());
    }
    return std::make_tuple(outs, printed.str());
  });

  // The outputs a run of a loaded kernel over `grid` writes, for a caller that allocates them:
  // [(shape, dtype, whether it must start zeroed)] in the order run_native_at takes them.
  m.def("native_outputs", [](const NativeKernel& k, const std::vector<int64_t>& grid) {
    const std::vector<bool> zero = k.outputs_to_zero(grid);
    py::list outs;
    for (size_t i = 0; i < k.program().tensors.size(); ++i) {
      const TensorDecl& t = k.program().tensors[i];
      if (t.role == TensorDecl::Role::output)
        outs.append(py::make_tuple(t.shape, t.dtype, bool(zero[i])));
    }
    return outs;
  });

  // Runs a loaded kernel on memory the caller owns: `data`, the addresses of its inputs then
  // its outputs (Program::tensors order, scratch excluded), each C-contiguous with the shape
  // and dtype the program declares (the caller compiled it for those tensors; outputs as
  // native_outputs describes them). Returns the device_print text.
  m.def("run_native_at", [](const NativeKernel& k, const std::vector<uintptr_t>& data,
                            const std::vector<int64_t>& grid, int threads) {
    size_t takes = 0;
    for (const TensorDecl& t : k.program().tensors) takes += t.role != TensorDecl::Role::scratch;
    if (takes != data.size())
      throw py::value_error(
          fmt::format("run_native_at: {} addresses for kernel '{}', which "
                      "takes {} tensors",
                      data.size(), k.program().name, takes));
    std::vector<Tensor> tensors;
    for (const TensorDecl& t : k.program().tensors)
      if (t.role != TensorDecl::Role::scratch)
        tensors.push_back(
            Tensor::borrow(reinterpret_cast<void*>(data[tensors.size()]), t.shape, t.dtype));
    std::ostringstream printed;
    NativeOptions o;
    o.print = &printed;
    o.threads = threads;  // 0: NEURON_THREADS, else every core
    try {
      py::gil_scoped_release release;
      k.run(tensors, grid, o);
    } catch (const std::bad_alloc&) {
      out_of_memory(k.program());  // HBM scratch
    }
    return printed.str();
  }, py::arg("kernel"), py::arg("data"), py::arg("grid"), py::arg("threads") = 0);

  // The process-wide compile cache (docs/cache.md), shared with C++ callers.
  m.def("cache_info", [] {
    CompileCache& c = CompileCache::global();
    CacheStats st = c.stats();
    std::vector<CacheEntryInfo> entries = c.list();
    std::uint64_t bytes = 0;
    for (auto& e : entries) bytes += e.file_bytes;
    py::dict d;
    d["dir"] = c.options().dir;
    d["disk_entries"] = entries.size();
    d["disk_bytes"] = bytes;
    d["memory_hits"] = st.memory_hits;
    d["disk_hits"] = st.disk_hits;
    d["misses"] = st.misses;
    d["stores"] = st.stores;
    d["waited"] = st.waited;  // misses served by another thread's compile of the same key
    d["build_id"] = std::string(toolkit_build_id());
    return d;
  });
  m.def("cache_clear", [] {
    CompileCache::global().clear();
    clear_native_kernels();
  });
}

}  // namespace neuron::python
