// Run-local SBUF ranges (plan.hpp run_local_ranges): the temporaries a partition-blocked run
// writes in full, reads back and never shares with another instruction, which the native
// backend keeps in a buffer of one block's rows. A range is run-local only when no block or
// instruction outside the run could see a difference.
#include <doctest/doctest.h>

#include <cmath>

#include "exec/differential.hpp"
#include "exec/sim_test_util.hpp"
#include "neuron/codegen/plan.hpp"

using namespace neuron;
using namespace neuron::sim_test;
using namespace neuron::testing;

namespace {
constexpr DType f32 = DType::float32;
constexpr int64_t P = 4, F = 16;  // [4, 16] fp32 tiles: 64 bytes a partition
using Ranges = std::vector<std::tuple<int64_t, int64_t, int64_t>>;

// Lowered programs number their instructions; hand-built ones are numbered here.
void number(std::vector<ProgNode>& body, int& next) {
  for (ProgNode& n : body) {
    if (n.kind == ProgNode::Kind::loop) number(n.body, next);
    else n.instr.id = next++;
  }
}
Program numbered(Program p) {
  int next = 0;
  number(p.body, next);
  return p;
}
// The run-local ranges of the run body[i, j) of the program's top level.
Ranges ranges_of(const Program& p, size_t i, size_t j) {
  Ranges out;
  for (const native::RunLocal& r : native::run_local_ranges(p, p.body, i, j))
    out.emplace_back(r.partition, r.lo, r.hi);
  return out;
}
AccessPattern tile(int64_t off, std::vector<Dim> free = {row(F)}) {
  return sb(f32, off, P, std::move(free));
}
ProgNode load(AccessPattern dst) {
  return dma(std::move(dst), hbm2(0, f32, P, F, F));
}
ProgNode scale(AccessPattern dst, AccessPattern src) {
  InstrArgs a;
  a.op0 = AluOp::multiply;
  a.imm0 = 2.0;
  return instr(Opcode::tensor_scalar, std::move(dst), {std::move(src)}, a);
}
ProgNode add(AccessPattern dst, AccessPattern a, AccessPattern b) {
  InstrArgs args;
  args.op0 = AluOp::add;
  return instr(Opcode::tensor_tensor, std::move(dst), {std::move(a), std::move(b)}, args);
}
ProgNode store(AccessPattern src) {
  return dma(hbm2(1, f32, P, F, F), std::move(src));
}
const std::vector<TensorDecl> kXY = {decl("x", {P, F}, f32, kIn), decl("y", {P, F}, f32, kOut)};
}  // namespace

TEST_CASE("run_local: temporaries written in full and read back inside the run") {
  // t = load x; u = 2 t; w = u + t; store w
  Program p = numbered(program(
      kXY, {load(tile(0)), scale(tile(64), tile(0)), add(tile(128), tile(64), tile(0)),
            store(tile(128))}));
  CHECK(ranges_of(p, 0, 4) == Ranges{{0, 0, 64}, {0, 64, 128}, {0, 128, 192}});
  // A tile read after the run (the store left out of it) is not run-local.
  CHECK(ranges_of(p, 0, 3) == Ranges{{0, 0, 64}, {0, 64, 128}});
  // Reads of part of a tile (its first half) lie inside its range.
  Program half = numbered(program(kXY, {load(tile(0)), scale(tile(64, {row(F / 2)}), tile(0, {row(F / 2)})),
                                        store(tile(0))}));
  CHECK(ranges_of(half, 0, 3) == Ranges{{0, 0, 64}, {0, 64, 96}});
}

TEST_CASE("run_local: what may hold values from outside the run is left alone") {
  SUBCASE("written by halves, then read whole") {
    Program p = numbered(program(kXY, {instr(Opcode::memset, tile(0, {row(F / 2)}), {}),
                                       instr(Opcode::memset, tile(32, {row(F / 2)}), {}),
                                       scale(tile(64), tile(0)), store(tile(64))}));
    CHECK(ranges_of(p, 0, 4) == Ranges{{0, 64, 128}});
  }
  SUBCASE("updated in place first (it carries a value into the run)") {
    Program p = numbered(program(kXY, {scale(tile(0), tile(0)), store(tile(0))}));
    CHECK(ranges_of(p, 0, 2).empty());
  }
  SUBCASE("the destination of a predicated copy keeps its old values") {
    Program p = numbered(program(
        kXY, {load(tile(0)),
              instr(Opcode::tensor_copy_predicated, tile(64), {tile(0), tile(0)}),
              store(tile(64))}));
    CHECK(ranges_of(p, 0, 3) == Ranges{{0, 0, 64}});
  }
  SUBCASE("every other column written (not dense)") {
    Program p = numbered(program(kXY, {instr(Opcode::memset, tile(0, {{2, F / 2}}), {}),
                                       scale(tile(64, {{2, F / 2}}), tile(0, {{2, F / 2}})),
                                       store(tile(64))}));
    CHECK(ranges_of(p, 0, 3).empty());
  }
  SUBCASE("read by a view straddling two tiles") {
    Program p = numbered(program(
        kXY, {load(tile(0)), load(tile(64)), scale(tile(128), tile(32)), store(tile(128))}));
    CHECK(ranges_of(p, 0, 4) == Ranges{{0, 128, 192}});
  }
  SUBCASE("touched by an instruction outside the run, before or in a loop") {
    Program p = numbered(program(
        kXY, {instr(Opcode::memset, tile(0), {}),
              loop("i0", 2, {load(tile(64))}), load(tile(0)), scale(tile(64), tile(0)),
              store(tile(64))}));
    CHECK(ranges_of(p, 2, 5) == Ranges{});
  }
  SUBCASE("touched from other pages of SBUF, or at an offset known only when it runs") {
    // The run's tiles are at bytes 8192 and 8256; touchers are looked for by 2 KiB pages
    // (plan.hpp SbufPages), which must miss none.
    constexpr int64_t W = 600;  // a [4, 600] fp32 view from byte 6000 ends at 8400
    auto with = [](ProgNode other) {
      return numbered(program(kXY, {load(tile(8192)), scale(tile(8256), tile(8192)),
                                    store(tile(8256)), std::move(other)}));
    };
    const Ranges both{{0, 8192, 8256}, {0, 8256, 8320}};
    CHECK(ranges_of(with(scale(sb(f32, 16384, P, {row(W)}), sb(f32, 0, P, {row(W)}))), 0, 3) ==
          both);
    CHECK(ranges_of(with(scale(sb(f32, 16384, P, {row(W)}), sb(f32, 6000, P, {row(W)}))), 0, 3)
              .empty());
    AccessPattern moving = tile(0);  // at 64 * i0: byte 8192 when i0 = 128
    moving.offset = Affine::var("i0", 64);
    CHECK(ranges_of(with(loop("i0", 200, {scale(tile(0), moving)})), 0, 3).empty());
  }
  SUBCASE("a tile allocated in a loop (rotating slots) but not one carried across iterations") {
    // acc = 0.5; for i0: t = x (slot i0 % 2), u = 2 t (slot i0 % 2), acc += u; store acc
    AccessPattern t = tile(64), u = tile(192);
    t.rotation = u.rotation = Rotation{"i0", 2, 64};
    Program p = numbered(program(kXY, {instr(Opcode::memset, tile(0), {}),
                                       loop("i0", 4, {load(t), scale(u, t),
                                                      add(tile(0), tile(0), u)}),
                                       store(tile(0))}));
    Ranges got;
    for (const native::RunLocal& r : native::run_local_ranges(p, p.body[1].body, 0, 3))
      got.emplace_back(r.partition, r.lo, r.hi);
    CHECK(got == Ranges{{0, 64, 128}, {0, 192, 256}});
    // A read of the other slot (last iteration's t) is not the same slot.
    AccessPattern previous = t;
    previous.rotation.var = "i1";
    p.body[1].body.insert(p.body[1].body.begin() + 2, scale(tile(320), previous));
    p = numbered(p);
    CHECK(native::run_local_ranges(p, p.body[1].body, 0, 4).size() == 2);  // u and the new one
  }
  SUBCASE("instructions that share an id cannot be told apart") {
    Program p = program(kXY, {load(tile(0)), scale(tile(64), tile(0)), store(tile(64))});
    CHECK(ranges_of(p, 0, 3).empty());
  }
}

// `ap` as an access of buffer `id` owning bytes [lo, lo + 64) of partitions [0, P) (what lower
// records in AccessPattern::alloc; hand-built views leave it unknown).
AccessPattern of(int id, AccessPattern ap, int64_t lo) {
  ap.alloc = {P, lo, lo + F * 4, id};
  return ap;
}

TEST_CASE("run_local: another buffer on the same bytes outside the run") {
  // The run: t = x, u = 2 t, store u (buffers 0 and 1 at bytes 0 and 64). After it, buffer 2
  // reuses bytes 0..63 (the allocator's choice once t is dead): v = x, w = 2 v (buffer 3 at
  // 128), store w.
  auto t = of(0, tile(0), 0), u = of(1, tile(64), 64), v = of(2, tile(0), 0),
       w = of(3, tile(128), 128);
  auto run = [&] { return std::vector<ProgNode>{load(t), scale(u, t), store(u)}; };
  auto with = [&](std::vector<ProgNode> after) {
    std::vector<ProgNode> body = run();
    for (ProgNode& n : after) body.push_back(std::move(n));
    return numbered(program(kXY, std::move(body)));
  };
  const Ranges both{{0, 0, 64}, {0, 64, 128}};
  SUBCASE("written whole before it is read: it never sees the run's values") {
    CHECK(ranges_of(with({load(v), scale(w, v), store(w)}), 0, 3) == both);
  }
  SUBCASE("read before it is written, it could: left alone") {
    CHECK(ranges_of(with({scale(w, v), load(v), store(w)}), 0, 3) == Ranges{{0, 64, 128}});
    CHECK(ranges_of(with({scale(v, v), store(v)}), 0, 3) == Ranges{{0, 64, 128}});
  }
  SUBCASE("written on some partitions, or in a loop that may not run, first") {
    AccessPattern half = v;
    half.dims[0].size = P / 2;
    CHECK(ranges_of(with({load(half), scale(w, v), store(w)}), 0, 3) == Ranges{{0, 64, 128}});
    CHECK(ranges_of(with({loop("i0", 0, {load(v)}), scale(w, v), store(w)}), 0, 3) ==
          Ranges{{0, 64, 128}});
  }
  SUBCASE("first written whole in a loop that may not run, and touched only inside it") {
    // Each trip writes v before reading it, and a run that skips the loop never touches it
    // (FlexAttention's temporaries in its loop over the listed blocks, which share bytes with
    // the same temporaries of its other loop).
    auto in_loop = [](std::vector<ProgNode> body) {
      ProgNode l = loop("j", 3, std::move(body));
      l.loop_kind = LoopKind::dynamic;
      return l;
    };
    CHECK(ranges_of(with({in_loop({load(v), scale(w, v), store(w)})}), 0, 3) == both);
    // Read again after the loop (it may have run no trip): left alone.
    CHECK(ranges_of(with({in_loop({load(v), scale(w, v)}), store(v)}), 0, 3) ==
          Ranges{{0, 64, 128}});
    // Written in a nested loop that may not run, read in the outer one: left alone.
    CHECK(ranges_of(with({in_loop({in_loop({load(v)}), scale(w, v), store(w)})}), 0, 3) ==
          Ranges{{0, 64, 128}});
  }
  SUBCASE("the same buffer outside the run, or one the run also touches") {
    CHECK(ranges_of(with({scale(w, t), store(w)}), 0, 3) == Ranges{{0, 64, 128}});
    // v is written in the run (after t, on its bytes) and read after it: neither is run-local.
    Program p = numbered(
        program(kXY, {load(t), store(t), load(v), scale(u, v), store(u), scale(w, v), store(w)}));
    CHECK(ranges_of(p, 0, 5) == Ranges{{0, 64, 128}});
  }
  SUBCASE("first written whole as an activation's row sums") {
    // exp(w) with its row sums into a [4, 1] column (buffer 4 on bytes 0..3), then read
    AccessPattern sums = of(4, sb(f32, 0, P, {row(1)}), 0);
    sums.alloc.hi = 4;
    ProgNode act = instr(Opcode::activation, w, {of(5, tile(512), 512)});
    act.instr.has_reduce_res = true;
    act.instr.reduce_res = sums;
    CHECK(ranges_of(with({act, scale(w, sums), store(w)}), 0, 3) == both);
  }
  SUBCASE("a hand-built program's views (buffers unknown) count as before") {
    CHECK(ranges_of(with({load(tile(0)), scale(w, tile(0)), store(w)}), 0, 3) ==
          Ranges{{0, 64, 128}});
  }
}

TEST_CASE("run_local: a view moving with a static loop counts only where the loop takes it") {
  // Before the run, a loop writes 64 bytes at 64 * i0 (a panel's slices); the run's tiles are
  // at bytes 256 and 320.
  auto with = [](int64_t extent, LoopKind kind) {
    AccessPattern moving = tile(0);
    moving.offset = Affine::var("i0", 64);
    ProgNode l = loop("i0", extent, {scale(moving, tile(512))});
    l.loop_kind = kind;
    return numbered(
        program(kXY, {l, load(tile(256)), scale(tile(320), tile(256)), store(tile(320))}));
  };
  CHECK(ranges_of(with(2, LoopKind::affine), 1, 4) == Ranges{{0, 256, 320}, {0, 320, 384}});
  CHECK(ranges_of(with(5, LoopKind::affine), 1, 4) == Ranges{{0, 320, 384}});  // reaches 256
  CHECK(ranges_of(with(2, LoopKind::dynamic), 1, 4).empty());                  // any trip count
}

TEST_CASE("run_local: a view a register or a dynamic loop places counts only inside its tile") {
  // Before the run, a dynamic loop reads 4 bytes at 4 * j (a FlexAttention block's first key,
  // kcol[:, j]) of a tile at bytes `at`; the run's tiles are at bytes 256 and 320. The code
  // checks such a view against its tile when it runs (docs/native.md "Bounds").
  auto with = [](int64_t at, bool known) {
    AccessPattern moving = sb(f32, at, P, {row(1)});
    moving.offset = Affine::var("j", 4) + Affine(at);
    if (known) moving.alloc = {P, at, at + 64, 7};
    ProgNode l = loop("j", 16, {scale(sb(f32, 512, P, {row(1)}), moving)});
    l.loop_kind = LoopKind::dynamic;
    return numbered(
        program(kXY, {l, load(tile(256)), scale(tile(320), tile(256)), store(tile(320))}));
  };
  CHECK(ranges_of(with(640, true), 1, 4) == Ranges{{0, 256, 320}, {0, 320, 384}});
  CHECK(ranges_of(with(256, true), 1, 4) == Ranges{{0, 320, 384}});  // its tile is t's bytes
  CHECK(ranges_of(with(640, false), 1, 4).empty());                  // no tile known: anywhere
}

TEST_CASE("run_local: a blocked run with run-local tiles gives the simulator's bits") {
  // [128, 1024] fp32 tiles (512 KiB) are blocked: t = x, e = exp(t) with row sums s,
  // out = e * (1 / s) + t. Every tile but s's reciprocal is run-local, and the load of t is
  // forwarded (its readers read x): with x in fp32, and in bf16 widened to fp32.
  for (const DType xdt : {DType::float32, DType::bfloat16}) {
    CAPTURE(dtype_name(xdt));
    constexpr int64_t R = 128, C = 1024, T = C * 4;
    auto x = random_values(R * C, 21);
    if (xdt == DType::bfloat16)
      for (float& v : x) v = Tensor::from_floats({v}, {1}, xdt).get(0);
    InstrArgs ex;
    ex.func = ActFunc::exp;
    ex.reduce_op = AluOp::add;
    ProgNode e = instr(Opcode::activation, sb(f32, T, R, {row(C)}), {sb(f32, 0, R, {row(C)})}, ex);
    e.instr.has_reduce_res = true;
    e.instr.reduce_res = sb(f32, 3 * T, R, {row(1)});
    InstrArgs rc;
    rc.func = ActFunc::reciprocal;
    InstrArgs mul;
    mul.op0 = AluOp::multiply;
    mul.operand0_tile = true;
    Program p = numbered(program(
        {decl("x", {R, C}, xdt, kIn), decl("out", {R, C}, f32, kOut)},
        {dma(sb(f32, 0, R, {row(C)}), hbm2(0, xdt, R, C, C)), e,
         instr(Opcode::activation, sb(f32, 3 * T + 64, R, {row(1)}), {sb(f32, 3 * T, R, {row(1)})},
               rc),
         instr(Opcode::tensor_scalar, sb(f32, 2 * T, R, {row(C)}),
               {sb(f32, T, R, {row(C)}), sb(f32, 3 * T + 64, R, {row(1)})}, mul),
         add(sb(f32, 2 * T, R, {row(C)}), sb(f32, 2 * T, R, {row(C)}), sb(f32, 0, R, {row(C)})),
         dma(hbm2(1, f32, R, C, C), sb(f32, 2 * T, R, {row(C)}))}));
    CHECK(ranges_of(p, 0, 6).size() == 5);
    std::vector<native::RunLocal> ranges = native::run_local_ranges(p, p.body, 0, 6);
    CHECK(native::forward_loads(p.body, 0, 6, ranges, [](const Affine&) { return false; })
              .rows == std::vector<AccessPattern>{hbm2(0, xdt, R, C, C)});
    auto r = run_both(p, {Tensor::from_floats(x, {R, C}, xdt), Tensor::empty({R, C}, f32)});
    std::vector<double> ref(R * C);
    for (int64_t q = 0; q < R; ++q) {
      double s = 0;
      for (int64_t c = 0; c < C; ++c) s += std::exp(double(x[q * C + c]));
      for (int64_t c = 0; c < C; ++c)
        ref[q * C + c] = std::exp(double(x[q * C + c])) / s + x[q * C + c];
    }
    check_reference(r, 0, ref, Tolerance{1e-5, 1e-6});
  }
}

// ---- forwarded loads (plan.hpp forward_loads) -------------------------------------------------

namespace {
bool never_dynamic(const Affine&) {
  return false;
}
// forward_loads over the whole top level: the elided instructions' indices, and the run.
native::ForwardedRun forwarded(const Program& p, std::vector<size_t>* dropped = nullptr,
                               const std::function<bool(const Affine&)>& dynamic = never_dynamic) {
  std::vector<native::RunLocal> ranges = native::run_local_ranges(p, p.body, 0, p.body.size());
  native::ForwardedRun run = native::forward_loads(p.body, 0, p.body.size(), ranges, dynamic);
  if (dropped)
    for (size_t k = 0; k < run.dropped.size(); ++k)
      if (run.dropped[k]) dropped->push_back(k);
  return run;
}
}  // namespace

TEST_CASE("forward_loads: a loaded tile's readers read its HBM rows") {
  // t = load x; u = 2 t; w = u + t; store w
  Program p = numbered(program(
      kXY, {load(tile(0)), scale(tile(64), tile(0)), add(tile(128), tile(64), tile(0)),
            store(tile(128))}));
  std::vector<size_t> dropped;
  native::ForwardedRun run = forwarded(p, &dropped);
  CHECK(dropped == std::vector<size_t>{0});
  const AccessPattern x_rows = hbm2(0, f32, P, F, F);
  CHECK(run.instrs[1].src[0] == x_rows);
  CHECK(run.instrs[2].src[1] == x_rows);
  CHECK(run.instrs[2].src[0] == tile(64));  // the other tiles stay
  // A read of the second half of t's rows reads the second half of x's rows.
  Program half = numbered(program(
      kXY, {load(tile(0)), scale(tile(64, {row(F / 2)}), tile(32, {row(F / 2)})),
            store(tile(64, {row(F / 2)}))}));
  CHECK(forwarded(half).instrs[1].src[0] == hbm(0, f32, F / 2, {{F, P}, {1, F / 2}}));
  // bf16 rows widened into an fp32 tile: the readers read bf16.
  Program narrow = numbered(program(
      {decl("x", {P, F}, DType::bfloat16, kIn), decl("y", {P, F}, f32, kOut)},
      {dma(tile(0), hbm2(0, DType::bfloat16, P, F, F)), scale(tile(64), tile(0)),
       store(tile(64))}));
  CHECK(forwarded(narrow).instrs[1].src[0] == hbm2(0, DType::bfloat16, P, F, F));
  // An output's rows read back and rewritten in place after their last read (a softmax's
  // second pass): each block's rows are read before they are written, so the readers read
  // them and the load goes; the rewritten view is the very view the readers now read.
  const AccessPattern y_rows = hbm2(1, f32, P, F, F);
  Program inplace = numbered(
      program(kXY, {dma(tile(0), y_rows), scale(tile(64), tile(0)), dma(y_rows, tile(64))}));
  dropped.clear();
  native::ForwardedRun rewrite = forwarded(inplace, &dropped);
  CHECK(dropped == std::vector<size_t>{0});
  CHECK(rewrite.instrs[1].src[0] == y_rows);
  CHECK(rewrite.instrs[1].src[0] == rewrite.instrs[2].dst);
}

TEST_CASE("forward_loads: loads whose tile is more than a copy of the rows stay") {
  auto refused = [](const Program& p) {
    std::vector<size_t> dropped;
    forwarded(p, &dropped);
    return dropped.empty();
  };
  SUBCASE("the tile is written again after the load") {
    CHECK(refused(numbered(program(
        kXY, {load(tile(0)), add(tile(0, {row(F / 2)}), tile(0, {row(F / 2)}),
                                 tile(32, {row(F / 2)})),
              scale(tile(64), tile(0)), store(tile(64))}))));
  }
  SUBCASE("the run writes the rows the tile copies") {
    CHECK(refused(numbered(program(
        kXY, {load(tile(0)), scale(tile(64), tile(0)), dma(hbm2(0, f32, P, F, F), tile(64)),
              store(tile(0))}))));
  }
  SUBCASE("the rows rewritten in place while the tile is still read, or through another view") {
    const AccessPattern y_rows = hbm2(1, f32, P, F, F);
    CHECK(refused(numbered(program(kXY, {dma(tile(0), y_rows), scale(tile(64), tile(0)),
                                         dma(y_rows, tile(64)), scale(tile(128), tile(0))}))));
    CHECK(refused(numbered(
        program(kXY, {dma(tile(0), y_rows), scale(tile(64), tile(0)),
                      dma(hbm(1, f32, 0, {{F, P}, {1, F / 2}}), tile(64, {row(F / 2)}))}))));
  }
  SUBCASE("the rows are not laid out like the tile (every other element)") {
    Program p = numbered(program(
        {decl("x", {P, 2 * F}, f32, kIn), decl("y", {P, F}, f32, kOut)},
        {dma(tile(0), hbm(0, f32, 0, {{2 * F, P}, {2, F}})), scale(tile(64), tile(0)),
         store(tile(64))}));
    CHECK(refused(p));
  }
  SUBCASE("an out-of-bounds-skipping load, or rows at a runtime offset") {
    Program p = numbered(program(
        kXY, {load(tile(0)), scale(tile(64), tile(0)), store(tile(64))}));
    CHECK_FALSE(refused(p));
    Program skip = p;
    skip.body[0].instr.args.oob_skip = true;
    CHECK(refused(skip));
    std::vector<size_t> dropped;
    forwarded(p, &dropped, [](const Affine&) { return true; });
    CHECK(dropped.empty());
  }
  SUBCASE("widened rows copied back into their own dtype (a NaN's payload would survive)") {
    const DType bf = DType::bfloat16;
    Program p = numbered(program(
        {decl("x", {P, F}, bf, kIn), decl("y", {P, F}, bf, kOut)},
        {dma(tile(0), hbm2(0, bf, P, F, F)), scale(tile(64), tile(0)),
         dma(hbm2(1, bf, P, F, F), tile(0))}));
    CHECK(refused(p));
  }
  SUBCASE("widened rows read by an instruction that does not take values (a predicate)") {
    const DType bf = DType::bfloat16;
    Program p = numbered(program(
        {decl("x", {P, F}, bf, kIn), decl("y", {P, F}, f32, kOut)},
        {dma(tile(0), hbm2(0, bf, P, F, F)), instr(Opcode::memset, tile(64), {}),
         instr(Opcode::tensor_copy_predicated, tile(64), {tile(0), tile(0)}), store(tile(64))}));
    CHECK(refused(p));
  }
}

// ---- broadcast rows (plan.hpp broadcast_rows) ------------------------------------------------

namespace {
using Rows = std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t>>;
Rows rows_of(const Program& p) {
  Rows out;
  for (const native::BroadcastRows& r : native::broadcast_rows(p))
    out.emplace_back(r.partition, r.count, r.lo, r.hi);
  return out;
}
// x's row 0 repeated on every partition (a DMA source with partition step 0).
ProgNode broadcast_load(AccessPattern dst) {
  return dma(std::move(dst), hbm(0, f32, 0, {{0, P}, {1, F}}));
}
ProgNode transpose(AccessPattern dst, AccessPattern src) {
  return instr(Opcode::nc_transpose, std::move(dst), {std::move(src)});
}
}  // namespace

TEST_CASE("broadcast_rows: tiles only partition broadcasts fill, read element-wise") {
  // w = x[0] on every partition; c = 0.5 everywhere; t = x; y = t * w + c
  Program p = program(kXY, {broadcast_load(tile(0)), instr(Opcode::memset, tile(64), {}),
                            load(tile(128)), scale(tile(192), tile(0)),
                            add(tile(192), tile(192), tile(64)), add(tile(192), tile(192), tile(128)),
                            store(tile(192))});
  CHECK(rows_of(p) == Rows{{0, P, 0, 64}, {0, P, 64, 128}});
  // Refilled by the same broadcast in a loop: still one row at all times.
  Program again = program(kXY, {loop("i0", 3, {broadcast_load(tile(0)), scale(tile(64), tile(0))}),
                                store(tile(64))});
  CHECK(rows_of(again) == Rows{{0, P, 0, 64}});
}

TEST_CASE("broadcast_rows: rows that may differ, or readers that need rows apart, are left alone") {
  SUBCASE("overwritten by an ordinary write") {
    Program p = program(kXY, {broadcast_load(tile(0)), scale(tile(64), tile(0)),
                              load(tile(0)), store(tile(0))});
    CHECK(rows_of(p).empty());
  }
  SUBCASE("half its partitions overwritten") {
    Program p = program(kXY, {broadcast_load(tile(0)), scale(sb(f32, 0, P / 2, {row(F)}),
                                                             sb(f32, 64, P / 2, {row(F)})),
                              store(tile(0))});
    CHECK(rows_of(p).empty());
  }
  SUBCASE("read by a transpose") {
    Program p = program(kXY, {broadcast_load(tile(0)), transpose(sb(f32, 64, F, {row(P)}), tile(0)),
                              store(tile(0))});
    CHECK(rows_of(p).empty());
  }
  SUBCASE("a broadcast of half the columns, read whole") {
    Program p = program(kXY, {dma(tile(0, {row(F / 2)}), hbm(0, f32, 0, {{0, P}, {1, F / 2}})),
                              scale(tile(64), tile(0)), store(tile(64))});
    CHECK(rows_of(p).empty());
  }
  SUBCASE("read through rotating slots (a tile allocated in a loop reads past the range)") {
    AccessPattern slot = tile(0);
    slot.rotation = Rotation{"i0", 2, 64};
    Program p = program(kXY, {broadcast_load(tile(0)),
                              loop("i0", 2, {scale(tile(128), slot), store(tile(128))})});
    CHECK(rows_of(p).empty());
  }
  SUBCASE("a single partition (nothing to share)") {
    Program p = program(kXY, {dma(sb(f32, 0, 1, {row(F)}), hbm(0, f32, 0, {{0, 1}, {1, F}})),
                              store(tile(0))});
    CHECK(rows_of(p).empty());
  }
}

TEST_CASE("broadcast_rows: accesses reaching the range from other pages of SBUF count") {
  // The broadcast tile is at bytes [8192, 8256); candidates are checked against the accesses
  // whose bytes may reach them (an index by 2 KiB pages), which must miss none.
  constexpr int64_t W = 600;  // a [4, 600] fp32 write from byte 6000 ends at 8400
  auto wide = [](int64_t off) { return sb(f32, off, P, {row(W)}); };
  auto with = [&](ProgNode other) {
    return program(kXY, {broadcast_load(tile(8192)), std::move(other),
                         scale(tile(64), tile(8192)), store(tile(64))});
  };
  CHECK(rows_of(with(scale(wide(16384), wide(0)))) == Rows{{0, P, 8192, 8256}});
  CHECK(rows_of(with(scale(wide(6000), wide(16384)))).empty());  // pages 2-4
  AccessPattern moving = tile(0);  // at 64 * i0: byte 8192 when i0 = 128
  moving.offset = Affine::var("i0", 64);
  CHECK(rows_of(with(loop("i0", 200, {scale(moving, tile(0))}))).empty());
  // A read at an offset not known before the run may be anywhere: it vetoes the range too.
  moving.offset = Affine(16384) + Affine::var("i0", 64);
  CHECK(rows_of(with(loop("i0", 2, {scale(tile(0), moving)}))).empty());
}

TEST_CASE("broadcast_rows: a norm-like kernel gives the simulator's bits with one weight row") {
  // out = x * w (w = x's first row broadcast) + 0.5, [128, 1024] fp32, blocked runs.
  constexpr int64_t R = 128, C = 1024, T = C * 4;
  auto x = random_values(R * C, 22);
  InstrArgs mul;
  mul.op0 = AluOp::multiply;
  InstrArgs half;
  half.imm0 = 0.5;
  Program p = numbered(program(
      {decl("x", {R, C}, f32, kIn), decl("out", {R, C}, f32, kOut)},
      {dma(sb(f32, 0, R, {row(C)}), hbm(0, f32, 0, {{0, R}, {1, C}})),
       instr(Opcode::memset, sb(f32, T, R, {row(C)}), {}, half),
       dma(sb(f32, 2 * T, R, {row(C)}), hbm2(0, f32, R, C, C)),
       instr(Opcode::tensor_tensor, sb(f32, 3 * T, R, {row(C)}),
             {sb(f32, 2 * T, R, {row(C)}), sb(f32, 0, R, {row(C)})}, mul),
       add(sb(f32, 3 * T, R, {row(C)}), sb(f32, 3 * T, R, {row(C)}), sb(f32, T, R, {row(C)})),
       dma(hbm2(1, f32, R, C, C), sb(f32, 3 * T, R, {row(C)}))}));
  CHECK(rows_of(p).size() == 2);
  auto r = run_both(p, {Tensor::from_floats(x, {R, C}, f32), Tensor::empty({R, C}, f32)});
  std::vector<double> ref(R * C);
  for (int64_t q = 0; q < R; ++q)
    for (int64_t c = 0; c < C; ++c) ref[q * C + c] = double(x[q * C + c]) * x[c] + 0.5;
  check_reference(r, 0, ref, Tolerance{1e-6, 1e-6});
}
