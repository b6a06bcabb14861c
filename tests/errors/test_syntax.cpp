// Messages quote code in the syntax of the kernel being traced: C++ for C++ kernels, Python
// for Python ones (the Python module traces with Syntax::python), never the other's.
#include <doctest/doctest.h>

#include "neuron/dsl/builder.hpp"
#include "neuron/language.hpp"
#include "neuron/trace.hpp"

using namespace neuron;

namespace {

// A kernel that returns an SBUF tile: rule kernel-output, whose message names the call that
// creates an output.
std::string output_message(dsl::Syntax syntax) {
  try {
    dsl::TraceScope scope("k", Span{}, syntax);
    auto in = scope.inputs({{{128, 8}, DType::float32}});
    scope.finish(std::vector<nl::tensor>{nl::load(in[0])});
  } catch (const UserError& e) {
    return e.message();
  }
  return "no error";
}

std::string no_trace_message() {
  try {
    nl::ndarray({1}, DType::float32);
  } catch (const UserError& e) {
    return e.message();
  }
  return "no error";
}

}  // namespace

TEST_CASE("syntax: a C++ trace quotes C++, a Python trace quotes Python") {
  CHECK(output_message(dsl::Syntax::cpp).find("nl::ndarray(..., nl::shared_hbm)") !=
        std::string::npos);
  std::string py = output_message(dsl::Syntax::python);
  CHECK(py.find("nl.ndarray(..., buffer=nl.shared_hbm)") != std::string::npos);
  CHECK(py.find("::") == std::string::npos);
  CHECK(dsl::syntax() == dsl::Syntax::cpp);  // the scope ended with the trace
}

TEST_CASE("syntax: outside a trace, the process default, overridden by a scope") {
  CHECK(no_trace_message().find("neuron::trace") != std::string::npos);
  {
    dsl::SyntaxScope python(dsl::Syntax::python);
    CHECK(no_trace_message().find("@neuron.kernel") != std::string::npos);
    CHECK(dsl::spell("nl::", "nl.") == "nl.");
  }
  CHECK(dsl::spell("nl::", "nl.") == "nl::");
}
