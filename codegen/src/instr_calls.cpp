// Helpers of the instruction calls shared by both executors (instr_calls.hpp).
#include "neuron/codegen/instr_calls.hpp"

#include <fmt/format.h>

#include <vector>

namespace neuron::native {

NormLayout value_pattern_layout(const Instr& in) {
  NormLayout l;
  for (int i = 0; i < kDims; ++i) l.size[i] = 1, l.stride[i] = 0;
  l.size[0] = in.dst.dims.empty() ? 1 : in.dst.dims[0].size;
  l.stride[0] = in.args.channel_multiplier;
  const auto& pat = in.args.pattern;
  const size_t pairs = pat.size() / 2, pad = static_cast<size_t>(kDims) - 1 - pairs;
  for (size_t i = 0; i < pairs; ++i) {
    l.stride[1 + pad + i] = pat[2 * i];
    l.size[1 + pad + i] = pat[2 * i + 1];
  }
  for (int i = 0; i < kDims; ++i) l.count *= l.size[i];
  return l;
}

std::string print_header(const Instr& in) {
  return fmt::format("{} [{}] {}\n", in.args.prefix, fmt::join(in.src.at(0).shape(), ", "),
                     dtype_name(in.src[0].dtype));
}

int same_flags(const Instr& in, std::initializer_list<const NormLayout*> layouts,
               std::initializer_list<const AccessPattern*> sources) {
  int f = same_shape(std::vector<const NormLayout*>(layouts)) ? kSameShape : 0;
  for (const AccessPattern* s : sources)
    if (may_overlap(*s, in.dst)) f |= kMayOverlap;
  return f;
}

}  // namespace neuron::native
