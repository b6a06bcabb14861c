// Target tables for trn1, trn2 (default) and trn3: every hardware figure the toolkit uses.
// The timing figures and their sources are in target.cpp (docs/profiling.md explains the model).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace neuron {

// Tile limits every generation shares: NKI's nl.tile_size. The target tables below are built
// from them, the C++ DSL's nl::tile_size and Python's nl.tile_size read them, so each number is
// written once. (A generation that changed one would get its own Target field, as SBUF has.)
namespace tile_limits {
inline constexpr int64_t pmax = 128;               // partitions of any SBUF/PSUM tile
inline constexpr int64_t psum_fmax = 512;          // fp32 elements per partition in a PSUM bank
inline constexpr int64_t gemm_stationary_fmax = 128;  // matmul stationary free size (M)
inline constexpr int64_t gemm_moving_fmax = 512;   // matmul moving free size (N)
inline constexpr int64_t bn_stats_fmax = 512;      // free elements one bn_stats reads
inline constexpr int psum_banks = 8;               // PSUM banks per partition
inline constexpr int64_t psum_bank_bytes = psum_fmax * 4;
}  // namespace tile_limits

// Timing of one compute engine. An instruction holds its engine for its occupancy (the
// initiation interval: its streaming cycles, at least min_ii_cycles); its results are visible
// latency_cycles after that (access start, pipeline drain and write-back). So back-to-back
// independent instructions issue every occupancy, and a dependent one waits for occupancy +
// latency.
struct EngineTiming {
  double ghz = 1;
  int64_t min_ii_cycles = 64;  // MIN_II: the shortest occupancy
  int64_t latency_cycles = 0;  // from the end of the occupancy to results visible
};

struct Target {
  std::string name;  // "trn2"; "trn2x2" is two trn2 cores' SBUF and PSUM (target_by_name)
  int partitions = 128;
  int64_t sbuf_bytes_per_partition = 0;  // usable bytes per partition
  int64_t psum_bytes_per_partition = 16384;
  int psum_banks = 8;
  int64_t psum_bank_bytes = 2048;
  int64_t gemm_stationary_fmax = 128;
  int64_t gemm_moving_fmax = 512;
  std::string generation;  // "trn1", "trn2", "trn3" (the name without a core count)
  int cores = 1;  // "trn2x2": 2, its SBUF and PSUM figures the sum of the cores' (cores_of)

  // ---- timing model (runtime/timing.hpp; every figure's source is in target.cpp) ----
  EngineTiming tensor, vector, scalar, gpsimd;
  // TensorE: a matmul streams its moving tile one column per cycle, at least matmul_min_cycles.
  int64_t matmul_min_cycles = 64;
  double matmul_fp32_slowdown = 4;  // fp32: two passes (fp32_mode LOW/HIGH) of 2N cycles
  double matmul_fp8_speedup = 1;    // fp8 operands stream this many times faster than bf16
  double transpose_fp32_slowdown = 4;  // nc_transpose of fp32 data (NC-v3 transpose mode: 2)
  // A new stationary matrix loads in the background while the previous matmul streams; a matmul
  // whose stationary arrives late starts this long after it is ready (LoadStationary latency).
  int64_t stationary_load_cycles = 188;
  // Elements per partition per cycle for one input; two-input VectorE/GpSimd instructions
  // stream both, so they take two_input_slowdown times longer (with the exceptions in timing).
  double vector_elems_per_cycle = 1, scalar_elems_per_cycle = 1, gpsimd_elems_per_cycle = 1;
  double two_input_slowdown = 2;
  // NC-v3+ VectorE perf mode: bf16/fp16 contiguous SBUF tensor_copy / tensor_scalar run this
  // many times faster.
  double vector_perf_mode_copy = 1;
  double scalar_bf16_speedup = 1;  // NC-v4 ScalarE: bf16 at twice the rate
  int64_t gpsimd_start_cycles = 150;  // iota / affine_select startup
  // ScalarE loads a lookup table when the activation function changes to one in another table.
  double act_table_load_ns = 0;
  // NC-v2: VectorE and ScalarE cannot access PSUM at the same time, VectorE and GpSimd not SBUF.
  bool psum_port_shared = false, sbuf_port_vector_gpsimd_shared = false;
  // A wait on a semaphore (every dependence between instructions is one) wakes this late.
  double semaphore_ns = 30;

  // DMA: a transfer is split into packets, one per engine per group of partitions; each engine
  // moves its packets at its own rate and pays a cost per descriptor (a contiguous run of HBM
  // bytes); a short descriptor still occupies the engine for dma_descriptor_min_ns (throughput
  // proportional to bytes below ~2 KiB). The trigger-to-first-byte latency and the completion
  // semaphores do not occupy the engines, so many transfers in flight hide them.
  int dma_engines = 16;
  int dma_partitions_per_engine = 8;
  double dma_read_bytes_per_ns = 23;   // per engine, HBM -> SBUF (and SBUF -> SBUF)
  double dma_write_bytes_per_ns = 23;  // per engine, SBUF -> HBM
  double dma_descriptor_ns = 20;       // per contiguous run of HBM bytes (or SBUF partition row)
  double dma_descriptor_min_ns = 0;    // a descriptor's bytes move for at least this long
  double dma_latency_ns = 1000;        // trigger to the first byte moving
  double dma_completion_ns = 150;      // last byte to the semaphore seen by the waiting engine
  int64_t dma_strided_bytes = 16;      // an innermost HBM stride above this many bytes ...
  double dma_strided_efficiency = 0.5; // ... moves at this fraction of the engine rate
  double hbm_gbps_per_core = 362.5;    // the chip's HBM bandwidth over its cores (reported)
  double launch_ns = 0;  // fixed cost of launching a kernel (preamble / benchmark floor)

  // Dense bf16 TensorE peak in FLOP/s: 128 x 128 MACs (2 FLOPs each) per cycle.
  double tensor_peak_flops() const { return 2.0 * partitions * 128 * tensor.ghz * 1e9; }
  // Aggregate DMA bandwidth of the core for reads, bytes/ns (= GB/s).
  double dma_gbps() const { return dma_engines * dma_read_bytes_per_ns; }
};

// Throws UserError (rule "target") naming the known targets when `name` is unknown.
const Target& target_by_name(std::string_view name);
const Target& default_target();  // trn2
std::vector<std::string> target_names();

}  // namespace neuron
