// VectorE instructions: element-wise ALU operations, scans, reductions, copies, memset.
#pragma once
#include "neuron/codegen/instr_def.hpp"

namespace neuron::native {

// dst = op(data1, data2), element by element.
template <>
struct InstrDef<Opcode::tensor_tensor> {
  static void check(const Operands& o) {
    o.same_count(0, "data1");
    o.same_count(1, "data2");
  }
  template <class E>
  static void call(E& e, const Instr& in) {
    NormLayout ld, l0, l1;
    auto x = e.view(in.src[0], in, l0);
    auto y = e.view(in.src[1], in, l1);
    auto d = e.view(in.dst, in, ld);
    e.call(NEURON_KERNEL(tensor_tensor), d, x, y, dtype_arg(in.dst), dtype_arg(in.src[0]), dtype_arg(in.src[1]),
           alu_arg(in.args.op0), same_flags(in, {&l0, &l1, &ld}, {&in.src[0], &in.src[1]}));
  }
};

// Per partition, along the free dims: r[i] = op1(op0(data0[i], r[i-1]), data1[i]) from
// r[-1] = initial (a [P, 1] tile, the third source, or an immediate).
template <>
struct InstrDef<Opcode::tensor_tensor_scan> {
  static void check(const Operands& o) {
    o.same_count(0, "data0");
    o.same_count(1, "data1");
    if (o.src[0].partitions() != o.dst.partitions())
      o.fail("shape-mismatch",
             "data0 has {} partitions, the destination {}; the scan runs along each partition",
             o.src[0].partitions(), o.dst.partitions());
    if (o.args().operand0_tile) o.column(2, 0, "initial");
  }
  template <class E>
  static void call(E& e, const Instr& in) {
    const InstrArgs& a = in.args;
    NormLayout ld, l0, l1, lc;
    auto x = e.view(in.src[0], in, l0);
    auto y = e.view(in.src[1], in, l1);
    const AccessPattern* init = a.operand0_tile ? &in.src[2] : nullptr;
    auto vi = init ? e.view(*init, in, lc) : e.no_view();
    auto d = e.view(in.dst, in, ld);
    e.call(NEURON_KERNEL(tensor_tensor_scan), d, x, y, vi, dtype_arg(in.dst), dtype_arg(in.src[0]),
           dtype_arg(in.src[1]), init ? dtype_arg(*init) : 0, alu_arg(a.op0), alu_arg(a.op1), int{a.reverse0},
           int{a.reverse1}, a.imm0);
  }
};

// dst = op1(op0(data, operand0), operand1); an operand is an immediate or a [P, 1] tile.
template <>
struct InstrDef<Opcode::tensor_scalar> {
  static void check(const Operands& o) {
    o.same_count(0, "data");
    size_t next = 1;
    if (o.args().operand0_tile) o.column(next++, 0, "operand0");
    if (o.args().operand1_tile) o.column(next++, 0, "operand1");
  }
  template <class E>
  static void call(E& e, const Instr& in) {
    const InstrArgs& a = in.args;
    NormLayout ld, l0, lc;
    auto s = e.view(in.src[0], in, l0);
    size_t next = 1;
    const AccessPattern* c0 = a.operand0_tile ? &in.src[next++] : nullptr;
    const AccessPattern* c1 = a.operand1_tile ? &in.src[next++] : nullptr;
    auto v0 = c0 ? e.view(*c0, in, lc) : e.no_view();
    auto v1 = c1 ? e.view(*c1, in, lc) : e.no_view();
    auto d = e.view(in.dst, in, ld);
    e.call(NEURON_KERNEL(tensor_scalar), d, s, v0, v1, dtype_arg(in.dst), dtype_arg(in.src[0]),
           c0 ? dtype_arg(*c0) : 0, c1 ? dtype_arg(*c1) : 0, alu_arg(a.op0), alu_arg(a.op1), int{a.reverse0},
           int{a.reverse1}, a.imm0, a.imm1, same_flags(in, {&l0, &ld}, {&in.src[0]}));
  }
};

// dst = op over the free axes `axes` of data (optionally negated).
template <>
struct InstrDef<Opcode::tensor_reduce> {
  static void check(const Operands& o) {
    const OperandShape& data = o.src[0];
    const int nd = static_cast<int>(data.sizes.size());
    std::vector<bool> reduced(static_cast<size_t>(nd), false);
    for (int ax : o.args().axes) {
      if (ax < 1 || ax >= nd)
        o.fail("reduce-axes",
               "axis {} is not a free axis of the data pattern {} (free axes are 1..{})", ax,
               data.str(), nd - 1);
      reduced[static_cast<size_t>(ax)] = true;
    }
    int64_t out_n = 1;
    for (int i = 0; i < nd; ++i)
      if (!reduced[static_cast<size_t>(i)]) out_n *= data.sizes[static_cast<size_t>(i)];
    if (o.dst.count != out_n)
      o.fail("shape-mismatch",
             "reducing data {} over axes [{}] gives {} elements but the destination {} has {}",
             data.str(), fmt::join(o.args().axes, ", "), out_n, o.dst.str(), o.dst.count);
  }
  template <class E>
  static void call(E& e, const Instr& in) {
    NormLayout ld, l0;
    auto s = e.view(in.src[0], in, l0);
    auto d = e.view(in.dst, in, ld);
    const int nd = static_cast<int>(in.src[0].dims.size());
    int mask = 0;
    for (int ax : in.args.axes) mask |= 1 << (ax + (kDims - nd));
    e.call(NEURON_KERNEL(tensor_reduce), d, s, dtype_arg(in.dst), dtype_arg(in.src[0]), alu_arg(in.args.reduce_op),
           mask, int{in.args.negate});
  }
};

// dst = src with a dtype cast (also the direct form of dma_copy).
template <>
struct InstrDef<Opcode::tensor_copy> {
  static void check(const Operands& o) { o.same_count(0, "source"); }
  template <class E>
  static void call(E& e, const Instr& in) {
    NormLayout ld, l0;
    auto s = e.view(in.src[0], in, l0);
    auto d = e.view(in.dst, in, ld);
    e.call(NEURON_KERNEL(copy), d, s, dtype_arg(in.dst), dtype_arg(in.src[0]),
           same_flags(in, {&l0, &ld}, {&in.src[0]}));
  }
};

// dst = src where predicate is non-zero; elsewhere dst keeps its value.
template <>
struct InstrDef<Opcode::tensor_copy_predicated> {
  static void check(const Operands& o) {
    o.same_count(0, "data");
    o.same_count(1, "predicate");
  }
  template <class E>
  static void call(E& e, const Instr& in) {
    NormLayout ld, l0, l1;
    auto s = e.view(in.src[0], in, l0);
    auto pr = e.view(in.src[1], in, l1);
    auto d = e.view(in.dst, in, ld);
    e.call(NEURON_KERNEL(copy_predicated), d, s, pr, dtype_arg(in.dst), dtype_arg(in.src[0]), dtype_arg(in.src[1]),
           same_flags(in, {&l0, &l1, &ld}, {&in.src[0], &in.src[1]}));
  }
};

// dst = value.
template <>
struct InstrDef<Opcode::memset> {
  static void check(const Operands&) {}
  template <class E>
  static void call(E& e, const Instr& in) {
    NormLayout ld;
    auto d = e.view(in.dst, in, ld);
    e.call(NEURON_KERNEL(memset), d, dtype_arg(in.dst), in.args.imm0);
  }
};

// ---- selection and statistics ---------------------------------------------------------------

// Shared rules: dst and the sources span the same partitions; `what` elements per partition.
inline void per_partition_count(const Operands& o, const OperandShape& s, int64_t n,
                                const char* what) {
  if (s.partitions() != o.src[0].partitions() || s.per_partition() != n)
    o.fail("shape-mismatch", "{} {} must be [{}, {}]", what, s.str(), o.src[0].partitions(), n);
}
inline void free_size_between(const Operands& o, int64_t lo, int64_t hi, const char* what) {
  const int64_t n = o.src[0].per_partition();
  if (n < lo || n > hi)
    o.fail("shape-mismatch", "{} {} has {} elements per partition; it takes {} to {}", what,
           o.src[0].str(), n, lo, hi);
}

// dst[p, 0..7] = the 8 largest values of src[p, :], in descending order.
template <>
struct InstrDef<Opcode::max8> {
  static void check(const Operands& o) {
    free_size_between(o, 8, 16384, "src");
    per_partition_count(o, o.dst, 8, "dst");
  }
  template <class E>
  static void call(E& e, const Instr& in) {
    call_dst_src(e, in, NEURON_KERNEL(max8));
  }
};

// dst[p, k] = the index in data[p, :] of vals[p, k] (fp32 comparison; a value repeated in vals
// takes the next occurrence, or with reverse=1, nc_match_replace8's dst_idx order, the next
// occurrence from the last slot down); all ones (0xFFFFFFFF for uint32) when it does not occur.
template <>
struct InstrDef<Opcode::nc_find_index8> {
  static void check(const Operands& o) {
    free_size_between(o, 8, 16384, "data");
    per_partition_count(o, o.src[1], 8, "vals");
    per_partition_count(o, o.dst, 8, "dst");
    if (dtype_is_float(o.in.dst.dtype))
      o.fail("dtype", "dst is {}; indices are written to an integer tile (uint32)",
             dtype_name(o.in.dst.dtype));
  }
  template <class E>
  static void call(E& e, const Instr& in) {
    NormLayout ld, l0, l1;
    auto s = e.view(in.src[0], in, l0);
    auto v = e.view(in.src[1], in, l1);
    auto d = e.view(in.dst, in, ld);
    e.call(NEURON_KERNEL(find_index8), d, s, v, dtype_arg(in.dst), dtype_arg(in.src[0]),
           dtype_arg(in.src[1]), int{in.args.reverse0 != 0});
  }
};

// dst = data with the elements nc_find_index8 would find replaced by imm.
template <>
struct InstrDef<Opcode::nc_match_replace8> {
  static void check(const Operands& o) {
    free_size_between(o, 8, 16384, "data");
    per_partition_count(o, o.src[1], 8, "vals");
    per_partition_count(o, o.dst, o.src[0].per_partition(), "dst");
  }
  template <class E>
  static void call(E& e, const Instr& in) {
    NormLayout ld, l0, l1;
    auto s = e.view(in.src[0], in, l0);
    auto v = e.view(in.src[1], in, l1);
    auto d = e.view(in.dst, in, ld);
    e.call(NEURON_KERNEL(match_replace8), d, s, v, dtype_arg(in.dst), dtype_arg(in.src[0]),
           dtype_arg(in.src[1]), in.args.imm0);
  }
};

// dst[p, :] = [count, mean, count * variance] of the even-indexed elements of data[p, :], then
// of the odd-indexed ones (fp32; the sums in the lane-blocked order, docs/numerics.md).
template <>
struct InstrDef<Opcode::bn_stats> {
  static void check(const Operands& o) {
    free_size_between(o, 1, tile_limits::bn_stats_fmax, "data");
    per_partition_count(o, o.dst, 6, "dst");
  }
  template <class E>
  static void call(E& e, const Instr& in) {
    call_dst_src(e, in, NEURON_KERNEL(bn_stats));
  }
};

// dst[p, :] = [mean, variance] of the (count, mean, count * variance) triples of data[p, :]
// combined (several bn_stats results side by side).
template <>
struct InstrDef<Opcode::bn_aggr> {
  static void check(const Operands& o) {
    const int64_t n = o.src[0].per_partition();
    if (n == 0 || n % 3 != 0)
      o.fail("shape-mismatch", "data {} has {} elements per partition; it must hold whole "
             "(count, mean, M2) triples", o.src[0].str(), n);
    per_partition_count(o, o.dst, 2, "dst");
  }
  template <class E>
  static void call(E& e, const Instr& in) {
    call_dst_src(e, in, NEURON_KERNEL(bn_aggr));
  }
};

// In every group of 32 partitions, dst partition i = src partition shuffle_mask[i] (255: dst
// partition i keeps its value).
template <>
struct InstrDef<Opcode::nc_stream_shuffle> {
  static void check(const Operands& o) {
    const auto& mask = o.args().pattern;
    const int64_t P = o.src[0].partitions(), group = P < 32 ? P : 32;
    if (P > 32 && P % 32 != 0)
      o.fail("shape-mismatch", "src {} spans {} partitions; shuffles work on 32-partition "
             "groups (use at most 32 or a multiple of 32)", o.src[0].str(), P);
    if (mask.size() != 32)
      o.fail("shuffle-mask", "shuffle_mask has {} entries; it needs 32 (255: keep)", mask.size());
    for (size_t i = 0; i < mask.size(); ++i)
      if (mask[i] != 255 && (mask[i] < 0 || mask[i] >= group))
        o.fail("shuffle-mask", "shuffle_mask[{}] is {}; a source partition is 0..{} or 255",
               i, mask[i], group - 1);
    // dst may span other partitions than src (src [1, F] broadcast to dst [32, F] with a mask
    // of zeros): each dst partition p reads src partition (p - p % 32) + shuffle_mask[p % 32].
    const int64_t Pd = o.dst.partitions();
    if (Pd > 32 && Pd % 32 != 0)
      o.fail("shape-mismatch", "dst {} spans {} partitions; shuffles work on 32-partition groups "
             "(use at most 32 or a multiple of 32)", o.dst.str(), Pd);
    if (o.dst.per_partition() != o.src[0].per_partition())
      o.fail("shape-mismatch", "dst {} has {} elements per partition but src {} has {}; a shuffle "
             "moves whole partitions", o.dst.str(), o.dst.per_partition(), o.src[0].str(),
             o.src[0].per_partition());
    for (int64_t p = 0; p < Pd; ++p) {
      const int64_t i = p % 32, from = mask[static_cast<size_t>(i)];
      if (from != 255 && p - i + from >= P)
        o.fail("shuffle-mask", "dst partition {} reads src partition {} (shuffle_mask[{}] is {}) "
               "but src {} has {} partitions", p, p - i + from, i, from, o.src[0].str(), P);
    }
    if (o.in.dst.dtype != o.in.src[0].dtype)
      o.fail("dtype", "dst is {} but src is {}; a shuffle keeps the dtype",
             dtype_name(o.in.dst.dtype), dtype_name(o.in.src[0].dtype));
  }
  template <class E>
  static void call(E& e, const Instr& in) {
    int64_t packed[4] = {0, 0, 0, 0};
    for (size_t i = 0; i < 32 && i < in.args.pattern.size(); ++i)
      packed[i / 8] |= static_cast<int64_t>(static_cast<uint64_t>(in.args.pattern[i] & 0xff)
                                            << (8 * (i % 8)));
    NormLayout ld, l0;
    auto s = e.view(in.src[0], in, l0);
    auto d = e.view(in.dst, in, ld);
    e.call(NEURON_KERNEL(stream_shuffle), d, s, dtype_arg(in.dst), dtype_arg(in.src[0]), packed[0],
           packed[1], packed[2], packed[3]);
  }
};

}  // namespace neuron::native
