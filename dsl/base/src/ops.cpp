// Name tables for the X-macro lists in ops.hpp.
#include "neuron/base/ops.hpp"

#include <fmt/format.h>

namespace neuron {

std::string_view opcode_name(Opcode op) {
  switch (op) {
#define X(e, name, level, engine, streams, signature) \
  case Opcode::e:                          \
    return name;
    NEURON_OPCODES(X)
#undef X
  }
  return "?";
}

OpLevel opcode_level(Opcode op) {
  switch (op) {
#define X(e, name, level, engine, streams, signature) \
  case Opcode::e:                          \
    return OpLevel::level;
    NEURON_OPCODES(X)
#undef X
  }
  return OpLevel::Isa;
}

Engine opcode_engine(Opcode op) {
  switch (op) {
#define X(e, name, level, engine, streams, signature) \
  case Opcode::e:                          \
    return Engine::engine;
    NEURON_OPCODES(X)
#undef X
  }
  return Engine::none;
}

int opcode_streamed_inputs(Opcode op) {
  switch (op) {
#define X(e, name, level, engine, streams, signature) \
  case Opcode::e:                          \
    return streams;
    NEURON_OPCODES(X)
#undef X
  }
  return 1;
}

std::optional<Opcode> opcode_from_name(std::string_view s) {
#define X(e, name, level, engine, streams, signature) \
  if (s == name) return Opcode::e;
  NEURON_OPCODES(X)
#undef X
  return std::nullopt;
}

// ---- signatures ------------------------------------------------------------------------

namespace {

#define NEURON_UNPAREN(...) __VA_ARGS__
#define OUT(mem) ArgSpec{"dst", ArgKind::view, true, mem, ArgSlot::dst}
#define IN(n, mem) ArgSpec{#n, ArgKind::view, true, mem, ArgSlot::src}
#define INDEX(n, mem) ArgSpec{#n, ArgKind::index, true, mem, ArgSlot::src}
#define OPT(n, mem, slot) ArgSpec{#n, ArgKind::view, false, mem, ArgSlot::slot}
#define OUT2(n, mem) ArgSpec{#n, ArgKind::view, true, mem, ArgSlot::reduce_res}
#define TILE_OR(n, req, slot) ArgSpec{#n, ArgKind::view_or_number, req, ON_CHIP, ArgSlot::slot}
#define ARG(n, kind, req, slot) ArgSpec{#n, ArgKind::kind, req, 0, ArgSlot::slot}
constexpr bool req = true, opt = false;

std::vector<std::vector<ArgSpec>> make_signatures() {
  std::vector<std::vector<ArgSpec>> sigs;
#define X(e, name, level, engine, streams, signature) \
  sigs.push_back({NEURON_UNPAREN signature});
  NEURON_OPCODES(X)
#undef X
  return sigs;
}

#undef OUT
#undef IN
#undef INDEX
#undef OPT
#undef OUT2
#undef TILE_OR
#undef ARG
#undef NEURON_UNPAREN

}  // namespace

static const std::vector<std::vector<ArgSpec>>& signatures() {
  static const std::vector<std::vector<ArgSpec>> sigs = make_signatures();
  return sigs;
}

const std::vector<ArgSpec>& opcode_signature(Opcode op) {
  return signatures().at(static_cast<size_t>(op));
}

bool opcode_writes_whole_dst(Opcode op) {
  switch (op) {
    case Opcode::tensor_tensor:
    case Opcode::tensor_scalar:
    case Opcode::activation:
    case Opcode::tensor_reduce:
    case Opcode::tensor_copy:
    case Opcode::memset:
    case Opcode::iota:
    case Opcode::affine_select:
    case Opcode::nc_transpose:
    case Opcode::nc_transpose_vector:
      return true;
    default:
      return false;
  }
}

bool opcode_has_dst(Opcode op) {
  static const std::vector<bool> has = [] {
    std::vector<bool> h;
    for (auto& sig : signatures()) {
      bool d = false;
      for (auto& a : sig) d |= a.slot == ArgSlot::dst;
      h.push_back(d);
    }
    return h;
  }();
  return has.at(static_cast<size_t>(op));
}

bool memory_in(Memory m, unsigned memories) {
  switch (m) {
    case Memory::sbuf:
      return memories & SBUF;
    case Memory::psum:
      return memories & PSUM;
    case Memory::hbm:
    case Memory::shared_hbm:
      return memories & HBM;
  }
  return false;
}

std::string memory_set_text(unsigned memories) {
  std::vector<std::string_view> names;
  if (memories & HBM) names.push_back("HBM");
  if (memories & SBUF) names.push_back("SBUF");
  if (memories & PSUM) names.push_back("PSUM");
  return fmt::format("{}", fmt::join(names, " or "));
}

std::string_view arg_kind_text(ArgKind k) {
  switch (k) {
    case ArgKind::view:
      return "a view";
    case ArgKind::index:
      return "a view of integer indices";
    case ArgKind::integer:
      return "an integer";
    case ArgKind::number:
      return "a number";
    case ArgKind::name:
      return "a name";
    case ArgKind::ints:
      return "an integer list";
    case ArgKind::view_or_number:
      return "a view or a number";
  }
  return "?";
}

std::string_view arg_slot_name(ArgSlot s) {
  switch (s) {
#define X(e)       \
  case ArgSlot::e: \
    return #e;
    NEURON_ARG_SLOTS(X)
#undef X
  }
  return "?";
}

std::string_view alu_op_name(AluOp op) {
  switch (op) {
#define X(e, name, arity) \
  case AluOp::e:          \
    return name;
    NEURON_ALU_OPS(X)
#undef X
  }
  return "?";
}

int alu_op_arity(AluOp op) {
  switch (op) {
#define X(e, name, arity) \
  case AluOp::e:          \
    return arity;
    NEURON_ALU_OPS(X)
#undef X
  }
  return 0;
}

std::optional<AluOp> alu_op_from_name(std::string_view s) {
#define X(e, name, arity) \
  if (s == name) return AluOp::e;
  NEURON_ALU_OPS(X)
#undef X
  return std::nullopt;
}

std::string_view act_func_name(ActFunc f) {
  switch (f) {
#define X(e, name) \
  case ActFunc::e: \
    return name;
    NEURON_ACT_FUNCS(X)
#undef X
  }
  return "?";
}

std::optional<ActFunc> act_func_from_name(std::string_view s) {
#define X(e, name) \
  if (s == name) return ActFunc::e;
  NEURON_ACT_FUNCS(X)
#undef X
  return std::nullopt;
}

std::string_view memory_name(Memory m) {
  switch (m) {
#define X(e, name) \
  case Memory::e:  \
    return name;
    NEURON_MEMORIES(X)
#undef X
  }
  return "?";
}

std::optional<Memory> memory_from_name(std::string_view s) {
#define X(e, name) \
  if (s == name) return Memory::e;
  NEURON_MEMORIES(X)
#undef X
  return std::nullopt;
}

std::string_view engine_name(Engine e) {
  switch (e) {
#define X(e, name) \
  case Engine::e:  \
    return name;
    NEURON_ENGINES(X)
#undef X
  }
  return "?";
}

std::optional<Engine> engine_from_name(std::string_view s) {
#define X(e, name) \
  if (s == name) return Engine::e;
  NEURON_ENGINES(X)
#undef X
  return std::nullopt;
}

}  // namespace neuron
