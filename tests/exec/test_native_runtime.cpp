// Native runtime: call validation, out-of-bounds errors (never a crash), the compile report and
// reuse of compiled kernels (memory and disk cache).
#include <dlfcn.h>
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>

#include <unistd.h>

#include "exec/differential.hpp"
#include "exec/sim_test_util.hpp"
#include "neuron/codegen/pipeline.hpp"
#include "neuron/base/error.hpp"
#include "neuron/ir/printer.hpp"
#include "neuron/runtime/cache.hpp"
#include "neuron/codegen/jit.hpp"
#include "neuron/codegen/plan.hpp"
#include "vector_add.hpp"

using namespace neuron;
using namespace neuron::sim_test;
using namespace neuron::testing;

namespace {
constexpr DType f32 = DType::float32;

// Runs f, expects a UserError of `rule` whose message contains `needle`.
template <class F>
void expect_user_error(F&& f, const std::string& rule, const std::string& needle) {
  try {
    f();
    FAIL("expected a UserError [", rule, "]");
  } catch (const UserError& e) {
    CHECK(e.rule() == rule);
    INFO(e.message());
    CHECK(e.message().find(needle) != std::string::npos);
  }
}

// A scratch cache directory for the duration of a test.
struct TempCacheDir {
  std::string dir;
  TempCacheDir() {
    dir = (std::filesystem::temp_directory_path() /
           ("neuron-native-test-" + std::to_string(::getpid())))
              .string();
    std::filesystem::remove_all(dir);
    setenv("NEURON_CACHE_DIR", dir.c_str(), 1);
  }
  ~TempCacheDir() {
    unsetenv("NEURON_CACHE_DIR");
    std::filesystem::remove_all(dir);
  }
};

Kernel vector_add_kernel(int64_t N, int64_t F) {
  return trace("vector_add", examples::vector_add,
               {{{N, F}, DType::float32}, {{N, F}, DType::float32}});
}
}  // namespace

TEST_CASE("native call-signature and grid errors match the simulator's rules") {
  Compiled c = compile(vector_add_kernel(256, 64), default_compile_options());
  NativeKernel k = compile_native(c);
  Tensor a = Tensor::empty({256, 64}, f32), b = Tensor::empty({256, 64}, f32);
  expect_user_error([&] { k({a}, {2}); }, "call-signature", "takes 3 tensors");
  expect_user_error([&] { k({a, Tensor::empty({256, 32}, f32)}, {2}); }, "call-signature",
                    "expected [256, 64] float32, got [256, 32] float32");
  expect_user_error([&] { k({a, Tensor::empty({256, 64}, DType::bfloat16)}, {2}); },
                    "call-signature", "bfloat16");
  expect_user_error([&] { k({a, b}, {}); }, "grid", "1 to 4 dims");
  expect_user_error([&] { k({a, b}, {0}); }, "grid", ">= 1");
}

TEST_CASE("native out-of-bounds: a pid-dependent HBM access is an error before anything runs") {
  // Grid 3 over 256 rows: program 2 would read rows 256..383.
  Compiled c = compile(vector_add_kernel(256, 64), default_compile_options());
  Tensor a = Tensor::empty({256, 64}, f32), b = Tensor::empty({256, 64}, f32);
  expect_user_error([&] { run_native(c, {a, b}, {3}); }, "out-of-bounds", "pid0=2");
  // The simulator rejects the same launch with the same rule.
  CHECK_THROWS_AS(simulate(c, {a, b}, {3}), UserError);
  // Within bounds it runs.
  CHECK_NOTHROW(run_native(c, {a, b}, {2}));
}

TEST_CASE("native out-of-bounds: on-chip partitions and bytes, and loop-dependent offsets") {
  const int F = 16;
  // Partitions 120..135 of SBUF.
  AccessPattern too_low = sb(f32, 0, 16, {row(F)});
  too_low.partition = 120;
  Program p1 = program({decl("x", {16, F}, f32, kIn)},
                       {dma(too_low, hbm2(0, f32, 16, F, F))});
  Tensor x = Tensor::empty({16, F}, f32);
  // No program id in the access: found when compiling, before any launch.
  expect_user_error([&] { compile_native(p1); }, "out-of-bounds", "partitions 120..135");
  CHECK_THROWS_AS(simulate(p1, {x}), UserError);
  // A loop walks the byte offset past the end of a PSUM partition (16 KiB) on its last trip.
  AccessPattern walk = ps(f32, 0, 1, {row(F)});
  walk.offset = Affine::var("i0", 4096);
  InstrArgs ms;
  Program p2 = program({decl("x", {16, F}, f32, kIn)},
                       {loop("i0", 5, {instr(Opcode::memset, walk, {}, ms)})});
  expect_user_error([&] { compile_native(p2); }, "out-of-bounds", "bytes");
  CHECK_THROWS_AS(simulate(p2, {x}), UserError);
}

TEST_CASE("a zero-trip loop runs nothing on either executor, even with out-of-range indices") {
  // Its body indexes row i0 + 5 of a 2-row tensor: legal because it never runs.
  const std::string text = R"(kernel zt(a: float32[2, 4] shared_hbm) -> (out: float32[2, 4] shared_hbm) {
  alloc t: float32[2, 4] sbuf
  dma_copy(dst=t[0:+2, 0:+4], src=a[0:+2, 0:+4])
  for i0 in affine_range(0) {
    memset(dst=t[0:+2, i0:+1], value=7.0)
    dma_copy(dst=out[i0+5:+1, 0:+4], src=t[0:+1, 0:+4])
  }
  dma_copy(dst=out[0:+2, 0:+4], src=t[0:+2, 0:+4])
})";
  Tensor a = Tensor::empty({2, 4}, f32);
  for (int i = 0; i < 8; ++i) a.set(i, float(i));
  BothResults r = run_both(compile(parse_kernel(text)), {a});
  for (int i = 0; i < 8; ++i) CHECK(r.sim[0].get(i) == float(i));
}

TEST_CASE("an instruction reads all its sources before writing, also natively") {
  // dst t[:, 2:8] partially overlaps src t[:, 0:6] and t[:, 1:7]: every executor must compute
  // from the values before the instruction (a streaming kernel would smear them forward).
  const std::string text = R"(kernel ov(a: float32[4, 8] shared_hbm) -> (out: float32[4, 8] shared_hbm) {
  alloc t: float32[4, 8] sbuf
  dma_copy(dst=t[0:+4, 0:+8], src=a[0:+4, 0:+8])
  tensor_tensor(dst=t[0:+4, 2:+6], data1=t[0:+4, 0:+6], data2=t[0:+4, 1:+6], op="add")
  activation(dst=t[0:+4, 1:+7], data=t[0:+4, 0:+7], func="copy", scale=2.0)
  dma_copy(dst=out[0:+4, 0:+8], src=t[0:+4, 0:+8])
})";
  Tensor a = Tensor::empty({4, 8}, f32);
  std::vector<float> ref(32);
  for (int i = 0; i < 32; ++i) a.set(i, ref[i] = float(i % 8 + 10 * (i / 8)));
  for (int p = 0; p < 4; ++p) {
    float* row = ref.data() + p * 8;
    float old[8];
    std::copy(row, row + 8, old);
    for (int j = 0; j < 6; ++j) row[2 + j] = old[j] + old[j + 1];
    std::copy(row, row + 8, old);
    for (int j = 0; j < 7; ++j) row[1 + j] = 2.0f * old[j];
  }
  BothResults r = run_both(compile(parse_kernel(text)), {a});
  for (int i = 0; i < 32; ++i) CHECK(r.sim[0].get(i) == ref[i]);
}

TEST_CASE("may_overlap: the partial-overlap check is compiled in only where bytes can be shared") {
  using native::may_overlap;
  // Byte ranges within a partition: [0, 1024) and [1024, 2048) are apart; [8, 1032) is not.
  CHECK_FALSE(may_overlap(sb(f32, 0, 128, {row(256)}), sb(f32, 1024, 128, {row(256)})));
  CHECK(may_overlap(sb(f32, 0, 128, {row(256)}), sb(f32, 8, 128, {row(256)})));
  // Partitions 0..63 and 64..127 are apart at any offset.
  AccessPattern high = sb(f32, 0, 64, {row(256)});
  high.partition = 64;
  CHECK_FALSE(may_overlap(sb(f32, 0, 64, {row(256)}), high));
  // Rotating slots count: two slots of 1024 bytes reach the next buffer at 1024.
  AccessPattern rot = sb(f32, 0, 128, {row(256)});
  rot.rotation = Rotation{"i0", 2, 1024};
  CHECK(may_overlap(rot, sb(f32, 1024, 128, {row(256)})));
  // Loop-dependent offsets are not analysed: assumed to overlap.
  AccessPattern moving = sb(f32, 0, 128, {row(16)});
  moving.offset = Affine::var("i0", 64);
  CHECK(may_overlap(moving, sb(f32, 4096, 128, {row(16)})));
  // Other memories never overlap; HBM by tensor.
  CHECK_FALSE(may_overlap(sb(f32, 0, 128, {row(256)}), ps(f32, 0, 128, {row(256)})));
  CHECK(may_overlap(hbm2(0, f32, 16, 16, 16), hbm2(0, f32, 16, 16, 16, 8)));
  CHECK_FALSE(may_overlap(hbm2(0, f32, 16, 16, 16), hbm2(1, f32, 16, 16, 16)));
}

TEST_CASE("may_overlap: two views of one HBM tensor whose offsets differ by a constant") {
  using native::may_overlap;
  // A matmul's output row blocks: out[pid0 * 256 + {0, 128}, i1 * 512 : +512] of a [*, 1024]
  // tensor. The same loop variable and program id in both, so they are 128 rows apart.
  const Affine at = Affine::var("pid0", 256 * 1024) + Affine::var("i1", 512);
  CHECK_FALSE(
      may_overlap(hbm2(0, f32, 128, 512, 1024, at), hbm2(0, f32, 128, 512, 1024, at + 128 * 1024)));
  // One element short of that: the last row of the first block reaches the second's first.
  CHECK(may_overlap(hbm2(0, f32, 128, 512, 1024, at),
                    hbm2(0, f32, 128, 512, 1024, at + 127 * 1024 + 511)));
  CHECK_FALSE(may_overlap(hbm2(0, f32, 128, 512, 1024, at),
                          hbm2(0, f32, 128, 512, 1024, at + 127 * 1024 + 512)));
  // Offsets that differ by more than a constant (another loop variable, another coefficient)
  // are not compared: assumed to overlap.
  CHECK(may_overlap(hbm2(0, f32, 128, 512, 1024, at),
                    hbm2(0, f32, 128, 512, 1024, Affine::var("i2", 512) + 128 * 1024)));
  CHECK(may_overlap(hbm2(0, f32, 128, 512, 1024, Affine::var("i1", 512)),
                    hbm2(0, f32, 128, 512, 1024, Affine::var("i1", 1024) + 128 * 1024)));
  // A register may change between two instructions: equal terms are not equal values.
  const Affine reg = Affine::var("r0", 1024);
  CHECK(may_overlap(hbm2(0, f32, 128, 512, 1024, reg),
                    hbm2(0, f32, 128, 512, 1024, reg + 128 * 1024)));
  // Interleaved rows (even and odd) share no element but their ranges meet: assumed to overlap.
  CHECK(may_overlap(hbm2(0, f32, 64, 512, 2048), hbm2(0, f32, 64, 512, 2048, 1024)));
}

TEST_CASE("native shape errors are found at compile time with the simulator's rule") {
  InstrArgs a;
  a.op0 = AluOp::add;
  Program p = program({decl("x", {8, 8}, f32, kIn)},
                      {instr(Opcode::tensor_tensor, sb(f32, 0, 8, {row(8)}),
                             {sb(f32, 0, 8, {row(8)}), sb(f32, 0, 8, {row(4)})}, a)});
  expect_user_error([&] { compile_native(p); }, "shape-mismatch", "data2");
}

TEST_CASE("native compile report and reuse: cold, memory, disk") {
  TempCacheDir tmp;
  clear_native_kernels();
  CompileCache::global().clear_memory();
  Compiled c = compile(vector_add_kernel(128, 48), default_compile_options());
  NativeKernel k1 = compile_native(c);
  const CompileReport& r1 = k1.report();
  CHECK(r1.cache == "cold");
  CHECK(r1.kernel == "vector_add");
  CHECK(r1.phase_ms("llvm optimize") > 0);
  CHECK(r1.phase_ms("machine code") > 0);
  CHECK(r1.phase_ms("load") > 0);
  bool has_pass = false;
  for (auto& ph : r1.phases) has_pass |= ph.name.rfind("pass ", 0) == 0;
  CHECK(has_pass);
  CHECK(r1.str().find("cold") != std::string::npos);

  // Same kernel again in this process: the loaded code is reused.
  NativeKernel k2 = compile_native(c);
  CHECK(k2.report().cache == "memory");
  CHECK(k2.report().key == r1.key);

  // A "new process": loaded kernels and the cache's memory level forgotten, disk remains.
  clear_native_kernels();
  CompileCache::global().clear_memory();
  NativeKernel k3 = compile_native(c);
  CHECK(k3.report().cache == "disk");
  CHECK(k3.report().phase_ms("llvm optimize") == 0);

  // All three run and agree with a reference.
  std::vector<float> av(128 * 48), bv(128 * 48);
  for (int i = 0; i < 128 * 48; ++i) av[i] = 0.25f * (i % 17), bv[i] = -0.5f * (i % 5);
  Tensor a = Tensor::from_floats(av, {128, 48}, f32), b = Tensor::from_floats(bv, {128, 48}, f32);
  for (const NativeKernel* k : {&k1, &k2, &k3}) {
    Tensor out = (*k)({a, b})[0];
    for (int i = 0; i < 128 * 48; ++i) REQUIRE(out.get(i) == av[i] + bv[i]);
  }
  // Repeated runs of one kernel reuse it and its worker scratch.
  for (int rep = 0; rep < 3; ++rep) {
    RunReport rr;
    NativeOptions o;
    o.report = &rr;
    Tensor out = run_native(vector_add_kernel(128, 48), {a, b}, {1}, o)[0];
    CHECK(out.get(5) == av[5] + bv[5]);
    CHECK(rr.programs == 1);
  }
  CHECK(compile_native(vector_add_kernel(128, 48)).report().cache == "memory");
}

TEST_CASE("native host-kernel mode gives the same bits as bitcode mode") {
  Compiled c = compile(vector_add_kernel(128, 40), default_compile_options());
  std::vector<float> av(128 * 40), bv(128 * 40);
  for (int i = 0; i < 128 * 40; ++i) av[i] = 0.1f * i, bv[i] = 1.0f / (1 + i);
  Tensor a = Tensor::from_floats(av, {128, 40}, f32), b = Tensor::from_floats(bv, {128, 40}, f32);
  NativeCompileOptions host;
  host.kernels = "host";
  Tensor o1 = compile_native(c)({a, b})[0];
  Tensor o2 = compile_native(c, host)({a, b})[0];
  CHECK(first_bit_difference(o1, o2) == -1);
  for (int i = 0; i < 128 * 40; ++i) REQUIRE(o2.get(i) == av[i] + bv[i]);
}

TEST_CASE("native bitcode mode specializes element-wise kernels into vector code") {
  // An fp32 add over a contiguous [16, 256] tile: after inlining with constant dtypes and op
  // the loop is vectorized and no call to the tensor_tensor kernel remains.
  InstrArgs a;
  a.op0 = AluOp::add;
  Program p = program({decl("x", {16, 256}, f32, kIn)},
                      {instr(Opcode::tensor_tensor, sb(f32, 2048, 16, {row(256)}),
                             {sb(f32, 0, 16, {row(256)}), sb(f32, 1024, 16, {row(256)})}, a)});
  native::JitOptions jo;
  const std::string ir = native::program_llvm_ir(p, jo, /*optimize=*/true);
  // The entry function itself (the cold partial-overlap path stays a call, out of line).
  const size_t at = ir.find("define void @neuron_entry");
  REQUIRE(at != std::string::npos);
  const std::string entry = ir.substr(at, ir.find("\n}\n", at) - at);
  CHECK(entry.find("fadd <") != std::string::npos);
  CHECK(entry.find("@neuron_k_tensor_tensor(") == std::string::npos);
  // Host mode calls the library's copy instead.
  jo.bitcode_kernels = false;
  const std::string host_ir = native::program_llvm_ir(p, jo, true);
  CHECK(host_ir.find("@neuron_host_k_tensor_tensor") != std::string::npos);
}

TEST_CASE("programs above NEURON_HOST_KERNELS_ABOVE instructions call the host kernels") {
  // vector_add over [256, 64] with grid {2}: 3 instructions per program.
  Compiled c = compile(vector_add_kernel(256, 64), default_compile_options());
  Tensor a = Tensor::empty({256, 64}, f32), b = Tensor::empty({256, 64}, f32);
  for (int64_t i = 0; i < a.elements(); ++i) a.set(i, float(i % 31) * 0.5f), b.set(i, float(i));
  setenv("NEURON_CACHE", "off", 1);
  NativeKernel small = compile_native(c);  // the default bound (20,000) is far away
  CHECK(small.report().options.find("kernels=bitcode") != std::string::npos);
  setenv("NEURON_HOST_KERNELS_ABOVE", "2", 1);
  NativeKernel big = compile_native(c);
  CHECK(big.report().options.find("kernels=host O0") != std::string::npos);  // unoptimized glue
  Tensor want = small({a, b}, {2})[0], got = big({a, b}, {2})[0];
  int64_t wrong = 0;
  for (int64_t i = 0; i < want.elements(); ++i) wrong += got.get(i) != want.get(i);
  CHECK(wrong == 0);
  setenv("NEURON_NATIVE_KERNELS", "bitcode", 1);  // an explicit choice wins
  CHECK(compile_native(c).report().options.find("kernels=bitcode O2") != std::string::npos);
  setenv("NEURON_NATIVE_KERNELS", "host", 1);  // and keeps the optimizer
  CHECK(compile_native(c).report().options.find("kernels=host O2") != std::string::npos);
  unsetenv("NEURON_NATIVE_KERNELS");
  setenv("NEURON_HOST_KERNELS_ABOVE", "lots", 1);
  expect_user_error([&] { compile_native(c); }, "config", "NEURON_HOST_KERNELS_ABOVE='lots'");
  unsetenv("NEURON_HOST_KERNELS_ABOVE");
  unsetenv("NEURON_CACHE");
}

TEST_CASE("native scratch: a kernel keeps its worker scratch after many other kernels ran") {
  // Each worker's SBUF/PSUM scratch is pooled per on-chip extent. Kernels of more extents than
  // the pool holds (a model's operators) evict the oldest, not the one running now: before, a
  // full pool refused every newcomer, and a kernel run after them mapped (and cleared) a fresh
  // scratch on every launch.
  RunReport rr;
  NativeOptions o;
  o.report = &rr;
  o.threads = 1;
  auto run = [&](int64_t free_elems) {
    Compiled c = compile(vector_add_kernel(128, free_elems), default_compile_options());
    Tensor a = Tensor::empty({128, free_elems}, f32), b = Tensor::empty({128, free_elems}, f32);
    a.set(3, 1.5f), b.set(3, 2.0f);
    Tensor out = run_native(c, {a, b}, {1}, o)[0];
    REQUIRE(out.get(3) == 3.5f);
    return rr.scratch_made;
  };
  // Three fp32 tiles of 32j elements a partition: 6j + 1 cache lines of pitch, all distinct
  // (a few may match earlier test cases' kernels, whose scratch the pool may still hold).
  const int64_t flood = static_cast<int64_t>(native_scratch_pool_capacity()) + 2;
  REQUIRE(flood >= 66);  // at least the 64 it always keeps
  for (int64_t j = 1; j <= flood; ++j) run(32 * j);
  CHECK(run(8) == 1);           // a new extent, after the pool filled
  CHECK(run(8) == 0);           // kept: the oldest scratch made way
  CHECK(run(32) == 1);          // that was this one's
  CHECK(run(32 * flood) == 0);  // the newest stay
  CHECK(rr.str().find("new scratch") == std::string::npos);
  run(32 * (flood + 1));
  CHECK(rr.str().find(", 1 new scratch") != std::string::npos);
}

TEST_CASE("native scratch: the pool keeps 16 launches' worth at the widest launch") {
  // A launch on 8 threads takes up to 8 scratches: the pool grows to hold 16 such launches.
  const std::size_t before = native_scratch_pool_capacity();
  CHECK(before >= 64);
  Compiled c = compile(vector_add_kernel(1024, 8), default_compile_options());
  Tensor a = Tensor::empty({1024, 8}, f32), b = Tensor::empty({1024, 8}, f32);
  NativeOptions o;
  o.threads = 8;
  run_native(c, {a, b}, {8}, o);
  CHECK(native_scratch_pool_capacity() == std::max<std::size_t>(before, 16 * 8));
}

TEST_CASE("native threads: NEURON_THREADS is the default, the call's option wins") {
  Compiled c = compile(vector_add_kernel(512, 8), default_compile_options());
  Tensor a = Tensor::empty({512, 8}, f32), b = Tensor::empty({512, 8}, f32);
  setenv("NEURON_THREADS", "3", 1);
  RunReport rr;
  NativeOptions o;
  o.report = &rr;
  run_native(c, {a, b}, {4}, o);
  CHECK(rr.threads == 3);
  o.threads = 2;
  run_native(c, {a, b}, {4}, o);
  CHECK(rr.threads == 2);
  o.threads = 16;  // never more threads than programs
  run_native(c, {a, b}, {4}, o);
  CHECK(rr.threads == 4);
  setenv("NEURON_THREADS", "many", 1);
  o.threads = 0;
  CHECK_THROWS_AS(run_native(c, {a, b}, {4}, o), UserError);
  unsetenv("NEURON_THREADS");
}

TEST_CASE("native threads: a loaded GNU OpenMP runtime's team runs the grid, same results") {
  // PyTorch brings libgomp into the process; here the system's stands in for it. Before it is
  // loaded (and with NEURON_OPENMP_TEAM=0) the own workers run the grid.
  const int64_t P = 512, F = 8;
  Compiled c = compile(vector_add_kernel(P, F), default_compile_options());
  Tensor a = Tensor::empty({P, F}, f32), b = Tensor::empty({P, F}, f32);
  for (int64_t i = 0; i < a.elements(); ++i) a.set(i, float(i % 97)), b.set(i, float(i % 13));
  RunReport rr;
  NativeOptions o;
  o.report = &rr;
  o.threads = 2;
  void* gomp = dlopen("libgomp.so.1", RTLD_NOW | RTLD_GLOBAL);
  REQUIRE_MESSAGE(gomp, "libgomp.so.1 (GCC's OpenMP runtime, with g++) is not installed");
  std::vector<Tensor> team = run_native(c, {a, b}, {4}, o);
  CHECK(rr.openmp_team);
  CHECK(rr.threads == 2);
  CHECK(rr.str().find("(OpenMP team)") != std::string::npos);
  setenv("NEURON_OPENMP_TEAM", "0", 1);
  std::vector<Tensor> own = run_native(c, {a, b}, {4}, o);
  CHECK_FALSE(rr.openmp_team);
  setenv("NEURON_OPENMP_TEAM", "yes", 1);
  CHECK_THROWS_WITH_AS(run_native(c, {a, b}, {4}, o),
                       doctest::Contains("NEURON_OPENMP_TEAM='yes' is not 0 or 1: set it to 1"),
                       UserError);
  unsetenv("NEURON_OPENMP_TEAM");
  std::vector<Tensor> sim = simulate(c, {a, b}, {4});
  check_bit_identical(sim, team);
  check_bit_identical(sim, own);
  for (int64_t i = 0; i < sim[0].elements(); ++i)
    REQUIRE(sim[0].get(i) == a.get(i) + b.get(i));
}
