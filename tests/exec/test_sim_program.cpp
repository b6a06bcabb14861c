// Simulator: DMA, rotation, SPMD grids, printing, scratch tensors and user errors on hand-built
// engine programs.
// simulate_both (kernels/differential.hpp) also runs each functional case natively and
// requires bit-identical results, so these are differential tests too.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "exec/differential.hpp"
#include "exec/sim_test_util.hpp"
#include "neuron/base/error.hpp"
#include "neuron/runtime/sim.hpp"

using namespace neuron;
using namespace neuron::sim_test;

// ---- DMA, rotation, grids ---------------------------------------------------------------------

TEST_CASE("dma_copy with strides, dtype conversion and partition broadcast") {
  const int R = 8, C = 16;
  auto x = random_values(R * C, 81);
  const auto f32 = DType::float32, bf = DType::bfloat16;
  Tensor tx = Tensor::from_floats(x, {R, C}, f32);
  Tensor strided = Tensor::empty({R, C / 2}, f32), bcast = Tensor::empty({4, C}, bf),
         hb = Tensor::empty({R, 3}, f32);
  Program p = program(
      {decl("x", {R, C}, f32, kIn), decl("s", {R, C / 2}, f32, kOut), decl("b", {4, C}, bf, kOut),
       decl("h", {R, 3}, f32, kOut)},
      {// every second column of x, reversed (negative stride), into SBUF
       dma(sb(f32, 0, R, {row(C / 2)}), hbm(0, f32, C - 2, {{C, R}, {-2, C / 2}})),
       dma(hbm2(1, f32, R, C / 2, C / 2), sb(f32, 0, R, {row(C / 2)})),
       // row 3 of x to partition 5, then broadcast partition 5 to 4 partitions (step 0), as bf16
       dma(chip(Memory::sbuf, f32, 256, 1, {row(C)}, 5), hbm(0, f32, 3 * C, {{0, 1}, {1, C}})),
       dma(sb(bf, 512, 4, {row(C)}), chip(Memory::sbuf, f32, 256, 4, {row(C)}, 5, 0)),
       dma(hbm2(2, bf, 4, C, C), sb(bf, 512, 4, {row(C)})),
       // HBM to HBM: column 1 broadcast to 3 columns (stride 0 dim)
       dma(hbm2(3, f32, R, 3, 3), hbm(0, f32, 1, {{C, R}, {0, 3}}))});
  neuron::testing::simulate_both(p, {tx, strided, bcast, hb});
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < C / 2; ++j) CHECK(strided.get(r * C / 2 + j) == x[r * C + C - 2 - 2 * j]);
    for (int j = 0; j < 3; ++j) CHECK(hb.get(r * 3 + j) == x[r * C + 1]);
  }
  for (int q = 0; q < 4; ++q)
    for (int j = 0; j < C; ++j) {
      float v = x[3 * C + j];
      CHECK(std::fabs(bcast.get(q * C + j) - v) <= std::ldexp(std::fabs(v), -8));
    }
}

TEST_CASE("rotating slots advance per iteration and wrap") {
  const int P = 4, F = 8, N = 4;
  auto x = random_values(N * P * F, 91);
  const auto f32 = DType::float32;
  Tensor tx = Tensor::from_floats(x, {N * P, F}, f32);
  Tensor out = Tensor::empty({N * P, F}, f32), slots = Tensor::empty({2 * P, F}, f32);
  Affine i = Affine::var("i0");
  AccessPattern buf = sb(f32, 1000, P, {row(F)});
  buf.rotation = {"i0", 2, 64};
  InstrArgs two;
  two.op0 = AluOp::multiply;
  two.imm0 = 2.0;
  AccessPattern res = buf;
  res.offset = 2000;
  Program p = program({decl("x", {N * P, F}, f32, kIn), decl("o", {N * P, F}, f32, kOut),
                       decl("slots", {2 * P, F}, f32, kOut)},
                      {loop("i0", N,
                            {dma(buf, hbm2(0, f32, P, F, F, i * (P * F))),
                             instr(Opcode::tensor_scalar, res, {buf}, two),
                             dma(hbm2(1, f32, P, F, F, i * (P * F)), res)}),
                       // After the loop: slot 0 holds iteration 2's data, slot 1 iteration 3's.
                       dma(hbm2(2, f32, P, F, F), sb(f32, 1000, P, {row(F)})),
                       dma(hbm2(2, f32, P, F, F, P * F), sb(f32, 1064, P, {row(F)}))});
  neuron::testing::simulate_both(p, {tx, out, slots});
  for (int k = 0; k < N * P * F; ++k) CHECK(out.get(k) == 2 * x[k]);
  for (int k = 0; k < P * F; ++k) {
    CHECK(slots.get(k) == x[2 * P * F + k]);
    CHECK(slots.get(P * F + k) == x[3 * P * F + k]);
  }
}

TEST_CASE("SPMD grid: pid-dependent offsets, fresh on-chip memory per program") {
  const int P = 8, F = 4, G = 4;
  auto x = random_values(G * P * F, 101);
  const auto f32 = DType::float32;
  Tensor tx = Tensor::from_floats(x, {G * P, F}, f32);
  Tensor out = Tensor::empty({G * P, F}, f32);
  Affine pid = Affine::var("pid0");
  InstrArgs add;
  add.op0 = AluOp::add;
  const auto X = sb(f32, 0, P, {row(F)}), A = sb(f32, 64, P, {row(F)});
  // A = A + X: A must start at zero in every program for out to equal x.
  Program p = program(
      {decl("x", {G * P, F}, f32, kIn), decl("o", {G * P, F}, f32, kOut)},
      {dma(X, hbm2(0, f32, P, F, F, pid * (P * F))), instr(Opcode::tensor_tensor, A, {A, X}, add),
       dma(hbm2(1, f32, P, F, F, pid * (P * F)), A)});
  neuron::testing::simulate_both(p, {tx, out}, {G});
  for (int k = 0; k < G * P * F; ++k) CHECK(out.get(k) == x[k]);
}

TEST_CASE("2-D grid runs row-major and binds npid") {
  // Every program (a, b) does acc = acc * 10 + v[a * npid1 + b] on one HBM element, so the
  // final value spells the order the programs ran in.
  const auto f32 = DType::float32;
  Tensor v = Tensor::from_floats({1, 2, 3, 4}, {4}, f32);
  Tensor acc = Tensor::empty({1}, f32), copy = Tensor::empty({4}, f32);
  // a * npid1 is not affine, so the flat index uses the known npid1 = 2.
  Affine flat = Affine::var("pid0") * 2 + Affine::var("pid1");
  InstrArgs times10, add;
  times10.op0 = AluOp::multiply;
  times10.imm0 = 10;
  add.op0 = AluOp::add;
  const auto S0 = sb(f32, 0, 1, {row(1)}), S1 = sb(f32, 4, 1, {row(1)}),
             S2 = sb(f32, 8, 1, {row(1)});
  Program p = program(
      {decl("v", {4}, f32, kIn), decl("acc", {1}, f32, kOut), decl("copy", {4}, f32, kOut)},
      {dma(S0, hbm(1, f32, 0, {{0, 1}, {1, 1}})), dma(S1, hbm(0, f32, flat, {{0, 1}, {1, 1}})),
       instr(Opcode::tensor_scalar, S2, {S0}, times10),
       instr(Opcode::tensor_tensor, S2, {S2, S1}, add), dma(hbm(1, f32, 0, {{0, 1}, {1, 1}}), S2),
       // copy[flat + npid0 + npid1 - 4] = v[flat]: lands in range only if npid0 = npid1 = 2.
       dma(hbm(2, f32, flat + Affine::var("npid0") + Affine::var("npid1") - 4, {{0, 1}, {1, 1}}),
           S1)});
  neuron::testing::simulate_both(p, {v, acc, copy}, {2, 2});
  CHECK(acc.get(0) == 1234.0f);
  for (int k = 0; k < 4; ++k) CHECK(copy.get(k) == float(k + 1));
}

TEST_CASE("device_print writes prefix, shape and values") {
  const auto f32 = DType::float32;
  Tensor tx = Tensor::from_floats({1, 2, 3, 4.5f}, {2, 2}, f32);
  InstrArgs pa;
  pa.prefix = "tile x";
  Program p = program({decl("x", {2, 2}, f32, kIn)},
                      {dma(sb(f32, 0, 2, {row(2)}), hbm2(0, f32, 2, 2, 2)),
                       instr(Opcode::device_print, {}, {sb(f32, 0, 2, {row(2)})}, pa)});
  std::ostringstream os;
  SimOptions opts;
  opts.print = &os;
  simulate(p, {tx}, {1}, opts);
  CHECK(os.str() == "tile x [2, 2] float32\n  [1, 2]\n  [3, 4.5]\n");
}

// ---- errors
// ---------------------------------------------------------------------------------------

TEST_CASE("call-signature errors name the tensor, expected and got") {
  const auto f32 = DType::float32;
  Program p = program({decl("x", {4, 4}, f32, kIn), decl("y", {4, 4}, f32, kOut)},
                      {dma(hbm2(1, f32, 4, 4, 4), hbm2(0, f32, 4, 4, 4))});
  Tensor good = Tensor::empty({4, 4}, f32);
  auto expect = [&](const std::vector<Tensor>& ts, const std::string& needle) {
    try {
      simulate(p, ts);
      FAIL("no error for " << needle);
    } catch (const UserError& e) {
      CHECK(e.rule() == "call-signature");
      INFO(e.message());
      CHECK(e.message().find(needle) != std::string::npos);
    }
  };
  expect({good}, "takes 2 tensors (x, y) but was called with 1");
  expect({good, Tensor::empty({4, 5}, f32)},
         "tensor 'y' (argument 1) of kernel 'test': expected [4, 4] float32, got [4, 5] float32");
  expect({Tensor::empty({4, 4}, DType::bfloat16), good},
         "tensor 'x' (argument 0) of kernel 'test': expected [4, 4] float32, got [4, 4] bfloat16");
}

TEST_CASE("out-of-bounds accesses are user errors with the instruction's span") {
  const auto f32 = DType::float32;
  Tensor x = Tensor::empty({128, 64}, f32);
  auto expect = [&](std::vector<ProgNode> body, int line, const std::string& needle,
                    std::vector<int64_t> grid = {1}) {
    Program p = program({decl("x", {128, 64}, f32, kIn)}, std::move(body));
    try {
      simulate(p, {x}, grid);
      FAIL("no error for " << needle);
    } catch (const UserError& e) {
      CHECK(e.rule() == "out-of-bounds");
      CHECK(e.span().file == "kernel.py");
      CHECK(e.span().line == line);
      INFO(e.message());
      CHECK(e.message().find(needle) != std::string::npos);
    }
  };
  SUBCASE("partitions past 128") {
    expect({dma(chip(Memory::sbuf, f32, 0, 16, {row(64)}, 120), hbm2(0, f32, 16, 64, 64), 17)}, 17,
           "touches partitions 120..135, outside the 128 partitions of sbuf");
  }
  SUBCASE("bytes past the end of an SBUF partition") {
    expect({dma(sb(f32, 212984 - 100, 16, {row(64)}), hbm2(0, f32, 16, 64, 64), 23)}, 23,
           "touches bytes [212884, 213140) of each partition, outside the 212984 bytes");
  }
  SUBCASE("PSUM bytes") {
    expect({instr(Opcode::memset, ps(f32, 16384 - 8, 4, {row(4)}), {}, {}, 29)}, 29,
           "outside the 16384 bytes of a psum partition");
  }
  SUBCASE("HBM elements through a loop variable, with its value") {
    expect({loop("i0", 3,
                 {dma(sb(f32, 0, 64, {row(64)}), hbm2(0, f32, 64, 64, 64, Affine::var("i0") * 4096),
                      31)})},
           31, "touches elements 8192..12287 of tensor 'x' (shape [128, 64], 8192 elements)");
  }
  SUBCASE("program id past the tensor") {
    expect(
        {dma(sb(f32, 0, 64, {row(64)}), hbm2(0, f32, 64, 64, 64, Affine::var("pid0") * 4096), 37)},
        37, "pid0=2", {3});
  }
  SUBCASE("rotation pushes a slot out of the partition") {
    AccessPattern r = sb(f32, 212984 - 400, 1, {row(64)});  // slot 1 ends 112 bytes past
    r.rotation = {"i0", 2, 256};
    expect({loop("i0", 2, {instr(Opcode::memset, r, {}, {}, 41)})}, 41, "i0=1");
  }
}

TEST_CASE("private HBM scratch tensors, fp8 writes and integer tensor_scalar") {
  const auto f32 = DType::float32, e4 = DType::float8_e4m3, u8 = DType::uint8;
  Tensor x =
      Tensor::from_floats({1.0f, 240.0f, 247.0f, 248.0f, -0.5f, 1000.0f, 0.0f, 17.0f}, {2, 4}, f32);
  Tensor o = Tensor::empty({2, 4}, e4), bits = Tensor::empty({2, 4}, u8);
  TensorDecl scratch = decl("tmp", {2, 4}, f32, TensorDecl::Role::scratch);
  scratch.memory = Memory::hbm;
  AccessPattern tmp = hbm2(3, f32, 2, 4, 4);
  tmp.memory = Memory::hbm;
  InstrArgs shift_and;  // (x << 2) & 0x3C on uint8 bit patterns
  shift_and.op0 = AluOp::left_shift;
  shift_and.imm0 = 2;
  shift_and.op1 = AluOp::bitwise_and;
  shift_and.imm1 = 0x3C;
  Program p = program(
      {decl("x", {2, 4}, f32, kIn), decl("o", {2, 4}, e4, kOut), decl("bits", {2, 4}, u8, kOut),
       scratch},
      {dma(tmp, hbm2(0, f32, 2, 4, 4)), dma(sb(e4, 0, 2, {row(4)}), tmp),
       dma(hbm2(1, e4, 2, 4, 4), sb(e4, 0, 2, {row(4)})),
       dma(sb(f32, 32, 2, {row(4)}), hbm2(0, f32, 2, 4, 4)),
       instr(Opcode::tensor_copy, sb(u8, 16, 2, {row(4)}), {sb(f32, 32, 2, {row(4)})}),
       instr(Opcode::tensor_scalar, sb(u8, 48, 2, {row(4)}), {sb(u8, 16, 2, {row(4)})}, shift_and),
       dma(hbm2(2, u8, 2, 4, 4), sb(u8, 48, 2, {row(4)}))});
  neuron::testing::simulate_both(p, {x, o, bits}, {2});
  // e4m3 codes: 1.0 = 0x38, 240 = 0x77, 247 -> 0x77, 248 -> inf 0x78, -0.5 = 0xB0, 1000 -> inf,
  // 0, 17 -> 16 (0x58; 17 is a tie between 16 and 18, even mantissa wins).
  const uint8_t want[8] = {0x38, 0x77, 0x77, 0x78, 0xB0, 0x78, 0x00, 0x58};
  // uint8 of x saturates (240, 247, 248, 0, 255, 0, 17), then (v << 2) & 0x3C.
  const int u[8] = {1, 240, 247, 248, 0, 255, 0, 17};
  for (int i = 0; i < 8; ++i) {
    CHECK(o.data_as<uint8_t>()[i] == want[i]);
    CHECK(bits.data_as<uint8_t>()[i] == ((u[i] << 2) & 0x3C));
  }
}

TEST_CASE("operand shape mismatches are user errors") {
  const auto f32 = DType::float32;
  Program p = program(
      {decl("x", {4, 4}, f32, kIn)},
      {instr(Opcode::tensor_copy, sb(f32, 0, 4, {row(3)}), {sb(f32, 64, 4, {row(4)})}, {}, 12)});
  try {
    simulate(p, {Tensor::empty({4, 4}, f32)});
    FAIL("no error");
  } catch (const UserError& e) {
    CHECK(e.rule() == "shape-mismatch");
    CHECK(e.span().line == 12);
    CHECK(e.message() ==
          "tensor_copy: source [4, 4] has 16 elements but destination [4, 3] has 12");
  }
}
