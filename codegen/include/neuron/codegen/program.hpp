// The engine program: ISA instructions bound to engines over access patterns, loops kept rolled.
// This is what both executors (runtime/sim and the native backend) consume.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "neuron/ir/ir.hpp"

namespace neuron {


// A rotating slot: the pattern's offset advances by `bytes` per iteration of loop `var`,
// wrapping after `count` slots: offset += (var mod count) * bytes.
struct Rotation {
  std::string var;
  int64_t count = 1;
  int64_t bytes = 0;
  bool operator==(const Rotation&) const = default;
};

// Where an operand lives and how it is walked.
//  - On chip (sbuf/psum): dims[0] is {partition step (1, or 0 to broadcast one partition),
//    partition count}; `partition` is the first partition; `offset` is the byte offset inside
//    each partition; further dims are {stride in elements, count}, outermost first.
//  - HBM: `tensor` indexes Program::tensors; `offset` is an element offset; every dim is
//    {stride in elements, count}.
// Offsets are affine in loop variables and program ids ("pid<axis>", "npid<axis>").
struct AccessPattern {
  struct Dim {
    int64_t stride = 1;
    int64_t size = 1;
    bool operator==(const Dim&) const = default;
  };
  Memory memory = Memory::sbuf;
  int tensor = -1;
  DType dtype = DType::float32;
  Affine partition;
  Affine offset;
  std::vector<Dim> dims;
  Rotation rotation;
  // On chip: what the tile's allocation owns, partitions [0, partitions) and bytes [lo, hi) of
  // each (of its first rotating slot; slot r adds r * rotation.bytes). Unknown (hi <= lo) in
  // hand-built programs. An access whose place a register or a dynamic loop decides must stay
  // inside it: both executors check that when it runs ("out-of-bounds"), so the native plans
  // may rely on it.
  // `buffer` tells the program's buffers apart (lower numbers them from 0; -1: unknown): two
  // different buffers share bytes only when their lifetimes do not overlap (the allocator).
  struct Alloc {
    int64_t partitions = 0, lo = 0, hi = 0;
    int buffer = -1;
    bool known() const { return hi > lo; }
    bool operator==(const Alloc&) const = default;
  };
  Alloc alloc;

  int64_t elements() const;
  std::vector<int64_t> shape() const;  // sizes of dims
  bool operator==(const AccessPattern&) const = default;
};

// Typed instruction arguments; which fields matter depends on the opcode (see Instr).
struct InstrArgs {
  AluOp op0 = AluOp::bypass, op1 = AluOp::bypass;  // tensor_tensor uses op0
  bool reverse0 = false, reverse1 = false;
  double imm0 = 0, imm1 = 0;           // tensor_scalar operands / memset value / on_false value
  bool operand0_tile = false, operand1_tile = false;  // tensor_scalar operand is a [P,1] tile
  ActFunc func = ActFunc::copy;        // activation
  double scale = 1.0;                  // activation scale immediate
  bool bias_tile = false, scale_tile = false;
  AluOp reduce_op = AluOp::bypass;     // activation reduce / tensor_reduce op
  std::vector<int> axes;               // tensor_reduce: reduced free axes (dims of the pattern)
  bool negate = false;
  int accumulate = -1;                 // nc_matmul: 0 overwrite, 1 accumulate, -1 auto
  // nc_matmul: the instruction just before it in its body is an nc_matmul reading the same
  // moving view, so the moving values are the ones that one read (set by lower; the native
  // matmul may keep its packed copy of them).
  bool same_moving = false;
  std::vector<int64_t> pattern;        // iota/affine_select: [stride, count] pairs, flattened
  int64_t offset = 0, channel_multiplier = 0;
  AluOp cmp_op = AluOp::equal;         // affine_select comparison against 0
  std::string prefix;                  // device_print
  // dma_copy with indirect rows: the last source is the [P, 1] index tile; element p selects
  // the row (dims[0] of the HBM side, `indirect_rows` of them) partition p moves.
  enum class Indirect { none, src, dst } indirect = Indirect::none;
  int64_t indirect_rows = 0;
  bool oob_skip = false;                // out-of-range rows are skipped, not an error
  bool bitcast = false;                 // dma_copy: dst's bytes = src's bytes (no conversion)
  int64_t num_elem_per_idx = 1, num_valid_indices = -1;  // local_gather (-1: all)
  std::string reg, src_reg;            // register_*: the register written/read; move source
  bool operator==(const InstrArgs&) const = default;
};

// One instruction, lowered from an Op by its signature (ops.hpp): `src` holds the source views
// present, in signature order (source_specs names them), InstrArgs the scalars.
struct Instr {
  Opcode op = Opcode::tensor_copy;
  Engine engine = Engine::vector;
  AccessPattern dst;
  std::vector<AccessPattern> src;
  bool has_reduce_res = false;  // activation with reduce_res
  AccessPattern reduce_res;
  InstrArgs args;
  int id = 0;  // position in program order (profiles and timing refer to it)
  Span span;
};

// A program node: an instruction or a rolled loop (var = 0 .. extent-1). A dynamic loop
// (LoopKind::dynamic) counts its trip from registers when it starts, or runs while `cond` is
// non-zero (For in ir.hpp).
struct ProgNode {
  enum class Kind { instr, loop } kind = Kind::instr;
  Instr instr;
  std::string var;
  int64_t extent = 0;
  LoopKind loop_kind = LoopKind::affine;
  Affine start = 0, stop = 0;
  int64_t step = 1;
  std::string cond;
  std::vector<ProgNode> body;
};

struct TensorDecl {
  enum class Role { input, output, scratch };
  std::string name;
  Memory memory = Memory::shared_hbm;
  std::vector<int64_t> shape;
  DType dtype = DType::float32;
  Role role = Role::input;
};

struct Program {
  std::string name;
  std::string target;
  std::vector<TensorDecl> tensors;  // inputs, then outputs, then private HBM scratch
  int64_t sbuf_bytes = 0;           // per-partition high-water mark of the allocation
  int64_t psum_bytes = 0;
  int num_instrs = 0;
  std::vector<ProgNode> body;
};

std::string print(const Program& p);
// The signature entries of in.src, in order: which argument each source is.
std::vector<const ArgSpec*> source_specs(const Instr& in);

}  // namespace neuron
