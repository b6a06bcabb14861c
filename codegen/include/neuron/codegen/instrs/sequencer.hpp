// Instructions the engines' sequencers run: registers (runtime integers), device_print and the
// PSUM flag hand-over of eager mode.
#pragma once
#include "neuron/codegen/instr_def.hpp"

namespace neuron::native {

// reg = the one element of src.
template <>
struct InstrDef<Opcode::register_load> {
  static void check(const Operands& o) {
    if (o.src[0].count != 1) o.fail("register", "src {} must be one element", o.src[0].str());
  }
  template <class E>
  static void call(E& e, const Instr& in) {
    NormLayout l0;
    auto s = e.view(in.src[0], in, l0);
    e.call_into(in.args.reg, NEURON_KERNEL(load_scalar), s, dtype_arg(in.src[0]));
  }
};

// The one element of dst = reg.
template <>
struct InstrDef<Opcode::register_store> {
  static void check(const Operands& o) {
    if (o.dst.count != 1) o.fail("register", "dst {} must be one element", o.dst.str());
  }
  template <class E>
  static void call(E& e, const Instr& in) {
    NormLayout ld;
    auto d = e.view(in.dst, in, ld);
    e.call(NEURON_KERNEL(store_scalar), d, dtype_arg(in.dst), e.reg(in.args.reg));
  }
};

// reg = value, or reg = src register.
template <>
struct InstrDef<Opcode::register_move> {
  static void check(const Operands&) {}
  template <class E>
  static void call(E& e, const Instr& in) {
    const InstrArgs& a = in.args;
    e.set_reg(a.reg,
              a.src_reg.empty() ? e.integer(static_cast<int64_t>(a.imm0)) : e.reg(a.src_reg));
  }
};

// Prints "prefix [shape] dtype" and the values of src.
template <>
struct InstrDef<Opcode::device_print> {
  static void check(const Operands&) {}
  template <class E>
  static void call(E& e, const Instr& in) {
    NormLayout l0;
    auto s = e.view(in.src[0], in, l0);
    e.call(NEURON_KERNEL(print), s, dtype_arg(in.src[0]), e.text(print_header(in)));
  }
};

// Executor state for eager mode (ops.hpp): the PSUM "written by matmul" flags of dst's elements
// <- flags != 0, element by element in row-major order; dst's values stay.
template <>
struct InstrDef<Opcode::psum_flags_set> {
  static void check(const Operands& o) { o.same_count(0, "flags"); }
  template <class E>
  static void call(E& e, const Instr& in) {
    call_dst_src(e, in, NEURON_KERNEL(psum_flags_set));
  }
};

// dst <- 1 where src's elements have their flags set, else 0.
template <>
struct InstrDef<Opcode::psum_flags_get> {
  static void check(const Operands& o) { o.same_count(0, "source"); }
  template <class E>
  static void call(E& e, const Instr& in) {
    call_dst_src(e, in, NEURON_KERNEL(psum_flags_get));
  }
};

}  // namespace neuron::native
