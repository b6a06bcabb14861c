// Timing model: single-instruction costs against formulas computed here from the target's
// figures and the published cost notes (CALIBRATION.md), and the scheduler's behaviour
// (overlap, dependences with latency and semaphores, list scheduling, accumulation pipelining,
// stationary and table loads, DMA engines, shared ports, rotation, SPMD).
#include <doctest/doctest.h>

#include <algorithm>
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
const Target& trn1 = target_by_name("trn1");
const Target& trn2 = target_by_name("trn2");
const Target& trn3 = target_by_name("trn3");

Instr make(Opcode op, Engine e, AccessPattern dst, std::vector<AccessPattern> src,
           InstrArgs args = {}) {
  Instr in = instr(op, std::move(dst), std::move(src), std::move(args)).instr;
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
ProgNode vec(Opcode op, AccessPattern dst, std::vector<AccessPattern> src = {}) {
  return on(Engine::vector, instr(op, std::move(dst), std::move(src)));
}

Profile run_timing(Program p, std::vector<Tensor> tensors = {}, const std::string& target = "trn2") {
  p.target = target;
  Profile prof;
  SimOptions o;
  o.profile = &prof;
  o.execute = !tensors.empty();
  simulate(p, tensors, {1}, o);
  return prof;
}

// The event of static instruction `i` (the n-th execution), whatever order they were placed in.
const InstrEvent& ev(const Profile& p, int i, int n = 0) {
  for (auto& e : p.events)
    if (e.instr == i && n-- == 0) return e;
  FAIL("no such event");
  return p.events.front();
}

}  // namespace

TEST_CASE("TensorE: max(N, 64) cycles, fp32 4x, fp8 per target; latency grows with M") {
  CHECK(instr_cost(matmul(bf, 128, 128, 512), trn2).cycles == 512);
  CHECK(instr_cost(matmul(bf, 128, 128, 512), trn2).ns == doctest::Approx(512 / 2.4));
  CHECK(instr_cost(matmul(bf, 128, 128, 512), trn1).ns == doctest::Approx(512 / 2.8));
  CHECK(instr_cost(matmul(bf, 128, 128, 32), trn2).cycles == 64);    // the 64-cycle floor
  CHECK(instr_cost(matmul(f32, 128, 128, 512), trn2).cycles == 2048);  // two passes of 2N
  CHECK(instr_cost(matmul(f32, 128, 128, 16), trn2).cycles == 256);  // 4 x max(16, 64)
  CHECK(instr_cost(matmul(f8, 128, 128, 512), trn1).cycles == 512);   // fp8 at the bf16 rate
  CHECK(instr_cost(matmul(f8, 128, 128, 512), trn2).cycles == 256);   // double-row mode
  CHECK(instr_cost(matmul(f8, 128, 128, 512), trn3).cycles == 128);   // MX 4x
  CHECK(instr_cost(matmul(bf, 64, 32, 100), trn2).flops == 2.0 * 64 * 32 * 100);
  // The result drains through the M stationary columns: latency = base + M cycles.
  auto one = instr_cost(matmul(bf, 128, 1, 128), trn1), wide = instr_cost(matmul(bf, 128, 96, 128), trn1);
  CHECK(one.latency_cycles == trn1.tensor.latency_cycles + 1);
  CHECK(wide.latency_cycles - one.latency_cycles == 95);
  // Published single-instruction durations (PG fig20-21, fig18): 188 ns and 219 ns, within 15%.
  CHECK((one.ns + one.latency_ns) == doctest::Approx(188).epsilon(0.15));
  CHECK((wide.ns + wide.latency_ns) == doctest::Approx(219).epsilon(0.15));
  CHECK(trn2.tensor_peak_flops() == doctest::Approx(2.0 * 128 * 128 * 2.4e9));
  // nc_transpose of [P, F] costs max(P, min(64, F)); fp32 at the target's transpose rate.
  Instr tr = make(Opcode::nc_transpose, Engine::tensor, ps(f32, 0, 64, {row(128)}),
                  {sb(bf, 0, 128, {row(64)})});
  CHECK(instr_cost(tr, trn2).cycles == 128);
  Instr tr32 = make(Opcode::nc_transpose, Engine::tensor, ps(f32, 0, 64, {row(128)}),
                    {sb(f32, 0, 128, {row(64)})});
  CHECK(instr_cost(tr32, trn1).cycles == 128 * trn1.transpose_fp32_slowdown);
  CHECK(instr_cost(tr32, trn2).cycles == 128 * trn2.transpose_fp32_slowdown);
}

TEST_CASE("VectorE: N or 2N by operands, perf mode, the ISA's exceptions; latency apart") {
  // Two fp32 SBUF inputs stream both: 2N.
  Instr tt = make(Opcode::tensor_tensor, Engine::vector, sb(f32, 0, 128, {row(1024)}),
                  {sb(f32, 8192, 128, {row(1024)}), sb(f32, 16384, 128, {row(1024)})});
  auto c = instr_cost(tt, trn2);
  CHECK(c.cycles == 2048);
  CHECK(c.ns == doctest::Approx(2048 / 0.96));
  CHECK(c.latency_cycles == trn2.vector.latency_cycles);
  CHECK(instr_cost(tt, trn1).ns == doctest::Approx(2048 / 1.12));
  // PG fig17: an fp32 add over 8192 elements per partition lasts 14968 ns on trn1.
  Instr big = make(Opcode::tensor_tensor, Engine::vector, sb(f32, 0, 64, {row(8192)}),
                   {sb(f32, 32768, 64, {row(8192)}), sb(f32, 65536, 64, {row(8192)})});
  auto cb = instr_cost(big, trn1);
  CHECK((cb.ns + cb.latency_ns) == doctest::Approx(14968).epsilon(0.02));
  // One input in PSUM: N.
  Instr tp = make(Opcode::tensor_tensor, Engine::vector, sb(f32, 0, 128, {row(512)}),
                  {ps(f32, 0, 128, {row(512)}), sb(f32, 8192, 128, {row(512)})});
  CHECK(instr_cost(tp, trn2).cycles == 512);
  // All-bf16 contiguous SBUF add: N; the same with a max: 2N.
  InstrArgs add;
  add.op0 = AluOp::add;
  Instr tb = make(Opcode::tensor_tensor, Engine::vector, sb(bf, 0, 128, {row(512)}),
                  {sb(bf, 2048, 128, {row(512)}), sb(bf, 4096, 128, {row(512)})}, add);
  CHECK(instr_cost(tb, trn1).cycles == 512);
  tb.args.op0 = AluOp::maximum;
  CHECK(instr_cost(tb, trn1).cycles == 1024);
  // tensor_copy bf16 SBUF: perf mode 4x on trn2/trn3, none on trn1; from PSUM never.
  Instr cp = make(Opcode::tensor_copy, Engine::vector, sb(bf, 0, 128, {row(1024)}),
                  {sb(bf, 4096, 128, {row(1024)})});
  CHECK(instr_cost(cp, trn2).cycles == 256);
  CHECK(instr_cost(cp, trn1).cycles == 1024);
  Instr ev = make(Opcode::tensor_copy, Engine::vector, sb(bf, 0, 128, {row(512)}),
                  {ps(f32, 0, 128, {row(512)})});
  CHECK(instr_cost(ev, trn2).cycles == 512);
  // MIN_II: a tiny instruction still holds the engine 64 cycles.
  Instr tiny = make(Opcode::tensor_scalar, Engine::vector, sb(f32, 0, 128, {row(4)}),
                    {sb(f32, 64, 128, {row(4)})});
  CHECK(instr_cost(tiny, trn2).cycles == 64);
  // reciprocal: max(64, 8N); zero memset of bf16: N/2; bf16 add-reduce: N/2.
  InstrArgs rc;
  rc.op0 = AluOp::reciprocal;
  Instr r = make(Opcode::tensor_scalar, Engine::vector, sb(f32, 0, 128, {row(100)}),
                 {sb(f32, 1024, 128, {row(100)})}, rc);
  CHECK(instr_cost(r, trn2).cycles == 800);
  Instr ms = make(Opcode::memset, Engine::vector, sb(bf, 0, 128, {row(1024)}), {});
  CHECK(instr_cost(ms, trn1).cycles == 512);
  InstrArgs red;
  red.reduce_op = AluOp::add;
  Instr rd = make(Opcode::tensor_reduce, Engine::vector, sb(bf, 0, 128, {row(1)}),
                  {sb(bf, 64, 128, {row(1024)})}, red);
  CHECK(instr_cost(rd, trn1).cycles == 512);
}

TEST_CASE("ScalarE and GpSimd: N at their clock, bf16 2x on trn3, tables, iota start") {
  InstrArgs ex;
  ex.func = ActFunc::exp;
  Instr act = make(Opcode::activation, Engine::scalar, sb(f32, 0, 128, {row(512)}),
                   {sb(f32, 4096, 128, {row(512)})}, ex);
  CHECK(instr_cost(act, trn2).ns == doctest::Approx(512 / 1.2));
  CHECK(instr_cost(act, trn1).ns == doctest::Approx(512 / 1.4));
  CHECK(instr_cost(act, trn2).act_table == static_cast<int>(ActFunc::exp));
  InstrArgs cp;
  cp.func = ActFunc::copy;
  Instr copy = make(Opcode::activation, Engine::scalar, sb(f32, 0, 128, {row(512)}),
                    {sb(f32, 4096, 128, {row(512)})}, cp);
  CHECK(instr_cost(copy, trn2).act_table == -1);  // identity needs no table
  Instr act16 = make(Opcode::activation, Engine::scalar, sb(bf, 0, 128, {row(512)}),
                     {sb(bf, 4096, 128, {row(512)})}, ex);
  CHECK(instr_cost(act16, trn3).cycles == 256);
  CHECK(instr_cost(act16, trn2).cycles == 512);
  // DMAO example 2: exp over [128, 128] bf16 lasts ~0.45 us on trn2.
  Instr small = make(Opcode::activation, Engine::scalar, sb(bf, 0, 128, {row(128)}),
                     {sb(bf, 4096, 128, {row(128)})}, ex);
  auto cs = instr_cost(small, trn2);
  CHECK((cs.ns + cs.latency_ns) == doctest::Approx(450).epsilon(0.05));
  // GpSimd iota over [128, 100]: 150 + N cycles.
  Instr io = make(Opcode::iota, Engine::gpsimd, sb(DType::int32, 0, 128, {row(100)}), {});
  CHECK(instr_cost(io, trn2).ns == doctest::Approx(250 / 1.2));
}

TEST_CASE("DMA: engines per partition group, a descriptor per contiguous HBM run, rates") {
  auto per_engine = [](const Target& t, double descs, double bytes, double rate, double eff = 1) {
    return descs * t.dma_descriptor_ns +
           std::max(descs * t.dma_descriptor_min_ns, bytes / rate / eff);
  };
  // [128, 512] bf16 from a [128, 512] tensor: contiguous, so one descriptor per engine.
  Instr ld = make(Opcode::dma_copy, Engine::dma, sb(bf, 0, 128, {row(512)}),
                  {hbm2(0, bf, 128, 512, 512)});
  auto c = instr_cost(ld, trn2);
  CHECK(c.dma);
  CHECK(c.hbm);
  CHECK(c.bytes == 131072);
  CHECK(c.dma_engines == 16);
  CHECK(c.descriptors == 16);
  CHECK(c.engine_ns == doctest::Approx(per_engine(trn2, 1, 8192, trn2.dma_read_bytes_per_ns)));
  CHECK(c.ns == doctest::Approx(c.engine_ns + trn2.dma_latency_ns + trn2.dma_completion_ns));
  // The same tile out of a wide tensor: 128 rows of 1 KiB, 8 per engine.
  Instr wide = make(Opcode::dma_copy, Engine::dma, sb(bf, 0, 128, {row(512)}),
                    {hbm2(0, bf, 128, 512, 8192)});
  CHECK(instr_cost(wide, trn2).descriptors == 128);
  CHECK(instr_cost(wide, trn2).engine_ns ==
        doctest::Approx(per_engine(trn2, 8, 8192, trn2.dma_read_bytes_per_ns)));
  // Rows of 1 KiB move for the descriptor's minimum time, not their bytes' (DMAO's curve: below
  // ~2 KiB a partition, throughput is proportional to the bytes): half as many bytes a row
  // cost the engine the same.
  CHECK(instr_cost(wide, trn2).engine_ns == doctest::Approx(8 * (20 + 60)));
  Instr narrow = make(Opcode::dma_copy, Engine::dma, sb(bf, 0, 128, {row(256)}),
                      {hbm2(0, bf, 128, 256, 8192)});
  CHECK(instr_cost(narrow, trn2).engine_ns == instr_cost(wide, trn2).engine_ns);
  // 4 partitions go to one engine (DMAO example 1: 32 KiB on one engine, 1416 ns; within 15%).
  Instr four = make(Opcode::dma_copy, Engine::dma, sb(bf, 0, 4, {row(4096)}),
                    {hbm2(0, bf, 4, 4096, 4096)});
  CHECK(instr_cost(four, trn2).dma_engines == 1);
  CHECK(instr_cost(four, trn2).engine_ns == doctest::Approx(1416).epsilon(0.15));
  // A transposing load: the innermost HBM step is 8 KiB > 16 B, half rate, a row per descriptor.
  Instr tr = make(Opcode::dma_copy, Engine::dma, sb(bf, 0, 128, {row(512)}),
                  {hbm(0, bf, 0, {{1, 128}, {4096, 512}})});
  auto ct = instr_cost(tr, trn2);
  CHECK(ct.strided);
  CHECK(ct.descriptors == 128);
  CHECK(ct.engine_ns ==
        doctest::Approx(per_engine(trn2, 8, 8192, trn2.dma_read_bytes_per_ns, 0.5)));
  // A 16-byte step (every 4th fp32) is full rate; 32 bytes is not.
  Instr s16 = make(Opcode::dma_copy, Engine::dma, sb(f32, 0, 128, {row(64)}),
                   {hbm(0, f32, 0, {{256, 128}, {4, 64}})});
  CHECK_FALSE(instr_cost(s16, trn2).strided);
  Instr s32 = make(Opcode::dma_copy, Engine::dma, sb(f32, 0, 128, {row(64)}),
                   {hbm(0, f32, 0, {{512, 128}, {8, 64}})});
  CHECK(instr_cost(s32, trn2).strided);
  // trn1: reads from HBM at the read rate, stores at the write rate (PG fig14: 4 MiB stored in
  // 16955 ns from trigger to completion).
  Instr st = make(Opcode::dma_copy, Engine::dma, hbm2(0, f32, 128, 8192, 8192),
                  {sb(f32, 0, 128, {row(8192)})});
  auto cst = instr_cost(st, trn1);
  CHECK(cst.engine_ns == doctest::Approx(per_engine(trn1, 1, 262144, trn1.dma_write_bytes_per_ns)));
  CHECK(cst.ns == doctest::Approx(16955).epsilon(0.05));
  CHECK(instr_cost(ld, trn1).engine_ns ==
        doctest::Approx(per_engine(trn1, 1, 8192, trn1.dma_read_bytes_per_ns)));
  // SBUF to SBUF: a descriptor per partition row, at the write rate, not HBM.
  Instr ss = make(Opcode::dma_copy, Engine::dma, sb(f32, 0, 128, {row(64)}),
                  {sb(f32, 4096, 128, {row(64)})});
  CHECK_FALSE(instr_cost(ss, trn1).hbm);
  CHECK(instr_cost(ss, trn1).engine_ns ==
        doctest::Approx(per_engine(trn1, 8, 2048, trn1.dma_write_bytes_per_ns)));
}

TEST_CASE("scheduling: overlap, dependences wait for results plus the semaphore") {
  auto decls = std::vector<TensorDecl>{decl("x", {128, 512}, f32, kIn)};
  const AccessPattern tile = sb(f32, 0, 128, {row(512)}), other = sb(f32, 8192, 128, {row(512)});
  const InstrCost load = instr_cost(make(Opcode::dma_copy, Engine::dma, tile,
                                         {hbm2(0, f32, 128, 512, 512)}), trn2);
  const InstrCost copy = instr_cost(make(Opcode::tensor_copy, Engine::vector, other, {tile}), trn2);
  SUBCASE("independent DMA and compute overlap") {
    Program p = program(decls, {dma(tile, hbm2(0, f32, 128, 512, 512)),
                                vec(Opcode::memset, sb(f32, 16384, 128, {row(256)}))});
    Profile prof = run_timing(p);
    CHECK(ev(prof, 0).start_ns == 0);
    CHECK(ev(prof, 1).start_ns == 0);
    CHECK(ev(prof, 0).end_ns == doctest::Approx(load.ns));
    CHECK(prof.total_ns == doctest::Approx(load.ns));
  }
  SUBCASE("true dependence: the copy starts a semaphore after the load completes") {
    Program p = program(decls, {dma(tile, hbm2(0, f32, 128, 512, 512)),
                                vec(Opcode::tensor_copy, other, {tile})});
    Profile prof = run_timing(p);
    const InstrEvent& e = ev(prof, 1);
    CHECK(e.start_ns == doctest::Approx(load.ns + trn2.semaphore_ns));
    CHECK(e.end_ns == doctest::Approx(e.start_ns + copy.ns + copy.latency_ns));
    CHECK(e.occupancy_ns == doctest::Approx(copy.ns));
    CHECK(e.wait_kind == DepKind::raw);
    CHECK(e.wait_memory == Memory::sbuf);
    CHECK(e.wait_ns == doctest::Approx(e.start_ns));
    CHECK(prof.events[static_cast<size_t>(e.wait_on)].instr == 0);
  }
  SUBCASE("a read of a different partition range does not wait") {
    Program p = program(decls, {dma(sb(f32, 0, 64, {row(512)}), hbm2(0, f32, 64, 512, 512)),
                                vec(Opcode::tensor_copy, sb(f32, 8192, 64, {row(512)}),
                                    {chip(Memory::sbuf, f32, 0, 64, {row(512)}, 64)})});
    CHECK(ev(run_timing(p), 1).start_ns == 0);
  }
  SUBCASE("anti dependence: a load into a buffer waits until its reader has read it") {
    Program p = program(decls, {vec(Opcode::memset, tile), vec(Opcode::tensor_copy, other, {tile}),
                                dma(tile, hbm2(0, f32, 128, 512, 512))});
    Profile prof = run_timing(p);
    const InstrEvent& cp = ev(prof, 1);
    const InstrEvent& ld = ev(prof, 2);
    CHECK(ld.wait_kind == DepKind::war);
    CHECK(ld.start_ns == doctest::Approx(cp.start_ns + cp.occupancy_ns + trn2.semaphore_ns));
  }
  SUBCASE("output dependence: a memset after a load waits for it") {
    Program p = program(decls, {dma(tile, hbm2(0, f32, 128, 512, 512)),
                                vec(Opcode::memset, sb(f32, 1024, 128, {row(16)}))});
    const InstrEvent& e = ev(run_timing(p), 1);
    CHECK(e.start_ns == doctest::Approx(load.ns + trn2.semaphore_ns));
    CHECK(e.wait_kind == DepKind::waw);
  }
}

TEST_CASE("latency and initiation interval: independent instructions pipeline, dependent wait") {
  auto decls = std::vector<TensorDecl>{decl("x", {1, 1}, f32, kIn)};
  const AccessPattern a = sb(f32, 0, 128, {row(256)}), b = sb(f32, 4096, 128, {row(256)});
  const InstrCost m = instr_cost(make(Opcode::memset, Engine::vector, a, {}), trn2);
  SUBCASE("independent: the second starts when the first lets go of the engine") {
    Profile prof = run_timing(program(decls, {vec(Opcode::memset, a), vec(Opcode::memset, b)}));
    CHECK(ev(prof, 1).start_ns == doctest::Approx(m.ns));
    CHECK(prof.total_ns == doctest::Approx(2 * m.ns + m.latency_ns));
  }
  SUBCASE("dependent: the second waits for the first's results") {
    Profile prof = run_timing(program(decls, {vec(Opcode::memset, a),
                                              vec(Opcode::tensor_copy, b, {a})}));
    CHECK(ev(prof, 1).start_ns == doctest::Approx(m.ns + m.latency_ns + trn2.semaphore_ns));
  }
  SUBCASE("PG fig16: dependent 1-element activations on trn1 start every 189 ns") {
    std::vector<ProgNode> body;
    for (int i = 0; i < 8; ++i) {
      ProgNode n = on(Engine::scalar, instr(Opcode::activation, sb(f32, 64 * ((i + 1) % 2), 128, {row(1)}),
                                            {sb(f32, 64 * (i % 2), 128, {row(1)})}));
      body.push_back(n);
    }
    Profile prof = run_timing(program(decls, body), {}, "trn1");
    CHECK((ev(prof, 7).start_ns - ev(prof, 0).start_ns) / 7 == doctest::Approx(189).epsilon(0.02));
  }
}

TEST_CASE("list scheduling: an engine runs a ready instruction before an earlier waiting one") {
  auto decls = std::vector<TensorDecl>{decl("x", {128, 512}, f32, kIn)};
  const AccessPattern tile = sb(f32, 0, 128, {row(512)});
  // The copy waits for the load; the memset after it in program order does not.
  Program p = program(decls, {dma(tile, hbm2(0, f32, 128, 512, 512)),
                              vec(Opcode::tensor_copy, sb(f32, 8192, 128, {row(512)}), {tile}),
                              vec(Opcode::memset, sb(f32, 16384, 128, {row(512)}))});
  Profile prof = run_timing(p);
  CHECK(ev(prof, 2).start_ns == 0);
  CHECK(ev(prof, 1).start_ns > ev(prof, 2).end_ns);
}

TEST_CASE("TensorE: accumulating matmuls pipeline; a late stationary costs its load") {
  auto decls = std::vector<TensorDecl>{decl("x", {128, 128}, bf, kIn)};
  const AccessPattern acc = ps(f32, 0, 128, {row(512)});
  const AccessPattern stat = sb(bf, 0, 128, {row(128)}), mov = sb(bf, 4096, 128, {row(512)});
  auto mm = [&](AccessPattern s, int accumulate) {
    ProgNode n = on(Engine::tensor, instr(Opcode::nc_matmul, acc, {s, mov}));
    n.instr.args.accumulate = accumulate;
    return n;
  };
  const InstrCost c = instr_cost(matmul(bf, 128, 128, 512), trn2);
  // Four matmuls into one PSUM tile, two stationaries alternating (both resident from t=0).
  Program p = program(decls, {mm(stat, 0), mm(sb(bf, 1024, 128, {row(128)}), 1), mm(stat, 1),
                              mm(sb(bf, 1024, 128, {row(128)}), 1)});
  Profile prof = run_timing(p);
  for (int i = 1; i < 4; ++i)
    CHECK(ev(prof, i).start_ns == doctest::Approx(ev(prof, i - 1).start_ns + c.ns));
  // A stationary loaded by DMA: the matmul starts its LoadStationary after the data arrives.
  Program q = program(decls, {dma(stat, hbm2(0, bf, 128, 128, 128)), mm(stat, 0)});
  Profile pq = run_timing(q);
  CHECK(ev(pq, 1).start_ns ==
        doctest::Approx(ev(pq, 0).end_ns + trn2.semaphore_ns + c.stationary_ns));
}

TEST_CASE("ScalarE loads an activation table when the function changes table") {
  auto decls = std::vector<TensorDecl>{decl("x", {1, 1}, f32, kIn)};
  auto act = [](ActFunc f, int64_t off) {
    ProgNode n = on(Engine::scalar, instr(Opcode::activation, sb(f32, off, 128, {row(64)}),
                                          {sb(f32, 0, 128, {row(64)})}));
    n.instr.args.func = f;
    return n;
  };
  Profile prof = run_timing(program(decls, {act(ActFunc::exp, 256), act(ActFunc::exp, 512),
                                            act(ActFunc::tanh, 768), act(ActFunc::copy, 1024),
                                            act(ActFunc::tanh, 1280)}), {}, "trn1");
  CHECK(ev(prof, 0).table_load_ns == trn1.act_table_load_ns);
  CHECK(ev(prof, 1).table_load_ns == 0);
  CHECK(ev(prof, 2).table_load_ns == trn1.act_table_load_ns);
  CHECK(ev(prof, 3).table_load_ns == 0);  // identity: no table, tanh stays loaded
  CHECK(ev(prof, 4).table_load_ns == 0);
}

TEST_CASE("DMA engines: many transfers share 16 engines; small ones use one engine each") {
  SUBCASE("16 loads of 1 MiB end after 16 MiB of engine time, not 1 MiB") {
    const int64_t cols = 4096;  // 128 x 4096 bf16 = 1 MiB, contiguous
    std::vector<ProgNode> body;
    for (int i = 0; i < 16; ++i)
      body.push_back(dma(sb(bf, 8192 * i, 128, {row(cols)}), hbm2(0, bf, 128, cols, cols)));
    Profile prof = run_timing(program({decl("x", {128, cols}, bf, kIn)}, std::move(body)));
    const double per_engine = trn2.dma_descriptor_ns + 65536 / trn2.dma_read_bytes_per_ns;
    REQUIRE(65536 / trn2.dma_read_bytes_per_ns > trn2.dma_descriptor_min_ns);  // bytes-bound
    CHECK(prof.total_ns == doctest::Approx(trn2.dma_latency_ns + 16 * per_engine +
                                           trn2.dma_completion_ns));
    for (double b : prof.dma_engine_busy_ns) CHECK(b == doctest::Approx(16 * per_engine));
    for (auto& e : prof.events) CHECK(e.start_ns == 0);  // all triggered at once
  }
  SUBCASE("four 4-partition loads run on four engines at once") {
    std::vector<ProgNode> body;
    for (int i = 0; i < 4; ++i)
      body.push_back(dma(sb(bf, 8192 * i, 4, {row(4096)}), hbm2(0, bf, 4, 4096, 4096)));
    Profile prof = run_timing(program({decl("x", {4, 4096}, bf, kIn)}, std::move(body)));
    const double one = instr_cost(make(Opcode::dma_copy, Engine::dma, sb(bf, 0, 4, {row(4096)}),
                                       {hbm2(0, bf, 4, 4096, 4096)}), trn2).ns;
    CHECK(prof.total_ns == doctest::Approx(one));
    int busy = 0;
    for (double b : prof.dma_engine_busy_ns) busy += b > 0;
    CHECK(busy == 4);
  }
}

TEST_CASE("NC-v2 ports: VectorE and ScalarE reading PSUM serialize on trn1, not on trn2") {
  auto decls = std::vector<TensorDecl>{decl("x", {1, 1}, f32, kIn)};
  Program p = program(decls, {vec(Opcode::tensor_copy, sb(f32, 0, 128, {row(512)}),
                                  {ps(f32, 0, 128, {row(512)})}),
                              on(Engine::scalar, instr(Opcode::activation,
                                                       sb(f32, 4096, 128, {row(512)}),
                                                       {ps(f32, 2048, 128, {row(512)})}))});
  Profile p1 = run_timing(p, {}, "trn1"), p2 = run_timing(p, {}, "trn2");
  CHECK(ev(p2, 1).start_ns == 0);
  CHECK(ev(p1, 1).start_ns == doctest::Approx(ev(p1, 0).occupancy_ns));
}

TEST_CASE("loops are walked: every dynamic iteration is timed, rotation breaks dependences") {
  // Load into a 2-slot rotating buffer, then copy out: load i+1 overlaps copy i.
  AccessPattern buf = sb(f32, 0, 128, {row(512)});
  buf.rotation = {"i0", 2, 2048};
  Affine i = Affine::var("i0");
  Program p = program(
      {decl("x", {8 * 128, 512}, f32, kIn)},
      {loop("i0", 8, {dma(buf, hbm2(0, f32, 128, 512, 512, i * (128 * 512))),
                      vec(Opcode::tensor_copy, sb(f32, 8192, 128, {row(512)}), {buf})})});
  Profile prof = run_timing(p);
  REQUIRE(prof.events.size() == 16);
  // Loads 0 and 1 go to different slots: both are triggered at once ...
  CHECK(ev(prof, 0, 1).start_ns == 0);
  // ... load 2 reuses slot 0 and waits for copy 0 to have read it.
  const InstrEvent& copy0 = ev(prof, 1, 0);
  CHECK(ev(prof, 0, 2).wait_kind == DepKind::war);
  CHECK(ev(prof, 0, 2).start_ns ==
        doctest::Approx(copy0.start_ns + copy0.occupancy_ns + trn2.semaphore_ns));
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
  CHECK(only.launch_ns == trn2.launch_ns);
}

TEST_CASE("HBM dependences: a load of stored data waits; disjoint column blocks do not") {
  auto decls = std::vector<TensorDecl>{decl("y", {128, 512}, f32, kOut)};
  SUBCASE("read after write through HBM") {
    Program p = program(decls, {dma(hbm2(0, f32, 128, 256, 512), sb(f32, 0, 128, {row(256)})),
                                dma(sb(f32, 4096, 128, {row(256)}), hbm2(0, f32, 128, 256, 512))});
    Profile prof = run_timing(p);
    CHECK(ev(prof, 1).start_ns == doctest::Approx(ev(prof, 0).end_ns + trn2.semaphore_ns));
    CHECK(ev(prof, 1).wait_kind == DepKind::raw);
    CHECK(ev(prof, 1).wait_memory == Memory::shared_hbm);
  }
  SUBCASE("stores to the left and right halves of the same rows overlap") {
    Program p = program(decls, {dma(hbm2(0, f32, 128, 256, 512), sb(f32, 0, 128, {row(256)})),
                                dma(hbm2(0, f32, 128, 256, 512, 256), sb(f32, 0, 128, {row(256)}))});
    Profile prof = run_timing(p);
    CHECK(ev(prof, 1).start_ns == 0);
  }
}

TEST_CASE("SPMD programs are timed on one core, one after another where they conflict") {
  Program p = program({decl("x", {1, 1}, f32, kIn)},
                      {vec(Opcode::memset, sb(f32, 0, 128, {row(256)}))});
  const InstrCost m = instr_cost(make(Opcode::memset, Engine::vector, sb(f32, 0, 128, {row(256)}),
                                      {}), trn2);
  Profile prof;
  SimOptions o;
  o.profile = &prof;
  o.execute = false;
  simulate(p, {}, {3}, o);
  REQUIRE(prof.events.size() == 3);
  CHECK(prof.programs == 3);
  std::vector<double> starts;
  for (auto& e : prof.events) starts.push_back(e.start_ns);
  std::sort(starts.begin(), starts.end());
  // The same SBUF bytes: each waits for the previous program's memset (output dependence).
  for (int i = 1; i < 3; ++i)
    CHECK(starts[static_cast<size_t>(i)] ==
          doctest::Approx(starts[static_cast<size_t>(i - 1)] + m.ns + m.latency_ns +
                          trn2.semaphore_ns));
}
