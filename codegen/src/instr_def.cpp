// What instruction definitions share (instr_def.hpp): operand shapes and their checks, the
// generic rules of a signature, and helpers of the kernel calls.
#include "neuron/codegen/instr_calls.hpp"

#include <fmt/format.h>

#include <vector>

namespace neuron::native {

Operands::Operands(const Instr& i) : in(i) {
  for (auto& s : in.src) src.push_back(shape(s, "source"));
  if (opcode_has_dst(in.op)) dst = shape(in.dst, "destination");
}

OperandShape Operands::shape(const AccessPattern& ap, const char* what) const {
  OperandShape s;
  for (auto& d : ap.dims) {
    if (d.size < 0)
      user_error(in.span, "out-of-bounds", "{} of {} has a negative dimension size {}", what,
                 name(), d.size);
    s.sizes.push_back(d.size);
    s.count *= d.size;
  }
  return s;
}

void Operands::same_count(size_t i, const char* what) const {
  if (src[i].count != dst.count)
    fail("shape-mismatch", "{} {} has {} elements but destination {} has {}", what, src[i].str(),
         src[i].count, dst.str(), dst.count);
}

void Operands::column(size_t i, size_t of, const char* what) const {
  if (src[i].count != src[of].partitions())
    fail("shape-mismatch", "{} {} must hold one value per partition ({})", what, src[i].str(),
         src[of].partitions());
}

void Operands::same_partitions(size_t i, const char* what) const {
  if (src[i].partitions() != dst.partitions())
    fail("shape-mismatch", "{} {} spans {} partitions but destination {} spans {}", what,
         src[i].str(), src[i].partitions(), dst.str(), dst.partitions());
}

void Operands::affine_pattern() const {
  const auto& pat = in.args.pattern;
  if (pat.size() % 2 != 0)
    fail("iota-pattern", "pattern needs [stride, count] pairs, got {} numbers", pat.size());
  int64_t n = dst.partitions();
  for (size_t i = 0; i < pat.size(); i += 2) n *= pat[i + 1];
  if (n != dst.count)
    fail("iota-pattern",
         "pattern [{}] over {} partitions gives {} values but the destination {} has {} elements",
         fmt::join(pat, ", "), dst.partitions(), n, dst.str(), dst.count);
  if (pat.size() / 2 + 1 > static_cast<size_t>(kDims))
    fail("native-unsupported", "a pattern of {} [stride, count] pairs; the native backend takes "
         "at most {}", pat.size() / 2, kDims - 1);
}

void check_instr_shapes(const Instr& in) {
  // The signature's rules: the sources it promises, integer index tiles.
  const auto specs = source_specs(in);
  NEURON_ASSERT(in.src.size() == specs.size(), "{} at {} has {} source operands, its signature {}",
                opcode_name(in.op), in.span.str(), in.src.size(), specs.size());
  for (size_t i = 0; i < specs.size(); ++i)
    if ((specs[i]->kind == ArgKind::index || specs[i]->slot == ArgSlot::src_rows ||
         specs[i]->slot == ArgSlot::dst_rows) &&
        dtype_is_float(in.src[i].dtype))
      user_error(in.span, "dtype", "{}: {} is {}; indices are integers", opcode_name(in.op),
                 specs[i]->name, dtype_name(in.src[i].dtype));
  Operands o(in);
  switch (in.op) {
#define X(op, name, level, engine, streams, signature) \
  NEURON_IF_##level(case Opcode::op : return InstrDef<Opcode::op>::check(o);)
    NEURON_OPCODES(X)
#undef X
    default:
      internal_error("the native backend has no semantics for '{}' (an nl helper must be "
                     "legalized first) at {}", opcode_name(in.op), in.span.str());
  }
}

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
