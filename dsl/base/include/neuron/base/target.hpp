// Target tables for trn1, trn2 (default) and trn3: every hardware figure the toolkit uses.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace neuron {

struct Target {
  std::string name;
  int partitions = 128;
  int64_t sbuf_bytes_per_partition = 0;  // usable bytes per partition
  int64_t psum_bytes_per_partition = 16384;
  int psum_banks = 8;
  int64_t psum_bank_bytes = 2048;
  int64_t gemm_stationary_fmax = 128;
  int64_t gemm_moving_fmax = 512;

  // ---- timing model (runtime/timing.hpp; figures and sources in target.cpp) ----
  // Engine clocks in GHz.
  double tensor_ghz = 2.4, vector_ghz = 0.96, scalar_ghz = 1.2, gpsimd_ghz = 1.2;
  // TensorE: a matmul streams its moving tile one column per cycle, at least this many cycles.
  int64_t matmul_min_cycles = 64;
  double matmul_fp32_slowdown = 4;  // fp32 operands take this many times longer
  double matmul_fp8_speedup = 1;    // fp8 operands stream this many times faster than bf16
  // Elements per partition per cycle for a one-input instruction.
  double vector_elems_per_cycle = 1, vector_perf_mode_elems_per_cycle = 2;  // perf: bf16/fp16
  double scalar_elems_per_cycle = 1, scalar_bf16_elems_per_cycle = 1;
  double gpsimd_elems_per_cycle = 1;
  double two_input_slowdown = 2;  // VectorE/GpSimd instructions with two tensor inputs
  // Fixed issue overhead per instruction in engine cycles (TensorE's is its 64-cycle floor).
  int64_t engine_overhead_cycles = 64;
  int64_t vector_dependent_overhead_cycles = 100;  // VectorE fed by its own previous result
  // DMA.
  int dma_queues = 16;
  double dma_queue_gbps = 27;          // GB/s per DMA engine (queue)
  double dma_latency_ns = 1300;        // fixed start latency of one transfer
  double hbm_gbps_per_core = 362.5;    // the chip's HBM bandwidth over the cores sharing it
  int64_t dma_strided_bytes = 16;      // free-dim strides above this many bytes ...
  double dma_strided_efficiency = 0.5; // ... run at this fraction of the bandwidth

  // Dense bf16 TensorE peak in FLOP/s: 128 x 128 MACs (2 FLOPs each) per cycle.
  double tensor_peak_flops() const { return 2.0 * partitions * 128 * tensor_ghz * 1e9; }
};

// Throws UserError (rule "target") naming the known targets when `name` is unknown.
const Target& target_by_name(std::string_view name);
const Target& default_target();  // trn2
std::vector<std::string> target_names();

}  // namespace neuron
