// The Kernel IR text form: printing and parsing back (lossless round trip).
#pragma once
#include <string>
#include <string_view>

#include "neuron/ir/ir.hpp"

namespace neuron {

struct PrintOptions {
  // Spans are printed as a trailing `loc("file":line:col)` only when asked: the canonical text
  // (cache keys, pass tests) must not depend on where the kernel was written.
  bool spans = false;
};

std::string print(const Kernel& k, const PrintOptions& opts = {});
std::string print(const StmtPtr& s, const PrintOptions& opts = {});
std::string print(const Access& a);

// Parses the text form. Malformed text is a UserError with rule "ir-parse" and a span pointing
// into the text (file = `source_name`, line/column of the offending token).
Kernel parse_kernel(std::string_view text, const std::string& source_name = "<ir>");

}  // namespace neuron
