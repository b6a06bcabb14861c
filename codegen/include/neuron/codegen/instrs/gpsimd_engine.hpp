// GpSimd instructions: index patterns (iota, affine_select) and per-partition gathers.
#pragma once
#include "neuron/codegen/instr_def.hpp"

namespace neuron::native {

// dst[p, i...] = offset + channel_multiplier * p + sum(stride * i) over the pattern's pairs.
template <>
struct InstrDef<Opcode::iota> {
  static void check(const Operands& o) { o.affine_pattern(); }
  template <class E>
  static void call(E& e, const Instr& in) {
    NormLayout ld;
    auto d = e.view(in.dst, in, ld);
    e.call(NEURON_KERNEL(iota), d, e.value_pattern(value_pattern_layout(in)), dtype_arg(in.dst),
           in.args.offset);
  }
};

// dst = cmp_op(iota value, 0) ? on_true : on_false.
template <>
struct InstrDef<Opcode::affine_select> {
  static void check(const Operands& o) {
    o.same_count(0, "on_true");
    o.affine_pattern();
  }
  template <class E>
  static void call(E& e, const Instr& in) {
    const InstrArgs& a = in.args;
    NormLayout ld, l0;
    auto s = e.view(in.src[0], in, l0);
    auto d = e.view(in.dst, in, ld);
    e.call(NEURON_KERNEL(affine_select), d, s, e.value_pattern(value_pattern_layout(in)),
           dtype_arg(in.dst), dtype_arg(in.src[0]), a.offset, alu_arg(a.cmp_op), a.imm0);
  }
};

// dst[p, j] = data[p, indices[p, j]] over data's flattened free dims.
template <>
struct InstrDef<Opcode::nc_n_gather> {
  static void check(const Operands& o) {
    const OperandShape &data = o.src[0], &idx = o.src[1];
    if (idx.partitions() != data.partitions() || o.dst.partitions() != data.partitions() ||
        o.dst.count != idx.count)
      o.fail("shape-mismatch",
             "data {}, indices {} and destination {} need the same partitions and as many "
             "destination elements as indices",
             data.str(), idx.str(), o.dst.str());
  }
  template <class E>
  static void call(E& e, const Instr& in) {
    NormLayout ld, l0, l1;
    auto s = e.view(in.src[0], in, l0);
    auto idx = e.view(in.src[1], in, l1);
    auto d = e.view(in.dst, in, ld);
    e.call(NEURON_KERNEL(gather), d, s, idx, dtype_arg(in.dst), dtype_arg(in.src[0]), dtype_arg(in.src[1]), in.id);
  }
};

// Per group of 16 partitions: the group's first num_valid_indices indices (partition-first)
// each select num_elem_per_idx consecutive elements of every partition's own row of src.
template <>
struct InstrDef<Opcode::local_gather> {
  static int64_t valid(const InstrArgs& a, int64_t index_per_partition) {
    return a.num_valid_indices >= 0 ? a.num_valid_indices : 16 * index_per_partition;
  }
  static void check(const Operands& o) {
    const OperandShape &data = o.src[0], &idx = o.src[1];
    const int64_t P = data.partitions(), per = o.args().num_elem_per_idx;
    const int64_t n = valid(o.args(), idx.per_partition());
    if (P % 16 != 0 || idx.partitions() != P || o.dst.partitions() != P)
      o.fail("shape-mismatch",
             "src {}, index {} and destination {} need the same partition count, a multiple of "
             "16 (GpSimd works in groups of 16 partitions)",
             data.str(), idx.str(), o.dst.str());
    if (per != 1 && per != 2 && per != 4 && per != 8 && per != 16 && per != 32)
      o.fail("local-gather", "num_elem_per_idx is {}; it must be 1, 2, 4, 8, 16 or 32", per);
    if (n < 0 || n > 16 * idx.per_partition() || n > 4096)
      o.fail("local-gather",
             "num_valid_indices is {}; a group of 16 partitions holds {} indices (at most 4096 "
             "are used)",
             n, 16 * idx.per_partition());
    if (o.dst.per_partition() != n * per)
      o.fail("shape-mismatch",
             "{} indices x {} elements need {} destination elements per partition, got {}", n,
             per, n * per, o.dst.per_partition());
  }
  template <class E>
  static void call(E& e, const Instr& in) {
    NormLayout ld, l0, l1;
    auto s = e.view(in.src[0], in, l0);
    auto idx = e.view(in.src[1], in, l1);
    auto d = e.view(in.dst, in, ld);
    const int64_t n = valid(in.args, l1.size[0] ? l1.count / l1.size[0] : 0);
    e.call(NEURON_KERNEL(local_gather), d, s, idx, dtype_arg(in.dst), dtype_arg(in.src[0]), dtype_arg(in.src[1]),
           in.args.num_elem_per_idx, n, in.id);
  }
};

// dst[0, j] = op over the partitions of data[:, j] (add, maximum, minimum in fp32; bitwise_and,
// bitwise_or on integer tiles).
template <>
struct InstrDef<Opcode::tensor_partition_reduce> {
  static void check(const Operands& o) {
    const AluOp op = o.args().reduce_op;
    if (op != AluOp::add && op != AluOp::maximum && op != AluOp::minimum &&
        op != AluOp::bitwise_and && op != AluOp::bitwise_or)
      o.fail("unknown-arg", "op={} cannot reduce across partitions (add, maximum, minimum, "
             "bitwise_and, bitwise_or)", alu_op_name(op));
    if ((op == AluOp::bitwise_and || op == AluOp::bitwise_or) &&
        (dtype_is_float(o.in.src[0].dtype) || dtype_is_float(o.in.dst.dtype)))
      o.fail("dtype", "op={} needs integer tiles, got data {} and dst {}", alu_op_name(op),
             dtype_name(o.in.src[0].dtype), dtype_name(o.in.dst.dtype));
    if (o.dst.partitions() != 1 || o.dst.count != o.src[0].per_partition())
      o.fail("shape-mismatch", "reducing data {} across partitions gives [1, {}], dst is {}",
             o.src[0].str(), o.src[0].per_partition(), o.dst.str());
  }
  template <class E>
  static void call(E& e, const Instr& in) {
    NormLayout ld, l0;
    auto s = e.view(in.src[0], in, l0);
    auto d = e.view(in.dst, in, ld);
    e.call(NEURON_KERNEL(partition_reduce), d, s, dtype_arg(in.dst), dtype_arg(in.src[0]),
           alu_arg(in.args.reduce_op));
  }
};

}  // namespace neuron::native
