// ScalarE instructions: activation functions with a fused scale, bias and row sum.
#pragma once
#include "neuron/codegen/instr_def.hpp"

namespace neuron::native {

// dst = func(data * scale + bias); reduce_res[p] = sum over the row of dst (reduce_op add).
// bias and scale may be [P, 1] tiles (sources after data, in that order).
template <>
struct InstrDef<Opcode::activation> {
  static void check(const Operands& o) {
    const InstrArgs& a = o.args();
    o.same_count(0, "data");
    o.same_partitions(0, "data");
    size_t next = 1;
    if (a.bias_tile) o.column(next++, 0, "bias");
    if (a.scale_tile) o.column(next++, 0, "scale");
    if (o.in.has_reduce_res) {
      OperandShape rr = o.shape(o.in.reduce_res, "reduce_res");
      if (rr.count != o.src[0].partitions())
        o.fail("shape-mismatch", "reduce_res {} must hold one value per partition ({})", rr.str(),
               o.src[0].partitions());
    }
  }
  template <class E>
  static void call(E& e, const Instr& in) {
    const InstrArgs& a = in.args;
    NormLayout ld, l0, lc;
    auto s = e.view(in.src[0], in, l0);
    size_t next = 1;
    const AccessPattern* bias = a.bias_tile ? &in.src[next++] : nullptr;
    const AccessPattern* scale = a.scale_tile ? &in.src[next++] : nullptr;
    auto vb = bias ? e.view(*bias, in, lc) : e.no_view();
    auto vs = scale ? e.view(*scale, in, lc) : e.no_view();
    auto d = e.view(in.dst, in, ld);
    auto rr = in.has_reduce_res ? e.view(in.reduce_res, in, lc) : e.no_view();
    e.call(NEURON_KERNEL(activation), d, s, vb, vs, rr, dtype_arg(in.dst), dtype_arg(in.src[0]),
           bias ? dtype_arg(*bias) : 0, scale ? dtype_arg(*scale) : 0, in.has_reduce_res ? dtype_arg(in.reduce_res) : 0,
           static_cast<int>(a.func), alu_arg(a.reduce_op), a.scale,
           same_flags(in, {&l0, &ld}, {&in.src[0]}));
  }
};

}  // namespace neuron::native
