// The one file of hardware numbers. Sources: ../shared/TRAINIUM.md and NKI_API.md section 2.
#include "neuron/base/target.hpp"

#include <fmt/format.h>

#include "neuron/base/error.hpp"

namespace neuron {

// Timing figures are from ../shared/TRAINIUM.md, which collects the public Neuron docs:
//   [arch]  NeuronCore-v2/v3/v4 architecture guides (clocks, lanes, HBM per chip, cores/chip)
//   [perf]  NKI performance guide (fixed instruction overhead ~64 cycles, VectorE ~100 for small
//           dependent instructions; matmul ~max(N, 64) cycles, 4x for fp32; one element per
//           partition per cycle on ScalarE/VectorE, 2x slower with two inputs)
//   [dma]   NKI DMA guide (16 DMA engines per core, ~27 GB/s each on trn1/trn2, ~38 GB/s on
//           trn3, ~1.3 us start latency, strides over 16 bytes halve efficiency)
static Target with_timing(Target t, double tensor_ghz, double vector_ghz, double scalar_ghz,
                          double gpsimd_ghz) {
  t.tensor_ghz = tensor_ghz;
  t.vector_ghz = vector_ghz;
  t.scalar_ghz = scalar_ghz;
  t.gpsimd_ghz = gpsimd_ghz;
  return t;
}

static std::vector<Target> make_targets() {
  // trn1 / NeuronCore-v2: 24 MiB SBUF = 128 x 192 KiB; usable 180224 bytes per partition
  // per the KLR tracer (NKI_API.md 2.1). PSUM 128 x 16 KiB in 8 banks of 2 KiB.
  // [arch] TensorE 2.8 GHz (2 * 128 * 128 * 2.8e9 = 91.8 TFLOPS bf16, the ~92 published);
  // VectorE 1.12 GHz, ScalarE and GpSimd 1.4 GHz.
  Target trn1 = with_timing(Target{"trn1", 128, 180224, 16384, 8, 2048, 128, 512}, 2.8, 1.12,
                            1.4, 1.4);
  trn1.matmul_fp8_speedup = 1;            // [arch] fp8 at the bf16 rate on NC-v2
  trn1.vector_perf_mode_elems_per_cycle = 1;  // [arch] no bf16 perf mode listed for NC-v2
  trn1.dma_queue_gbps = 27;               // [dma]
  trn1.hbm_gbps_per_core = 820.0 / 2;     // [arch] ~0.82 TB/s per chip, 2 cores per chip

  // trn2 / NeuronCore-v3: 28 MiB SBUF = 128 x 224 KiB; usable 212984 bytes (KLR tracer).
  // [arch] TensorE 2.4 GHz (78.6 TFLOPS bf16, the ~79 published); VectorE 0.96 GHz with 512
  // bf16/fp16 elements per cycle in perf mode vs 256 otherwise (so 2x per partition);
  // ScalarE and GpSimd 1.2 GHz.
  Target trn2 = with_timing(Target{"trn2", 128, 212984, 16384, 8, 2048, 128, 512}, 2.4, 0.96,
                            1.2, 1.2);
  trn2.matmul_fp8_speedup = 2;            // [arch] fp8 double-row mode: 2x bf16
  trn2.vector_perf_mode_elems_per_cycle = 2;  // [arch] 512 / 256 elements per cycle
  trn2.dma_queue_gbps = 27;               // [dma]
  trn2.hbm_gbps_per_core = 2900.0 / 8;    // [arch] ~2.9 TB/s per chip, 8 cores per chip

  // trn3 / NeuronCore-v4: 32 MiB SBUF = 128 x 256 KiB; usable 245752 bytes (KLR tracer).
  // [arch] TensorE 2.4 GHz; VectorE 1.2 GHz (512 / 256 perf mode); ScalarE 1.2 GHz with 256
  // bf16 / 128 other elements per cycle (2x per partition in bf16); GpSimd 1.2 GHz.
  Target trn3 = with_timing(Target{"trn3", 128, 245752, 16384, 8, 2048, 128, 512}, 2.4, 1.2, 1.2,
                            1.2);
  trn3.matmul_fp8_speedup = 4;            // [arch] MX fp8 ~315 TFLOPS = 4x bf16
  trn3.vector_perf_mode_elems_per_cycle = 2;  // [arch] 512 / 256
  trn3.scalar_bf16_elems_per_cycle = 2;   // [arch] 256 bf16 / 128 other
  trn3.dma_queue_gbps = 38;               // [dma]
  trn3.hbm_gbps_per_core = 4800.0 / 8;    // [arch] ~4.7-4.9 TB/s per chip, 8 cores per chip

  // Shared by all three ([perf], [dma]): matmul floor 64 cycles, fp32 4x slower, 64-cycle
  // issue overhead (VectorE 100 when fed by its own previous instruction), 1 element per
  // partition per cycle on ScalarE/VectorE/GpSimd (GpSimd: assumed like ScalarE, no published
  // rate), 2x slower with two inputs, 16 DMA queues with 1.3 us start latency, strided (> 16 B)
  // accesses at half efficiency. These are the struct's defaults.
  return {trn1, trn2, trn3};
}

static const std::vector<Target>& targets() {
  static const std::vector<Target> all = make_targets();
  return all;
}

const Target& target_by_name(std::string_view name) {
  for (auto& t : targets())
    if (t.name == name) return t;
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
