// TensorE instructions: the systolic matmul and the transpose through it.
#pragma once
#include "neuron/codegen/instr_def.hpp"

namespace neuron::native {

// dst[M, N] (PSUM, fp32) (+)= stationary[K, M]^T @ moving[K, N]; accumulate -1: auto (the
// fresh_psum pass decides), 0 overwrite, 1 add.
template <>
struct InstrDef<Opcode::nc_matmul> {
  static void check(const Operands& o) {
    const OperandShape &st = o.src[0], &mv = o.src[1], &dst = o.dst;
    const int64_t K = st.partitions(), M = st.per_partition(), N = mv.per_partition();
    if (mv.partitions() != K || dst.partitions() != M || dst.per_partition() != N)
      o.fail("shape-mismatch",
             "stationary {} [K={}, M={}], moving {} [K={}, N={}] need a destination [M, N] = "
             "[{}, {}], got {}",
             st.str(), K, M, mv.str(), mv.partitions(), N, M, N, dst.str());
  }
  template <class E>
  static void call(E& e, const Instr& in) {
    NormLayout ld, l0, l1;
    auto st = e.view(in.src[0], in, l0);
    auto mv = e.view(in.src[1], in, l1);
    auto d = e.view(in.dst, in, ld);
    const int layout = (matmul_fast_layout(in, ld, l0, l1) ? kMatmulFast : 0) |
                       (in.args.same_moving ? kMatmulSameMoving : 0);
    e.call(NEURON_KERNEL(matmul), d, st, mv, dtype_arg(in.dst), dtype_arg(in.src[0]),
           dtype_arg(in.src[1]), in.args.accumulate, layout);
  }
};

// dst[F, P] = data[P, F]^T.
template <>
struct InstrDef<Opcode::nc_transpose> {
  static void check(const Operands& o) {
    const int64_t P = o.src[0].partitions(), F = o.src[0].per_partition();
    if (o.dst.partitions() != F || o.dst.per_partition() != P)
      o.fail("shape-mismatch", "data {} [P={}, F={}] needs a destination [{}, {}], got {}",
             o.src[0].str(), P, F, F, P, o.dst.str());
  }
  template <class E>
  static void call(E& e, const Instr& in) {
    call_dst_src(e, in, NEURON_KERNEL(transpose));
  }
};

// nc_transpose on the Vector engine (NKI's engine=vector, the default when dst is in SBUF): the
// same transpose of a tile of at most 32 x 32, SBUF or PSUM on either side.
template <>
struct InstrDef<Opcode::nc_transpose_vector> {
  static void check(const Operands& o) {
    InstrDef<Opcode::nc_transpose>::check(o);
    const int64_t P = o.src[0].partitions(), F = o.src[0].per_partition();
    if (P > 32 || F > 32)
      o.fail("shape-mismatch", "data {} [P={}, F={}]: the Vector engine transposes at most 32 x "
             "32; transpose larger tiles on the Tensor engine into PSUM (dst in PSUM)",
             o.src[0].str(), P, F);
  }
  template <class E>
  static void call(E& e, const Instr& in) {
    call_dst_src(e, in, NEURON_KERNEL(transpose));
  }
};

}  // namespace neuron::native
