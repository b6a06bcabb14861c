// Name tables for the X-macro lists in ops.hpp.
#include "neuron/base/ops.hpp"

namespace neuron {

std::string_view opcode_name(Opcode op) {
  switch (op) {
#define X(e, name, level, engine, streams) \
  case Opcode::e:                          \
    return name;
    NEURON_OPCODES(X)
#undef X
  }
  return "?";
}

OpLevel opcode_level(Opcode op) {
  switch (op) {
#define X(e, name, level, engine, streams) \
  case Opcode::e:                          \
    return OpLevel::level;
    NEURON_OPCODES(X)
#undef X
  }
  return OpLevel::Isa;
}

Engine opcode_engine(Opcode op) {
  switch (op) {
#define X(e, name, level, engine, streams) \
  case Opcode::e:                          \
    return Engine::engine;
    NEURON_OPCODES(X)
#undef X
  }
  return Engine::none;
}

int opcode_streamed_inputs(Opcode op) {
  switch (op) {
#define X(e, name, level, engine, streams) \
  case Opcode::e:                          \
    return streams;
    NEURON_OPCODES(X)
#undef X
  }
  return 1;
}

std::optional<Opcode> opcode_from_name(std::string_view s) {
#define X(e, name, level, engine, streams) \
  if (s == name) return Opcode::e;
  NEURON_OPCODES(X)
#undef X
  return std::nullopt;
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
