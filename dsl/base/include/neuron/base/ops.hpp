// The operation vocabulary of the Kernel IR: opcodes, ALU operators, activation functions, memories.
// Every list is an X-macro so names, parsing and dispatch come from one place.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace neuron {

// The instruction table: one row per opcode, the only place an instruction is described.
// X(enumerator, printed name, level, engine, streamed inputs, (signature...)):
//  - level: Nl (a helper that legalize expands into ISA instructions) or Isa (an engine
//    instruction that survives to the engine program and runs as an instruction kernel:
//    codegen/instr_calls.hpp says which, dsl/base/src/kernels/instr_kernels.cpp defines it);
//  - engine: the engine an ISA instruction runs on (none for nl helpers and register moves);
//  - streamed inputs: how many full-size tensor operands the engine streams (the timing model's
//    cost entry: two-input VectorE/GpSimd instructions run at half rate);
//  - signature: the keyword arguments of the Op node (ir.hpp), in order. From it come the
//    verifier's argument and memory checks, the lowering to Instr (sources in signature order,
//    scalars into InstrArgs) and the program listing:
//      OUT(mem)                the destination view `dst`, in memories `mem`
//      IN(name, mem)           a source view the instruction reads
//      INDEX(name, mem)        a source view of integer indices
//      OPT(name, mem, slot)    an optional view (slot says what it is: bias_tile, src_rows, ...)
//      OUT2(name, mem)         a second destination (Instr::reduce_res, like activation's)
//      TILE_OR(name, req, slot) a [P, 1] tile (a source) or a number (the InstrArgs slot)
//      ARG(name, kind, req, slot) a scalar: kind integer/number/name/ints, slot its InstrArgs field
//    Memories: SBUF, PSUM, HBM (either HBM kind), ON_CHIP, DMA_MEM (HBM or SBUF), ANY_MEM.
//  The shape rules of ISA instructions are the program checker's (codegen/src/plan.cpp
//  check_instr: one case per opcode, run for both executors).
#define NEURON_OPCODES(X)                                                                     \
  /* nl helpers, expanded by codegen/src/legalize.cpp */                                       \
  X(nl_load, "nl.load", Nl, none, 1, /* dst(sbuf) <- src(hbm) with dtype cast */               \
    (OUT(SBUF), IN(src, HBM), OPT(src_rows, SBUF, src_rows), OPT(dst_rows, SBUF, dst_rows),    \
     ARG(oob_mode, integer, opt, oob_skip)))                                                   \
  X(nl_store, "nl.store", Nl, none, 1, /* dst(hbm) <- src(sbuf|psum) */                        \
    (OUT(HBM), IN(src, ON_CHIP), OPT(src_rows, SBUF, src_rows), OPT(dst_rows, SBUF, dst_rows), \
     ARG(oob_mode, integer, opt, oob_skip)))                                                   \
  X(nl_copy, "nl.copy", Nl, none, 1, /* dst <- src, dtype cast (a DMA when one side is HBM) */ \
    (OUT(ANY_MEM), IN(src, ANY_MEM)))                                                          \
  X(nl_matmul, "nl.matmul", Nl, none, 1, /* dst(psum) <- x @ y (transpose_x) */                \
    (OUT(PSUM), IN(x, SBUF), IN(y, SBUF), ARG(transpose_x, integer, req, none)))               \
  X(nl_transpose, "nl.transpose", Nl, none, 1, /* dst <- src.T */                              \
    (OUT(PSUM), IN(src, SBUF)))                                                                \
  X(nl_unary, "nl.unary", Nl, none, 1, /* dst <- func(x) */                                    \
    (OUT(ON_CHIP), IN(x, ON_CHIP), ARG(func, name, req, none)))                                \
  X(nl_binary, "nl.binary", Nl, none, 2, /* dst <- op(x, y), numpy broadcasting */             \
    (OUT(ON_CHIP), TILE_OR(x, req, none), TILE_OR(y, req, none), ARG(op, name, req, none)))    \
  X(nl_reduce, "nl.reduce", Nl, none, 1, /* dst <- op over free axes */                        \
    (OUT(ON_CHIP), IN(x, ON_CHIP), ARG(op, name, req, none), ARG(axes, ints, req, none)))      \
  X(nl_where, "nl.where", Nl, none, 2, /* dst <- cond ? x : y */                               \
    (OUT(ON_CHIP), IN(cond, ON_CHIP), TILE_OR(x, req, none), TILE_OR(y, req, none)))           \
  /* ISA instructions (nki.isa names) */                                                       \
  X(nc_matmul, "nc_matmul", Isa, tensor, 1,                                                    \
    (OUT(PSUM), IN(stationary, SBUF), IN(moving, SBUF),                                        \
     ARG(accumulate, integer, opt, accumulate)))                                               \
  X(nc_transpose, "nc_transpose", Isa, tensor, 1, (OUT(PSUM), IN(data, SBUF)))                 \
  X(nc_transpose_vector, "nc_transpose_vector", Isa, vector, 1, /* at most 32 x 32 */          \
    (OUT(ON_CHIP), IN(data, ON_CHIP)))                                                         \
  /* MX (NeuronCore-v4 microscaling), see instrs/mx.hpp */                                     \
  X(nc_matmul_mx, "nc_matmul_mx", Isa, tensor, 1, /* dst(psum) <- scaled x4 st^T @ mv */       \
    (OUT(PSUM), IN(stationary, SBUF), IN(moving, SBUF), IN(stationary_scale, SBUF),           \
     IN(moving_scale, SBUF), ARG(accumulate, integer, opt, accumulate)))                       \
  X(quantize_mx, "quantize_mx", Isa, vector, 1, /* dst (x4), dst_scale <- MX blocks of src */ \
    (OUT(SBUF), IN(src, SBUF), OUT2(dst_scale, SBUF)))                                \
  X(activation, "activation", Isa, scalar, 1, /* func(data * scale + bias) [, row sums] */     \
    (OUT(ON_CHIP), IN(data, ON_CHIP), ARG(func, name, req, func),                              \
     OPT(bias, ON_CHIP, bias_tile), TILE_OR(scale, opt, scale),                                \
     ARG(reduce_op, name, opt, reduce_op), OPT(reduce_res, ON_CHIP, reduce_res)))              \
  X(tensor_tensor, "tensor_tensor", Isa, vector, 2,                                            \
    (OUT(ON_CHIP), IN(data1, ON_CHIP), IN(data2, ON_CHIP), ARG(op, name, req, op0)))           \
  X(tensor_tensor_scan, "tensor_tensor_scan", Isa, vector, 2, /* per partition, see kernels */ \
    (OUT(ON_CHIP), IN(data0, ON_CHIP), IN(data1, ON_CHIP), TILE_OR(initial, req, imm0),        \
     ARG(op0, name, req, op0), ARG(op1, name, req, op1),                                       \
     ARG(reverse0, integer, opt, reverse0), ARG(reverse1, integer, opt, reverse1)))            \
  X(tensor_scalar, "tensor_scalar", Isa, vector, 1,                                            \
    (OUT(ON_CHIP), IN(data, ON_CHIP), ARG(op0, name, req, op0), TILE_OR(operand0, req, imm0),  \
     ARG(reverse0, integer, opt, reverse0), ARG(op1, name, opt, op1),                          \
     TILE_OR(operand1, opt, imm1), ARG(reverse1, integer, opt, reverse1)))                     \
  X(tensor_reduce, "tensor_reduce", Isa, vector, 1,                                            \
    (OUT(ON_CHIP), IN(data, ON_CHIP), ARG(op, name, req, reduce_op),                           \
     ARG(axes, ints, req, axes), ARG(negate, integer, opt, negate)))                           \
  X(tensor_copy, "tensor_copy", Isa, vector, 1, (OUT(ON_CHIP), IN(src, ON_CHIP)))              \
  X(tensor_copy_predicated, "tensor_copy_predicated", Isa, vector, 2,                          \
    (OUT(ON_CHIP), IN(src, ON_CHIP), IN(predicate, ON_CHIP)))                                  \
  X(memset, "memset", Isa, vector, 0, (OUT(ON_CHIP), ARG(value, number, req, imm0)))           \
  X(iota, "iota", Isa, gpsimd, 0,                                                              \
    (OUT(SBUF), ARG(pattern, ints, req, pattern), ARG(offset, integer, opt, offset),           \
     ARG(channel_multiplier, integer, opt, channel_multiplier)))                               \
  X(affine_select, "affine_select", Isa, gpsimd, 1,                                            \
    (OUT(SBUF), IN(on_true, SBUF), ARG(pattern, ints, req, pattern),                           \
     ARG(offset, integer, opt, offset), ARG(channel_multiplier, integer, opt, channel_multiplier), \
     ARG(cmp_op, name, opt, cmp_op), ARG(on_false, number, req, imm0)))                        \
  X(dma_copy, "dma_copy", Isa, dma, 1, /* src_rows/dst_rows: indirect rows, see plan.cpp */    \
    (OUT(DMA_MEM), IN(src, DMA_MEM), OPT(src_rows, SBUF, src_rows),                            \
     OPT(dst_rows, SBUF, dst_rows), ARG(oob_mode, integer, opt, oob_skip),                     \
     ARG(bitcast, integer, opt, bitcast))) /* bitcast: dst bytes = src bytes, see instrs/dma */ \
  X(nc_n_gather, "nc_n_gather", Isa, gpsimd, 1, /* dst[p, j] = data[p, indices[p, j]] */       \
    (OUT(SBUF), IN(data, SBUF), INDEX(indices, SBUF)))                                         \
  X(local_gather, "local_gather", Isa, gpsimd, 1, /* per 16-partition group, see kernels */    \
    (OUT(SBUF), IN(src, SBUF), INDEX(index, SBUF),                                             \
     ARG(num_elem_per_idx, integer, opt, num_elem_per_idx),                                    \
     ARG(num_valid_indices, integer, opt, num_valid_indices)))                                 \
  X(tensor_partition_reduce, "tensor_partition_reduce", Isa, gpsimd, 1, /* [P, F] -> [1, F] */ \
    (OUT(ON_CHIP), IN(data, ON_CHIP), ARG(op, name, req, reduce_op)))                          \
  /* selection and statistics (VectorE), see instrs/vector_engine.hpp */                       \
  X(max8, "max8", Isa, vector, 1, (OUT(ON_CHIP), IN(src, ON_CHIP)))                            \
  X(nc_find_index8, "nc_find_index8", Isa, vector, 1,                                          \
    (OUT(ON_CHIP), IN(data, ON_CHIP), IN(vals, ON_CHIP),                                       \
     ARG(reverse, integer, opt, reverse0))) /* repeated vals: from the last slot */            \
  X(nc_match_replace8, "nc_match_replace8", Isa, vector, 1,                                    \
    (OUT(ON_CHIP), IN(data, ON_CHIP), IN(vals, ON_CHIP), ARG(imm, number, req, imm0)))         \
  X(bn_stats, "bn_stats", Isa, vector, 1, (OUT(ON_CHIP), IN(data, ON_CHIP)))                   \
  X(bn_aggr, "bn_aggr", Isa, vector, 1, (OUT(ON_CHIP), IN(data, ON_CHIP)))                     \
  X(nc_stream_shuffle, "nc_stream_shuffle", Isa, vector, 1,                                    \
    (OUT(ON_CHIP), IN(src, ON_CHIP), ARG(shuffle_mask, ints, req, pattern)))                   \
  /* random numbers: a [P, 4] uint32 state per partition (builtins.hpp), instrs/random.hpp */  \
  X(rng, "rng", Isa, vector, 1, /* dst <- draws from state (bits, or uniform in [low, high)) */ \
    (OUT(ON_CHIP), IN(state, SBUF), ARG(low, number, req, imm0), ARG(high, number, req, imm1)))  \
  X(dropout, "dropout", Isa, vector, 2, /* dst <- draw < prob ? 0 : data */                   \
    (OUT(ON_CHIP), IN(data, ON_CHIP), IN(state, SBUF), TILE_OR(prob, req, imm0)))              \
  X(rng_seed, "rng_seed", Isa, gpsimd, 0, /* dst(state) <- keys of seed, counters 0 */        \
    (OUT(SBUF), TILE_OR(seed, req, imm0)))                                                     \
  X(rng_skip, "rng_skip", Isa, gpsimd, 0, /* dst(state) <- state with counters + count */     \
    (OUT(SBUF), IN(state, SBUF), ARG(count, integer, req, offset)))                            \
  /* registers (runtime integers, ir.hpp), run by the engines' sequencers */                  \
  X(register_load, "register_load", Isa, none, 0, /* reg <- one element of src */             \
    (ARG(reg, name, req, reg), IN(src, DMA_MEM)))                                              \
  X(register_store, "register_store", Isa, none, 0, /* dst (one element) <- reg */            \
    (OUT(DMA_MEM), ARG(reg, name, req, reg)))                                                  \
  X(register_move, "register_move", Isa, none, 0, /* reg <- value, or reg <- src register */  \
    (ARG(reg, name, req, reg), ARG(value, integer, opt, imm0), ARG(src, name, opt, src_reg)))  \
  X(device_print, "device_print", Isa, none, 1,                                                \
    (IN(src, ANY_MEM), ARG(prefix, name, opt, prefix)))                                        \
  /* executor state, not NKI instructions: eager mode (python/neuron/eager.py) runs each call */ \
  /* as its own kernel, so it hands a PSUM tile's "written by matmul" flags over with these */  \
  X(psum_flags_set, "psum_flags_set", Isa, none, 1, /* dst's flags <- flags != 0 */           \
    (OUT(PSUM), IN(flags, SBUF)))                                                              \
  X(psum_flags_get, "psum_flags_get", Isa, none, 1, /* dst <- 1 where src's flags are set */  \
    (OUT(SBUF), IN(src, PSUM)))

enum class OpLevel { Nl, Isa };

enum class Opcode {
#define X(e, name, level, engine, streams, signature) e,
  NEURON_OPCODES(X)
#undef X
};

// Binary and unary ALU operators of the Vector/GpSimd engines (tensor_tensor, tensor_scalar,
// tensor_reduce). X(enumerator, name, arity)
#define NEURON_ALU_OPS(X)                                                              \
  X(bypass, "bypass", 1)                                                               \
  X(add, "add", 2) X(subtract, "subtract", 2) X(multiply, "multiply", 2)                \
  X(divide, "divide", 2) X(maximum, "maximum", 2) X(minimum, "minimum", 2)              \
  X(power, "power", 2) X(mod, "mod", 2) X(fmod, "fmod", 2)                              \
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
  X(sin, "sin") X(cos, "cos") X(erf, "erf") X(negative, "negative") X(floor, "floor")    \
  X(ceil, "ceil") X(trunc, "trunc") X(tan, "tan") X(arctan, "arctan")                     \
  X(gelu_dx, "gelu_dx") X(gelu_apprx_sigmoid, "gelu_apprx_sigmoid")                       \
  X(gelu_apprx_sigmoid_dx, "gelu_apprx_sigmoid_dx") X(silu_dx, "silu_dx") X(mish, "mish") \
  X(erf_dx, "erf_dx")

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

// ---- instruction signatures (the table's last column) ---------------------------------

// What an argument holds: a view of a buffer, an integer view of indices, or a scalar.
enum class ArgKind { view, index, integer, number, name, ints, view_or_number };

// Which field of the lowered instruction (codegen's Instr / InstrArgs) an argument fills.
// Views: dst, src (a source, in signature order), or an optional view's meaning.
#define NEURON_ARG_SLOTS(X)                                                                \
  X(none) X(dst) X(src) X(bias_tile) X(src_rows) X(dst_rows) X(reduce_res)                \
  X(op0) X(op1) X(reverse0) X(reverse1) X(imm0) X(imm1) X(scale) X(func) X(reduce_op)     \
  X(axes) X(negate) X(accumulate) X(pattern) X(offset) X(channel_multiplier) X(cmp_op)    \
  X(prefix) X(oob_skip) X(bitcast) X(num_elem_per_idx) X(num_valid_indices) X(reg) X(src_reg)

enum class ArgSlot {
#define X(e) e,
  NEURON_ARG_SLOTS(X)
#undef X
};

// Memories an argument may live in, as a bit set.
enum MemorySet : unsigned {
  SBUF = 1,
  PSUM = 2,
  HBM = 4,  // hbm or shared_hbm
  ON_CHIP = SBUF | PSUM,
  DMA_MEM = SBUF | HBM,
  ANY_MEM = SBUF | PSUM | HBM,
};

struct ArgSpec {
  const char* name;
  ArgKind kind;
  bool required;
  unsigned memories;  // MemorySet, for views
  ArgSlot slot;

  bool is_view() const { return kind == ArgKind::view || kind == ArgKind::index; }
  // A view the instruction reads (goes to Instr::src when present).
  bool is_source() const {
    return (is_view() || kind == ArgKind::view_or_number) && slot != ArgSlot::dst &&
           slot != ArgSlot::reduce_res;
  }
};

const std::vector<ArgSpec>& opcode_signature(Opcode op);
bool opcode_has_dst(Opcode op);                  // whether the signature has OUT
// Whether the instruction writes every element of its destination whatever its arguments
// (element-wise, copies, transposes, memset, iota, affine_select). nc_matmul without
// accumulation and a DMA that neither scatters nor skips rows do too; their callers check that.
bool opcode_writes_whole_dst(Opcode op);
bool memory_in(Memory m, unsigned memories);     // m is one of the MemorySet bits
std::string memory_set_text(unsigned memories);  // "SBUF", "SBUF or PSUM", ...
std::string_view arg_kind_text(ArgKind k);       // "a view", "an integer", ...
std::string_view arg_slot_name(ArgSlot s);

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
