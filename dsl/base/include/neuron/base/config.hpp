// The one place for the toolkit's knobs: every NEURON_* environment variable is read here.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace neuron {

// NEURON_CACHE: off (memory level only, no disk access), on (default), must-hit (a miss is an
// error: for deployments that must never compile).
enum class CacheMode { off, on, must_hit };

struct Config {
  // NEURON_DUMP_IR=1: print the IR after each pass ("unchanged" when a pass did nothing) and
  // per-pass times, on stderr.
  bool dump_ir = false;
  // NEURON_TARGET: trn1, trn2 (default) or trn3. Decides legality (SBUF size) and timing.
  std::string target = "trn2";
  // Compile cache (runtime/cache.hpp, docs/cache.md). NEURON_CACHE_DIR, else
  // $XDG_CACHE_HOME/neuron, else ~/.cache/neuron.
  std::string cache_dir;
  // NEURON_CACHE_MAX_BYTES: bound on the disk cache; accepts K, M, G suffixes (powers of 1024).
  std::uint64_t cache_max_bytes = std::uint64_t(1) << 30;
  CacheMode cache_mode = CacheMode::on;
  // NEURON_CACHE_MEMORY_ENTRIES: bound on each in-process (memory) level, least recently used
  // evicted first: the compile cache's object blobs and the native backend's loaded kernels.
  // An evicted kernel's code is unloaded once no NativeKernel holds it. 0 keeps none.
  std::size_t cache_memory_entries = 512;
  // ---- native backend (runtime/native, docs/native.md) ----
  // NEURON_THREADS: worker threads for the SPMD grid; 0 (default) means the core count.
  int threads = 0;
  // NEURON_OPENMP_TEAM=0: native launches always use the toolkit's own worker threads. By
  // default, in a process that has the GNU OpenMP runtime loaded (PyTorch brings it), a launch
  // runs its grid on that runtime's thread team instead of beside it (runtime/src/native/
  // native_run.cpp, docs/native.md "Threads"). Read once, at the first multi-threaded launch.
  bool openmp_team = true;
  // NEURON_LOG: comma-separated topics; "compile" prints every compile report on stderr.
  bool log_compile = false;
  // NEURON_NATIVE_KERNELS: how generated code reaches the instruction kernels: "bitcode"
  // (linked in and specialized) or "host" (calls to the library's compiled copies). Unset:
  // bitcode, except for programs of more than host_kernels_above instructions.
  std::string native_kernels;
  // NEURON_HOST_KERNELS_ABOVE: a program with more instructions than this (a fully unrolled
  // legacy kernel) calls the host kernels when NEURON_NATIVE_KERNELS is unset, and its own
  // code is compiled unoptimized: specializing every call made LLVM's compile of a
  // 150,000-instruction program take over 20 minutes, the host calls 4 minutes, and those
  // unoptimized 15 s for nki-samples' pipelined attention (docs/native.md "Bitcode vs host
  // functions").
  int64_t host_kernels_above = 20000;
  // NEURON_MATMUL_ISA: which nc_matmul kernel variant native code and the simulator use: amx,
  // avx512bf16, avx512, avx2 or portable; empty (default) picks the fastest this CPU supports.
  // All compute the same bits (docs/numerics.md); for comparing speed. Read once, at the first
  // matmul.
  std::string matmul_isa;
  // NEURON_PARTITION_BLOCKS=0: generated code runs every instruction over its whole tiles instead
  // of running runs of partition-local instructions a block of partitions at a time (the same
  // bits either way; for comparing speed and for isolating a suspected backend bug).
  bool partition_blocks = true;
  // NEURON_SBUF_FOLDING=0: generated code keeps every SBUF tile at its full addresses, instead of
  // keeping a blocked run's own temporaries in a buffer of one block's rows and a tile filled
  // only by partition broadcasts in one row (codegen/src/folded_sbuf.cpp; the same bits).
  bool sbuf_folding = true;
  // NEURON_FUSED_CHAINS=0: generated code runs every element-wise instruction as its own loop,
  // instead of running a chain of them, each reading the one before, as one loop over the
  // elements (codegen/src/fused_chains.cpp; the same bits).
  bool fused_chains = true;
  // NEURON_TRANSPOSED_MATMUL=0: generated code runs `nc_transpose; copy; nc_matmul` of a tile's
  // transpose as the three instructions, instead of one product reading the tile's rows
  // (codegen/src/transposed_matmul.cpp; the same bits).
  bool transposed_matmul = true;
  // NEURON_STREAM_STORES_MIN_BYTES=n (a byte count, K/M/G suffixes): a fused chain that writes
  // a kernel output of at least n bytes writes it with non-temporal (streaming) stores, which
  // skip reading each cache line before overwriting it and leave the caches to data read again
  // (docs/native.md "Streaming stores"; the same bits). 0 turns it off. The default, 8M, is
  // where streaming a producer's output started to pay on the machines measured, counting the
  // consumer that reads it back.
  std::uint64_t stream_store_bytes = 8u << 20;
  // ---- profiler (runtime/profile.hpp, docs/profiling.md) ----
  // NEURON_PROFILE=dir: every neuron::simulate of a compiled kernel also runs the timing model
  // and writes <kernel>-<n>.json (Chrome/Perfetto trace), .txt (summary) and .html into dir.
  std::string profile_dir;
  // ---- Python front end (python/neuron, docs/python.md) ----
  // NEURON_EAGER=1: @neuron.kernel kernels default to eager mode (each operation runs as it is
  // called, so print() and a debugger work inside the kernel).
  bool eager = false;
  // NEURON_STRICT=1: a torch operator whose kernel cannot take its inputs raises instead of
  // falling back to its PyTorch reference (neuron.torch.custom_op, docs/python.md).
  bool strict = false;
};

// Reads the environment each call, so tests and long-lived processes see changes.
Config config();
// config().threads alone (NEURON_THREADS), for every native run: without the rest of the parse.
int config_threads();
// config().openmp_team alone (NEURON_OPENMP_TEAM), for the first native launch.
bool config_openmp_team();
// NEURON_MATMUL_ISA as set, unchecked (config() checks it): for the matmul kernel's first call,
// which must not throw.
std::string config_matmul_isa();

}  // namespace neuron
