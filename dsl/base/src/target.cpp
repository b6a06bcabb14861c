// The one file of hardware numbers, each with its source. Sources: ../shared/TRAINIUM.md,
// NKI_API.md section 2, and ../shared/CALIBRATION.md (published measurements; where it
// corrects TRAINIUM.md, CALIBRATION.md wins). Tags:
//   [arch]   NeuronCore-v2/v3/v4 architecture guides (clocks, SBUF, HBM, cores per chip)
//   [isa]    legacy nki.isa cost notes (MIN_II, per-instruction exceptions), CALIBRATION.md 5.2
//   [PG]     NKI performance guide profiles, CALIBRATION.md 3 (figure numbers there)
//   [DMAO]   NKI DMA overview, CALIBRATION.md 4 (per-NC DMA table, example transfers)
//   [KO]     kernel-optimization tutorial profiles (trn2), CALIBRATION.md 1.2
//   [MM]     matrix-multiplication tutorial (trn1), CALIBRATION.md 1.1
//   [GEMM]   nki-autotune trn2 GEMM sweep, CALIBRATION.md 2.5
//   [fit]    chosen so the calibration cases (bench/calibration) match; the derivation is given
//   [assume] no published figure: taken from another generation, said which
#include "neuron/base/target.hpp"

#include <fmt/format.h>

#include <map>
#include <memory>
#include <mutex>

#include "neuron/base/error.hpp"

namespace neuron {

namespace {

// Engine timing shared by all generations (cycle counts; the clocks differ).
//  - min_ii 64 [isa] "MIN_II is roughly 64 engine cycles".
//  - The fixed costs (the "~60 cycles" static overhead per tensor access [arch NC-v2], pipeline
//    drain) are latency, not occupancy: mamba v1's back-to-back two-input fp32 VectorE
//    instructions take 2N cycles each and nothing more (160 of them plus 21 small ones in
//    148.99 us active at 1.12 GHz [PG mamba profile]).
//  - VectorE latency 380: a 2N fp32 tensor_tensor lasts 2N + 380 cycles [PG fig17].
//  - TensorE latency 330 (+ M, the stationary columns the result drains through): MM N=128 is
//    188 ns with a 1-column stationary and 219 ns with 96 columns [PG fig18, fig20-21] (526 and
//    613 cycles at 2.8 GHz: 128 streamed + 398 / 485); an fp32 pass of N=512 with 128 columns is
//    589 ns [SDK nki-profiler-5] (1414 cycles at 2.4 GHz: 1024 + 390). 330 + M fits all three
//    within 15%.
EngineTiming engine(double ghz, int64_t latency) {
  return EngineTiming{ghz, 64, latency};
}

// The fields every generation shares (tile_limits) plus its usable SBUF bytes per partition.
Target from_tile_limits(const char* name, int64_t sbuf_bytes_per_partition) {
  using namespace tile_limits;
  Target t;
  t.name = t.generation = name;
  t.partitions = pmax;
  t.sbuf_bytes_per_partition = sbuf_bytes_per_partition;
  t.psum_bytes_per_partition = psum_banks * psum_bank_bytes;
  t.psum_banks = psum_banks;
  t.psum_bank_bytes = psum_bank_bytes;
  t.gemm_stationary_fmax = gemm_stationary_fmax;
  t.gemm_moving_fmax = gemm_moving_fmax;
  return t;
}

Target make_trn1() {
  // trn1 / NeuronCore-v2: 24 MiB SBUF = 128 x 192 KiB; usable 180224 bytes per partition per the
  // KLR tracer (NKI_API.md 2.1). PSUM 128 x 16 KiB in 8 banks of 2 KiB.
  Target t = from_tile_limits("trn1", 180224);
  // [arch] TensorE 2.8 GHz (2 * 128 * 128 * 2.8e9 = 91.8 TFLOPS bf16, the ~92 published),
  // VectorE 1.12 GHz, ScalarE and GpSimd 1.4 GHz.
  t.tensor = engine(2.8, 330);
  t.vector = engine(1.12, 380);
  // ScalarE latency 159: a 1-element activation lasts 159 ns = 223 cycles at 1.4 GHz, MIN_II 64
  // of it occupancy [PG fig16].
  t.scalar = engine(1.4, 159);
  t.gpsimd = engine(1.4, 159);  // [assume] like ScalarE (same clock, no published latency)
  t.matmul_fp8_speedup = 1;     // [arch] fp8 at the bf16 rate on NC-v2
  t.transpose_fp32_slowdown = 4;  // [isa] like an fp32 matmul (no transpose mode on NC-v2)
  t.vector_perf_mode_copy = 1;    // [arch] no VectorE perf mode on NC-v2
  t.act_table_load_ns = 368;      // [PG] ACT_TABLE_LOAD 368 ns (legacy profiling guide)
  // [arch] "VectorE and GpSimdE cannot access SBUF in parallel", "VectorE and ScalarE cannot
  // access PSUM in parallel" (lifted on NC-v3).
  t.psum_port_shared = true;
  t.sbuf_port_vector_gpsimd_shared = true;
  // [PG fig16] a RAW-dependent chain of 1-element activations starts every 189 ns; each lasts
  // 159 ns: the semaphore wake-up is the other 30 ns.
  t.semaphore_ns = 30;
  // DMA. Writes: 17 B/ns per engine [DMAO per-NC table: 272 GB/s], matching the 4 MiB spill at
  // 247 GB/s [PG fig14] and 18.1 B/ns on one engine [PG fig30]. Reads from HBM: every DMA-bound
  // step of the trn1 matmul tutorial moves its loads at 103-106 GB/s, whatever the row size
  // (256 B to 4 KiB) and transfer size [MM]: 6.9 B/ns per engine with a 10 ns descriptor cost
  // [fit: MM steps 1 and 2, whose per-engine work per iteration is 16 descriptors + 10 KiB and
  // 8 descriptors + 8 KiB]. Reads wait for HBM's reply and writes are posted, which is the likely
  // reason for the asymmetry; no document states it. SBUF-to-SBUF copies run at the write rate.
  t.dma_read_bytes_per_ns = 6.9;
  t.dma_write_bytes_per_ns = 17;
  t.dma_descriptor_ns = 10;
  t.dma_latency_ns = 1300;   // TRAINIUM.md / DMA guide: "~1300 ns" semaphore to start
  t.dma_completion_ns = 150; // [assume] trn2's
  t.hbm_gbps_per_core = 820.0 / 2;  // [arch] ~0.82 TB/s per chip, 2 cores per chip
  // The profile timeline of a trn1 NEFF starts 13-17 us before the first instruction
  // [PG mamba v1 profile; legacy profiling guide]: 15 us.
  t.launch_ns = 15000;
  return t;
}

Target make_trn2() {
  // trn2 / NeuronCore-v3: 28 MiB SBUF = 128 x 224 KiB; usable 212984 bytes (KLR tracer).
  Target t = from_tile_limits("trn2", 212984);
  // [arch] TensorE 2.4 GHz (78.6 TFLOPS bf16, the ~79 published); VectorE 0.96 GHz; ScalarE and
  // GpSimd 1.2 GHz.
  t.tensor = engine(2.4, 330);
  t.vector = engine(0.96, 380);  // [assume] NC-v2's cycle counts
  // ScalarE latency 412: exp over [128, 128] bf16 lasts ~0.45 us and over [4, 4096] ~3.75 us
  // [DMAO examples 2, 1] (540 and 4500 cycles at 1.2 GHz: N + 412 for both).
  t.scalar = engine(1.2, 412);
  t.gpsimd = engine(1.2, 412);     // [assume] like ScalarE
  t.matmul_fp8_speedup = 2;        // [arch] fp8 double-row mode: 2x bf16
  t.transpose_fp32_slowdown = 2;   // [arch] NC-v3 transpose mode: fp32 transposes 2x faster
  t.vector_perf_mode_copy = 4;     // [arch] 4x tensor_copy / tensor_scalar on bf16/fp16 SBUF
  t.act_table_load_ns = 1050;      // [DMAO] ~1.05 us bar before the first exp (example 2)
  t.semaphore_ns = 30;             // [assume] NC-v2's
  // DMA: 27.2 B/ns per engine, the DMA overview's "theoretical bandwidth of 27.2 GB/s" per
  // engine [DMAO]. Per descriptor 20 ns, and its bytes move for at least 60 ns: the DMA
  // overview's throughput curve is proportional to bytes per partition below ~2 KiB (10% of
  // the 32 KiB throughput at 256 B, 42% at 1 KiB, 81% at 2 KiB, 97% at 4 KiB [DMAO fig]), and a
  // 2 KiB packet moves in 97 ns [DMAO example 2]. [fit, session 41: the curve, example 2 and
  // the KO and NA-GEMM steps together; worst figure 1.23x, was 2.56x with 29 ns per descriptor
  // and no floor, fitted to KO v2 and v3 alone.] The DMA overview's per-NC table (23 B/ns) and
  // its one-engine 32 KiB transfer (1416 ns, 23.1 B/ns) are that rate with the overheads in:
  // the model gives 1.22 us for the latter.
  // Latency: ~1.0 us from trigger to the first byte, ~1.25 us trigger to completion for 0.1 us
  // of movement [DMAO examples 1, 2]: 1000 + 150.
  t.dma_read_bytes_per_ns = 27.2;
  t.dma_write_bytes_per_ns = 27.2;
  t.dma_descriptor_ns = 20;
  t.dma_descriptor_min_ns = 60;
  t.dma_latency_ns = 1000;
  t.dma_completion_ns = 150;
  t.hbm_gbps_per_core = 2900.0 / 8;  // [arch] ~2.9 TB/s per chip, 8 cores per chip
  t.launch_ns = 50000;               // [GEMM] ~50 us floor of nki.benchmark (512^3 in 54 us)
  return t;
}

Target make_trn3() {
  // trn3 / NeuronCore-v4: 32 MiB SBUF = 128 x 256 KiB; usable 245752 bytes (KLR tracer).
  Target t = from_tile_limits("trn3", 245752);
  // [arch] TensorE 2.4 GHz; VectorE 1.2 GHz; ScalarE 1.2 GHz (256 bf16 / 128 other elements per
  // cycle: 2x in bf16); GpSimd 1.2 GHz. Latencies: [assume] NC-v3's.
  t.tensor = engine(2.4, 330);
  t.vector = engine(1.2, 380);
  t.scalar = engine(1.2, 412);
  t.gpsimd = engine(1.2, 412);
  t.matmul_fp8_speedup = 4;        // [arch] MX fp8 ~315 TFLOPS = 4x bf16
  t.transpose_fp32_slowdown = 2;   // [assume] NC-v3's transpose mode
  t.vector_perf_mode_copy = 4;     // [arch] as NC-v3
  t.scalar_bf16_speedup = 2;       // [arch] 256 bf16 / 128 other
  t.act_table_load_ns = 1050;      // [assume] NC-v3's
  t.semaphore_ns = 30;             // [assume]
  t.dma_read_bytes_per_ns = 38.4;  // [DMAO] theoretical 38.4 GB/s per engine (NC-v4)
  t.dma_write_bytes_per_ns = 38.4;
  t.dma_descriptor_ns = 29;        // [assume] NC-v3's fit before session 41 (no trn3 DMA figure
                                   // to check trn2's 60 ns floor against)
  t.dma_latency_ns = 1000;         // [assume] NC-v3's
  t.dma_completion_ns = 150;
  t.hbm_gbps_per_core = 4800.0 / 8;  // [arch] ~4.7-4.9 TB/s per chip, 8 cores per chip
  t.launch_ns = 50000;               // [assume] NC-v3's
  return t;
}

// Shared by all three (Target's defaults): matmul floor 64 cycles and fp32 4x (two passes of
// 2N, [KO]: 2062 cycles per 128x128x512 fp32 matmul), LoadStationary 188 cycles when it cannot
// hide behind the previous matmul ([PG fig20-21]: 67 ns at 2.8 GHz), 1 element per partition
// per cycle on ScalarE/VectorE/GpSimd, 2x slower with two streamed inputs, GpSimd start 150
// cycles for iota/affine_select [isa], 16 DMA engines, 8 partitions per engine ([DMAO]: a
// [128, 128] transfer is 16 packets, a [4, 4096] one goes to one engine), strided (> 16 B)
// innermost HBM access at half rate (TRAINIUM.md).
const std::vector<Target>& targets() {
  static const std::vector<Target> all = {make_trn1(), make_trn2(), make_trn3()};
  return all;
}

}  // namespace

// "trn2x2": the on-chip memory of n cores of a generation in one simulated core, for the
// programs of an LNC grid traced into one body (python/neuron/collectives.py): SBUF and PSUM
// (bytes and banks) n times over, everything else the generation's.
const Target* cores_of(std::string_view name) {
  static std::mutex mutex;
  static std::map<std::string, std::unique_ptr<Target>, std::less<>> made;
  const size_t x = name.rfind('x');
  if (x == std::string_view::npos || x + 1 >= name.size()) return nullptr;
  int n = 0;
  for (char c : name.substr(x + 1)) {
    if (c < '0' || c > '9' || n > 64) return nullptr;
    n = n * 10 + (c - '0');
  }
  if (n < 2 || n > 64) return nullptr;
  const Target* base = nullptr;
  for (auto& t : targets())
    if (t.name == name.substr(0, x)) base = &t;
  if (!base) return nullptr;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = made.find(name);
  if (it == made.end()) {
    auto t = std::make_unique<Target>(*base);
    t->name = std::string(name);
    t->sbuf_bytes_per_partition *= n;
    t->psum_bytes_per_partition *= n;
    t->psum_banks *= n;
    t->cores = n;
    it = made.emplace(std::string(name), std::move(t)).first;
  }
  return it->second.get();
}

const Target& target_by_name(std::string_view name) {
  for (auto& t : targets())
    if (t.name == name) return t;
  if (const Target* t = cores_of(name)) return *t;
  user_error(Span{}, "target", "unknown target '{}'; known targets are {}", name,
             fmt::join(target_names(), ", "));
}

const Target& default_target() { return target_by_name("trn2"); }

std::vector<std::string> target_names() {
  std::vector<std::string> names;
  for (auto& t : targets()) names.push_back(t.name);
  return names;
}

}  // namespace neuron
