// What a native worker clears between programs (plan.hpp first_reads): only the on-chip bytes a
// program may read before writing them, and every program still sees the simulator's zeroed
// memories there.
#include <doctest/doctest.h>

#include "exec/differential.hpp"
#include "exec/sim_test_util.hpp"
#include "neuron/base/target.hpp"
#include "neuron/codegen/pipeline.hpp"
#include "neuron/codegen/plan.hpp"
#include "neuron/ir/printer.hpp"

using namespace neuron;
using namespace neuron::sim_test;
using namespace neuron::testing;

namespace {
constexpr DType f32 = DType::float32;
constexpr int64_t P = 4, F = 16;  // [4, 16] fp32 tiles: 64 bytes a partition
using Ranges = std::vector<std::pair<int64_t, int64_t>>;

native::FirstReads first_reads_of(const Program& p) {
  return native::first_reads(p, native::analyze_bounds(p), target_by_name("trn2"));
}
ProgNode load(AccessPattern dst) {
  return dma(std::move(dst), hbm2(0, f32, P, F, F));
}
ProgNode copy(AccessPattern dst, AccessPattern src) {
  return instr(Opcode::tensor_copy, std::move(dst), {std::move(src)});
}
const std::vector<TensorDecl> kX = {decl("x", {P, F}, f32, kIn)};
}  // namespace

TEST_CASE("first_reads: a tile written in full before it is read is never cleared") {
  Program p = program(kX, {load(sb(f32, 0, P, {row(F)})),
                           copy(sb(f32, 64, P, {row(F)}), sb(f32, 0, P, {row(F)}))});
  native::FirstReads fr = first_reads_of(p);
  CHECK(fr.sbuf.empty());
  CHECK(fr.psum.empty());
}

TEST_CASE("first_reads: reads not covered by an earlier full write are cleared") {
  SUBCASE("never written") {
    Program p = program(kX, {copy(sb(f32, 64, P, {row(F)}), sb(f32, 0, P, {row(F)}))});
    CHECK(first_reads_of(p).sbuf == Ranges{{0, 64}});
  }
  SUBCASE("half the columns written") {
    Program p = program(kX, {load(sb(f32, 0, P, {row(F / 2)})),
                             copy(sb(f32, 64, P, {row(F)}), sb(f32, 0, P, {row(F)}))});
    CHECK(first_reads_of(p).sbuf == Ranges{{0, 64}});
  }
  SUBCASE("half the partitions written") {
    Program p = program(kX, {instr(Opcode::memset, sb(f32, 0, P / 2, {row(F)}), {}),
                             copy(sb(f32, 64, P, {row(F)}), sb(f32, 0, P, {row(F)}))});
    CHECK(first_reads_of(p).sbuf == Ranges{{0, 64}});
  }
  SUBCASE("every other column written (not dense)") {
    Program p = program(kX, {instr(Opcode::memset, sb(f32, 0, P, {{2, F / 2}}), {}),
                             copy(sb(f32, 64, P, {row(F / 2)}), sb(f32, 0, P, {row(F / 2)}))});
    CHECK(first_reads_of(p).sbuf == Ranges{{0, 32}});
  }
  SUBCASE("written after the read") {
    Program p = program(kX, {copy(sb(f32, 64, P, {row(F)}), sb(f32, 0, P, {row(F)})),
                             load(sb(f32, 0, P, {row(F)}))});
    CHECK(first_reads_of(p).sbuf == Ranges{{0, 64}});
  }
}

TEST_CASE("first_reads: loops, moving addresses and destinations that are read") {
  SUBCASE("a write that moves with its loop covers reads in the same iteration only") {
    AccessPattern slot = sb(f32, 0, P, {row(F)});
    slot.offset = Affine::var("i0", 64);
    AccessPattern all = sb(f32, 0, P, {row(4 * F)});
    Program p = program(kX, {loop("i0", 4, {load(slot), copy(sb(f32, 512, P, {row(F)}), slot)}),
                             copy(sb(f32, 1024, P, {row(4 * F)}), all)});
    CHECK(first_reads_of(p).sbuf == Ranges{{0, 256}});
  }
  SUBCASE("a write that stays put covers reads after its loop") {
    Program p = program(kX, {loop("i0", 3, {load(sb(f32, 0, P, {row(F)}))}),
                             copy(sb(f32, 64, P, {row(F)}), sb(f32, 0, P, {row(F)}))});
    CHECK(first_reads_of(p).sbuf.empty());
  }
  SUBCASE("a dynamic loop may run no iteration") {
    ProgNode l = loop("i0", 0, {load(sb(f32, 0, P, {row(F)}))});
    l.loop_kind = LoopKind::dynamic;
    Program p = program(kX, {l, copy(sb(f32, 64, P, {row(F)}), sb(f32, 0, P, {row(F)}))});
    CHECK(first_reads_of(p).sbuf == Ranges{{0, 64}});
  }
  SUBCASE("an accumulating matmul reads its PSUM destination; an overwriting one does not") {
    for (int acc : {0, 1}) {
      InstrArgs a;
      a.accumulate = acc;
      Program p = program(kX, {load(sb(f32, 0, P, {row(P)})),
                               instr(Opcode::nc_matmul, ps(f32, 0, P, {row(P)}),
                                     {sb(f32, 0, P, {row(P)}), sb(f32, 0, P, {row(P)})}, a),
                               copy(sb(f32, 64, P, {row(P)}), ps(f32, 0, P, {row(P)}))});
      CAPTURE(acc);
      CHECK(first_reads_of(p).psum == (acc ? Ranges{{0, 16}} : Ranges{}));
      CHECK(first_reads_of(p).sbuf.empty());
    }
  }
}

TEST_CASE("every program reads zeros where it reads before writing, though the last one wrote") {
  // Each program loads the left half of t, stores all of t, then loads the right half: the
  // store must see zeros on the right in every program, also natively on one thread, where
  // the worker's memories still hold the previous program's right half.
  const std::string text = R"(kernel halves(x: float32[4, 16] shared_hbm) -> (out: float32[12, 16] shared_hbm) {
  alloc t: float32[4, 16] sbuf
  dma_copy(dst=t[0:+4, 0:+8], src=x[0:+4, 0:+8])
  dma_copy(dst=out[pid0*4:+4, 0:+16], src=t[0:+4, 0:+16])
  dma_copy(dst=t[0:+4, 8:+8], src=x[0:+4, 8:+8])
})";
  Tensor x = Tensor::empty({P, F}, f32);
  for (int i = 0; i < P * F; ++i) x.set(i, float(i + 1));
  NativeOptions one;
  one.threads = 1;
  BothResults r = run_both(compile(parse_kernel(text)), {x}, {3}, one);
  for (int64_t row = 0; row < 3 * P; ++row)
    for (int64_t c = 0; c < F; ++c)
      CHECK(r.native[0].get(row * F + c) == (c < 8 ? float((row % P) * F + c + 1) : 0.0f));
}
