// The C entry points of an operator library (neuron_add_op_library, cmake/NeuronOpLibrary.cmake):
// the library holds the user's kernels registered by neuron-opgen in its own copy of the kernel
// registry; neuron.load_ops (python/neuron/oplib.py) reads neuron_op_library_schema() (written
// by neuron-opgen --library) and, for each signature it meets, asks the library to trace the
// kernel and hand back the Kernel IR as text (docs/ir.md), which the Python module parses,
// compiles and runs like any other kernel. Text, not C++ objects, crosses the boundary, so the
// library and the Python module need not share a heap, a registry or symbols (the library's
// toolkit symbols are hidden; only these functions are exported).
//
// Request (one item a line):   tensor DTYPE D0 D1 ...        e.g. "tensor float32 64 48"
//                              param NAME VALUE               bool 0/1, int, float (any strtod
//                                                             form), str/choice/dtype: the text
// Reply: the IR text; or "!error\nRULE\nFILE\nLINE\nCOLUMN\nMESSAGE" for a user error (the
// span is the kernel's C++ source line). Free either with neuron_op_library_free.
#include <cstdlib>
#include <cstring>
#include <map>
#include <neuron/ir/printer.hpp>
#include <neuron/registry.hpp>
#include <sstream>
#include <string>
#include <string_view>

#define NEURON_OPLIB_API extern "C" __attribute__((visibility("default")))

namespace {

char* copy(const std::string& s) {
  char* out = static_cast<char*>(std::malloc(s.size() + 1));
  std::memcpy(out, s.c_str(), s.size() + 1);
  return out;
}

char* error_reply(const std::string& rule, const neuron::Span& span, const std::string& message) {
  std::ostringstream o;
  o << "!error\n" << rule << "\n" << span.file << "\n" << span.line << "\n" << span.column << "\n"
    << message;
  return copy(o.str());
}

// A parameter's text as the value of its registered kind (the registry checks it again).
neuron::ParamValue param_value(const neuron::ParamInfo* p, const std::string& text) {
  using K = neuron::ParamKind;
  if (!p) return text;  // unknown: trace_registered names it
  switch (p->kind) {
    case K::boolean: return text == "1" || text == "true" || text == "True";
    case K::integer: return int64_t(std::strtoll(text.c_str(), nullptr, 10));
    case K::real: return std::strtod(text.c_str(), nullptr);
    case K::dtype:
      if (auto d = neuron::dtype_from_name(text)) return *d;
      return text;  // the registry names the parameter and its kind
    default: return text;
  }
}

}  // namespace

NEURON_OPLIB_API int neuron_op_library_abi_version() { return 1; }

NEURON_OPLIB_API char* neuron_op_library_trace(const char* name, const char* request) {
  try {
    const neuron::RegisteredKernel* k = neuron::Registry::global().find(name);
    std::vector<neuron::TensorSpec> specs;
    std::map<std::string, neuron::ParamValue, std::less<>> params;
    std::istringstream lines(request);
    for (std::string line; std::getline(lines, line);) {
      std::istringstream words(line);
      std::string what, a;
      words >> what >> a;
      if (what == "tensor") {
        neuron::TensorSpec spec;
        auto d = neuron::dtype_from_name(a);
        if (!d) return error_reply("call-signature", {}, "unknown dtype '" + a + "'");
        spec.dtype = *d;
        for (int64_t n; words >> n;) spec.shape.push_back(n);
        specs.push_back(std::move(spec));
      } else if (what == "param") {
        // "param <name> <value>": the value is the rest of the line (it may hold spaces)
        const size_t at = std::string_view("param ").size() + a.size() + 1;
        std::string value = line.substr(std::min(line.size(), at));
        const neuron::ParamInfo* info = nullptr;
        if (k)
          for (const auto& p : k->params)
            if (p.name == a) info = &p;
        params[a] = param_value(info, value);
      }
    }
    // with spans: errors of the later passes point at the header's line, as a C++ trace's do
    return copy(neuron::print(neuron::trace_registered(name, std::move(specs), params, {}),
                              neuron::PrintOptions{.spans = true}));
  } catch (const neuron::UserError& e) {
    return error_reply(e.rule(), e.span(), e.message());
  } catch (const std::exception& e) {
    return error_reply("internal", {}, e.what());
  }
}

NEURON_OPLIB_API void neuron_op_library_free(char* p) { std::free(p); }
