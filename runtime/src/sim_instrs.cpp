// What each engine instruction computes, on resolved views, using the builtins for every number.
#include <fmt/format.h>
#include <fmt/ostream.h>

#include <algorithm>
#include <cstring>
#include <ostream>

#include "neuron/error.hpp"
#include "neuron/runtime/builtins.hpp"
#include "sim_state.hpp"

namespace neuron::sim {
namespace {

namespace b = builtins;

std::vector<float> gather_f32(const View& v) {
  std::vector<int64_t> offs = v.offsets();
  std::vector<float> out(offs.size());
  if (v.dtype == DType::float32) {
    for (size_t i = 0; i < offs.size(); ++i) std::memcpy(&out[i], v.base + offs[i], 4);
  } else {
    for (size_t i = 0; i < offs.size(); ++i) out[i] = b::load_f32(v.base + offs[i], v.dtype);
  }
  return out;
}

std::vector<std::byte> gather_raw(const View& v) {
  std::vector<int64_t> offs = v.offsets();
  std::vector<std::byte> out(offs.size() * static_cast<size_t>(v.esize));
  for (size_t i = 0; i < offs.size(); ++i)
    std::memcpy(out.data() + i * v.esize, v.base + offs[i], static_cast<size_t>(v.esize));
  return out;
}

std::vector<int64_t> gather_int(const View& v) {
  std::vector<int64_t> offs = v.offsets();
  std::vector<int64_t> out(offs.size());
  for (size_t i = 0; i < offs.size(); ++i) out[i] = b::load_int(v.base + offs[i], v.dtype);
  return out;
}

// Writes to PSUM by anything but a matmul make the next auto-accumulate matmul overwrite.
void clear_flags(const View& v, const std::vector<int64_t>& offs) {
  if (!v.flags) return;
  for (int64_t o : offs) std::memset(v.flags + o, 0, static_cast<size_t>(v.esize));
}

void scatter_f32(const View& v, const std::vector<float>& vals) {
  std::vector<int64_t> offs = v.offsets();
  if (v.dtype == DType::float32) {
    for (size_t i = 0; i < offs.size(); ++i) std::memcpy(v.base + offs[i], &vals[i], 4);
  } else {
    for (size_t i = 0; i < offs.size(); ++i) b::store_f32(v.base + offs[i], v.dtype, vals[i]);
  }
  clear_flags(v, offs);
}

void scatter_raw(const View& v, const std::vector<std::byte>& raw) {
  std::vector<int64_t> offs = v.offsets();
  for (size_t i = 0; i < offs.size(); ++i)
    std::memcpy(v.base + offs[i], raw.data() + i * v.esize, static_cast<size_t>(v.esize));
  clear_flags(v, offs);
}

// Integer results of bit-vector ops keep their low bits (the destination's width).
void scatter_int_bits(const View& v, const std::vector<int64_t>& vals) {
  std::vector<int64_t> offs = v.offsets();
  for (size_t i = 0; i < offs.size(); ++i) b::store_int_bits(v.base + offs[i], v.dtype, vals[i]);
  clear_flags(v, offs);
}

std::string shape_of(const View& v) {
  return fmt::format("[{}]", fmt::join(v.sizes, ", "));
}

void same_count(const Instr& in, const View& a, const char* an, const View& c, const char* cn) {
  if (a.count != c.count)
    user_error(in.span, "shape-mismatch", "{}: {} {} has {} elements but {} {} has {}",
               opcode_name(in.op), an, shape_of(a), a.count, cn, shape_of(c), c.count);
}

void same_partitions(const Instr& in, const View& a, const char* an, const View& c,
                     const char* cn) {
  if (a.partitions() != c.partitions())
    user_error(in.span, "shape-mismatch", "{}: {} {} spans {} partitions but {} {} spans {}",
               opcode_name(in.op), an, shape_of(a), a.partitions(), cn, shape_of(c),
               c.partitions());
}

// A [P,1] operand tile: one value per partition of `data`.
std::vector<float> column(const Instr& in, const View& col, const View& data, const char* name) {
  if (col.count != data.partitions())
    user_error(in.span, "shape-mismatch", "{}: {} {} must hold one value per partition ({})",
               opcode_name(in.op), name, shape_of(col), data.partitions());
  return gather_f32(col);
}

void need_src(const Instr& in, const std::vector<View>& src, size_t n) {
  NEURON_ASSERT(src.size() >= n, "{} at {} needs {} source operands, has {}", opcode_name(in.op),
                in.span.str(), n, src.size());
}

bool all_int(std::initializer_list<const View*> vs) {
  for (auto* v : vs)
    if (v && dtype_is_float(v->dtype)) return false;
  return true;
}

bool is_unary(AluOp op) {
  return op == AluOp::bypass || op == AluOp::abs || op == AluOp::rsqrt || op == AluOp::reciprocal ||
         op == AluOp::logical_not;
}

// out[n] = fma(a, row[n], out[n]). Cloned for FMA hardware so the loop vectorizes; the default
// clone calls the libm fma, which computes the same correctly rounded result. Not under
// ThreadSanitizer: the clones' ifunc resolver runs during relocation, before TSan's runtime is
// up, and the instrumented resolver crashes (scripts/sanitize.sh --thread).
#if defined(__SANITIZE_THREAD__)
#define NEURON_FMA_CLONES
#else
#define NEURON_FMA_CLONES __attribute__((target_clones("fma", "default")))
#endif
NEURON_FMA_CLONES void fma_row(float a, const float* row, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = std::fma(a, row[i], out[i]);
}

void exec_matmul(const Instr& in, const View& dst, const std::vector<View>& src) {
  need_src(in, src, 2);
  const View &st = src[0], &mv = src[1];
  const int64_t K = st.partitions(), M = st.per_partition(), N = mv.per_partition();
  if (mv.partitions() != K || dst.partitions() != M || dst.per_partition() != N)
    user_error(in.span, "shape-mismatch",
               "nc_matmul: stationary {} [K={}, M={}], moving {} [K={}, N={}] need a "
               "destination [M, N] = [{}, {}], got {}",
               shape_of(st), K, M, shape_of(mv), mv.partitions(), N, M, N, shape_of(dst));
  std::vector<float> s = gather_f32(st), m = gather_f32(mv);
  std::vector<int64_t> offs = dst.offsets();
  std::vector<float> acc(static_cast<size_t>(N));
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t n = 0; n < N; ++n) {
      std::byte* p = dst.base + offs[static_cast<size_t>(i * N + n)];
      bool keep = in.args.accumulate == 1 || (in.args.accumulate == -1 && dst.flags &&
                                              dst.flags[offs[static_cast<size_t>(i * N + n)]]);
      acc[static_cast<size_t>(n)] = keep ? b::load_f32(p, dst.dtype) : 0.0f;
    }
    for (int64_t k = 0; k < K; ++k)
      fma_row(s[static_cast<size_t>(k * M + i)], m.data() + k * N, acc.data(), N);
    for (int64_t n = 0; n < N; ++n) {
      int64_t o = offs[static_cast<size_t>(i * N + n)];
      b::store_f32(dst.base + o, dst.dtype, acc[static_cast<size_t>(n)]);
      if (dst.flags) std::memset(dst.flags + o, 1, static_cast<size_t>(dst.esize));
    }
  }
}

void exec_transpose(const Instr& in, const View& dst, const std::vector<View>& src) {
  need_src(in, src, 1);
  const View& d = src[0];
  const int64_t P = d.partitions(), F = d.per_partition();
  if (dst.partitions() != F || dst.per_partition() != P)
    user_error(in.span, "shape-mismatch",
               "nc_transpose: data {} [P={}, F={}] needs a destination [{}, {}], got {}",
               shape_of(d), P, F, F, P, shape_of(dst));
  if (d.dtype == dst.dtype) {
    std::vector<std::byte> raw = gather_raw(d), out(raw.size());
    const size_t e = static_cast<size_t>(d.esize);
    for (int64_t p = 0; p < P; ++p)
      for (int64_t f = 0; f < F; ++f)
        std::memcpy(out.data() + (f * P + p) * e, raw.data() + (p * F + f) * e, e);
    return scatter_raw(dst, out);
  }
  std::vector<float> x = gather_f32(d), out(x.size());
  for (int64_t p = 0; p < P; ++p)
    for (int64_t f = 0; f < F; ++f)
      out[static_cast<size_t>(f * P + p)] = x[static_cast<size_t>(p * F + f)];
  scatter_f32(dst, out);
}

void exec_activation(const Instr& in, const View& dst, const std::vector<View>& src,
                     const View* rr) {
  need_src(in, src, 1 + in.args.bias_tile + in.args.scale_tile);
  const View& d = src[0];
  same_count(in, d, "data", dst, "destination");
  same_partitions(in, d, "data", dst, "destination");
  const int64_t P = d.partitions(), F = d.per_partition();
  size_t next = 1;
  std::vector<float> bias(static_cast<size_t>(P), 0.0f),
      scale(static_cast<size_t>(P), static_cast<float>(in.args.scale));
  if (in.args.bias_tile) bias = column(in, src[next++], d, "bias");
  if (in.args.scale_tile) scale = column(in, src[next++], d, "scale");
  std::vector<float> x = gather_f32(d);
  AluOp rop = in.args.reduce_op == AluOp::bypass ? AluOp::add : in.args.reduce_op;
  std::vector<float> red(static_cast<size_t>(P));
  for (int64_t p = 0; p < P; ++p) {
    const float sc = scale[static_cast<size_t>(p)], bi = bias[static_cast<size_t>(p)];
    float* row = x.data() + p * F;
    for (int64_t f = 0; f < F; ++f) {
      float t = row[f] * sc;
      t = t + bi;
      row[f] = b::activate(in.args.func, t);
    }
    // The partition's values in row-major order, in the lane-blocked order (builtins.hpp).
    float lane[b::kReduceLanes];
    b::reduce_init(lane, rop);
    b::reduce_run(lane, rop, 0, F, [&](int64_t f) { return row[f]; });
    red[static_cast<size_t>(p)] = b::reduce_finish(lane, rop);
  }
  scatter_f32(dst, x);
  if (rr) {
    if (rr->count != P)
      user_error(in.span, "shape-mismatch",
                 "activation: reduce_res {} must hold one value per partition ({})", shape_of(*rr),
                 P);
    scatter_f32(*rr, red);
  }
}

void exec_tensor_tensor(const Instr& in, const View& dst, const std::vector<View>& src) {
  need_src(in, src, 2);
  same_count(in, src[0], "data1", dst, "destination");
  same_count(in, src[1], "data2", dst, "destination");
  const AluOp op = in.args.op0;
  if (b::alu_is_bitvec(op) && all_int({&dst, &src[0], &src[1]})) {
    std::vector<int64_t> x = gather_int(src[0]), y = gather_int(src[1]);
    for (size_t i = 0; i < x.size(); ++i) x[i] = b::alu_bits(op, x[i], y[i]);
    return scatter_int_bits(dst, x);
  }
  std::vector<float> x = gather_f32(src[0]), y = gather_f32(src[1]);
  for (size_t i = 0; i < x.size(); ++i) x[i] = b::alu(op, x[i], y[i]);
  scatter_f32(dst, x);
}

void exec_tensor_scalar(const Instr& in, const View& dst, const std::vector<View>& src) {
  const auto& a = in.args;
  need_src(in, src, 1 + a.operand0_tile + a.operand1_tile);
  const View& d = src[0];
  same_count(in, d, "data", dst, "destination");
  const int64_t P = d.partitions(), F = d.per_partition();
  size_t next = 1;
  const View* t0 = a.operand0_tile ? &src[next++] : nullptr;
  const View* t1 = a.operand1_tile ? &src[next++] : nullptr;
  const bool two = a.op1 != AluOp::bypass;
  if (b::alu_is_bitvec(a.op0) && (!two || b::alu_is_bitvec(a.op1)) && all_int({&dst, &d, t0, t1})) {
    auto col = [&](const View* t, double imm, const char* name) {
      if (!t)
        return std::vector<int64_t>(static_cast<size_t>(P),
                                    static_cast<int64_t>(std::llround(imm)));
      column(in, *t, d, name);
      return gather_int(*t);
    };
    std::vector<int64_t> c0 = col(t0, a.imm0, "operand0"), c1 = col(t1, a.imm1, "operand1");
    std::vector<int64_t> x = gather_int(d);
    for (int64_t p = 0; p < P; ++p)
      for (int64_t f = 0; f < F; ++f) {
        int64_t& v = x[static_cast<size_t>(p * F + f)];
        int64_t o0 = c0[static_cast<size_t>(p)], o1 = c1[static_cast<size_t>(p)];
        v = a.reverse0 ? b::alu_bits(a.op0, o0, v) : b::alu_bits(a.op0, v, o0);
        if (two) v = a.reverse1 ? b::alu_bits(a.op1, o1, v) : b::alu_bits(a.op1, v, o1);
      }
    return scatter_int_bits(dst, x);
  }
  auto col = [&](const View* t, double imm, const char* name) {
    return t ? column(in, *t, d, name)
             : std::vector<float>(static_cast<size_t>(P), static_cast<float>(imm));
  };
  std::vector<float> c0 = col(t0, a.imm0, "operand0"), c1 = col(t1, a.imm1, "operand1");
  std::vector<float> x = gather_f32(d);
  const bool rev0 = a.reverse0 && !is_unary(a.op0), rev1 = a.reverse1 && !is_unary(a.op1);
  for (int64_t p = 0; p < P; ++p) {
    const float o0 = c0[static_cast<size_t>(p)], o1 = c1[static_cast<size_t>(p)];
    for (int64_t f = 0; f < F; ++f) {
      float& v = x[static_cast<size_t>(p * F + f)];
      v = rev0 ? b::alu(a.op0, o0, v) : b::alu(a.op0, v, o0);
      if (two) v = rev1 ? b::alu(a.op1, o1, v) : b::alu(a.op1, v, o1);
    }
  }
  scatter_f32(dst, x);
}

void exec_tensor_reduce(const Instr& in, const View& dst, const std::vector<View>& src) {
  need_src(in, src, 1);
  const View& d = src[0];
  const int nd = static_cast<int>(d.sizes.size());
  std::vector<bool> reduced(static_cast<size_t>(nd), false);
  for (int ax : in.args.axes) {
    if (ax < 1 || ax >= nd)
      user_error(in.span, "reduce-axes",
                 "tensor_reduce: axis {} is not a free axis of the data pattern {} (free axes are "
                 "1..{})",
                 ax, shape_of(d), nd - 1);
    reduced[static_cast<size_t>(ax)] = true;
  }
  // Output index of each input element: row-major over the kept dims.
  std::vector<int64_t> coef(static_cast<size_t>(nd), 0);
  int64_t out_n = 1;
  for (int i = nd - 1; i >= 0; --i) {
    if (reduced[static_cast<size_t>(i)]) continue;
    coef[static_cast<size_t>(i)] = out_n;
    out_n *= d.sizes[static_cast<size_t>(i)];
  }
  if (dst.count != out_n)
    user_error(in.span, "shape-mismatch",
               "tensor_reduce: reducing data {} over axes [{}] gives {} elements but the "
               "destination {} has {}",
               shape_of(d), fmt::join(in.args.axes, ", "), out_n, shape_of(dst), dst.count);
  std::vector<int64_t> where = row_major_map(d.sizes, coef);
  std::vector<float> x = gather_f32(d);
  const AluOp op = in.args.reduce_op;
  // Row-major order visits each result's reduced elements in their row-major order: the i-th
  // one seen for a result goes to lane i mod 16 (the lane-blocked order, builtins.hpp).
  constexpr int L = b::kReduceLanes;
  std::vector<float> lanes(static_cast<size_t>(out_n * L), b::reduce_identity(op));
  std::vector<int64_t> seen(static_cast<size_t>(out_n), 0);
  for (size_t i = 0; i < x.size(); ++i) {
    const auto o = static_cast<size_t>(where[i]);
    float& r = lanes[o * L + static_cast<size_t>(seen[o]++ % L)];
    r = b::alu(op, r, x[i]);
  }
  std::vector<float> acc(static_cast<size_t>(out_n));
  for (size_t o = 0; o < acc.size(); ++o) {
    float lane[L];
    std::copy_n(lanes.begin() + static_cast<std::ptrdiff_t>(o * L), L, lane);
    acc[o] = b::reduce_finish(lane, op);
  }
  if (in.args.negate)
    for (float& r : acc) r = -r;
  scatter_f32(dst, acc);
}

void exec_copy(const Instr& in, const View& dst, const View& s, const char* name) {
  same_count(in, s, name, dst, "destination");
  if (s.dtype == dst.dtype) return scatter_raw(dst, gather_raw(s));
  scatter_f32(dst, gather_f32(s));
}

void exec_copy_predicated(const Instr& in, const View& dst, const std::vector<View>& src) {
  need_src(in, src, 2);
  same_count(in, src[0], "data", dst, "destination");
  same_count(in, src[1], "predicate", dst, "destination");
  std::vector<float> pred = gather_f32(src[1]);
  std::vector<int64_t> offs = dst.offsets();
  const size_t e = static_cast<size_t>(dst.esize);
  if (src[0].dtype == dst.dtype) {
    std::vector<std::byte> raw = gather_raw(src[0]);
    for (size_t i = 0; i < offs.size(); ++i)
      if (pred[i] != 0.0f) std::memcpy(dst.base + offs[i], raw.data() + i * e, e);
  } else {
    std::vector<float> x = gather_f32(src[0]);
    for (size_t i = 0; i < offs.size(); ++i)
      if (pred[i] != 0.0f) b::store_f32(dst.base + offs[i], dst.dtype, x[i]);
  }
  clear_flags(dst, offs);
}

void exec_memset(const View& dst, double value) {
  std::byte enc[4];
  b::store_f64(enc, dst.dtype, value);
  std::vector<int64_t> offs = dst.offsets();
  for (int64_t o : offs) std::memcpy(dst.base + o, enc, static_cast<size_t>(dst.esize));
  clear_flags(dst, offs);
}

// offset + p * channel_multiplier + sum_k stride_k * idx_k in int32 (wrapping), row-major.
std::vector<int64_t> affine_values(const Instr& in, const View& dst) {
  const auto& pat = in.args.pattern;
  if (pat.size() % 2 != 0)
    user_error(in.span, "iota-pattern", "{}: pattern needs [stride, count] pairs, got {} numbers",
               opcode_name(in.op), pat.size());
  std::vector<int64_t> sizes{dst.partitions()}, coef{in.args.channel_multiplier};
  for (size_t i = 0; i < pat.size(); i += 2) {
    coef.push_back(pat[i]);
    sizes.push_back(pat[i + 1]);
  }
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  if (n != dst.count)
    user_error(in.span, "iota-pattern",
               "{}: pattern [{}] over {} partitions gives {} values but the destination {} has {} "
               "elements",
               opcode_name(in.op), fmt::join(pat, ", "), dst.partitions(), n, shape_of(dst),
               dst.count);
  std::vector<int64_t> v = row_major_map(sizes, coef);
  for (int64_t& x : v)
    x = static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint64_t>(x + in.args.offset)));
  return v;
}

void exec_iota(const Instr& in, const View& dst) {
  std::vector<int64_t> v = affine_values(in, dst);
  std::vector<int64_t> offs = dst.offsets();
  for (size_t i = 0; i < offs.size(); ++i) b::store_int(dst.base + offs[i], dst.dtype, v[i]);
  clear_flags(dst, offs);
}


void exec_affine_select(const Instr& in, const View& dst, const std::vector<View>& src) {
  need_src(in, src, 1);
  same_count(in, src[0], "on_true", dst, "destination");
  std::vector<int64_t> v = affine_values(in, dst);
  std::vector<int64_t> offs = dst.offsets();
  const size_t e = static_cast<size_t>(dst.esize);
  std::byte on_false[4];
  b::store_f64(on_false, dst.dtype, in.args.imm0);
  const bool raw = src[0].dtype == dst.dtype;
  std::vector<std::byte> rx = raw ? gather_raw(src[0]) : std::vector<std::byte>{};
  std::vector<float> fx = raw ? std::vector<float>{} : gather_f32(src[0]);
  for (size_t i = 0; i < offs.size(); ++i) {
    std::byte* p = dst.base + offs[i];
    if (!b::compare_int(in.args.cmp_op, v[i], 0))
      std::memcpy(p, on_false, e);
    else if (raw)
      std::memcpy(p, rx.data() + i * e, e);
    else
      b::store_f32(p, dst.dtype, fx[i]);
  }
  clear_flags(dst, offs);
}

void exec_print(const Instr& in, const View& d, std::ostream& os) {
  std::vector<float> x = gather_f32(d);
  const int64_t P = d.partitions(), F = d.per_partition();
  std::string s = fmt::format("{} {} {}\n", in.args.prefix, shape_of(d), dtype_name(d.dtype));
  for (int64_t p = 0; p < P; ++p)
    s += fmt::format("  [{}]\n", fmt::join(x.begin() + p * F, x.begin() + (p + 1) * F, ", "));
  os << s;
}

}  // namespace

void execute(const Instr& in, const View& dst, const std::vector<View>& src, const View* rr,
             ExecState& st) {
  switch (in.op) {
    case Opcode::nc_matmul:
      return exec_matmul(in, dst, src);
    case Opcode::nc_transpose:
      return exec_transpose(in, dst, src);
    case Opcode::activation:
      return exec_activation(in, dst, src, rr);
    case Opcode::tensor_tensor:
      return exec_tensor_tensor(in, dst, src);
    case Opcode::tensor_scalar:
      return exec_tensor_scalar(in, dst, src);
    case Opcode::tensor_reduce:
      return exec_tensor_reduce(in, dst, src);
    case Opcode::tensor_copy:
      need_src(in, src, 1);
      return exec_copy(in, dst, src[0], "source");
    case Opcode::tensor_copy_predicated:
      return exec_copy_predicated(in, dst, src);
    case Opcode::memset:
      return exec_memset(dst, in.args.imm0);
    case Opcode::iota:
      return exec_iota(in, dst);
    case Opcode::affine_select:
      return exec_affine_select(in, dst, src);
    case Opcode::dma_copy:
      need_src(in, src, 1);
      return exec_copy(in, dst, src[0], "source");
    case Opcode::device_print:
      need_src(in, src, 1);
      return exec_print(in, src[0], *st.print);
    default:
      internal_error(
          "the simulator has no semantics for '{}' (an nl helper must be legalized "
          "first) at {}",
          opcode_name(in.op), in.span.str());
  }
}

}  // namespace neuron::sim
