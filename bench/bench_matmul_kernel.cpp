// Throughput of the nc_matmul instruction kernel (runtime/native/matmul_kernel.hpp), per ISA
// variant, fp32 and bf16, for one instruction's tile with contiguous and partition-like strides.
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "../dsl/base/src/kernels/matmul_variants.hpp"
#include "neuron/base/matmul_kernel.hpp"

namespace {

struct Case {
  const char* name;
  int64_t M, N, K;
  int64_t partition_bytes;  // bytes between rows k of A and B; 0 = rows packed back to back
  int64_t ldc;              // 0 = N
};

// 208 KiB is an SBUF partition and 4096 floats a PSUM partition (16 KiB): each row of an
// operand tile is a separate partition, so consecutive k rows are that far apart.
const Case kCases[] = {
    {"tile_contiguous", 128, 512, 128, 0, 0},
    {"tile_partition_strides", 128, 512, 128, 208 * 1024, 4096},
    // The same with every partition padded by one cache line, which spreads the rows over
    // the cache sets (208 KiB is a multiple of 4 KiB, so unpadded rows all share L1 sets).
    {"tile_padded_partitions", 128, 512, 128, 208 * 1024 + 64, 4096 + 16},
    {"odd_7x33x129", 7, 33, 129, 0, 0},
    // Flash attention's two matmuls (kernels/attention.hpp, head dim 64): the scores
    // Q^T [64, 128] x K^T [64, 512] and the probabilities' p^T [128, 128] x V [128, 64].
    {"attention_scores", 128, 512, 64, 208 * 1024 + 64, 4096 + 16},
    {"attention_pv", 128, 64, 128, 208 * 1024 + 64, 4096 + 16},
};

// rows x ld elements, random in the first `cols` of each row (the rest is never read).
template <class T>
std::vector<T> random_buffer(int64_t rows, int64_t cols, int64_t ld, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<T> v(static_cast<size_t>(rows * ld));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < cols; ++i) {
      T& x = v[static_cast<size_t>(r * ld + i)];
      float f = d(rng);
      if constexpr (sizeof(T) == 4) {
        x = f;
      } else {
        uint32_t u;
        std::memcpy(&u, &f, 4);
        x = static_cast<T>(u >> 16);
      }
    }
  return v;
}

template <class T>
void run_case(benchmark::State& state, const std::string& isa, const Case& cs) {
  const int64_t lda = cs.partition_bytes ? cs.partition_bytes / int64_t(sizeof(T)) : cs.M;
  const int64_t ldb = cs.partition_bytes ? cs.partition_bytes / int64_t(sizeof(T)) : cs.N;
  const int64_t ldc = cs.ldc ? cs.ldc : cs.N;
  auto a = random_buffer<T>(cs.K, cs.M, lda, 1);
  auto b = random_buffer<T>(cs.K, cs.N, ldb, 2);
  std::vector<float> c(static_cast<size_t>(cs.M * ldc), 0.0f);
  for (auto _ : state) {
    if constexpr (sizeof(T) == 4)
      neuron_matmul_f32_variant(isa.c_str(), c.data(), ldc, a.data(), lda, b.data(), ldb, cs.M,
                                cs.N, cs.K, 1);
    else
      neuron_matmul_bf16_variant(isa.c_str(), c.data(), ldc, a.data(), lda, b.data(), ldb, cs.M,
                                 cs.N, cs.K, 1);
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2e-9 * double(cs.M * cs.N * cs.K),
                                                 benchmark::Counter::kIsIterationInvariantRate);
}

// The library matmul's row group (kernels/matmul.hpp): four nc_matmuls of 128 rows over one
// moving tile [128, 512] bf16, with partition-like strides, each call packing B
// (neuron_matmul_bf16) or the last three told it is unchanged (neuron_matmul_bf16_same_b, what
// InstrArgs::same_moving makes the native backend call). The host's variant.
void row_group_bf16(benchmark::State& state, bool same_b) {
  const int64_t ld = (208 * 1024 + 64) / 2, ldc = 4096 + 16, M = 128, N = 512, K = 128;
  auto a = random_buffer<uint16_t>(K, 4 * M, ld, 1);
  auto b = random_buffer<uint16_t>(K, N, ld, 2);
  std::vector<float> c(static_cast<size_t>(4 * M * ldc), 0.0f);
  for (auto _ : state) {
    for (int64_t j = 0; j < 4; ++j)
      (j > 0 && same_b ? neuron_matmul_bf16_same_b : neuron_matmul_bf16)(
          c.data() + j * M * ldc, ldc, a.data() + j * M, ld, b.data(), ld, M, N, K, 1);
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2e-9 * double(4 * M * N * K),
                                                 benchmark::Counter::kIsIterationInvariantRate);
}

#if defined(__x86_64__)
// The core's FMA ceiling for reference: 24 independent accumulator chains, no memory traffic.
__attribute__((target("avx512f,fma"))) void fma_peak_avx512(benchmark::State& state) {
  constexpr int64_t kSteps = 4096;
  for (auto _ : state) {
    __m512 acc[24];
    for (int i = 0; i < 24; ++i) acc[i] = _mm512_set1_ps(float(i));
    __m512 x = _mm512_set1_ps(0.999f), y = _mm512_set1_ps(1e-4f);
    for (int64_t s = 0; s < kSteps; ++s) {
#pragma GCC unroll 24
      for (int i = 0; i < 24; ++i) acc[i] = _mm512_fmadd_ps(x, acc[i], y);
      __asm__ volatile("" : "+v"(x));
    }
    for (int i = 0; i < 24; ++i) benchmark::DoNotOptimize(acc[i]);
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(2e-9 * 24 * 16 * kSteps, benchmark::Counter::kIsIterationInvariantRate);
}

// The same for AVX512-BF16's vdpbf16ps (32 products per instruction): the avx512bf16 variant's
// ceiling.
__attribute__((target("avx512f,avx512bf16"))) void dpbf16_peak(benchmark::State& state) {
  constexpr int64_t kSteps = 4096;
  for (auto _ : state) {
    __m512 acc[24];
    for (int i = 0; i < 24; ++i) acc[i] = _mm512_set1_ps(float(i));
    __m512bh x = (__m512bh)_mm512_set1_epi32(0x3f803f80),
             y = (__m512bh)_mm512_set1_epi32(0x38d138d1);
    for (int64_t s = 0; s < kSteps; ++s) {
#pragma GCC unroll 24
      for (int i = 0; i < 24; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], x, y);
      __asm__ volatile("" : "+v"(x));
    }
    for (int i = 0; i < 24; ++i) benchmark::DoNotOptimize(acc[i]);
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(2e-9 * 24 * 32 * kSteps, benchmark::Counter::kIsIterationInvariantRate);
}
#endif

}  // namespace

int main(int argc, char** argv) {
  for (const char* isa : {"amx", "avx512bf16", "avx512", "avx2", "portable"}) {
    if (!neuron_matmul_variant_supported(isa)) continue;
    for (const Case& cs : kCases) {
      std::string shape = fmt::format("{}/M{}_N{}_K{}", cs.name, cs.M, cs.N, cs.K);
      benchmark::RegisterBenchmark(
          fmt::format("matmul_f32/{}/{}", isa, shape).c_str(),
          [isa = std::string(isa), cs](benchmark::State& st) { run_case<float>(st, isa, cs); });
      benchmark::RegisterBenchmark(
          fmt::format("matmul_bf16/{}/{}", isa, shape).c_str(),
          [isa = std::string(isa), cs](benchmark::State& st) { run_case<uint16_t>(st, isa, cs); });
    }
  }
  benchmark::RegisterBenchmark("row_group_bf16/host/pack_each",
                               [](benchmark::State& st) { row_group_bf16(st, false); });
  benchmark::RegisterBenchmark("row_group_bf16/host/same_b",
                               [](benchmark::State& st) { row_group_bf16(st, true); });
#if defined(__x86_64__)
  if (neuron_matmul_variant_supported("avx512"))
    benchmark::RegisterBenchmark("fma_peak/avx512", fma_peak_avx512);
  if (neuron_matmul_variant_supported("avx512bf16"))
    benchmark::RegisterBenchmark("dpbf16_peak/avx512bf16", dpbf16_peak);
#endif
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("matmul_host_isa", neuron_matmul_isa());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
