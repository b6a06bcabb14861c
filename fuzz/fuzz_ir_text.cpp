// libFuzzer target over the IR text parser, the verifier and the compile pipeline
// (scripts/fuzz_libfuzzer.sh builds it with clang-14 -fsanitize=fuzzer,address,undefined).
//
// Contract under test: any byte string ends in a parsed-and-compiled kernel or a UserError.
// An InternalError, any other exception, a crash, a hang or a sanitizer report is a bug.
// Accepted kernels must also survive print -> parse unchanged.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "neuron/codegen/pipeline.hpp"
#include "neuron/base/error.hpp"
#include "neuron/ir/equality.hpp"
#include "neuron/ir/printer.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace neuron;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  Kernel k;
  try {
    k = parse_kernel(text, "<fuzz>");
  } catch (const UserError&) {
    return 0;
  }
  const std::string printed = print(k);
  Kernel again;
  try {
    again = parse_kernel(printed, "<printed>");
  } catch (const UserError& e) {
    std::fprintf(stderr, "printed kernel does not parse back: %s\n%s\n", e.what(), printed.c_str());
    std::abort();
  }
  if (!equal(k, again)) {
    std::fprintf(stderr, "print/parse round trip changed the kernel:\n%s\n", printed.c_str());
    std::abort();
  }
  try {
    Compiled c = compile(k);
    (void)c;
  } catch (const UserError&) {
  }
  return 0;
}
