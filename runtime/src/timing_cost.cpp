// Static instruction costs of the timing model: occupancy and latency per engine instruction, the
// per-engine work of a DMA transfer. Every constant is a Target field (sources in
// dsl/base/src/target.cpp); the formulas follow the vendor's ISA cost notes as CALIBRATION.md 3
// and 5 quote them.
#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "neuron/runtime/timing.hpp"

namespace neuron {

namespace {

bool is_fp8(DType d) { return dtype_is_float(d) && dtype_bytes(d) == 1; }
bool is_half(DType d) { return d == DType::bfloat16 || d == DType::float16; }

int64_t partitions_of(const AccessPattern& ap) {
  return is_on_chip(ap.memory) && !ap.dims.empty() ? std::max<int64_t>(ap.dims[0].size, 1) : 1;
}

int64_t per_partition(const AccessPattern& ap) {
  if (ap.dims.empty()) return 1;
  if (!is_on_chip(ap.memory)) return ap.elements();
  return ap.elements() / std::max<int64_t>(ap.dims[0].size, 1);
}

// Contiguous runs of an access pattern: merging dims from the innermost while each steps by the
// size of what is inside it. On chip a run never crosses a partition. An innermost dim with a
// stride other than 1 is walked by one descriptor per row of it (`strided`: at reduced rate when
// the step exceeds `strided_bytes`).
struct Runs {
  int64_t count = 1;
  bool strided = false;
};
Runs runs_of(const AccessPattern& ap, int64_t strided_bytes) {
  const size_t first = is_on_chip(ap.memory) ? 1 : 0;
  std::vector<AccessPattern::Dim> dims;
  for (size_t i = first; i < ap.dims.size(); ++i)
    if (ap.dims[i].size > 1) dims.push_back(ap.dims[i]);
  Runs r;
  const int64_t elements = std::max<int64_t>(ap.elements(), 1);
  if (dims.empty()) {
    r.count = first ? partitions_of(ap) : 1;
    return r;
  }
  int64_t run = dims.back().size;
  if (dims.back().stride == 1) {
    for (size_t i = dims.size() - 1; i-- > 0 && dims[i].stride == run;) run *= dims[i].size;
  } else {
    r.strided = std::llabs(dims.back().stride) * dtype_bytes(ap.dtype) > strided_bytes;
  }
  r.count = std::max<int64_t>(1, elements / run);
  return r;
}

// TensorE streaming cycles for `n` moving columns ([perf] max(N, 64); fp32 two passes of 2N).
double matmul_cycles(int64_t n, DType a, DType b, const Target& t) {
  const double floor = static_cast<double>(t.matmul_min_cycles);
  if (a == DType::float32 || b == DType::float32 || !(is_half(a) || is_fp8(a)))
    return std::max(static_cast<double>(n), floor) * t.matmul_fp32_slowdown;
  if (is_fp8(a) && is_fp8(b)) return std::max(static_cast<double>(n) / t.matmul_fp8_speedup, floor);
  return std::max(static_cast<double>(n), floor);
}

// Activation functions computed without a lookup table; every other function has its own table.
int act_table(ActFunc f) {
  switch (f) {
    case ActFunc::copy:
    case ActFunc::negative:
    case ActFunc::abs:
    case ActFunc::relu:
    case ActFunc::square:
    case ActFunc::sign:
      return -1;
    default:
      return static_cast<int>(f);
  }
}

bool contiguous_free(const AccessPattern& ap) {
  return runs_of(ap, 1 << 30).count == partitions_of(ap);
}

void engine_time(InstrCost& c, double stream_cycles, const EngineTiming& e) {
  c.cycles = std::max(static_cast<double>(e.min_ii_cycles), stream_cycles);
  c.latency_cycles += static_cast<double>(e.latency_cycles);
  c.ns = c.cycles / e.ghz;
  c.latency_ns = c.latency_cycles / e.ghz;
}

void dma_cost(InstrCost& c, const Instr& in, const Target& t) {
  const AccessPattern& src = in.src.at(0);
  const AccessPattern& dst = in.dst;
  c.dma = true;
  c.bytes = std::max(src.elements() * dtype_bytes(src.dtype), dst.elements() * dtype_bytes(dst.dtype));
  const bool src_hbm = !is_on_chip(src.memory), dst_hbm = !is_on_chip(dst.memory);
  c.hbm = src_hbm || dst_hbm;
  // Descriptors: the contiguous runs of the HBM side (SBUF writes are per partition and cheap),
  // or the partition rows when both sides are on chip.
  const AccessPattern& side = src_hbm ? src : dst_hbm ? dst : src;
  Runs runs = runs_of(side, t.dma_strided_bytes);
  // Engines: one per group of partitions of the on-chip side; HBM to HBM spreads its runs.
  const AccessPattern* chip = !src_hbm ? &src : !dst_hbm ? &dst : nullptr;
  int64_t engines = chip ? (partitions_of(*chip) + t.dma_partitions_per_engine - 1) /
                               t.dma_partitions_per_engine
                         : runs.count;
  engines = std::clamp<int64_t>(engines, 1, t.dma_engines);
  c.dma_engines = static_cast<int>(engines);
  c.descriptors = std::max(runs.count, engines);  // a run is split at least per engine
  c.strided = runs.strided;
  // Reads from HBM wait for its reply; everything else (writes, SBUF reads) runs at the write rate.
  const double rate = src_hbm ? t.dma_read_bytes_per_ns : t.dma_write_bytes_per_ns;
  const double per_engine_bytes = static_cast<double>(c.bytes) / static_cast<double>(engines);
  const double per_engine_desc =
      std::ceil(static_cast<double>(c.descriptors) / static_cast<double>(engines));
  const double move_ns = per_engine_bytes / rate / (runs.strided ? t.dma_strided_efficiency : 1.0);
  c.engine_ns = per_engine_desc * t.dma_descriptor_ns +
                std::max(per_engine_desc * t.dma_descriptor_min_ns, move_ns);
  c.latency_ns = t.dma_latency_ns + t.dma_completion_ns;
  c.ns = c.engine_ns + c.latency_ns;
}

}  // namespace

InstrCost instr_cost(const Instr& in, const Target& t) {
  InstrCost c;
  if (in.engine == Engine::none) return c;  // device_print, registers: the sequencer
  if (in.engine == Engine::dma || in.op == Opcode::dma_copy) {
    dma_cost(c, in, t);
    return c;
  }
  int64_t bytes = in.dst.elements() * dtype_bytes(in.dst.dtype);
  for (auto& s : in.src) bytes += s.elements() * dtype_bytes(s.dtype);
  c.bytes = bytes;
  c.sbuf_access = in.dst.memory == Memory::sbuf;
  c.psum_access = in.dst.memory == Memory::psum;
  bool psum_in = false, half_all = is_half(in.dst.dtype) || is_fp8(in.dst.dtype), contiguous = true;
  for (auto& s : in.src) {
    psum_in |= s.memory == Memory::psum;
    c.sbuf_access |= s.memory == Memory::sbuf;
    half_all &= is_half(s.dtype) || is_fp8(s.dtype);
    contiguous &= contiguous_free(s);
  }
  contiguous &= contiguous_free(in.dst);
  c.psum_access |= psum_in;
  const AccessPattern& data = in.src.empty() ? in.dst : in.src[0];
  const double n = static_cast<double>(std::max(per_partition(data), per_partition(in.dst)));
  const double parts = static_cast<double>(partitions_of(data));
  switch (in.engine) {
    case Engine::tensor: {
      c.engine_unit = 0;
      const AccessPattern& stat = in.src.at(0);
      if (in.op == Opcode::nc_matmul) {
        // nc_matmul(stationary [K, M], moving [K, N]): the moving tile streams N columns; the
        // result drains through the M columns of the array (latency grows with M: PG fig18/20).
        const AccessPattern& moving = in.src.at(1);
        const int64_t k = partitions_of(moving), m = per_partition(stat);
        const int64_t cols = per_partition(moving);
        c.latency_cycles = static_cast<double>(m);
        engine_time(c, matmul_cycles(cols, stat.dtype, moving.dtype, t), t.tensor);
        c.flops = 2.0 * static_cast<double>(k) * static_cast<double>(m) * static_cast<double>(cols);
        c.accumulates = true;
      } else if (in.op == Opcode::nc_matmul_mx) {
        // nc_matmul_mx(stationary [K, M] x4, moving [K, N] x4): each column holds four values
        // per row, contracted in one pass: N columns at one per cycle, the 4x bf16 rate of MX
        // fp8 (TRAINIUM.md: ~315 TFLOPS MX against ~79 bf16 on trn3).
        const AccessPattern& moving = in.src.at(1);
        const int64_t k = partitions_of(moving), m = per_partition(stat);
        const int64_t cols = per_partition(moving);
        c.latency_cycles = static_cast<double>(m);
        engine_time(c, std::max<double>(static_cast<double>(cols),
                                        static_cast<double>(t.matmul_min_cycles)),
                    t.tensor);
        c.flops = 8.0 * static_cast<double>(k) * static_cast<double>(m) * static_cast<double>(cols);
        c.accumulates = true;
      } else {
        // nc_transpose: the data is loaded as the stationary and an identity streams through:
        // max(P, min(64, F)) cycles (legacy ISA), fp32 data at the transpose fp32 rate.
        const double p = parts, f = static_cast<double>(per_partition(stat));
        double cycles = std::max(p, std::min(64.0, f));
        if (!(is_half(stat.dtype) || is_fp8(stat.dtype))) cycles *= t.transpose_fp32_slowdown;
        c.latency_cycles = f;
        c.cycles = cycles;
        c.ns = cycles / t.tensor.ghz;
        c.latency_ns = (c.latency_cycles + static_cast<double>(t.tensor.latency_cycles)) /
                       t.tensor.ghz;
        c.latency_cycles += static_cast<double>(t.tensor.latency_cycles);
        c.flops = 2.0 * p * f * p;
      }
      c.stationary_ns = static_cast<double>(t.stationary_load_cycles) / t.tensor.ghz;
      return c;
    }
    case Engine::vector: {
      c.engine_unit = 1;
      double stream = n / t.vector_elems_per_cycle;
      const bool recip = in.args.op0 == AluOp::reciprocal || in.args.op1 == AluOp::reciprocal;
      switch (in.op) {
        case Opcode::tensor_tensor: {
          // 2N (both inputs stream) unless one input is in PSUM, or all-bf16/fp16 SBUF
          // add/subtract/multiply on contiguous data: N.
          const AluOp op = in.args.op0;
          const bool cheap_op = op == AluOp::add || op == AluOp::subtract || op == AluOp::multiply;
          if (!(psum_in || (half_all && cheap_op && contiguous))) stream *= t.two_input_slowdown;
          break;
        }
        case Opcode::tensor_copy_predicated:
          if (!psum_in) stream *= t.two_input_slowdown;
          break;
        case Opcode::tensor_copy:
        case Opcode::tensor_scalar:
          // NC-v3+ perf mode: bf16/fp16 SBUF-to-SBUF contiguous copies and tensor_scalar.
          if (half_all && !c.psum_access && contiguous) stream /= t.vector_perf_mode_copy;
          break;
        case Opcode::tensor_reduce:
          if (is_half(data.dtype) && is_half(in.dst.dtype) &&
              (in.args.reduce_op == AluOp::add || in.args.reduce_op == AluOp::maximum))
            stream /= 2;
          break;
        case Opcode::memset:
          if (in.args.imm0 == 0 && is_half(in.dst.dtype)) stream /= 2;
          break;
        default:  // other instructions streaming two inputs (the instruction table says which)
          if (opcode_streamed_inputs(in.op) == 2 && !psum_in) stream *= t.two_input_slowdown;
          break;
      }
      if (recip) stream = 8 * n;  // reciprocal: max(MIN_II, 8N) (legacy ISA)
      engine_time(c, stream, t.vector);
      c.flops = n * parts;
      return c;
    }
    case Engine::scalar: {
      c.engine_unit = 2;
      double stream = n / t.scalar_elems_per_cycle;
      if (is_half(data.dtype) && is_half(in.dst.dtype)) stream /= t.scalar_bf16_speedup;
      if (in.has_reduce_res) stream += static_cast<double>(t.scalar.min_ii_cycles);
      if (in.op == Opcode::activation) c.act_table = act_table(in.args.func);
      engine_time(c, stream, t.scalar);
      c.flops = n * parts;
      return c;
    }
    case Engine::gpsimd: {
      c.engine_unit = 3;
      double stream = n / t.gpsimd_elems_per_cycle;
      if (in.op == Opcode::iota || in.op == Opcode::affine_select)
        stream += static_cast<double>(t.gpsimd_start_cycles);
      engine_time(c, stream, t.gpsimd);
      c.flops = n * parts;
      return c;
    }
    default:
      return InstrCost{};
  }
}

}  // namespace neuron
