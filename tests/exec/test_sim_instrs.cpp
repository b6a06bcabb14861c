// Simulator: each compute instruction on hand-built engine programs, checked against
// double-precision loops written here.
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

// ---- matmul ----------------------------------------------------------------------------------

TEST_CASE("nc_matmul fp32 computes stationary^T @ moving") {
  const int K = 64, M = 32, N = 48;
  auto a = random_values(K * M, 1), bm = random_values(K * N, 2);
  Tensor ta = Tensor::from_floats(a, {K, M}, DType::float32);
  Tensor tb = Tensor::from_floats(bm, {K, N}, DType::float32);
  Tensor out = Tensor::empty({M, N}, DType::float32);
  InstrArgs mm;
  mm.accumulate = 0;
  Program p = program(
      {decl("a", {K, M}, DType::float32, kIn), decl("b", {K, N}, DType::float32, kIn),
       decl("out", {M, N}, DType::float32, kOut)},
      {dma(sb(DType::float32, 0, K, {row(M)}), hbm2(0, DType::float32, K, M, M)),
       dma(sb(DType::float32, 1024, K, {row(N)}), hbm2(1, DType::float32, K, N, N)),
       instr(Opcode::nc_matmul, ps(DType::float32, 0, M, {row(N)}),
             {sb(DType::float32, 0, K, {row(M)}), sb(DType::float32, 1024, K, {row(N)})}, mm),
       dma(hbm2(2, DType::float32, M, N, N), ps(DType::float32, 0, M, {row(N)}))});
  neuron::testing::simulate_both(p, {ta, tb, out});
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      double ref = 0;
      for (int k = 0; k < K; ++k) ref += double(a[k * M + m]) * bm[k * N + n];
      CHECK(out.get(m * N + n) == doctest::Approx(ref).epsilon(1e-5));
    }
}

TEST_CASE("nc_matmul bf16 inputs with accumulate on, off and auto") {
  const int K = 32, M = 16, N = 24;
  auto a1 = exact_values(K * M, 3), b1 = exact_values(K * N, 4);
  auto a2 = exact_values(K * M, 5), b2 = exact_values(K * N, 6);
  std::vector<float> all_a = a1, all_b = b1;
  all_a.insert(all_a.end(), a2.begin(), a2.end());
  all_b.insert(all_b.end(), b2.begin(), b2.end());
  Tensor ta = Tensor::from_floats(all_a, {2 * K, M}, DType::bfloat16);
  Tensor tb = Tensor::from_floats(all_b, {2 * K, N}, DType::bfloat16);
  auto ref = [&](int which, int m, int n) {
    double s = 0;
    const auto& a = which ? a2 : a1;
    const auto& bb = which ? b2 : b1;
    for (int k = 0; k < K; ++k) s += double(a[k * M + m]) * bb[k * N + n];
    return s;
  };
  auto run = [&](int acc1, int acc2, bool memset_first) {
    Tensor out = Tensor::empty({M, N}, DType::float32);
    InstrArgs m1, m2, ms;
    m1.accumulate = acc1;
    m2.accumulate = acc2;
    ms.imm0 = 5.0;
    const auto S1 = sb(DType::bfloat16, 0, K, {row(M)}), S2 = sb(DType::bfloat16, 256, K, {row(M)});
    const auto V1 = sb(DType::bfloat16, 512, K, {row(N)}),
               V2 = sb(DType::bfloat16, 1024, K, {row(N)});
    const auto D = ps(DType::float32, 2048, M, {row(N)});
    std::vector<ProgNode> body = {dma(S1, hbm2(0, DType::bfloat16, K, M, M)),
                                  dma(S2, hbm2(0, DType::bfloat16, K, M, M, K * M)),
                                  dma(V1, hbm2(1, DType::bfloat16, K, N, N)),
                                  dma(V2, hbm2(1, DType::bfloat16, K, N, N, K * N))};
    if (memset_first) body.push_back(instr(Opcode::memset, D, {}, ms));
    body.push_back(instr(Opcode::nc_matmul, D, {S1, V1}, m1));
    body.push_back(instr(Opcode::nc_matmul, D, {S2, V2}, m2));
    body.push_back(dma(hbm2(2, DType::float32, M, N, N), D));
    Program p = program(
        {decl("a", {2 * K, M}, DType::bfloat16, kIn), decl("b", {2 * K, N}, DType::bfloat16, kIn),
         decl("out", {M, N}, DType::float32, kOut)},
        body);
    neuron::testing::simulate_both(p, {ta, tb, out});
    return out;
  };
  SUBCASE("overwrite then accumulate: sum of both") {
    Tensor o = run(0, 1, true);
    for (int m = 0; m < M; ++m)
      for (int n = 0; n < N; ++n) CHECK(o.get(m * N + n) == ref(0, m, n) + ref(1, m, n));
  }
  SUBCASE("accumulate onto a memset value") {
    Tensor o = run(1, 1, true);
    for (int m = 0; m < M; ++m)
      for (int n = 0; n < N; ++n) CHECK(o.get(m * N + n) == 5.0 + ref(0, m, n) + ref(1, m, n));
  }
  SUBCASE("overwrite twice: only the second product") {
    Tensor o = run(1, 0, true);
    for (int m = 0; m < M; ++m)
      for (int n = 0; n < N; ++n) CHECK(o.get(m * N + n) == ref(1, m, n));
  }
  SUBCASE("auto: a memset value is overwritten, then matmuls accumulate") {
    Tensor o = run(-1, -1, true);
    for (int m = 0; m < M; ++m)
      for (int n = 0; n < N; ++n) CHECK(o.get(m * N + n) == ref(0, m, n) + ref(1, m, n));
  }
}

TEST_CASE("tiled 256^3 fp32 matmul with loops over k, m and n blocks") {
  const int S = 256, T = 128;
  auto a = random_values(S * S, 11), bm = random_values(S * S, 12);
  // a is given as A^T ([K, M] layout), so out = a^T @ b.
  Tensor ta = Tensor::from_floats(a, {S, S}, DType::float32);
  Tensor tb = Tensor::from_floats(bm, {S, S}, DType::float32);
  Tensor out = Tensor::empty({S, S}, DType::float32);
  Affine m = Affine::var("i0"), n = Affine::var("i1"), k = Affine::var("i2");
  InstrArgs mm;
  mm.accumulate = -1;
  const auto St = sb(DType::float32, 0, T, {row(T)}), Mv = sb(DType::float32, 4096, T, {row(T)});
  const auto D = ps(DType::float32, 0, T, {row(T)}), O = sb(DType::float32, 8192, T, {row(T)});
  InstrArgs zero;
  Program p =
      program({decl("a", {S, S}, DType::float32, kIn), decl("b", {S, S}, DType::float32, kIn),
               decl("out", {S, S}, DType::float32, kOut)},
              {loop("i0", S / T,
                    {loop("i1", S / T,
                          {instr(Opcode::memset, D, {}, zero),
                           loop("i2", S / T,
                                {dma(St, hbm2(0, DType::float32, T, T, S, k * (T * S) + m * T)),
                                 dma(Mv, hbm2(1, DType::float32, T, T, S, k * (T * S) + n * T)),
                                 instr(Opcode::nc_matmul, D, {St, Mv}, mm)}),
                           instr(Opcode::tensor_copy, O, {D}),
                           dma(hbm2(2, DType::float32, T, T, S, m * (T * S) + n * T), O)})})});
  neuron::testing::simulate_both(p, {ta, tb, out});
  for (int i = 0; i < S; i += 7)
    for (int j = 0; j < S; j += 5) {
      double ref = 0;
      for (int kk = 0; kk < S; ++kk) ref += double(a[kk * S + i]) * bm[kk * S + j];
      CHECK(out.get(i * S + j) == doctest::Approx(ref).epsilon(1e-4));
    }
}

// ---- transpose, activation -----------------------------------------------------------------

TEST_CASE("nc_transpose fp32 and bit-exact bf16") {
  const int P = 32, F = 48;
  auto x = random_values(P * F, 21);
  for (DType dt : {DType::float32, DType::bfloat16}) {
    Tensor tin = Tensor::from_floats(x, {P, F}, dt);
    Tensor out = Tensor::empty({F, P}, dt);
    Program p =
        program({decl("x", {P, F}, dt, kIn), decl("y", {F, P}, dt, kOut)},
                {dma(sb(dt, 0, P, {row(F)}), hbm2(0, dt, P, F, F)),
                 instr(Opcode::nc_transpose, ps(dt, 0, F, {row(P)}), {sb(dt, 0, P, {row(F)})}),
                 dma(hbm2(1, dt, F, P, P), ps(dt, 0, F, {row(P)}))});
    neuron::testing::simulate_both(p, {tin, out});
    for (int i = 0; i < P; ++i)
      for (int j = 0; j < F; ++j) {
        if (dt == DType::bfloat16)
          CHECK(bits16(out, j * P + i) == bits16(tin, i * F + j));
        else
          CHECK(out.get(j * P + i) == x[i * F + j]);
      }
  }
}

TEST_CASE("activation with [P,1] scale and bias tiles, an immediate scale, and reduce") {
  const int P = 16, F = 20;
  auto x = random_values(P * F, 31), sc = random_values(P, 32), bi = random_values(P, 33);
  Tensor tx = Tensor::from_floats(x, {P, F}, DType::float32);
  Tensor tsc = Tensor::from_floats(sc, {P, 1}, DType::float32);
  Tensor tbi = Tensor::from_floats(bi, {P, 1}, DType::float32);
  Tensor out = Tensor::empty({P, F}, DType::float32), red = Tensor::empty({P, 1}, DType::float32);
  Tensor out2 = Tensor::empty({P, F}, DType::float32);
  InstrArgs act;
  act.func = ActFunc::gelu;
  act.bias_tile = act.scale_tile = true;
  act.reduce_op = AluOp::add;
  InstrArgs act2;
  act2.func = ActFunc::exp;
  act2.scale = 0.5;
  const auto X = sb(DType::float32, 0, P, {row(F)}), B = sb(DType::float32, 100, P, {row(1)}),
             Sc = sb(DType::float32, 104, P, {row(1)}), Y = sb(DType::float32, 200, P, {row(F)}),
             R = sb(DType::float32, 300, P, {row(1)}), Y2 = sb(DType::float32, 400, P, {row(F)});
  ProgNode a = instr(Opcode::activation, Y, {X, B, Sc}, act);
  a.instr.has_reduce_res = true;
  a.instr.reduce_res = R;
  Program p = program(
      {decl("x", {P, F}, DType::float32, kIn), decl("s", {P, 1}, DType::float32, kIn),
       decl("b", {P, 1}, DType::float32, kIn), decl("y", {P, F}, DType::float32, kOut),
       decl("r", {P, 1}, DType::float32, kOut), decl("y2", {P, F}, DType::float32, kOut)},
      {dma(X, hbm2(0, DType::float32, P, F, F)), dma(Sc, hbm2(1, DType::float32, P, 1, 1)),
       dma(B, hbm2(2, DType::float32, P, 1, 1)), a, instr(Opcode::activation, Y2, {X}, act2),
       dma(hbm2(3, DType::float32, P, F, F), Y), dma(hbm2(4, DType::float32, P, 1, 1), R),
       dma(hbm2(5, DType::float32, P, F, F), Y2)});
  neuron::testing::simulate_both(p, {tx, tsc, tbi, out, red, out2});
  for (int i = 0; i < P; ++i) {
    double sum = 0;
    for (int j = 0; j < F; ++j) {
      double t = double(x[i * F + j]) * sc[i] + bi[i];
      double g = 0.5 * t * (1 + std::erf(t / std::sqrt(2.0)));
      sum += g;
      CHECK(out.get(i * F + j) == doctest::Approx(g).epsilon(1e-5));
      CHECK(out2.get(i * F + j) == doctest::Approx(std::exp(0.5 * x[i * F + j])).epsilon(1e-6));
    }
    CHECK(red.get(i) == doctest::Approx(sum).epsilon(1e-5));
  }
}

// ---- vector engine -----------------------------------------------------------------------------

TEST_CASE("tensor_tensor arithmetic on fp32 and bitwise on int32") {
  const int P = 8, F = 12;
  auto x = random_values(P * F, 41), y = random_values(P * F, 42);
  Tensor tx = Tensor::from_floats(x, {P, F}, DType::float32);
  Tensor ty = Tensor::from_floats(y, {P, F}, DType::float32);
  Tensor out = Tensor::empty({P, F}, DType::bfloat16);
  std::vector<float> ix(P * F), iy(P * F);
  for (int i = 0; i < P * F; ++i) {
    ix[i] = float(i * 37 + 5);
    iy[i] = float(0xF0F0 ^ (i * 11));
  }
  Tensor tix = Tensor::from_floats(ix, {P, F}, DType::int32);
  Tensor tiy = Tensor::from_floats(iy, {P, F}, DType::int32);
  Tensor iout = Tensor::empty({P, F}, DType::int32);
  InstrArgs sub, band;
  sub.op0 = AluOp::subtract;
  band.op0 = AluOp::bitwise_and;
  const auto f32 = DType::float32, i32 = DType::int32;
  Program p =
      program({decl("x", {P, F}, f32, kIn), decl("y", {P, F}, f32, kIn),
               decl("ix", {P, F}, i32, kIn), decl("iy", {P, F}, i32, kIn),
               decl("o", {P, F}, DType::bfloat16, kOut), decl("io", {P, F}, i32, kOut)},
              {dma(sb(f32, 0, P, {row(F)}), hbm2(0, f32, P, F, F)),
               dma(sb(f32, 64, P, {row(F)}), hbm2(1, f32, P, F, F)),
               dma(sb(i32, 128, P, {row(F)}), hbm2(2, i32, P, F, F)),
               dma(sb(i32, 192, P, {row(F)}), hbm2(3, i32, P, F, F)),
               instr(Opcode::tensor_tensor, sb(DType::bfloat16, 256, P, {row(F)}),
                     {sb(f32, 0, P, {row(F)}), sb(f32, 64, P, {row(F)})}, sub),
               instr(Opcode::tensor_tensor, sb(i32, 320, P, {row(F)}),
                     {sb(i32, 128, P, {row(F)}), sb(i32, 192, P, {row(F)})}, band),
               dma(hbm2(4, DType::bfloat16, P, F, F), sb(DType::bfloat16, 256, P, {row(F)})),
               dma(hbm2(5, i32, P, F, F), sb(i32, 320, P, {row(F)}))});
  neuron::testing::simulate_both(p, {tx, ty, tix, tiy, out, iout});
  for (int i = 0; i < P * F; ++i) {
    double d = double(x[i]) - y[i];
    // One bf16 rounding: within half a bf16 ulp (2^-8 relative).
    CHECK(std::fabs(out.get(i) - d) <= std::ldexp(std::fabs(d), -8) + 1e-30);
    CHECK(iout.data_as<int32_t>()[i] == ((i * 37 + 5) & (0xF0F0 ^ (i * 11))));
  }
}

TEST_CASE("tensor_scalar with immediates, [P,1] tiles and reverse flags") {
  const int P = 8, F = 10;
  auto x = random_values(P * F, 51, 0.5f, 3.0f), c = random_values(P, 52, 1.0f, 2.0f);
  Tensor tx = Tensor::from_floats(x, {P, F}, DType::float32);
  Tensor tc = Tensor::from_floats(c, {P, 1}, DType::float32);
  Tensor o1 = Tensor::empty({P, F}, DType::float32), o2 = Tensor::empty({P, F}, DType::float32);
  InstrArgs imm;  // (x * 3) + 0.25
  imm.op0 = AluOp::multiply;
  imm.imm0 = 3.0;
  imm.op1 = AluOp::add;
  imm.imm1 = 0.25;
  InstrArgs tile;  // 1.5 / (c - x), with c a [P,1] tile
  tile.op0 = AluOp::subtract;
  tile.operand0_tile = true;
  tile.reverse0 = true;
  tile.op1 = AluOp::divide;
  tile.imm1 = 1.5;
  tile.reverse1 = true;
  const auto f32 = DType::float32;
  const auto X = sb(f32, 0, P, {row(F)}), C = sb(f32, 64, P, {row(1)});
  Program p = program({decl("x", {P, F}, f32, kIn), decl("c", {P, 1}, f32, kIn),
                       decl("o1", {P, F}, f32, kOut), decl("o2", {P, F}, f32, kOut)},
                      {dma(X, hbm2(0, f32, P, F, F)), dma(C, hbm2(1, f32, P, 1, 1)),
                       instr(Opcode::tensor_scalar, sb(f32, 100, P, {row(F)}), {X}, imm),
                       instr(Opcode::tensor_scalar, sb(f32, 200, P, {row(F)}), {X, C}, tile),
                       dma(hbm2(2, f32, P, F, F), sb(f32, 100, P, {row(F)})),
                       dma(hbm2(3, f32, P, F, F), sb(f32, 200, P, {row(F)}))});
  neuron::testing::simulate_both(p, {tx, tc, o1, o2});
  for (int i = 0; i < P; ++i)
    for (int j = 0; j < F; ++j) {
      double v = x[i * F + j];
      CHECK(o1.get(i * F + j) == doctest::Approx(v * 3 + 0.25).epsilon(1e-6));
      CHECK(o2.get(i * F + j) == doctest::Approx(1.5 / (double(c[i]) - v)).epsilon(1e-4));
    }
}

TEST_CASE("tensor_reduce over one and two axes, with negate") {
  const int P = 8, A = 4, B = 6;
  auto x = random_values(P * A * B, 61);
  const auto f32 = DType::float32;
  Tensor tx = Tensor::from_floats(x, {P, A, B}, f32);
  Tensor o1 = Tensor::empty({P, A}, f32), o2 = Tensor::empty({P, 1}, f32),
         o3 = Tensor::empty({P, B}, f32);
  InstrArgs sum_b, max_ab, neg_a;
  sum_b.reduce_op = AluOp::add;
  sum_b.axes = {2};
  max_ab.reduce_op = AluOp::maximum;
  max_ab.axes = {1, 2};
  neg_a.reduce_op = AluOp::add;
  neg_a.axes = {1};
  neg_a.negate = true;
  const auto X = sb(f32, 0, P, {{B, A}, {1, B}});
  Program p = program({decl("x", {P, A, B}, f32, kIn), decl("o1", {P, A}, f32, kOut),
                       decl("o2", {P, 1}, f32, kOut), decl("o3", {P, B}, f32, kOut)},
                      {dma(X, hbm(0, f32, 0, {{A * B, P}, {B, A}, {1, B}})),
                       instr(Opcode::tensor_reduce, sb(f32, 200, P, {{1, A}, {1, 1}}), {X}, sum_b),
                       instr(Opcode::tensor_reduce, sb(f32, 300, P, {row(1)}), {X}, max_ab),
                       instr(Opcode::tensor_reduce, sb(f32, 400, P, {row(B)}), {X}, neg_a),
                       dma(hbm2(1, f32, P, A, A), sb(f32, 200, P, {row(A)})),
                       dma(hbm2(2, f32, P, 1, 1), sb(f32, 300, P, {row(1)})),
                       dma(hbm2(3, f32, P, B, B), sb(f32, 400, P, {row(B)}))});
  neuron::testing::simulate_both(p, {tx, o1, o2, o3});
  for (int i = 0; i < P; ++i) {
    double mx = -1e30;
    for (int a = 0; a < A; ++a) {
      double s = 0;
      for (int bb = 0; bb < B; ++bb) {
        s += x[(i * A + a) * B + bb];
        mx = std::max(mx, double(x[(i * A + a) * B + bb]));
      }
      CHECK(o1.get(i * A + a) == doctest::Approx(s).epsilon(1e-5));
    }
    CHECK(o2.get(i) == mx);
    for (int bb = 0; bb < B; ++bb) {
      double s = 0;
      for (int a = 0; a < A; ++a) s += x[(i * A + a) * B + bb];
      CHECK(o3.get(i * B + bb) == doctest::Approx(-s).epsilon(1e-5));
    }
  }
}

TEST_CASE("tensor_copy rounds to bf16 on write; predicated copy; memset") {
  const int P = 2, F = 4;
  // Hand-derived bf16 roundings: 1+2^-8 -> 1 (tie, even), 1+3*2^-8 -> 1+2^-6 (tie, even),
  // 1+2^-8+2^-12 -> 1+2^-7, 70000 -> 70144 (0x4789), -3 exact.
  const float e8 = std::ldexp(1.0f, -8);
  std::vector<float> x = {1 + e8, 1 + 3 * e8, 1 + e8 + std::ldexp(1.0f, -12), 70000.0f, -3.0f, 0.0f,
                          1e-3f,  2.5f};
  std::vector<uint16_t> want = {0x3F80, 0x3F82, 0x3F81, 0x4789, 0xC040, 0x0000, 0x3A83, 0x4020};
  std::vector<float> pred = {1, 0, 1, 0, 0, 0, 2, 1};
  const auto f32 = DType::float32, bf = DType::bfloat16, i32 = DType::int32;
  Tensor tx = Tensor::from_floats(x, {P, F}, f32), tp = Tensor::from_floats(pred, {P, F}, f32);
  Tensor out = Tensor::empty({P, F}, bf), pout = Tensor::empty({P, F}, f32),
         mout = Tensor::empty({P, F}, i32), bout = Tensor::empty({P, F}, bf);
  InstrArgs m7, mb;
  m7.imm0 = 7.0;
  mb.imm0 = 1.0 + std::ldexp(1.0, -8);
  const auto X = sb(f32, 0, P, {row(F)}), Pr = sb(f32, 32, P, {row(F)});
  Program p = program(
      {decl("x", {P, F}, f32, kIn), decl("p", {P, F}, f32, kIn), decl("o", {P, F}, bf, kOut),
       decl("po", {P, F}, f32, kOut), decl("mo", {P, F}, i32, kOut), decl("bo", {P, F}, bf, kOut)},
      {dma(X, hbm2(0, f32, P, F, F)), dma(Pr, hbm2(1, f32, P, F, F)),
       instr(Opcode::tensor_copy, sb(bf, 64, P, {row(F)}), {X}),
       dma(hbm2(2, bf, P, F, F), sb(bf, 64, P, {row(F)})),
       instr(Opcode::memset, sb(f32, 96, P, {row(F)}), {}, m7),
       instr(Opcode::tensor_copy_predicated, sb(f32, 96, P, {row(F)}), {X, Pr}),
       dma(hbm2(3, f32, P, F, F), sb(f32, 96, P, {row(F)})),
       instr(Opcode::memset, sb(i32, 128, P, {row(F)}), {}, m7),
       dma(hbm2(4, i32, P, F, F), sb(i32, 128, P, {row(F)})),
       instr(Opcode::memset, sb(bf, 160, P, {row(F)}), {}, mb),
       dma(hbm2(5, bf, P, F, F), sb(bf, 160, P, {row(F)}))});
  neuron::testing::simulate_both(p, {tx, tp, out, pout, mout, bout});
  for (int i = 0; i < P * F; ++i) {
    CHECK(bits16(out, i) == want[i]);
    CHECK(pout.get(i) == (pred[i] != 0 ? x[i] : 7.0f));
    CHECK(mout.data_as<int32_t>()[i] == 7);
    CHECK(bits16(bout, i) == 0x3F80);
  }
}

// ---- gpsimd ------------------------------------------------------------------------------------

TEST_CASE("iota and affine_select follow offset + p*channel_multiplier + sum stride*idx") {
  const int P = 8, A = 4, B = 3;
  const auto i32 = DType::int32, f32 = DType::float32;
  Tensor io = Tensor::empty({P, A * B}, i32);
  auto x = random_values(P * 8, 71);
  Tensor tx = Tensor::from_floats(x, {P, 8}, f32);
  Tensor so = Tensor::empty({P, 8}, f32);
  InstrArgs iota;
  iota.pattern = {5, A, 1, B};
  iota.offset = 2;
  iota.channel_multiplier = 100;
  InstrArgs sel;  // causal mask: keep where p - j >= 0
  sel.pattern = {-1, 8};
  sel.offset = 0;
  sel.channel_multiplier = 1;
  sel.cmp_op = AluOp::greater_equal;
  sel.imm0 = -1e4;
  Program p = program(
      {decl("x", {P, 8}, f32, kIn), decl("io", {P, A * B}, i32, kOut),
       decl("so", {P, 8}, f32, kOut)},
      {instr(Opcode::iota, sb(i32, 0, P, {{B, A}, {1, B}}), {}, iota),
       dma(hbm2(1, i32, P, A * B, A * B), sb(i32, 0, P, {row(A * B)})),
       dma(sb(f32, 64, P, {row(8)}), hbm2(0, f32, P, 8, 8)),
       instr(Opcode::affine_select, sb(f32, 128, P, {row(8)}), {sb(f32, 64, P, {row(8)})}, sel),
       dma(hbm2(2, f32, P, 8, 8), sb(f32, 128, P, {row(8)}))});
  neuron::testing::simulate_both(p, {tx, io, so});
  for (int i = 0; i < P; ++i) {
    for (int a = 0; a < A; ++a)
      for (int bb = 0; bb < B; ++bb)
        CHECK(io.data_as<int32_t>()[i * A * B + a * B + bb] == 2 + 100 * i + 5 * a + bb);
    for (int j = 0; j < 8; ++j) CHECK(so.get(i * 8 + j) == (i - j >= 0 ? x[i * 8 + j] : -1e4f));
  }
}

TEST_CASE("iota into fp32 rows: negative steps, an offset, values past 2^24 rounded") {
  const int P = 5, F = 7;
  const auto f32 = DType::float32;
  InstrArgs iota;
  iota.pattern = {-3, F};
  iota.offset = 16777217 - 2;  // row 0 holds 2^24 - 1 .. below; row 1 starts at 2^24 + 1
  iota.channel_multiplier = 3;
  Program p = program({decl("io", {P, F}, f32, kOut)},
                      {instr(Opcode::iota, sb(f32, 0, P, {row(F)}), {}, iota),
                       dma(hbm2(0, f32, P, F, F), sb(f32, 0, P, {row(F)}))});
  Tensor io = Tensor::empty({P, F}, f32);
  neuron::testing::simulate_both(p, {io});
  for (int i = 0; i < P; ++i)
    for (int j = 0; j < F; ++j)
      CHECK(io.get(i * F + j) == static_cast<float>(int32_t{16777215} + 3 * i - 3 * j));
}
