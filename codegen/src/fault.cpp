// The messages of run-time faults (fault.hpp).
#include "neuron/codegen/fault.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "neuron/base/error.hpp"

namespace neuron::native {

namespace {

const Instr* find_instr(const std::vector<ProgNode>& body, int id) {
  for (auto& n : body) {
    if (n.kind == ProgNode::Kind::instr) {
      if (n.instr.id == id) return &n.instr;
    } else if (const Instr* in = find_instr(n.body, id)) {
      return in;
    }
  }
  return nullptr;
}

std::string operand_name(const Instr& in, int64_t i) {
  return i < 0 ? "destination" : fmt::format("source {}", i);
}

}  // namespace

void raise_fault(const Program& p, const Fault& f, const std::string& where) {
  if (f.kind == kFaultNone) return;
  const Instr* in = find_instr(p.body, f.instr);
  NEURON_ASSERT(in, "a fault names instruction {}, which program '{}' does not have", f.instr,
                p.name);
  const std::string at = where.empty() ? "" : fmt::format(" ({})", where);
  const auto name = opcode_name(in->op);
  switch (f.kind) {
    case kFaultRowIndex: {
      const bool src = in->args.indirect == InstrArgs::Indirect::src;
      const AccessPattern& hbm = src ? in->src.at(0) : in->dst;
      const std::string tensor = hbm.tensor >= 0 && static_cast<size_t>(hbm.tensor) <
                                                         p.tensors.size()
                                     ? p.tensors[static_cast<size_t>(hbm.tensor)].name
                                     : "?";
      user_error(in->span, "out-of-bounds",
                 "{}: row index {} (element {} of the {} index tile) is outside the {} rows "
                 "the view of tensor '{}' can select{}; keep indices in 0..{}, or pass oob_mode=skip to skip such rows",
                 name, f.a, f.c, src ? "src_rows" : "dst_rows", f.b, tensor, at, f.b - 1);
    }
    case kFaultGatherIndex:
      user_error(in->span, "out-of-bounds",
                 "{}: index {} read at partition {} is outside the {} elements of a data "
                 "partition{}",
                 name, f.a, f.c, f.b, at);
    case kFaultAccess: {
      const AccessPattern& ap = f.c < 0 ? in->dst : in->src.at(static_cast<size_t>(f.c));
      if (!is_on_chip(ap.memory) && ap.tensor >= 0 &&
          static_cast<size_t>(ap.tensor) < p.tensors.size()) {
        const TensorDecl& t = p.tensors[static_cast<size_t>(ap.tensor)];
        user_error(in->span, "out-of-bounds",
                   "{}: the {} touches elements {}..{} of tensor '{}' (shape [{}], {} "
                   "elements); a register or a dynamic loop made the index{}: keep it inside the "
                   "tensor",
                   name, operand_name(*in, f.c), f.a, f.b, t.name, fmt::join(t.shape, ", "), f.d,
                   at);
      }
      user_error(in->span, "out-of-bounds",
                 "{}: the {} touches {}..{}, outside 0..{} ({} of its memory); a register or a "
                 "dynamic loop made the index{}",
                 name, operand_name(*in, f.c), f.a, f.b, f.d - 1,
                 is_on_chip(ap.memory) ? "bytes of a partition" : "elements", at);
    }
    case kFaultTile: {
      const AccessPattern& ap = f.c < 0 ? in->dst : in->src.at(static_cast<size_t>(f.c));
      user_error(in->span, "out-of-bounds",
                 "{}: the {} touches bytes {}..{} of each partition, outside its tile's bytes "
                 "{}..{}; a register or a dynamic loop made the index{}: keep it inside the tile",
                 name, operand_name(*in, f.c), f.a, f.b, f.d - (ap.alloc.hi - ap.alloc.lo),
                 f.d - 1, at);
    }
    case kFaultPartition:
      user_error(in->span, "out-of-bounds",
                 "{}: the {} touches partitions {}..{}, outside 0..{}; a register or a dynamic "
                 "loop made the index{}",
                 name, operand_name(*in, f.c), f.a, f.b, f.d - 1, at);
    default:
      internal_error("unknown fault kind {} of {} at {}", f.kind, name, in->span.str());
  }
}

}  // namespace neuron::native
