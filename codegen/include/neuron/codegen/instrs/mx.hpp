// MX (OCP microscaling) on NeuronCore-v4: quantize_mx (VectorE) packs bf16/fp16 data into x4
// elements with one uint8 scale per block of 8 partitions x 4 values, and nc_matmul_mx
// (TensorE) multiplies two such operands, applying the scales (builtins.hpp "MX", docs/mx.md).
//
// Scale layout: the scale of block g (partitions 8g .. 8g+7 of the data) sits on partition
// (g / 4) * 32 + g % 4 of the scale tile (4 scales per 32-partition quadrant, at the quadrant's
// first 4 partitions), column j for the data's x4 element j.
#pragma once
#include "neuron/codegen/instr_def.hpp"

namespace neuron::native {

// The scale tile's partitions a data tile of `data_partitions` needs: up to the last block's row.
inline int64_t mx_scale_rows(int64_t data_partitions) {
  const int64_t g = data_partitions / 8 - 1;
  return g < 0 ? 0 : (g / 4) * 32 + g % 4 + 1;
}

inline void check_mx_scale(const Operands& o, size_t i, const char* what, int64_t data_partitions,
                           int64_t columns) {
  const AccessPattern& ap = o.in.src[i];
  if (ap.dtype != DType::uint8 && ap.dtype != DType::float8_e8m0fnu)
    o.fail("dtype", "{} must be float8_e8m0fnu or uint8 (E8M0 scale codes), got {}", what,
           dtype_name(ap.dtype));
  const OperandShape& s = o.src[i];
  const int64_t rows = mx_scale_rows(data_partitions);
  if (s.partitions() < rows || s.per_partition() < columns)
    o.fail("shape-mismatch",
           "{} {} is too small: data of {} partitions and {} x4 elements per partition needs "
           "at least [{}, {}] (the scale of partitions 8g..8g+7 sits on partition "
           "(g // 4) * 32 + g % 4)",
           what, s.str(), data_partitions, columns, rows, columns);
}

inline void check_mx_partitions(const Operands& o, const char* what, int64_t p, int64_t max) {
  if (p % 32 != 0 || p > max)
    o.fail("mx-shape", "{} has {} partitions; MX data needs a multiple of 32 up to {}", what, p,
           max);
}

// dst[M, N] (PSUM fp32 or bf16) = sum over k, q of st[k, m].q * mv[k, n].q, each value times its
// block's scale; sources in order stationary, moving, stationary_scale, moving_scale.
template <>
struct InstrDef<Opcode::nc_matmul_mx> {
  static void check(const Operands& o) {
    const OperandShape &st = o.src[0], &mv = o.src[1], &dst = o.dst;
    for (size_t i : {size_t{0}, size_t{1}})
      if (!dtype_is_mx(o.in.src[i].dtype))
        o.fail("dtype", "{} must be float8_e5m2_x4, float8_e4m3fn_x4 or float4_e2m1fn_x4, got {}",
               i == 0 ? "stationary" : "moving", dtype_name(o.in.src[i].dtype));
    if (o.in.dst.dtype != DType::float32 && o.in.dst.dtype != DType::bfloat16)
      o.fail("psum-dtype", "dst is {}; nc_matmul_mx writes float32 or bfloat16 PSUM",
             dtype_name(o.in.dst.dtype));
    const int64_t K = st.partitions(), M = st.per_partition(), N = mv.per_partition();
    check_mx_partitions(o, "stationary", K, 128);
    if (M % 2 != 0 || M > 128)
      o.fail("mx-shape", "stationary has {} x4 elements per partition; M must be even, at most 128",
             M);
    if (N > 512) o.fail("mx-shape", "moving has {} x4 elements per partition; N is at most 512", N);
    if (mv.partitions() != K || dst.partitions() != M || dst.per_partition() != N)
      o.fail("shape-mismatch",
             "stationary {} [K={}, M={}], moving {} [K={}, N={}] need a destination [M, N] = "
             "[{}, {}], got {}",
             st.str(), K, M, mv.str(), mv.partitions(), N, M, N, dst.str());
    check_mx_scale(o, 2, "stationary_scale", K, M);
    check_mx_scale(o, 3, "moving_scale", K, N);
  }
  template <class E>
  static void call(E& e, const Instr& in) {
    NormLayout ld, l0, l1, l2, l3;
    auto st = e.view(in.src[0], in, l0);
    auto mv = e.view(in.src[1], in, l1);
    auto ss = e.view(in.src[2], in, l2);
    auto ms = e.view(in.src[3], in, l3);
    auto d = e.view(in.dst, in, ld);
    e.call(NEURON_KERNEL(matmul_mx), d, st, mv, ss, ms, dtype_arg(in.dst), dtype_arg(in.src[0]),
           dtype_arg(in.src[1]), in.args.accumulate);
  }
};

// dst [P, F/4] (fp8 x4) and dst_scale (uint8) <- src [P, F] (bf16/fp16): per block of 8
// partitions x 4 values, the scale from the block's largest exponent and the values divided by
// it, clamped and rounded (builtins.hpp mx_block_scale / mx_quantize).
template <>
struct InstrDef<Opcode::quantize_mx> {
  static void check(const Operands& o) {
    const DType sd = o.in.src[0].dtype, dd = o.in.dst.dtype;
    if (sd != DType::bfloat16 && sd != DType::float16)
      o.fail("dtype", "src must be bfloat16 or float16, got {}", dtype_name(sd));
    if (dd != DType::float8_e5m2_x4 && dd != DType::float8_e4m3fn_x4)
      o.fail("dtype", "dst must be float8_e5m2_x4 or float8_e4m3fn_x4 (MXFP8), got {}",
             dtype_name(dd));
    const OperandShape &s = o.src[0], &d = o.dst;
    check_mx_partitions(o, "src", s.partitions(), 128);
    if (s.per_partition() % 4 != 0 || d.partitions() != s.partitions() ||
        d.per_partition() * 4 != s.per_partition())
      o.fail("shape-mismatch",
             "src {} needs a multiple of 4 values per partition and dst [{}, {}] (four values "
             "per x4 element), got dst {}",
             s.str(), s.partitions(), s.per_partition() / 4, d.str());
    const AccessPattern& sc = o.in.reduce_res;
    if (sc.dtype != DType::uint8 && sc.dtype != DType::float8_e8m0fnu)
      o.fail("dtype", "dst_scale must be float8_e8m0fnu or uint8 (E8M0 scale codes), got {}",
             dtype_name(sc.dtype));
    OperandShape ss = o.shape(sc, "dst_scale");
    const int64_t rows = mx_scale_rows(s.partitions());
    if (ss.partitions() < rows || ss.per_partition() < d.per_partition())
      o.fail("shape-mismatch",
             "dst_scale {} is too small: {} partitions of {} x4 elements need at least [{}, {}] "
             "(the scale of partitions 8g..8g+7 sits on partition (g // 4) * 32 + g % 4)",
             ss.str(), s.partitions(), d.per_partition(), rows, d.per_partition());
  }
  template <class E>
  static void call(E& e, const Instr& in) {
    NormLayout ld, l0, lc;
    auto s = e.view(in.src[0], in, l0);
    auto sc = e.view(in.reduce_res, in, lc);
    auto d = e.view(in.dst, in, ld);
    e.call(NEURON_KERNEL(quantize_mx), d, sc, s, dtype_arg(in.dst), dtype_arg(in.src[0]));
  }
};

}  // namespace neuron::native
