// Random numbers: a counter-based generator with a [P, 4] uint32 state tile per kernel
// (builtins.hpp "random numbers"; docs/random.md). Draws read the state; rng_skip advances it.
#pragma once
#include "neuron/codegen/instr_def.hpp"

namespace neuron::native {

// The state operand: uint32, four words per partition, one row per partition of `of`.
inline void check_rng_state(const Operands& o, const AccessPattern& ap, const OperandShape& st,
                            int64_t partitions) {
  if (ap.dtype != DType::uint32 || st.per_partition() != 4 || st.partitions() != partitions)
    o.fail("rng-state",
           "the random state must be a uint32 [{}, 4] view (one row of four words per "
           "partition), got {} {}",
           partitions, dtype_name(ap.dtype), st.str());
}

// dst <- draws of the state: 32 random bits per element (integer dst) or uniform values in
// [low, high) (float dst).
template <>
struct InstrDef<Opcode::rng> {
  static void check(const Operands& o) {
    check_rng_state(o, o.in.src[0], o.src[0], o.dst.partitions());
  }
  template <class E>
  static void call(E& e, const Instr& in) {
    NormLayout ld, ls;
    auto st = e.view(in.src[0], in, ls);
    auto d = e.view(in.dst, in, ld);
    e.call(NEURON_KERNEL(rng), d, st, dtype_arg(in.dst), in.args.imm0, in.args.imm1);
  }
};

// dst <- 0 where a uniform draw is below prob (a number or a [P, 1] tile), else data.
template <>
struct InstrDef<Opcode::dropout> {
  static void check(const Operands& o) {
    o.same_count(0, "data");
    o.same_partitions(0, "data");
    check_rng_state(o, o.in.src[1], o.src[1], o.dst.partitions());
    if (o.args().operand0_tile) o.column(2, 0, "prob");
  }
  template <class E>
  static void call(E& e, const Instr& in) {
    NormLayout ld, l0, ls, lp;
    auto s = e.view(in.src[0], in, l0);
    auto st = e.view(in.src[1], in, ls);
    const AccessPattern* prob = in.args.operand0_tile ? &in.src[2] : nullptr;
    auto vp = prob ? e.view(*prob, in, lp) : e.no_view();
    auto d = e.view(in.dst, in, ld);
    e.call(NEURON_KERNEL(dropout), d, s, st, vp, dtype_arg(in.dst), dtype_arg(in.src[0]),
           prob ? dtype_arg(*prob) : 0, in.args.imm0);
  }
};

// dst (a state) <- per partition p the key of seed (a number, or a [P, 1] / [1, 1] tile), counter 0.
template <>
struct InstrDef<Opcode::rng_seed> {
  static void check(const Operands& o) {
    check_rng_state(o, o.in.dst, o.dst, o.dst.partitions());
    if (o.args().operand0_tile) {
      const OperandShape& s = o.src[0];
      if (s.per_partition() != 1 || (s.partitions() != 1 && s.partitions() != o.dst.partitions()))
        o.fail("shape-mismatch",
               "seed {} must hold one value per partition of the state ({}) or one value", s.str(),
               o.dst.partitions());
    }
  }
  template <class E>
  static void call(E& e, const Instr& in) {
    NormLayout ld, ls;
    const AccessPattern* seed = in.args.operand0_tile ? &in.src[0] : nullptr;
    auto vs = seed ? e.view(*seed, in, ls) : e.no_view();
    auto d = e.view(in.dst, in, ld);
    e.call(NEURON_KERNEL(rng_seed), d, vs, seed ? dtype_arg(*seed) : 0, in.args.imm0);
  }
};

// dst (a state) <- state with every counter advanced by count (after a draw of count values per
// partition).
template <>
struct InstrDef<Opcode::rng_skip> {
  static void check(const Operands& o) {
    check_rng_state(o, o.in.dst, o.dst, o.dst.partitions());
    check_rng_state(o, o.in.src[0], o.src[0], o.dst.partitions());
  }
  template <class E>
  static void call(E& e, const Instr& in) {
    NormLayout ld, ls;
    auto st = e.view(in.src[0], in, ls);
    auto d = e.view(in.dst, in, ld);
    e.call(NEURON_KERNEL(rng_skip), d, st, in.args.offset);
  }
};

}  // namespace neuron::native
