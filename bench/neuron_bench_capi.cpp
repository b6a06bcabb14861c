// A tiny C API over the native backend for bench/compare.py and bench/compare_attention.py
// (ctypes): runs the compiled library kernels (matmul, softmax, flash attention forward and
// backward) on caller-owned buffers and returns the median seconds per run.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "neuron/kernels/attention.hpp"
#include "neuron/kernels/attention_backward.hpp"
#include "neuron/kernels/matmul.hpp"
#include "neuron/kernels/softmax.hpp"
#include "neuron/neuron.hpp"
#include "neuron/runtime/native/native.hpp"
#include "rmsnorm.hpp"

namespace {

// Row blocks per program of the SPMD matmul: NEURON_BENCH_BLOCKS (1..4), else 4,
// halved while it leaves fewer programs than threads.
int64_t blocks_for(int64_t M, int threads) {
  const char* env = std::getenv("NEURON_BENCH_BLOCKS");
  int64_t blocks = env ? std::clamp<int64_t>(std::atoll(env), 1, 4) : 4;
  while (blocks > 1 && (M % (128 * blocks) != 0 || M / (128 * blocks) < threads)) blocks /= 2;
  return blocks;
}

struct Entry {
  neuron::NativeKernel kernel;
  std::vector<int64_t> grid;
};

// Kernels are traced and compiled once per shape and kept for the process.
std::mutex g_mutex;
std::map<std::string, Entry> g_kernels;
std::string g_error;

const Entry& matmul_kernel(int64_t M, int64_t N, int64_t K, neuron::DType dt, int threads) {
  const int64_t blocks = blocks_for(M, threads);
  std::string key = fmt::format("matmul {} {} {} {} {}", M, N, K, neuron::dtype_name(dt), blocks);
  std::lock_guard lock(g_mutex);
  auto it = g_kernels.find(key);
  if (it != g_kernels.end()) return it->second;
  // The library matmul with lhsT stored [K, M]; each program owns 128 * blocks rows.
  neuron::kernels::MatmulConfig cfg;
  cfg.transpose_a = true;
  cfg.programs = M % (128 * blocks) == 0 ? M / (128 * blocks) : 1;
  auto k = neuron::trace("bench_matmul",
                         [cfg](neuron::nl::tensor a, neuron::nl::tensor b) {
                           return neuron::kernels::matmul(a, b, cfg);
                         },
                         {{{K, M}, dt}, {{K, N}, dt}});
  Entry e{neuron::compile_native(k), neuron::kernels::matmul_grid(cfg)};
  return g_kernels.emplace(key, std::move(e)).first->second;
}

const Entry& softmax_kernel(int64_t rows, int64_t cols) {
  std::string key = fmt::format("softmax {} {}", rows, cols);
  std::lock_guard lock(g_mutex);
  auto it = g_kernels.find(key);
  if (it != g_kernels.end()) return it->second;
  // The library softmax, one program per 128 rows (rows a multiple of 128).
  const neuron::kernels::SoftmaxConfig cfg{rows % 128 == 0 ? rows / 128 : 1};
  auto k = neuron::trace(
      "bench_softmax", [cfg](neuron::nl::tensor x) { return neuron::kernels::softmax(x, cfg); },
      {{{rows, cols}, neuron::DType::float32}});
  Entry e{neuron::compile_native(k), neuron::kernels::softmax_grid(cfg)};
  return g_kernels.emplace(key, std::move(e)).first->second;
}

// Flash attention (kernels/attention.hpp, kernels/attention_backward.hpp), one kv head per query
// head; compile seconds of the last new kernel and where it came from ("cold", "disk", ...).
double g_compile_s = 0;
std::string g_compile_cache;

const Entry& attention_kernel(bool backward, int64_t B, int64_t H, int64_t L, int64_t S,
                              int64_t D, bool causal, neuron::DType dt) {
  std::string key = fmt::format("attention{} {} {} {} {} {} {} {}", backward ? "_bwd" : "", B, H,
                                L, S, D, causal, neuron::dtype_name(dt));
  std::lock_guard lock(g_mutex);
  auto it = g_kernels.find(key);
  if (it != g_kernels.end()) return it->second;
  neuron::kernels::AttentionConfig cfg;
  cfg.causal = causal;
  const std::vector<int64_t> qs{B, H, L, D}, ks{B, H, S, D};
  neuron::Kernel k;
  using neuron::nl::tensor;
  if (backward)
    k = neuron::trace(
        "bench_attention_backward",
        [cfg](tensor q, tensor k, tensor v, tensor o, tensor d, tensor l) {
          return neuron::kernels::attention_backward(q, k, v, o, d, l, cfg);
        },
        {{qs, dt}, {ks, dt}, {ks, dt}, {qs, dt}, {qs, dt}, {{B, H, L}, neuron::DType::float32}});
  else
    k = neuron::trace(
        "bench_attention",
        [cfg](tensor q, tensor k, tensor v) {
          return neuron::kernels::attention_forward(q, k, v, cfg);
        },
        {{qs, dt}, {ks, dt}, {ks, dt}});
  auto t0 = std::chrono::steady_clock::now();
  Entry e{neuron::compile_native(k), backward ? neuron::kernels::attention_backward_grid(qs, ks)
                                              : neuron::kernels::attention_grid(qs, ks)};
  g_compile_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  g_compile_cache = e.kernel.report().cache;
  return g_kernels.emplace(key, std::move(e)).first->second;
}

const Entry& rmsnorm_kernel(int64_t rows, int64_t cols, neuron::DType dt) {
  std::string key = fmt::format("rmsnorm {} {} {}", rows, cols, neuron::dtype_name(dt));
  std::lock_guard lock(g_mutex);
  auto it = g_kernels.find(key);
  if (it != g_kernels.end()) return it->second;
  auto k = neuron::trace(
      "bench_rmsnorm",
      [](neuron::nl::tensor x, neuron::nl::tensor w) { return bench::rmsnorm(x, w, 1e-6f); },
      {{{rows, cols}, dt}, {{1, cols}, dt}});
  Entry e{neuron::compile_native(k), {rows / 128}};
  return g_kernels.emplace(key, std::move(e)).first->second;
}

// Warm-up runs (at least one, at least 20 ms), then `iters` timed runs; the median, in seconds.
double time_runs(const Entry& e, const std::vector<neuron::Tensor>& tensors, int threads,
                 int iters) {
  neuron::NativeOptions opts;
  opts.threads = threads;
  // Warm up for at least 20 ms of runs: after the machine idles, its first milliseconds run
  // slow (a 1.4 ms softmax at 2 threads took 1.5x for ~8 ms, torch.softmax alike), and the peer's
  // median_time (compare.py) samples loops of 20 ms, which absorb that; one warm-up run did not.
  const auto warm_start = std::chrono::steady_clock::now();
  do e.kernel.run(tensors, e.grid, opts);
  while (std::chrono::steady_clock::now() - warm_start < std::chrono::milliseconds(20));
  std::vector<double> secs;
  for (int i = 0; i < std::max(iters, 1); ++i) {
    auto t0 = std::chrono::steady_clock::now();
    e.kernel.run(tensors, e.grid, opts);
    secs.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(secs.begin(), secs.end());
  return secs[secs.size() / 2];
}

template <class F>
double guarded(F&& f) {
  try {
    return f();
  } catch (const std::exception& e) {
    g_error = e.what();
    return -1.0;
  }
}

}  // namespace

extern "C" {

// out[M, N] = lhsT[K, M].T @ rhs[K, N], all row-major, fp32 or (dtype_is_bf16) bf16 bits.
// Returns the median seconds per run after a warm-up, or -1 on error (neuron_bench_error).
double neuron_bench_matmul(int64_t M, int64_t N, int64_t K, int dtype_is_bf16, int threads,
                           int iters, void* lhsT, void* rhs, void* out) {
  return guarded([&] {
    auto dt = dtype_is_bf16 ? neuron::DType::bfloat16 : neuron::DType::float32;
    const Entry& e = matmul_kernel(M, N, K, dt, threads);
    std::vector<neuron::Tensor> t{neuron::Tensor::borrow(lhsT, {K, M}, dt),
                                  neuron::Tensor::borrow(rhs, {K, N}, dt),
                                  neuron::Tensor::borrow(out, {M, N}, dt)};
    return time_runs(e, t, threads, iters);
  });
}

// Row softmax of x[rows, cols] fp32 (rows a multiple of 128) into out.
double neuron_bench_softmax(int64_t rows, int64_t cols, int threads, int iters, float* x,
                            float* out) {
  return guarded([&] {
    const Entry& e = softmax_kernel(rows, cols);
    std::vector<neuron::Tensor> t{
        neuron::Tensor::borrow(x, {rows, cols}, neuron::DType::float32),
        neuron::Tensor::borrow(out, {rows, cols}, neuron::DType::float32)};
    return time_runs(e, t, threads, iters);
  });
}

// Flash attention forward: q [B, H, L, D], k, v [B, H, S, D] (fp32, or bf16 bits), out
// [B, H, L, D] like q, lse [B, H, L] fp32. Median seconds per run after a warm-up, -1 on error.
double neuron_bench_attention(int64_t B, int64_t H, int64_t L, int64_t S, int64_t D, int causal,
                              int dtype_is_bf16, int threads, int iters, void* q, void* k,
                              void* v, void* out, float* lse) {
  return guarded([&] {
    auto dt = dtype_is_bf16 ? neuron::DType::bfloat16 : neuron::DType::float32;
    const Entry& e = attention_kernel(false, B, H, L, S, D, causal != 0, dt);
    std::vector<neuron::Tensor> t{
        neuron::Tensor::borrow(q, {B, H, L, D}, dt), neuron::Tensor::borrow(k, {B, H, S, D}, dt),
        neuron::Tensor::borrow(v, {B, H, S, D}, dt), neuron::Tensor::borrow(out, {B, H, L, D}, dt),
        neuron::Tensor::borrow(lse, {B, H, L}, neuron::DType::float32)};
    return time_runs(e, t, threads, iters);
  });
}

// RMSNorm of x[rows, cols] with weight w[1, cols] (eps 1e-6), fp32 or bf16 bits, into out.
double neuron_bench_rmsnorm(int64_t rows, int64_t cols, int dtype_is_bf16, int threads, int iters,
                            void* x, void* w, void* out) {
  return guarded([&] {
    auto dt = dtype_is_bf16 ? neuron::DType::bfloat16 : neuron::DType::float32;
    const Entry& e = rmsnorm_kernel(rows, cols, dt);
    std::vector<neuron::Tensor> t{neuron::Tensor::borrow(x, {rows, cols}, dt),
                                  neuron::Tensor::borrow(w, {1, cols}, dt),
                                  neuron::Tensor::borrow(out, {rows, cols}, dt)};
    return time_runs(e, t, threads, iters);
  });
}

// Flash attention backward from the forward's out and lse: dq, dk, dv like q, k, v.
double neuron_bench_attention_backward(int64_t B, int64_t H, int64_t L, int64_t S, int64_t D,
                                       int causal, int dtype_is_bf16, int threads, int iters,
                                       void* q, void* k, void* v, void* out, void* dout,
                                       float* lse, void* dq, void* dk, void* dv) {
  return guarded([&] {
    auto dt = dtype_is_bf16 ? neuron::DType::bfloat16 : neuron::DType::float32;
    const Entry& e = attention_kernel(true, B, H, L, S, D, causal != 0, dt);
    std::vector<neuron::Tensor> t{
        neuron::Tensor::borrow(q, {B, H, L, D}, dt), neuron::Tensor::borrow(k, {B, H, S, D}, dt),
        neuron::Tensor::borrow(v, {B, H, S, D}, dt), neuron::Tensor::borrow(out, {B, H, L, D}, dt),
        neuron::Tensor::borrow(dout, {B, H, L, D}, dt),
        neuron::Tensor::borrow(lse, {B, H, L}, neuron::DType::float32),
        neuron::Tensor::borrow(dq, {B, H, L, D}, dt), neuron::Tensor::borrow(dk, {B, H, S, D}, dt),
        neuron::Tensor::borrow(dv, {B, H, S, D}, dt)};
    return time_runs(e, t, threads, iters);
  });
}

// Seconds the last newly compiled attention kernel took to compile (trace excluded), and
// whether it was compiled ("cold") or loaded from the compile cache ("disk", "memory").
double neuron_bench_last_compile_seconds() {
  return g_compile_s;
}
const char* neuron_bench_last_compile_cache() {
  return g_compile_cache.c_str();
}

// Row blocks per program the matmul uses for these sizes (for the report).
int64_t neuron_bench_matmul_blocks(int64_t M, int threads) {
  return blocks_for(M, threads);
}

// The message of the last error, "" when none.
const char* neuron_bench_error() {
  return g_error.c_str();
}

}  // extern "C"
