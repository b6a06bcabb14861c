// What a native worker clears between programs (plan.hpp first_reads): only the on-chip bytes a
// program may read before writing them, and every program still sees the simulator's zeroed
// memories there.
#include <doctest/doctest.h>

#include "exec/differential.hpp"
#include "exec/sim_test_util.hpp"
#include "neuron/base/error.hpp"
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
    // Only the partitions read: a worker clears those, not all 128.
    CHECK(first_reads_of(p).sbuf_partitions == std::vector<int64_t>{P});
    // Two reads merged into one range take the partitions of both; a read whose partition
    // moves with the program id needs all of them.
    Program two = program(kX, {copy(sb(f32, 128, 2, {row(F)}), sb(f32, 0, 2, {row(F)})),
                               copy(sb(f32, 192, 3, {row(F)}), sb(f32, 32, 3, {row(F)}))});
    CHECK(first_reads_of(two).sbuf == Ranges{{0, 96}});
    CHECK(first_reads_of(two).sbuf_partitions == std::vector<int64_t>{3});
    AccessPattern moving = sb(f32, 0, 1, {row(F)});
    moving.partition = Affine::var("pid0", 1);
    Program by_pid = program(kX, {copy(sb(f32, 64, 1, {row(F)}), moving)});
    CHECK(first_reads_of(by_pid).sbuf_partitions == std::vector<int64_t>{128});
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
  SUBCASE("a write that moves with its loop covers, after it, what all its iterations wrote") {
    // Four 64-byte rows of a panel, one an iteration, read in the iteration and after the loop.
    AccessPattern slot = sb(f32, 0, P, {row(F)});
    slot.offset = Affine::var("i0", 64);
    AccessPattern all = sb(f32, 0, P, {row(4 * F)});
    Program p = program(kX, {loop("i0", 4, {load(slot), copy(sb(f32, 512, P, {row(F)}), slot)}),
                             copy(sb(f32, 1024, P, {row(4 * F)}), all)});
    CHECK(first_reads_of(p).sbuf.empty());
    // Steps of 128 bytes leave gaps between the rows: the panel's read after the loop needs
    // clearing (the reads inside the loop still do not).
    slot.offset = Affine::var("i0", 128);
    AccessPattern wide = sb(f32, 0, P, {row(7 * F)});  // to the end of the last row
    Program gaps = program(kX, {loop("i0", 4, {load(slot), copy(sb(f32, 512, P, {row(F)}), slot)}),
                                copy(sb(f32, 1024, P, {row(7 * F)}), wide)});
    CHECK(first_reads_of(gaps).sbuf == Ranges{{0, 448}});
    // A write whose partitions move with the loop covers nothing after it.
    AccessPattern down = sb(f32, 0, 1, {row(F)});
    down.partition = Affine::var("i0", 1);
    Program rows = program(kX, {loop("i0", 4, {load(down)}),
                                copy(sb(f32, 512, P, {row(F)}), sb(f32, 0, P, {row(F)}))});
    CHECK(first_reads_of(rows).sbuf == Ranges{{0, 64}});
    // Nested loops: rows of 16 bytes in i1, 64 a row in i0, cover the panel after both.
    AccessPattern quarter = sb(f32, 0, P, {row(F / 4)});
    quarter.offset = Affine::var("i0", 64) + Affine::var("i1", 16);
    Program nested = program(kX, {loop("i0", 4, {loop("i1", 4, {load(quarter)})}),
                                  copy(sb(f32, 1024, P, {row(4 * F)}), all)});
    CHECK(first_reads_of(nested).sbuf.empty());
  }
  SUBCASE("a read that moves with its loop is covered by a write spanning all its iterations") {
    // The panel written whole before the loop, a row read an iteration (a matmul's stationary
    // tiles): covered. One iteration more reads past the panel: cleared.
    AccessPattern row_i = sb(f32, 0, P, {row(F)});
    row_i.offset = Affine::var("i0", 64);
    auto reads = [&](int64_t trips) {
      return program(kX, {instr(Opcode::memset, sb(f32, 0, P, {row(4 * F)}), {}),
                          loop("i0", trips, {copy(sb(f32, 1024, P, {row(F)}), row_i)})});
    };
    CHECK(first_reads_of(reads(4)).sbuf.empty());
    CHECK(first_reads_of(reads(5)).sbuf == Ranges{{0, 320}});
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

TEST_CASE("first_reads: a write more than 512 writes back covers nothing; the result is the same") {
  // t is loaded, 600 other tiles are written, then t is stored: the walk looks back at the
  // newest 512 writes only, so t counts as read first and is cleared at the program's start,
  // before the load overwrites it.
  std::vector<ProgNode> body = {load(sb(f32, 0, P, {row(F)}))};
  for (int k = 1; k <= 600; ++k)
    body.push_back(instr(Opcode::memset, sb(f32, 64 * k, P, {row(F)}), {}));
  body.push_back(dma(hbm2(1, f32, P, F, F), sb(f32, 0, P, {row(F)})));
  Program p = program({decl("x", {P, F}, f32, kIn), decl("out", {P, F}, f32, kOut)},
                      std::move(body));
  CHECK(first_reads_of(p).sbuf == Ranges{{0, 64}});
  Tensor x = Tensor::empty({P, F}, f32);
  for (int i = 0; i < P * F; ++i) x.set(i, float(i + 1));
  BothResults r = run_both(p, {x, Tensor::empty({P, F}, f32)});
  for (int i = 0; i < P * F; ++i) CHECK(r.native[0].get(i) == float(i + 1));
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

TEST_CASE("a tile loaded a column block an iteration is not cleared; gaps between blocks are") {
  // Each program loads t's column blocks in a loop (all of them, or every other one), stores
  // its first 12 columns (up to the end of the last block), then loads the rest: natively on
  // one thread the store must see the simulator's zeros in the gap, which the previous program
  // filled.
  auto run = [](const std::string& loop_body, const std::string& after) {
    const std::string text =
        "kernel blocks(x: float32[4, 16] shared_hbm) -> (out: float32[12, 12] shared_hbm) {\n"
        "  alloc t: float32[4, 16] sbuf\n  for i0 in affine_range(2) {\n    " +
        loop_body + "\n  }\n  dma_copy(dst=out[pid0*4:+4, 0:+12], src=t[0:+4, 0:+12])\n  " + after +
        "\n}";
    Tensor x = Tensor::empty({P, F}, f32);
    for (int i = 0; i < P * F; ++i) x.set(i, float(i + 1));
    NativeOptions one;
    one.threads = 1;
    Compiled c = compile(parse_kernel(text));
    return std::make_pair(first_reads_of(c.program), run_both(c, {x}, {3}, one).native[0]);
  };
  auto [whole, all] = run("dma_copy(dst=t[0:+4, i0*8:+8], src=x[0:+4, i0*8:+8])",
                          "dma_copy(dst=t[0:+4, 0:+4], src=x[0:+4, 0:+4])");
  CHECK(whole.sbuf.empty());
  for (int64_t row = 0; row < 3 * P; ++row)
    for (int64_t c = 0; c < 12; ++c) CHECK(all.get(row * 12 + c) == float((row % P) * F + c + 1));
  auto [gappy, halves] = run("dma_copy(dst=t[0:+4, i0*8:+4], src=x[0:+4, i0*8:+4])",
                             "dma_copy(dst=t[0:+4, 4:+4], src=x[0:+4, 4:+4])");
  CHECK(gappy.sbuf == Ranges{{0, 48}});
  for (int64_t row = 0; row < 3 * P; ++row)
    for (int64_t c = 0; c < 12; ++c)
      CHECK(halves.get(row * 12 + c) == (c % 8 < 4 ? float((row % P) * F + c + 1) : 0.0f));
}

namespace {
// outputs_to_zero of a kernel written in the IR's text form, for its output `out` (tensor 1).
bool out_needs_zero(const std::string& text, const std::vector<int64_t>& grid) {
  Compiled c = compile(parse_kernel(text));
  const std::vector<bool> z = native::outputs_to_zero(c.program, grid);
  for (size_t t = 0; t < c.program.tensors.size(); ++t)
    if (c.program.tensors[t].name == "out") return z[t];
  FAIL("no output named out");
  return true;
}

// Each program stores rows [4 pid0, 4 pid0 + 4) of out [12, 16].
const std::string kRows = R"(kernel rows(x: float32[4, 16] shared_hbm) -> (out: float32[12, 16] shared_hbm) {
  alloc t: float32[4, 16] sbuf
  dma_copy(dst=t[0:+4, 0:+16], src=x[0:+4, 0:+16])
  dma_copy(dst=out[pid0*4:+4, 0:+16], src=t[0:+4, 0:+16])
})";
}  // namespace

TEST_CASE("outputs_to_zero: an output every element of which the programs overwrite is not zeroed") {
  CHECK_FALSE(out_needs_zero(kRows, {3}));
  CHECK(out_needs_zero(kRows, {2}));  // rows 8..11 are never written
  // The same rows through a loop of column halves, and through two strided writes.
  CHECK_FALSE(out_needs_zero(R"(kernel halves(x: float32[4, 16] shared_hbm) -> (out: float32[4, 16] shared_hbm) {
  alloc t: float32[4, 16] sbuf
  dma_copy(dst=t[0:+4, 0:+16], src=x[0:+4, 0:+16])
  for i0 in affine_range(2) {
    dma_copy(dst=out[0:+4, i0*8:+8], src=t[0:+4, i0*8:+8])
  }
})", {1}));
  CHECK_FALSE(out_needs_zero(R"(kernel evens(x: float32[4, 16] shared_hbm) -> (out: float32[4, 16] shared_hbm) {
  alloc t: float32[4, 16] sbuf
  dma_copy(dst=t[0:+4, 0:+16], src=x[0:+4, 0:+16])
  dma_copy(dst=out[0:+4, 0:+8:2], src=t[0:+4, 0:+8])
  dma_copy(dst=out[0:+4, 1:+8:2], src=t[0:+4, 8:+8])
})", {1}));
}

TEST_CASE("outputs_to_zero: partial, read, skipped or dynamic writes keep the zeros") {
  SUBCASE("half the columns") {
    CHECK(out_needs_zero(R"(kernel half(x: float32[4, 16] shared_hbm) -> (out: float32[4, 16] shared_hbm) {
  alloc t: float32[4, 16] sbuf
  dma_copy(dst=t[0:+4, 0:+16], src=x[0:+4, 0:+16])
  dma_copy(dst=out[0:+4, 0:+8], src=t[0:+4, 0:+8])
})", {1}));
  }
  SUBCASE("the kernel reads its output") {
    CHECK(out_needs_zero(R"(kernel reread(x: float32[4, 16] shared_hbm) -> (out: float32[4, 16] shared_hbm) {
  alloc t: float32[4, 16] sbuf
  dma_copy(dst=t[0:+4, 0:+16], src=out[0:+4, 0:+16])
  dma_copy(dst=out[0:+4, 0:+16], src=t[0:+4, 0:+16])
})", {1}));
  }
  SUBCASE("a read back of what an earlier node wrote, in a later node of one program") {
    // Each program writes its rows whole, then reads them back and rewrites them (a softmax's
    // second pass): nothing to zero. Reading a column not yet written, reading another
    // program's rows, or reading inside the node that writes keeps the zeros.
    auto kernel = [](const std::string& read, const std::string& write_first) {
      return R"(kernel back(x: float32[8, 16] shared_hbm) -> (out: float32[8, 16] shared_hbm) {
  alloc t: float32[4, 16] sbuf
  alloc u: float32[4, 16] sbuf
  dma_copy(dst=t[0:+4, 0:+16], src=x[pid0*4:+4, 0:+16])
  )" + write_first +
             R"(
  for i0 in affine_range(2) {
    dma_copy(dst=u[0:+4, 0:+8], src=)" +
             read + R"()
    dma_copy(dst=out[pid0*4:+4, i0*8:+8], src=u[0:+4, 0:+8])
  }
})";
    };
    const std::string whole = "dma_copy(dst=out[pid0*4:+4, 0:+16], src=t[0:+4, 0:+16])";
    const std::string halves =
        "for i1 in affine_range(2) {\n    dma_copy(dst=out[pid0*4:+4, i1*8:+8], "
        "src=t[0:+4, i1*8:+8])\n  }";
    CHECK_FALSE(out_needs_zero(kernel("out[pid0*4:+4, i0*8:+8]", whole), {2}));
    CHECK_FALSE(out_needs_zero(kernel("out[pid0*4:+4, i0*8:+8]", halves), {2}));
    CHECK(out_needs_zero(kernel("out[pid0*4:+4, i0*8:+8]",
                                "dma_copy(dst=out[pid0*4:+4, 1:+15], src=t[0:+4, 1:+15])"),
                         {2}));  // column 0 is read before it is written
    CHECK(out_needs_zero(
        kernel("out[pid0*4:+4, i0*8:+8]", "dma_copy(dst=out[pid0*4:+4, 0:+8], src=t[0:+4, 0:+8])"),
        {2}));  // the second half is read before it is written
    CHECK(out_needs_zero(kernel("out[4-pid0*4:+4, i0*8:+8]", whole), {2}));  // the other's rows
    CHECK(out_needs_zero(kernel("out[pid0*4:+4, i0*8:+8]", ""), {2}));  // read within its writer
  }
  SUBCASE("the only write is in a loop that may not run") {
    CHECK(out_needs_zero(R"(kernel dyn(x: float32[4, 16] shared_hbm, n: int32[1, 1] shared_hbm) -> (out: float32[4, 16] shared_hbm) {
  alloc t: float32[4, 16] sbuf
  dma_copy(dst=t[0:+4, 0:+16], src=x[0:+4, 0:+16])
  register_load(reg="r0", src=n[0:+1, 0:+1])
  for i0 in dynamic_range(0, r0, 1) {
    dma_copy(dst=out[0:+4, 0:+16], src=t[0:+4, 0:+16])
  }
})", {1}));
  }
}

TEST_CASE("an output not provably overwritten still reads zeros where nothing wrote") {
  Tensor x = Tensor::empty({P, F}, f32);
  for (int i = 0; i < P * F; ++i) x.set(i, float(i + 1));
  // Dirty the allocator's free memory first, so an unzeroed output would likely show it.
  for (int k = 0; k < 8; ++k) {
    Tensor junk = Tensor::uninitialized({12, 16}, f32);
    for (int i = 0; i < 12 * 16; ++i) junk.set(i, -7.0f);
  }
  BothResults r = run_both(compile(parse_kernel(kRows)), {x}, {2});
  for (int64_t row = 0; row < 12; ++row)
    for (int64_t c = 0; c < F; ++c)
      CHECK(r.native[0].get(row * F + c) == (row < 8 ? float((row % P) * F + c + 1) : 0.0f));
}

// The native pitch between partitions (plan.hpp physical_pitch): always an odd number of cache
// lines, so the rows of a tile spread over the L1 sets instead of all falling on the same ones.
TEST_CASE("physical_pitch: an odd number of cache lines, also where the whole partition is used") {
  const Target& t = target_by_name("trn2");
  auto pitch_of = [&](const Program& p) {
    return native::physical_pitch(p, native::analyze_bounds(p), t);
  };
  // Static accesses: the bytes touched (two 64-byte rows) rounded up to an odd line count.
  Program fixed = program(kX, {load(sb(f32, 0, P, {row(F)})),
                               copy(sb(f32, 64, P, {row(F)}), sb(f32, 0, P, {row(F)}))});
  CHECK(pitch_of(fixed).sbuf == 3 * 64);
  // An offset that depends on the program id: the whole partition, rounded up to an odd line
  // count; PSUM's 16 KiB (256 lines, a multiple of 4 KiB) gets one more line.
  for (Memory m : {Memory::sbuf, Memory::psum}) {
    AccessPattern moving = m == Memory::sbuf ? sb(f32, 0, P, {row(F)}) : ps(f32, 0, P, {row(F)});
    moving.offset = Affine::var("pid0", 64);
    Program by_pid = program(kX, {load(moving)});
    const int64_t full = native::bytes_per_partition(t, m);
    const native::Pitch pitch = pitch_of(by_pid);
    const int64_t got = m == Memory::sbuf ? pitch.sbuf : pitch.psum;
    CAPTURE(full);
    CHECK(got >= full);
    CHECK(got < full + 128);
    CHECK(got % 64 == 0);
    CHECK((got / 64) % 2 == 1);
    if (m == Memory::psum) CHECK(got == 16384 + 64);
  }
}

TEST_CASE("a read placed by a register stays in its tile: only the tile is cleared, the pitch fits") {
  // A [4, 16] tile at bytes 256..319 read at a register's column, before anything writes it.
  AccessPattern col = sb(f32, 256, P, {row(1)});
  col.offset = Affine(256) + Affine::var("r0", 4);
  std::vector<ProgNode> body{
      instr(Opcode::register_load, AccessPattern{}, {sb(DType::int32, 0, 1, {row(1)})}),
      copy(sb(f32, 0, P, {row(1)}), col)};
  body[0].instr.args.reg = "r0";
  Program unknown = program(kX, body);
  const Target& t = target_by_name("trn2");
  // Without its allocation (a hand-built program) the read may land anywhere.
  CHECK(first_reads_of(unknown).sbuf ==
        Ranges{{0, native::bytes_per_partition(t, Memory::sbuf)}});
  body[1].instr.src[0].alloc = {P, 256, 320};
  Program known = program(kX, body);
  CHECK(first_reads_of(known).sbuf == Ranges{{0, 4}, {256, 320}});
  CHECK(native::physical_pitch(known, native::analyze_bounds(known), t).sbuf == 5 * 64);
  // And it is kept there: a register value moving the read past the tile is an error in both
  // executors, though the bytes are inside the partition.
  for (int32_t r : {15, 16}) {
    CAPTURE(r);
    Program p = program({decl("r", {1, 1}, DType::int32, kIn), decl("out", {P, 1}, f32, kOut)},
                        {dma(sb(DType::int32, 0, 1, {row(1)}), hbm2(0, DType::int32, 1, 1, 1)),
                         known.body[0], known.body[1],
                         dma(hbm2(1, f32, P, 1, 1), sb(f32, 0, P, {row(1)}))});
    std::vector<Tensor> in{Tensor::from_floats({float(r)}, {1, 1}, DType::int32),
                          Tensor::empty({P, 1}, f32)};
    if (r == 15) {
      run_both(p, in);
    } else {
      CHECK_THROWS_WITH_AS(simulate(p, in), doctest::Contains("outside its tile"), UserError);
      CHECK_THROWS_WITH_AS(compile_native(p).run(in, {1}), doctest::Contains("outside its tile"),
                           UserError);
    }
  }
}
