// Timing model: single-instruction costs against hand-computed figures per engine, dtype and
// target, and dependence behaviour (overlap, serialization, anti/output dependences, HBM share).
#include <doctest/doctest.h>

#include <vector>

#include "exec/sim_test_util.hpp"
#include "neuron/runtime/profile.hpp"
#include "neuron/runtime/sim.hpp"
#include "neuron/base/target.hpp"
#include "neuron/runtime/timing.hpp"

using namespace neuron;
using namespace neuron::sim_test;

namespace {

const auto f32 = DType::float32, bf = DType::bfloat16, f8 = DType::float8_e4m3;

Instr make(Opcode op, Engine e, AccessPattern dst, std::vector<AccessPattern> src) {
  Instr in = instr(op, std::move(dst), std::move(src)).instr;
  in.engine = e;
  return in;
}
Instr matmul(DType dt, int64_t k, int64_t m, int64_t n) {
  return make(Opcode::nc_matmul, Engine::tensor, ps(f32, 0, m, {row(n)}),
              {sb(dt, 0, k, {row(m)}), sb(dt, 4096, k, {row(n)})});
}
ProgNode on(Engine e, ProgNode n) {
  n.instr.engine = e;
  return n;
}

Profile run_timing(Program p, std::vector<Tensor> tensors = {}) {
  Profile prof;
  SimOptions o;
  o.profile = &prof;
  o.execute = !tensors.empty();
  simulate(p, tensors, {1}, o);
  return prof;
}

}  // namespace

TEST_CASE("TensorE: max(N, 64) cycles at bf16, 4x at fp32, fp8 per target, clock per target") {
  const Target& trn2 = target_by_name("trn2");
  const Target& trn1 = target_by_name("trn1");
  const Target& trn3 = target_by_name("trn3");
  CHECK(instr_cost(matmul(bf, 128, 128, 512), trn2).cycles == 512);
  CHECK(instr_cost(matmul(bf, 128, 128, 512), trn2).ns == doctest::Approx(512 / 2.4));
  CHECK(instr_cost(matmul(bf, 128, 128, 512), trn1).ns == doctest::Approx(512 / 2.8));
  CHECK(instr_cost(matmul(bf, 128, 128, 32), trn2).cycles == 64);   // the 64-cycle floor
  CHECK(instr_cost(matmul(f32, 128, 128, 512), trn2).cycles == 2048);
  CHECK(instr_cost(matmul(f32, 128, 128, 16), trn2).cycles == 256);  // 4 x max(16, 64)
  CHECK(instr_cost(matmul(f8, 128, 128, 512), trn1).cycles == 512);  // fp8 at the bf16 rate
  CHECK(instr_cost(matmul(f8, 128, 128, 512), trn2).cycles == 256);  // double-row mode
  CHECK(instr_cost(matmul(f8, 128, 128, 512), trn3).cycles == 128);  // 4x
  CHECK(instr_cost(matmul(bf, 128, 128, 512), trn2).flops == 2.0 * 128 * 128 * 512);
  CHECK(instr_cost(matmul(bf, 64, 32, 100), trn2).flops == 2.0 * 64 * 32 * 100);
  // Peak: 128 x 128 MACs per cycle at 2.4 GHz = 78.6 TFLOPS.
  CHECK(trn2.tensor_peak_flops() == doctest::Approx(2.0 * 128 * 128 * 2.4e9));
}

TEST_CASE("VectorE, ScalarE, GpSimd: overhead + elements per partition at the engine clock") {
  const Target& trn2 = target_by_name("trn2");
  const Target& trn1 = target_by_name("trn1");
  const Target& trn3 = target_by_name("trn3");
  // Two inputs, fp32: 64 + 2 * 1024.
  Instr tt = make(Opcode::tensor_tensor, Engine::vector, sb(f32, 0, 128, {row(1024)}),
                  {sb(f32, 8192, 128, {row(1024)}), sb(f32, 16384, 128, {row(1024)})});
  CHECK(instr_cost(tt, trn2).cycles == 64 + 2048);
  CHECK(instr_cost(tt, trn2).ns == doctest::Approx(2112 / 0.96));
  CHECK(instr_cost(tt, trn1).ns == doctest::Approx(2112 / 1.12));
  // One input, bf16 in and out: perf mode doubles the rate on trn2; trn1 has no perf mode.
  Instr cp = make(Opcode::tensor_copy, Engine::vector, sb(bf, 0, 128, {row(1024)}),
                  {sb(bf, 4096, 128, {row(1024)})});
  CHECK(instr_cost(cp, trn2).cycles == 64 + 512);
  CHECK(instr_cost(cp, trn1).cycles == 64 + 1024);
  // fp32 -> bf16 (PSUM evacuation) is not perf mode.
  Instr ev = make(Opcode::tensor_copy, Engine::vector, sb(bf, 0, 128, {row(512)}),
                  {ps(f32, 0, 128, {row(512)})});
  CHECK(instr_cost(ev, trn2).cycles == 64 + 512);
  CHECK(instr_cost(ev, trn2).dependent_cycles == 100 + 512);
  // Partition count does not matter: one element per partition per cycle.
  Instr ts = make(Opcode::tensor_scalar, Engine::vector, sb(f32, 0, 16, {row(256)}),
                  {sb(f32, 4096, 16, {row(256)})});
  CHECK(instr_cost(ts, trn2).cycles == 64 + 256);
  // ScalarE at 1.2 GHz; trn3 doubles bf16.
  Instr act = make(Opcode::activation, Engine::scalar, sb(f32, 0, 128, {row(512)}),
                   {sb(f32, 4096, 128, {row(512)})});
  CHECK(instr_cost(act, trn2).ns == doctest::Approx((64 + 512) / 1.2));
  CHECK(instr_cost(act, trn1).ns == doctest::Approx((64 + 512) / 1.4));
  Instr act16 = make(Opcode::activation, Engine::scalar, sb(bf, 0, 128, {row(512)}),
                     {sb(bf, 4096, 128, {row(512)})});
  CHECK(instr_cost(act16, trn3).cycles == 64 + 256);
  CHECK(instr_cost(act16, trn2).cycles == 64 + 512);
  // GpSimd iota over [128, 100].
  Instr io = make(Opcode::iota, Engine::gpsimd, sb(DType::int32, 0, 128, {row(100)}), {});
  CHECK(instr_cost(io, trn2).ns == doctest::Approx(164 / 1.2));
}

TEST_CASE("DMA: start latency plus bytes over the queue bandwidth; strided accesses cost double") {
  const Target& trn2 = target_by_name("trn2");
  const Target& trn3 = target_by_name("trn3");
  // 128 rows of 512 bf16, contiguous: 131072 bytes at 27 GB/s after 1.3 us.
  Instr ld = make(Opcode::dma_copy, Engine::dma, sb(bf, 0, 128, {row(512)}),
                  {hbm2(0, bf, 128, 512, 512)});
  auto c = instr_cost(ld, trn2);
  CHECK(c.dma);
  CHECK(c.hbm);
  CHECK(c.bytes == 131072);
  CHECK(c.ns == doctest::Approx(1300 + 131072 / 27.0));
  CHECK(instr_cost(ld, trn3).ns == doctest::Approx(1300 + 131072 / 38.0));
  // A transposing load: the free dim steps 4096 elements (8 KiB > 16 B): half efficiency.
  Instr tr = make(Opcode::dma_copy, Engine::dma, sb(bf, 0, 128, {row(512)}),
                  {hbm(0, bf, 0, {{1, 128}, {4096, 512}})});
  CHECK(instr_cost(tr, trn2).ns == doctest::Approx(1300 + 2 * 131072 / 27.0));
  // A 16-byte stride (every 4th fp32) is still full efficiency; 32 bytes is not.
  Instr s16 = make(Opcode::dma_copy, Engine::dma, sb(f32, 0, 128, {row(64)}),
                   {hbm(0, f32, 0, {{256, 128}, {4, 64}})});
  CHECK(instr_cost(s16, trn2).effective_bytes == 128 * 64 * 4);
  Instr s32 = make(Opcode::dma_copy, Engine::dma, sb(f32, 0, 128, {row(64)}),
                   {hbm(0, f32, 0, {{512, 128}, {8, 64}})});
  CHECK(instr_cost(s32, trn2).effective_bytes == 2 * 128 * 64 * 4);
  // SBUF to SBUF does not touch HBM.
  Instr ss = make(Opcode::dma_copy, Engine::dma, sb(f32, 0, 128, {row(64)}),
                  {sb(f32, 4096, 128, {row(64)})});
  CHECK_FALSE(instr_cost(ss, trn2).hbm);
}

TEST_CASE("independent DMA and compute overlap; dependent ones serialize") {
  const double dma_ns = 1300 + 128 * 512 * 4 / 27.0;
  const double memset_ns = (64 + 256) / 0.96, copy_ns = (64 + 512) / 0.96;
  auto decls = std::vector<TensorDecl>{decl("x", {128, 512}, f32, kIn)};
  SUBCASE("independent") {
    Program p = program(decls, {dma(sb(f32, 0, 128, {row(512)}), hbm2(0, f32, 128, 512, 512)),
                                on(Engine::vector, instr(Opcode::memset,
                                                         sb(f32, 8192, 128, {row(256)}), {}))});
    Profile prof = run_timing(p);
    REQUIRE(prof.events.size() == 2);
    CHECK(prof.events[0].start_ns == 0);
    CHECK(prof.events[1].start_ns == 0);
    CHECK(prof.events[1].end_ns == doctest::Approx(memset_ns));
    CHECK(prof.total_ns == doctest::Approx(dma_ns));
    CHECK(prof.events[1].wait_on == -1);
  }
  SUBCASE("true dependence: the copy waits for the load") {
    Program p = program(decls, {dma(sb(f32, 0, 128, {row(512)}), hbm2(0, f32, 128, 512, 512)),
                                on(Engine::vector, instr(Opcode::tensor_copy,
                                                         sb(f32, 8192, 128, {row(512)}),
                                                         {sb(f32, 0, 128, {row(512)})}))});
    Profile prof = run_timing(p);
    REQUIRE(prof.events.size() == 2);
    CHECK(prof.events[1].start_ns == doctest::Approx(dma_ns));
    CHECK(prof.events[1].wait_on == 0);
    CHECK(prof.events[1].wait_kind == DepKind::raw);
    CHECK(prof.events[1].wait_memory == Memory::sbuf);
    CHECK(prof.events[1].wait_ns == doctest::Approx(dma_ns));
    CHECK(prof.total_ns == doctest::Approx(dma_ns + copy_ns));
  }
  SUBCASE("a read of a different partition range does not wait") {
    Program p = program(decls, {dma(sb(f32, 0, 64, {row(512)}), hbm2(0, f32, 64, 512, 512)),
                                on(Engine::vector,
                                   instr(Opcode::tensor_copy, sb(f32, 8192, 64, {row(512)}),
                                         {chip(Memory::sbuf, f32, 0, 64, {row(512)}, 64)}))});
    Profile prof = run_timing(p);
    CHECK(prof.events[1].start_ns == 0);
  }
  SUBCASE("anti dependence: a load into a buffer waits for its reader") {
    Program p = program(
        decls, {on(Engine::vector, instr(Opcode::memset, sb(f32, 0, 128, {row(512)}), {})),
                on(Engine::vector, instr(Opcode::tensor_copy, sb(f32, 8192, 128, {row(512)}),
                                         {sb(f32, 0, 128, {row(512)})})),
                dma(sb(f32, 0, 128, {row(512)}), hbm2(0, f32, 128, 512, 512))});
    Profile prof = run_timing(p);
    REQUIRE(prof.events.size() == 3);
    // The copy reads the memset's result right after it on the same engine: 100-cycle overhead.
    const double memset512 = (64 + 512) / 0.96, dep_copy = (100 + 512) / 0.96;
    CHECK(prof.events[1].start_ns == doctest::Approx(memset512));
    CHECK(prof.events[1].end_ns == doctest::Approx(memset512 + dep_copy));
    CHECK(prof.events[2].start_ns == doctest::Approx(memset512 + dep_copy));
    CHECK(prof.events[2].wait_kind == DepKind::war);
    CHECK(prof.events[2].wait_on == 1);
  }
  SUBCASE("output dependence: a memset after a load waits for it") {
    Program p = program(decls, {dma(sb(f32, 0, 128, {row(512)}), hbm2(0, f32, 128, 512, 512)),
                                on(Engine::vector,
                                   instr(Opcode::memset, sb(f32, 1024, 128, {row(16)}), {}))});
    Profile prof = run_timing(p);
    CHECK(prof.events[1].start_ns == doctest::Approx(dma_ns));
    CHECK(prof.events[1].wait_kind == DepKind::waw);
  }
  SUBCASE("one engine runs its instructions in order even when independent") {
    Program p = program(
        decls, {on(Engine::vector, instr(Opcode::memset, sb(f32, 0, 128, {row(256)}), {})),
                on(Engine::vector, instr(Opcode::memset, sb(f32, 4096, 128, {row(256)}), {}))});
    Profile prof = run_timing(p);
    CHECK(prof.events[1].start_ns == doctest::Approx(memset_ns));
    CHECK(prof.events[1].wait_on == -1);
    CHECK(prof.total_ns == doctest::Approx(2 * memset_ns));
  }
}

TEST_CASE("DMA queues: independent transfers spread over queues; HBM share bounds the total") {
  // 16 loads of 1 MiB each at once: alone each takes 1.3 us + 1 MiB / 27 GB/s, but 16 x 27 GB/s
  // exceeds trn2's 362.5 GB/s per core, so the last ends near 1.3 us + 16 MiB / 362.5 GB/s.
  const int64_t rows = 128, cols = 4096;  // 128 x 4096 bf16 = 1 MiB
  std::vector<ProgNode> body;
  for (int i = 0; i < 16; ++i)
    body.push_back(dma(sb(bf, 8192 * i, 128, {row(cols)}), hbm2(0, bf, rows, cols, cols)));
  Program p = program({decl("x", {rows, cols}, bf, kIn)}, std::move(body));
  Profile prof = run_timing(p);
  REQUIRE(prof.events.size() == 16);
  std::vector<bool> used(prof.units.size(), false);
  for (auto& e : prof.events) {
    CHECK(e.start_ns == 0);
    CHECK(e.end_ns >= 1300 + (1 << 20) / 27.0 - 1e-6);
    used[static_cast<size_t>(e.unit)] = true;
  }
  int queues = 0;
  for (size_t u = static_cast<size_t>(prof.first_dma_unit); u < used.size(); ++u) queues += used[u];
  CHECK(queues == 16);
  // The fluid model places transfers in program order, so the share is approximate (within 5%);
  // without the HBM bound all would end at 1.3 us + 1 MiB / 27 GB/s = 40.1 us.
  CHECK(prof.total_ns == doctest::Approx(1300 + 16.0 * (1 << 20) / 362.5).epsilon(0.05));
}

TEST_CASE("loops are walked: every dynamic iteration is timed, rotation breaks dependences") {
  // Load into a 2-slot rotating buffer, then copy out: with two slots, load i+1 overlaps copy i.
  AccessPattern buf = sb(f32, 0, 128, {row(512)});
  buf.rotation = {"i0", 2, 2048};
  Affine i = Affine::var("i0");
  Program p = program(
      {decl("x", {8 * 128, 512}, f32, kIn)},
      {loop("i0", 8, {dma(buf, hbm2(0, f32, 128, 512, 512, i * (128 * 512))),
                      on(Engine::vector, instr(Opcode::tensor_copy, sb(f32, 8192, 128, {row(512)}),
                                               {buf}))})});
  Profile prof = run_timing(p);
  REQUIRE(prof.events.size() == 16);
  // Iteration 1's load does not wait for iteration 0's copy (other slot) ...
  CHECK(prof.events[2].start_ns == 0);
  // ... but iteration 2's load reuses slot 0 and waits for iteration 0's copy to read it.
  CHECK(prof.events[4].wait_kind == DepKind::war);
  CHECK(prof.events[4].start_ns == doctest::Approx(prof.events[1].end_ns));
}

TEST_CASE("functional results are unchanged with the timing model on") {
  const int R = 128, C = 64;
  auto x = random_values(R * C, 5);
  Program p = program({decl("x", {R, C}, f32, kIn), decl("y", {R, C}, f32, kOut)},
                      {dma(sb(f32, 0, R, {row(C)}), hbm2(0, f32, R, C, C)),
                       on(Engine::scalar, [] {
                         ProgNode n = instr(Opcode::activation, sb(f32, 1024, R, {row(C)}),
                                            {sb(f32, 0, R, {row(C)})});
                         n.instr.args.func = ActFunc::exp;
                         return n;
                       }()),
                       dma(hbm2(1, f32, R, C, C), sb(f32, 1024, R, {row(C)}))});
  Tensor tx = Tensor::from_floats(x, {R, C}, f32);
  Tensor plain = Tensor::empty({R, C}, f32), timed = Tensor::empty({R, C}, f32);
  simulate(p, {tx, plain});
  Profile prof = run_timing(p, {tx, timed});
  CHECK(prof.executed);
  CHECK(prof.events.size() == 3);
  for (int64_t k = 0; k < R * C; ++k) CHECK(timed.get(k) == plain.get(k));
  // Timing only computes nothing but times the same.
  Profile only = run_timing(p);
  CHECK_FALSE(only.executed);
  CHECK(only.total_ns == prof.total_ns);
}

TEST_CASE("HBM dependences: a load of stored data waits; disjoint column blocks do not") {
  const double store_ns = 1300 + 128 * 256 * 4 / 27.0;
  auto decls = std::vector<TensorDecl>{decl("y", {128, 512}, f32, kOut)};
  SUBCASE("read after write through HBM") {
    Program p = program(decls, {dma(hbm2(0, f32, 128, 256, 512), sb(f32, 0, 128, {row(256)})),
                                dma(sb(f32, 4096, 128, {row(256)}), hbm2(0, f32, 128, 256, 512))});
    Profile prof = run_timing(p);
    CHECK(prof.events[1].start_ns == doctest::Approx(store_ns));
    // Best fit puts it on the store's own queue, which frees exactly when its data is ready;
    // on any other queue the wait is recorded as a true dependence through HBM.
    if (prof.events[1].unit != prof.events[0].unit) {
      CHECK(prof.events[1].wait_kind == DepKind::raw);
      CHECK(prof.events[1].wait_memory == Memory::shared_hbm);
    }
  }
  SUBCASE("stores to the left and right halves of the same rows overlap") {
    Program p = program(decls, {dma(hbm2(0, f32, 128, 256, 512), sb(f32, 0, 128, {row(256)})),
                                dma(hbm2(0, f32, 128, 256, 512, 256), sb(f32, 0, 128, {row(256)}))});
    Profile prof = run_timing(p);
    CHECK(prof.events[1].start_ns == 0);
    CHECK(prof.events[0].unit != prof.events[1].unit);
  }
}

TEST_CASE("SPMD programs are timed back to back on one core") {
  const double memset_ns = (64 + 256) / 0.96;
  Program p = program({decl("x", {1, 1}, f32, kIn)},
                      {on(Engine::vector, instr(Opcode::memset, sb(f32, 0, 128, {row(256)}), {}))});
  Profile prof;
  SimOptions o;
  o.profile = &prof;
  o.execute = false;
  simulate(p, {}, {3}, o);
  REQUIRE(prof.events.size() == 3);
  CHECK(prof.programs == 3);
  for (int i = 0; i < 3; ++i) {
    CHECK(prof.events[static_cast<size_t>(i)].program == i);
    CHECK(prof.events[static_cast<size_t>(i)].start_ns == doctest::Approx(i * memset_ns));
  }
}
