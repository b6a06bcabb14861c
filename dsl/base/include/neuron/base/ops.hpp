// The operation vocabulary of the Kernel IR: opcodes, ALU operators, activation functions, memories.
// Every list is an X-macro so names, parsing and dispatch come from one place.
#pragma once
#include <optional>
#include <string_view>

namespace neuron {

// The instruction table. X(enumerator, printed name, level, engine, streamed inputs):
//  - level: Nl (a helper that legalize expands into ISA instructions) or Isa (an engine
//    instruction that survives to the engine program and runs as an instruction kernel:
//    codegen/instr_calls.hpp says which, dsl/base/src/kernels/instr_kernels.cpp defines it);
//  - engine: the engine an ISA instruction runs on (none for nl helpers and device_print);
//  - streamed inputs: how many full-size tensor operands the engine streams (the timing model's
//    cost entry: two-input VectorE/GpSimd instructions run at half rate).
// Operands are named keyword arguments on the Op node (see ir.hpp); the names each opcode takes
// are its signature (op_arg_specs in ops.hpp, listed in docs/language-reference.md), checked by
// the verifier.
#define NEURON_OPCODES(X)                                                                \
  /* nl helpers, expanded by codegen/src/legalize.cpp */                                  \
  X(nl_load, "nl.load", Nl, none, 1)           /* dst(sbuf) <- src(hbm) with dtype cast */ \
  X(nl_store, "nl.store", Nl, none, 1)         /* dst(hbm) <- src(sbuf|psum) */            \
  X(nl_copy, "nl.copy", Nl, none, 1)           /* dst <- src, dtype cast */                \
  X(nl_matmul, "nl.matmul", Nl, none, 1)       /* dst(psum) <- x @ y (transpose_x) */      \
  X(nl_transpose, "nl.transpose", Nl, none, 1) /* dst <- src.T */                          \
  X(nl_unary, "nl.unary", Nl, none, 1)         /* dst <- func(x) */                        \
  X(nl_binary, "nl.binary", Nl, none, 2)       /* dst <- op(x, y), numpy broadcasting */   \
  X(nl_reduce, "nl.reduce", Nl, none, 1)       /* dst <- op over free axes */              \
  X(nl_where, "nl.where", Nl, none, 2)         /* dst <- cond ? x : y */                   \
  /* ISA instructions (nki.isa names) */                                                  \
  X(nc_matmul, "nc_matmul", Isa, tensor, 1)                                               \
  X(nc_transpose, "nc_transpose", Isa, tensor, 1)                                         \
  X(activation, "activation", Isa, scalar, 1)                                             \
  X(tensor_tensor, "tensor_tensor", Isa, vector, 2)                                       \
  X(tensor_scalar, "tensor_scalar", Isa, vector, 1)                                       \
  X(tensor_reduce, "tensor_reduce", Isa, vector, 1)                                       \
  X(tensor_copy, "tensor_copy", Isa, vector, 1)                                           \
  X(tensor_copy_predicated, "tensor_copy_predicated", Isa, vector, 2)                     \
  X(memset, "memset", Isa, vector, 0)                                                     \
  X(iota, "iota", Isa, gpsimd, 0)                                                         \
  X(affine_select, "affine_select", Isa, gpsimd, 1)                                       \
  X(dma_copy, "dma_copy", Isa, dma, 1)          /* optional src_rows/dst_rows: indirect */ \
  X(nc_n_gather, "nc_n_gather", Isa, gpsimd, 1) /* dst[p, j] = data[p, indices[p, j]] */      \
  X(local_gather, "local_gather", Isa, gpsimd, 1) /* per 16-partition group, see kernels */   \
  /* registers (runtime integers, ir.hpp), run by the engines' sequencers */               \
  X(register_load, "register_load", Isa, none, 0)   /* reg <- one element of src */           \
  X(register_store, "register_store", Isa, none, 0) /* dst (one element) <- reg */            \
  X(register_move, "register_move", Isa, none, 0)   /* reg <- value, or reg <- src register */\
  X(device_print, "device_print", Isa, none, 1)

enum class OpLevel { Nl, Isa };

enum class Opcode {
#define X(e, name, level, engine, streams) e,
  NEURON_OPCODES(X)
#undef X
};

// Binary and unary ALU operators of the Vector/GpSimd engines (tensor_tensor, tensor_scalar,
// tensor_reduce). X(enumerator, name, arity)
#define NEURON_ALU_OPS(X)                                                              \
  X(bypass, "bypass", 1)                                                               \
  X(add, "add", 2) X(subtract, "subtract", 2) X(multiply, "multiply", 2)                \
  X(divide, "divide", 2) X(maximum, "maximum", 2) X(minimum, "minimum", 2)              \
  X(power, "power", 2) X(mod, "mod", 2)                                                 \
  X(equal, "equal", 2) X(not_equal, "not_equal", 2) X(greater, "greater", 2)            \
  X(greater_equal, "greater_equal", 2) X(less, "less", 2) X(less_equal, "less_equal", 2) \
  X(logical_and, "logical_and", 2) X(logical_or, "logical_or", 2)                       \
  X(logical_xor, "logical_xor", 2)                                                      \
  X(bitwise_and, "bitwise_and", 2) X(bitwise_or, "bitwise_or", 2)                       \
  X(bitwise_xor, "bitwise_xor", 2) X(left_shift, "left_shift", 2)                       \
  X(right_shift, "right_shift", 2)                                                      \
  X(abs, "abs", 1) X(rsqrt, "rsqrt", 1) X(reciprocal, "reciprocal", 1)                  \
  X(logical_not, "logical_not", 1)

enum class AluOp {
#define X(e, name, arity) e,
  NEURON_ALU_OPS(X)
#undef X
};

// Scalar-engine activation functions: activation computes func(x * scale + bias).
#define NEURON_ACT_FUNCS(X)                                                              \
  X(copy, "copy") X(exp, "exp") X(log, "log") X(tanh, "tanh") X(sqrt, "sqrt")            \
  X(rsqrt, "rsqrt") X(sigmoid, "sigmoid") X(silu, "silu") X(gelu, "gelu")                \
  X(gelu_apprx_tanh, "gelu_apprx_tanh") X(relu, "relu") X(abs, "abs")                    \
  X(reciprocal, "reciprocal") X(square, "square") X(sign, "sign") X(softplus, "softplus") \
  X(sin, "sin") X(cos, "cos") X(erf, "erf") X(negative, "negative")

enum class ActFunc {
#define X(e, name) e,
  NEURON_ACT_FUNCS(X)
#undef X
};

// Where a buffer lives. hbm is private to one SPMD program; shared_hbm is visible to all
// (kernel inputs and outputs).
#define NEURON_MEMORIES(X) X(hbm, "hbm") X(shared_hbm, "shared_hbm") X(sbuf, "sbuf") X(psum, "psum")

enum class Memory {
#define X(e, name) e,
  NEURON_MEMORIES(X)
#undef X
};

#define NEURON_ENGINES(X) \
  X(tensor, "tensor") X(vector, "vector") X(scalar, "scalar") X(gpsimd, "gpsimd") X(dma, "dma") \
  X(none, "none")

enum class Engine {
#define X(e, name) e,
  NEURON_ENGINES(X)
#undef X
};

inline bool is_on_chip(Memory m) { return m == Memory::sbuf || m == Memory::psum; }

std::string_view opcode_name(Opcode op);
OpLevel opcode_level(Opcode op);
Engine opcode_engine(Opcode op);
int opcode_streamed_inputs(Opcode op);
std::optional<Opcode> opcode_from_name(std::string_view s);
std::string_view alu_op_name(AluOp op);
int alu_op_arity(AluOp op);
std::optional<AluOp> alu_op_from_name(std::string_view s);
std::string_view act_func_name(ActFunc f);
std::optional<ActFunc> act_func_from_name(std::string_view s);
std::string_view memory_name(Memory m);
std::optional<Memory> memory_from_name(std::string_view s);
std::string_view engine_name(Engine e);
std::optional<Engine> engine_from_name(std::string_view s);

}  // namespace neuron
