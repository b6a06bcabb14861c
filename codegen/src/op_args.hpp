// The keyword-argument signature of every opcode (docs/ir.md), as the verifier checks it.
#pragma once
#include <string_view>
#include <vector>

#include "neuron/ir/ir.hpp"

namespace neuron::passes {

enum class ArgKind { view, integer, number, name, ints, view_or_number };

struct ArgSpec {
  const char* name;
  ArgKind kind;
  bool required;
};

// The arguments `code` takes. Integer flags with a documented default (accumulate, reverse0,
// negate, ...) may be omitted.
const std::vector<ArgSpec>& op_arg_specs(Opcode code);
std::string_view arg_kind_name(ArgKind k);  // "a view", "an integer", ...
bool value_has_kind(const Value& v, ArgKind k);

}  // namespace neuron::passes
