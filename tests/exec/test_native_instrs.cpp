// Native backend, instruction by instruction on hand-built engine programs: native and
// simulator agree bit for bit, and results match values computed here.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "exec/differential.hpp"
#include "exec/sim_test_util.hpp"

using namespace neuron;
using namespace neuron::sim_test;
using namespace neuron::testing;

namespace {
constexpr DType f32 = DType::float32;

Tensor vals(const std::vector<float>& v, std::vector<int64_t> shape, DType dt = f32) {
  return Tensor::from_floats(v, std::move(shape), dt);
}

// dst HBM [P, F] <- op(src HBM [P, F]) through SBUF: load, `compute` (SBUF 0 -> SBUF 8192), store.
Program unary_program(int64_t P, int64_t F, DType in_dt, DType out_dt, ProgNode compute) {
  return program({decl("x", {P, F}, in_dt, kIn), decl("out", {P, F}, out_dt, kOut)},
                 {dma(sb(in_dt, 0, P, {row(F)}), hbm2(0, in_dt, P, F, F)), std::move(compute),
                  dma(hbm2(1, out_dt, P, F, F), sb(out_dt, 8192, P, {row(F)}))});
}

// x [P, F] and a bias column b [P, 1] in, out = activation(x) [P, F] and its row sums sum
// [P, 1]: `a` with its function, scale and reduce op, the bias read from the tile.
Program activation_program(int64_t P, int64_t F, InstrArgs a) {
  a.bias_tile = true;
  ProgNode act = instr(Opcode::activation, sb(f32, 8192, P, {row(F)}),
                       {sb(f32, 0, P, {row(F)}), sb(f32, 4096, P, {row(1)})}, a);
  act.instr.has_reduce_res = true;
  act.instr.reduce_res = sb(f32, 12288, P, {row(1)});
  return program(
      {decl("x", {P, F}, f32, kIn), decl("b", {P, 1}, f32, kIn), decl("out", {P, F}, f32, kOut),
       decl("sum", {P, 1}, f32, kOut)},
      {dma(sb(f32, 0, P, {row(F)}), hbm2(0, f32, P, F, F)),
       dma(sb(f32, 4096, P, {row(1)}), hbm2(1, f32, P, 1, 1)), act,
       dma(hbm2(2, f32, P, F, F), sb(f32, 8192, P, {row(F)})),
       dma(hbm2(3, f32, P, 1, 1), sb(f32, 12288, P, {row(1)}))});
}
}  // namespace

TEST_CASE("native nc_matmul fp32: fast layout, accumulate off, on and auto") {
  const int K = 64, M = 32, N = 48;
  auto a = random_values(K * M, 1), bm = random_values(K * N, 2);
  for (int acc : {0, 1, -1}) {
    CAPTURE(acc);
    InstrArgs mm;
    mm.accumulate = acc;
    // Two matmuls into the same PSUM tile: the second accumulates unless accumulate == 0.
    Program p = program(
        {decl("a", {K, M}, f32, kIn), decl("b", {K, N}, f32, kIn), decl("out", {M, N}, f32, kOut)},
        {dma(sb(f32, 0, K, {row(M)}), hbm2(0, f32, K, M, M)),
         dma(sb(f32, 1024, K, {row(N)}), hbm2(1, f32, K, N, N)),
         instr(Opcode::nc_matmul, ps(f32, 0, M, {row(N)}),
               {sb(f32, 0, K, {row(M)}), sb(f32, 1024, K, {row(N)})}, mm),
         instr(Opcode::nc_matmul, ps(f32, 0, M, {row(N)}),
               {sb(f32, 0, K, {row(M)}), sb(f32, 1024, K, {row(N)})}, mm),
         dma(hbm2(2, f32, M, N, N), ps(f32, 0, M, {row(N)}))});
    auto r = run_both(p, {vals(a, {K, M}), vals(bm, {K, N}), Tensor::empty({M, N}, f32)});
    std::vector<double> ref(M * N);
    for (int m = 0; m < M; ++m)
      for (int n = 0; n < N; ++n) {
        double s = 0;
        for (int k = 0; k < K; ++k) s += double(a[k * M + m]) * bm[k * N + n];
        ref[m * N + n] = acc == 0 ? s : 2 * s;
      }
    check_reference(r, 0, ref, {1e-5, 1e-5});
  }
}

TEST_CASE("native nc_matmul bf16 and a strided (generic) layout") {
  const int K = 32, M = 16, N = 24;
  auto a = exact_values(K * M, 3), bm = exact_values(K * N, 4);
  InstrArgs mm;
  mm.accumulate = 0;
  // bf16 operands, contiguous.
  Program p = program(
      {decl("a", {K, M}, DType::bfloat16, kIn), decl("b", {K, N}, DType::bfloat16, kIn),
       decl("out", {M, N}, f32, kOut)},
      {dma(sb(DType::bfloat16, 0, K, {row(M)}), hbm2(0, DType::bfloat16, K, M, M)),
       dma(sb(DType::bfloat16, 1024, K, {row(N)}), hbm2(1, DType::bfloat16, K, N, N)),
       instr(Opcode::nc_matmul, ps(f32, 0, M, {row(N)}),
             {sb(DType::bfloat16, 0, K, {row(M)}), sb(DType::bfloat16, 1024, K, {row(N)})}, mm),
       dma(hbm2(2, f32, M, N, N), ps(f32, 0, M, {row(N)}))});
  std::vector<double> ref(M * N);
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      double s = 0;
      for (int k = 0; k < K; ++k) s += double(a[k * M + m]) * bm[k * N + n];
      ref[m * N + n] = s;  // exact: multiples of 1/64 with short sums
    }
  auto r = run_both(p, {vals(a, {K, M}, DType::bfloat16), vals(bm, {K, N}, DType::bfloat16),
                        Tensor::empty({M, N}, f32)});
  check_reference(r, 0, ref, {0, 0});
  // fp32, moving operand read with stride 2 (every other column of a 2N-wide tile).
  auto b2 = random_values(K * 2 * N, 5);
  Program q = program(
      {decl("a", {K, M}, f32, kIn), decl("b", {K, 2 * N}, f32, kIn), decl("out", {M, N}, f32, kOut)},
      {dma(sb(f32, 0, K, {row(M)}), hbm2(0, f32, K, M, M)),
       dma(sb(f32, 1024, K, {row(2 * N)}), hbm2(1, f32, K, 2 * N, 2 * N)),
       instr(Opcode::nc_matmul, ps(f32, 0, M, {row(N)}),
             {sb(f32, 0, K, {row(M)}), sb(f32, 1024, K, {{2, N}})}, mm),
       dma(hbm2(2, f32, M, N, N), ps(f32, 0, M, {row(N)}))});
  auto r2 = run_both(q, {vals(a, {K, M}), vals(b2, {K, 2 * N}), Tensor::empty({M, N}, f32)});
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      double s = 0;
      for (int k = 0; k < K; ++k) s += double(a[k * M + m]) * b2[k * 2 * N + 2 * n];
      ref[m * N + n] = s;
    }
  check_reference(r2, 0, ref, {1e-5, 1e-5});
}

// Every pair of operand dtypes but bf16 x bf16 is one fma per k in increasing k on the fp32
// values (docs/numerics.md, "Matmul"), now through the fp32 matmul kernel: operands read in
// place (fp32, tf32) or widened into scratch (fp16, fp8, bf16 beside another dtype), in the
// contiguous layout or strided, into an fp32 PSUM tile in place or a bf16 one through a copy,
// and with auto accumulate over a tile whose elements differ (half of it rewritten in between).
TEST_CASE("native nc_matmul of fp16, fp8, tf32 and mixed operands is the fp32 fma chain") {
  const int K = 40, M = 12, N = 20;  // K not a multiple of 8 or 32
  struct Case {
    DType s, v, psum;
    bool strided;  // the moving operand read with stride 2 (not the kernels' layout)
  };
  const DType bf16 = DType::bfloat16, f16 = DType::float16, e4 = DType::float8_e4m3,
              e5 = DType::float8_e5m2, e4fn = DType::float8_e4m3fn, tf32 = DType::tfloat32;
  const Case cases[] = {{f16, f16, f32, false},  {e4, e5, f32, false},    {e4fn, bf16, f32, false},
                        {f32, bf16, f32, false}, {tf32, f32, f32, false}, {f16, f16, f32, true},
                        {e5, f32, bf16, false},  {f32, f32, bf16, true},  {bf16, f16, f32, true}};
  for (const Case& c : cases) {
    CAPTURE(dtype_name(c.s));
    CAPTURE(dtype_name(c.v));
    CAPTURE(dtype_name(c.psum));
    CAPTURE(c.strided);
    const int W = c.strided ? 2 * N : N;
    // Values of every magnitude the fp8 formats hold, subnormals included.
    std::vector<float> a = random_values(K * M, 7, -3.0f, 3.0f), bm = random_values(K * W, 8);
    for (size_t i = 0; i < a.size(); i += 7) a[i] *= 1.0f / 64;
    const Tensor ta = vals(a, {K, M}, c.s), tb = vals(bm, {K, W}, c.v);
    InstrArgs overwrite, add, autoacc;
    overwrite.accumulate = 0, add.accumulate = 1, autoacc.accumulate = -1;
    InstrArgs fill;
    fill.imm0 = 0.75;
    const auto S = sb(c.s, 0, K, {row(M)});
    const auto V = c.strided ? sb(c.v, 1024, K, {{2, N}}) : sb(c.v, 1024, K, {row(N)});
    const auto D = ps(c.psum, 0, M, {row(N)});
    // out0 = A^T B; out1 = (A^T B + A^T B) on the right half, A^T B after a memset on the left.
    Program p = program(
        {decl("a", {K, M}, c.s, kIn), decl("b", {K, W}, c.v, kIn),
         decl("out0", {M, N}, c.psum, kOut), decl("out1", {M, N}, c.psum, kOut)},
        {dma(S, hbm2(0, c.s, K, M, M)), dma(sb(c.v, 1024, K, {row(W)}), hbm2(1, c.v, K, W, W)),
         instr(Opcode::nc_matmul, D, {S, V}, overwrite), dma(hbm2(2, c.psum, M, N, N), D),
         instr(Opcode::nc_matmul, D, {S, V}, add),
         instr(Opcode::memset, ps(c.psum, 0, M, {row(N / 2)}), {}, fill),
         instr(Opcode::nc_matmul, D, {S, V}, autoacc), dma(hbm2(3, c.psum, M, N, N), D)});
    auto r = run_both(p, {ta, tb, Tensor::empty({M, N}, c.psum), Tensor::empty({M, N}, c.psum)});
    // The reference: the stored operand values, one std::fma per k, rounded to the PSUM dtype
    // whenever the tile holds the value.
    auto stored = [&](float x) { return vals({x}, {1}, c.psum).get(0); };
    for (int m = 0; m < M; ++m)
      for (int n = 0; n < N; ++n) {
        auto chain = [&](float acc) {
          for (int k = 0; k < K; ++k)
            acc = std::fma(ta.get(k * M + m), tb.get(k * W + (c.strided ? 2 * n : n)), acc);
          return acc;
        };
        const float once = stored(chain(0.0f));
        const float twice = n < N / 2 ? once : stored(chain(stored(chain(once))));
        const int64_t i = m * N + n;
        INFO("m ", m, " n ", n);
        REQUIRE(r.native[0].get(i) == once);
        REQUIRE(r.native[1].get(i) == twice);
      }
  }
}

TEST_CASE("native nc_transpose and tensor_copy with a dtype cast") {
  const int P = 8, F = 24;
  auto x = random_values(P * F, 6);
  Program p = program(
      {decl("x", {P, F}, f32, kIn), decl("out", {F, P}, DType::bfloat16, kOut)},
      {dma(sb(f32, 0, P, {row(F)}), hbm2(0, f32, P, F, F)),
       instr(Opcode::nc_transpose, sb(f32, 4096, F, {row(P)}), {sb(f32, 0, P, {row(F)})}),
       instr(Opcode::tensor_copy, sb(DType::bfloat16, 8192, F, {row(P)}),
             {sb(f32, 4096, F, {row(P)})}),
       dma(hbm2(1, DType::bfloat16, F, P, P), sb(DType::bfloat16, 8192, F, {row(P)}))});
  auto r = run_both(p, {vals(x, {P, F}), Tensor::empty({F, P}, DType::bfloat16)});
  std::vector<double> ref(F * P);
  for (int f = 0; f < F; ++f)
    for (int q = 0; q < P; ++q) ref[f * P + q] = x[q * F + f];
  check_reference(r, 0, ref);
}

// Host kernels (the library's copies, called by long programs) copy a tile of one dtype a whole
// row at a time where both views are contiguous along the row, else element by element in
// words of the dtype's size (instr_kernels.cpp copy_elements): every element size and layout,
// and a source that overlaps the destination (the copy reads it before writing).
TEST_CASE("native tensor_copy of one dtype with host kernels: rows, strided, reshaped, overlapping") {
  const int P = 8, F = 24;
  setenv("NEURON_NATIVE_KERNELS", "host", 1);
  for (DType dt : {DType::int8, DType::bfloat16, f32}) {
    CAPTURE(dtype_name(dt));
    const int64_t e = dtype_bytes(dt);
    std::vector<float> x(P * 2 * F);
    for (size_t i = 0; i < x.size(); ++i) x[i] = float(int(i * 7 % 101) - 50);  // exact in int8
    struct Layout {
      const char* name;
      AccessPattern dst, src;
      int64_t shift;  // src element f goes to dst element f (the loaded row is 2F long)
      int64_t step;
    };
    const Layout layouts[] = {
        {"rows", sb(dt, 4096, P, {row(F)}), sb(dt, 0, P, {row(F)}), 0, 1},
        {"strided source", sb(dt, 4096, P, {row(F)}), sb(dt, 0, P, {{2, F}}), 0, 2},
        {"reshaped source", sb(dt, 4096, P, {row(F)}), sb(dt, 0, P, {{4, F / 4}, {1, 4}}), 0, 1},
        {"overlapping", sb(dt, 3 * e, P, {row(F)}), sb(dt, 0, P, {row(F)}), 3, 1},
    };
    for (const Layout& l : layouts) {
      CAPTURE(std::string(l.name));
      const int64_t out_at = l.shift ? 0 : 4096;  // read back the whole loaded row, or dst
      const int64_t W = l.shift ? 2 * F : F;
      Program p = program(
          {decl("x", {P, 2 * F}, dt, kIn), decl("out", {P, W}, dt, kOut)},
          {dma(sb(dt, 0, P, {row(2 * F)}), hbm2(0, dt, P, 2 * F, 2 * F)),
           instr(Opcode::tensor_copy, l.dst, {l.src}),
           dma(hbm2(1, dt, P, W, W), sb(dt, out_at, P, {row(W)}))});
      auto r = run_both(p, {vals(x, {P, 2 * F}, dt), Tensor::empty({P, W}, dt)});
      std::vector<double> ref(P * W);
      for (int q = 0; q < P; ++q)
        for (int f = 0; f < W; ++f) {
          const int64_t src = l.shift ? (f >= l.shift && f < l.shift + F ? f - l.shift : f)
                                      : f * l.step;
          ref[q * W + f] = x[q * 2 * F + src];
        }
      check_reference(r, 0, ref, {0, 0});
    }
  }
  unsetenv("NEURON_NATIVE_KERNELS");
}

// Host kernels convert fp32 <-> bf16 and fp32 <-> fp16 a whole row at a time where both views
// are contiguous along their rows (instr_kernels.cpp convert_rows), else element by element:
// each element must get the bits of the per-element conversion (Tensor::from_floats, whose
// rounding test_builtins.cpp checks against an enumeration of the codes), specials included.
TEST_CASE("native tensor_copy between float dtypes with host kernels: rows and strided") {
  const int P = 4, F = 40;
  setenv("NEURON_NATIVE_KERNELS", "host", 1);
  std::vector<float> x(P * 2 * F);
  const float specials[] = {0.0f,    -0.0f,     INFINITY, -INFINITY, NAN,   -NAN,    65504.0f,
                            65520.0f, 70000.0f, 1e-8f,    -6e-8f,    3e-5f, 1.0e-40f, 1.00390625f,
                            1.01171875f, 3.4e38f};
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = i % 3 == 0 ? specials[(i / 3) % 16] : std::ldexp(float(int(i * 37 % 1999) - 999), int(i % 41) - 30);
  const DType bf16 = DType::bfloat16, f16 = DType::float16;
  for (auto [from, to] : {std::pair<DType, DType>{f32, bf16}, {bf16, f32}, {f32, f16}, {f16, f32}}) {
    CAPTURE(dtype_name(from));
    CAPTURE(dtype_name(to));
    const Tensor in = vals(x, {P, 2 * F}, from);
    for (bool strided : {false, true}) {
      CAPTURE(strided);
      Program p = program(
          {decl("x", {P, 2 * F}, from, kIn), decl("out", {P, F}, to, kOut)},
          {dma(sb(from, 0, P, {row(2 * F)}), hbm2(0, from, P, 2 * F, 2 * F)),
           instr(Opcode::tensor_copy, sb(to, 8192, P, {row(F)}),
                 {strided ? sb(from, 0, P, {{2, F}}) : sb(from, 0, P, {row(F)})}),
           dma(hbm2(1, to, P, F, F), sb(to, 8192, P, {row(F)}))});
      auto r = run_both(p, {in, Tensor::empty({P, F}, to)});
      std::vector<float> src(P * F);
      for (int q = 0; q < P; ++q)
        for (int f = 0; f < F; ++f) src[q * F + f] = in.get(q * 2 * F + (strided ? 2 * f : f));
      const Tensor want = vals(src, {P, F}, to);
      const Tensor& got = r.native[0];
      const int64_t bad = first_bit_difference(got, want);
      INFO("element ", bad, ": got ", (bad >= 0 ? got.get(bad) : 0.0f), " want ",
           (bad >= 0 ? want.get(bad) : 0.0f), " from ", (bad >= 0 ? src[bad] : 0.0f));
      CHECK(bad == -1);
    }
  }
  unsetenv("NEURON_NATIVE_KERNELS");
}

// Host kernels run fp32 tensor_tensor add / subtract / multiply / divide a row at a time where
// every view is contiguous along its rows (instr_kernels.cpp arithmetic_rows), else element by
// element: each must give IEEE's result for each element (NaN, infinities, division by zero),
// also in place (the result over data0) and strided.
TEST_CASE("native fp32 tensor_tensor arithmetic with host kernels: rows, in place, strided") {
  const int P = 5, F = 37;
  setenv("NEURON_NATIVE_KERNELS", "host", 1);
  auto x = random_values(P * 2 * F, 31), y = random_values(P * 2 * F, 32);
  const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e-40f, 3e38f};
  for (size_t i = 0; i < x.size(); i += 5) x[i] = specials[(i / 5) % 7];
  for (size_t i = 0; i < y.size(); i += 7) y[i] = specials[(i / 7 + 3) % 7];
  const std::pair<AluOp, float (*)(float, float)> ops[] = {
      {AluOp::add, [](float a, float b) { return a + b; }},
      {AluOp::subtract, [](float a, float b) { return a - b; }},
      {AluOp::multiply, [](float a, float b) { return a * b; }},
      {AluOp::divide, [](float a, float b) { return a / b; }}};
  for (auto [op, fn] : ops)
    for (int layout = 0; layout < 3; ++layout) {  // rows, in place, strided
      CAPTURE(static_cast<int>(op));
      CAPTURE(layout);
      InstrArgs a;
      a.op0 = op;
      const int64_t step = layout == 2 ? 2 : 1, dst_at = layout == 1 ? 0 : 8192;
      const auto src = [&](int64_t at) {
        return step == 2 ? sb(f32, at, P, {{2, F}}) : sb(f32, at, P, {row(F)});
      };
      Program p = program(
          {decl("x", {P, 2 * F}, f32, kIn), decl("y", {P, 2 * F}, f32, kIn),
           decl("out", {P, F}, f32, kOut)},
          {dma(sb(f32, 0, P, {row(2 * F)}), hbm2(0, f32, P, 2 * F, 2 * F)),
           dma(sb(f32, 4096, P, {row(2 * F)}), hbm2(1, f32, P, 2 * F, 2 * F)),
           instr(Opcode::tensor_tensor, sb(f32, dst_at, P, {row(F)}), {src(0), src(4096)}, a),
           dma(hbm2(2, f32, P, F, F), sb(f32, dst_at, P, {row(F)}))});
      auto r = run_both(p, {vals(x, {P, 2 * F}), vals(y, {P, 2 * F}), Tensor::empty({P, F}, f32)});
      for (int q = 0; q < P; ++q)
        for (int f = 0; f < F; ++f) {
          const float want = fn(x[q * 2 * F + f * step], y[q * 2 * F + f * step]);
          const float got = r.native[0].get(q * F + f);
          INFO("partition ", q, " element ", f, ": got ", got, " want ", want);
          REQUIRE((std::isnan(want) ? std::isnan(got) : got == want));
        }
    }
  unsetenv("NEURON_NATIVE_KERNELS");
}

// Host kernels run fp32 tensor_scalar with add / subtract / multiply / divide a row at a time
// too (scalar_rows_f32): op0 with an immediate, then op1 with a column tile, either operand
// order, each step rounded to fp32, against the two IEEE operations written out; in place and
// strided (the element walk) as well.
TEST_CASE("native fp32 tensor_scalar arithmetic with host kernels: rows, in place, strided") {
  const int P = 6, F = 33;
  setenv("NEURON_NATIVE_KERNELS", "host", 1);
  auto x = random_values(P * 2 * F, 41), col = random_values(P, 42);
  x[3] = NAN, x[9] = INFINITY, x[12] = 0.0f, col[2] = 0.0f;
  const AluOp ops[] = {AluOp::add, AluOp::subtract, AluOp::multiply, AluOp::divide};
  auto apply = [](AluOp op, float a, float b) {
    return op == AluOp::add        ? a + b
           : op == AluOp::subtract ? a - b
           : op == AluOp::multiply ? a * b
                                   : a / b;
  };
  for (AluOp op0 : ops)
    for (AluOp op1 : {AluOp::bypass, AluOp::subtract, AluOp::divide})
      for (int rev = 0; rev < 4; ++rev)
        for (int layout = 0; layout < 3; ++layout) {  // rows, in place, strided
          CAPTURE(static_cast<int>(op0));
          CAPTURE(static_cast<int>(op1));
          CAPTURE(rev);
          CAPTURE(layout);
          InstrArgs a;
          a.op0 = op0, a.op1 = op1, a.reverse0 = rev & 1, a.reverse1 = rev & 2;
          a.imm0 = 1.75, a.operand1_tile = op1 != AluOp::bypass;
          const int64_t step = layout == 2 ? 2 : 1, dst_at = layout == 1 ? 0 : 8192;
          std::vector<AccessPattern> srcs = {step == 2 ? sb(f32, 0, P, {{2, F}})
                                                       : sb(f32, 0, P, {row(F)})};
          if (a.operand1_tile) srcs.push_back(sb(f32, 12288, P, {row(1)}));
          Program p = program(
              {decl("x", {P, 2 * F}, f32, kIn), decl("c", {P, 1}, f32, kIn),
               decl("out", {P, F}, f32, kOut)},
              {dma(sb(f32, 0, P, {row(2 * F)}), hbm2(0, f32, P, 2 * F, 2 * F)),
               dma(sb(f32, 12288, P, {row(1)}), hbm2(1, f32, P, 1, 1)),
               instr(Opcode::tensor_scalar, sb(f32, dst_at, P, {row(F)}), srcs, a),
               dma(hbm2(2, f32, P, F, F), sb(f32, dst_at, P, {row(F)}))});
          auto r = run_both(p, {vals(x, {P, 2 * F}), vals(col, {P, 1}), Tensor::empty({P, F}, f32)});
          for (int q = 0; q < P; ++q)
            for (int f = 0; f < F; ++f) {
              float v = x[q * 2 * F + f * step];
              v = (rev & 1) ? apply(op0, 1.75f, v) : apply(op0, v, 1.75f);
              if (op1 != AluOp::bypass) v = (rev & 2) ? apply(op1, col[q], v) : apply(op1, v, col[q]);
              const float got = r.native[0].get(q * F + f);
              INFO("partition ", q, " element ", f, ": got ", got, " want ", v);
              REQUIRE((std::isnan(v) ? std::isnan(got) : got == v));
            }
        }
  unsetenv("NEURON_NATIVE_KERNELS");
}

// tensor_tensor_scan multiply-then-add on fp32 tiles (Mamba's state update, a cumsum) runs 16
// partitions' chains together (instr_kernels.cpp scan_multiply_add): each partition must still
// get the scalar recurrence's bits, r = x * r + y with two roundings, for a partition count off
// the group size, a 2-d free shape, either operand order and in place (the result over data0).
TEST_CASE("native tensor_tensor_scan multiply then add: the scalar recurrence's bits") {
  const int P = 37, A = 3, B = 10, F = A * B;
  auto x = random_values(P * F, 21, 0.5f, 1.0f), y = random_values(P * F, 22);
  auto init = random_values(P, 23);
  for (int rev = 0; rev < 4; ++rev)
    for (bool in_place : {false, true}) {
      CAPTURE(rev);
      CAPTURE(in_place);
      InstrArgs a;
      a.op0 = AluOp::multiply, a.op1 = AluOp::add, a.reverse0 = rev & 1, a.reverse1 = rev & 2;
      a.operand0_tile = true;
      const int64_t dst_at = in_place ? 0 : 8192;
      Program p = program(
          {decl("x", {P, F}, f32, kIn), decl("y", {P, F}, f32, kIn), decl("i", {P, 1}, f32, kIn),
           decl("out", {P, F}, f32, kOut)},
          {dma(sb(f32, 0, P, {row(F)}), hbm2(0, f32, P, F, F)),
           dma(sb(f32, 4096, P, {row(F)}), hbm2(1, f32, P, F, F)),
           dma(sb(f32, 12288, P, {row(1)}), hbm2(2, f32, P, 1, 1)),
           instr(Opcode::tensor_tensor_scan, sb(f32, dst_at, P, {{B, A}, {1, B}}),
                 {sb(f32, 0, P, {{B, A}, {1, B}}), sb(f32, 4096, P, {{B, A}, {1, B}}),
                  sb(f32, 12288, P, {row(1)})},
                 a),
           dma(hbm2(3, f32, P, F, F), sb(f32, dst_at, P, {row(F)}))});
      auto r = run_both(p, {vals(x, {P, F}), vals(y, {P, F}), vals(init, {P, 1}),
                            Tensor::empty({P, F}, f32)});
      for (int q = 0; q < P; ++q) {
        float acc = init[q];
        for (int i = 0; i < F; ++i) {
          const float xi = x[q * F + i], yi = y[q * F + i];
          const float t = xi * acc;
          acc = t + yi;
          INFO("partition ", q, " element ", i);
          REQUIRE(r.native[0].get(q * F + i) == acc);
        }
      }
    }
}

// 32-bit tiles SBUF to PSUM (the fast path, neuron_transpose32: 8 x 8 register blocks on AVX2
// and AVX-512 CPUs, the edges element by element), sizes on and off the block multiples.
TEST_CASE("native nc_transpose of 32-bit tiles: register blocks and the edges") {
  for (auto [P, F] : {std::pair<int, int>{16, 16}, {128, 128}, {37, 50}, {33, 17}, {7, 40}}) {
    CAPTURE(P);
    CAPTURE(F);
    auto x = random_values(P * F, 10);
    Program p = program(
        {decl("x", {P, F}, f32, kIn), decl("out", {F, P}, f32, kOut)},
        {dma(sb(f32, 0, P, {row(F)}), hbm2(0, f32, P, F, F)),
         instr(Opcode::nc_transpose, ps(f32, 0, F, {row(P)}), {sb(f32, 0, P, {row(F)})}),
         dma(hbm2(1, f32, F, P, P), ps(f32, 0, F, {row(P)}))});
    auto r = run_both(p, {vals(x, {P, F}), Tensor::empty({F, P}, f32)});
    std::vector<double> ref(static_cast<size_t>(F * P));
    for (int f = 0; f < F; ++f)
      for (int q = 0; q < P; ++q) ref[f * P + q] = x[q * F + f];
    check_reference(r, 0, ref, {0, 0});
  }
}

// SBUF to SBUF (the Vector engine's transpose): two tiles of one memory interleave their
// partition rows, so their byte ranges overlap whatever their columns. Columns apart take the
// fast path; columns that really overlap must still read the whole source before writing (the
// simulator's order), which a fast path taken by mistake would not.
TEST_CASE("native nc_transpose within SBUF: interleaved rows apart, and truly overlapping") {
  const int P = 32;
  for (int at : {32, 40, 16, -8}) {  // destination column offset from the source's, in floats
    CAPTURE(at);
    const int src0 = at < 0 ? 8 : 0, dst0 = src0 + at, W = 96;
    auto x = random_values(P * W, 11);
    Program p = program(
        {decl("x", {P, W}, f32, kIn), decl("out", {P, W}, f32, kOut)},
        {dma(sb(f32, 0, P, {row(W)}), hbm2(0, f32, P, W, W)),
         instr(Opcode::nc_transpose_vector, sb(f32, 4 * dst0, P, {row(P)}),
               {sb(f32, 4 * src0, P, {row(P)})}),
         dma(hbm2(1, f32, P, W, W), sb(f32, 0, P, {row(W)}))});
    auto r = run_both(p, {vals(x, {P, W}), Tensor::empty({P, W}, f32)});
    std::vector<double> ref(x.begin(), x.end());
    for (int f = 0; f < P; ++f)
      for (int q = 0; q < P; ++q) ref[f * W + dst0 + q] = x[q * W + src0 + f];
    check_reference(r, 0, ref, {0, 0});
  }
}

// SBUF to PSUM (views in different memories take the fast path, neuron_transpose16).
TEST_CASE("native nc_transpose of 16-bit tiles: 8 x 8 register blocks and the edges") {
  const DType bf = DType::bfloat16;
  for (auto [P, F] : {std::pair<int, int>{16, 24}, {21, 37}, {128, 128}, {3, 5}}) {
    CAPTURE(P);
    CAPTURE(F);
    auto x = random_values(P * F, 9);
    Program p = program(
        {decl("x", {P, F}, bf, kIn), decl("out", {F, P}, bf, kOut)},
        {dma(sb(bf, 0, P, {row(F)}), hbm2(0, bf, P, F, F)),
         instr(Opcode::nc_transpose, ps(bf, 0, F, {row(P)}), {sb(bf, 0, P, {row(F)})}),
         dma(hbm2(1, bf, F, P, P), ps(bf, 0, F, {row(P)}))});
    Tensor in = vals(x, {P, F}, bf);
    const std::vector<float> xr = in.to_floats();  // the bf16-rounded input
    auto r = run_both(p, {in, Tensor::empty({F, P}, bf)});
    std::vector<double> ref(static_cast<size_t>(F * P));
    for (int f = 0; f < F; ++f)
      for (int q = 0; q < P; ++q) ref[f * P + q] = xr[q * F + f];
    check_reference(r, 0, ref, {0, 0});
    // Into an fp32 PSUM tile (nl.matmul's transpose of a bf16 operand): widened exactly.
    Program w = program(
        {decl("x", {P, F}, bf, kIn), decl("out", {F, P}, f32, kOut)},
        {dma(sb(bf, 0, P, {row(F)}), hbm2(0, bf, P, F, F)),
         instr(Opcode::nc_transpose, ps(f32, 0, F, {row(P)}), {sb(bf, 0, P, {row(F)})}),
         dma(hbm2(1, f32, F, P, P), ps(f32, 0, F, {row(P)}))});
    check_reference(run_both(w, {in, Tensor::empty({F, P}, f32)}), 0, ref, {0, 0});
  }
}

TEST_CASE("native activation: exp with bias tile, scale and reduce_res") {
  const int P = 16, F = 40;
  auto x = random_values(P * F, 7), bias = random_values(P, 8);
  InstrArgs a;
  a.func = ActFunc::exp;
  a.scale = 0.5;
  a.reduce_op = AluOp::add;
  auto r = run_both(activation_program(P, F, a), {vals(x, {P, F}), vals(bias, {P, 1}), Tensor::empty({P, F}, f32),
                        Tensor::empty({P, 1}, f32)});
  std::vector<double> ref(P * F), sum(P, 0.0);
  for (int q = 0; q < P; ++q)
    for (int f = 0; f < F; ++f) {
      ref[q * F + f] = std::exp(0.5 * x[q * F + f] + bias[q]);
      sum[q] += ref[q * F + f];
    }
  check_reference(r, 0, ref);
  check_reference(r, 1, sum, {1e-5, 1e-4});
}

TEST_CASE("native activation functions all agree with the simulator") {
  const int P = 4, F = 33;
  auto x = random_values(P * F, 9, -3.0f, 3.0f);
  for (ActFunc fn : {ActFunc::tanh, ActFunc::sigmoid, ActFunc::gelu, ActFunc::gelu_apprx_tanh,
                     ActFunc::silu, ActFunc::softplus, ActFunc::relu, ActFunc::sin, ActFunc::erf,
                     ActFunc::square, ActFunc::sign}) {
    CAPTURE(static_cast<int>(fn));
    InstrArgs a;
    a.func = fn;
    Program p = unary_program(P, F, f32, DType::bfloat16,
                              instr(Opcode::activation, sb(DType::bfloat16, 8192, P, {row(F)}),
                                    {sb(f32, 0, P, {row(F)})}, a));
    run_both(p, {vals(x, {P, F}), Tensor::empty({P, F}, DType::bfloat16)});
  }
}

// The library's compiled activation, which the simulator runs and long programs call (host
// kernels), has a clone for x86-64-v3 CPUs, where g++ would fuse x * scale + bias or a
// polynomial step into one FMA and round differently from the JIT's kernels (clang,
// -ffp-contract=off); CMakeLists.txt builds it with -ffp-contract=off too. Every function, fp32
// out, a scale that is not a power of two, a bias tile and a row sum, bit for bit over 4,096
// values, with JIT-compiled and with host kernels.
TEST_CASE("native activation gives the simulator's bits for every function, either kernels") {
  const int P = 32, F = 128;
  auto x = random_values(P * F, 21, -6.0f, 6.0f), bias = random_values(P, 22, -1.0f, 1.0f);
  for (const char* kernels : {"bitcode", "host"}) {
    CAPTURE(std::string(kernels));
    setenv("NEURON_NATIVE_KERNELS", kernels, 1);
    for (int f = 0; f <= static_cast<int>(ActFunc::erf_dx); ++f) {
      const auto fn = static_cast<ActFunc>(f);
      CAPTURE(std::string(act_func_name(fn)));
      InstrArgs a;
      a.func = fn;
      a.scale = 0.7071;
      a.reduce_op = AluOp::add;
      run_both(activation_program(P, F, a), {vals(x, {P, F}), vals(bias, {P, 1}), Tensor::empty({P, F}, f32),
                   Tensor::empty({P, 1}, f32)});
    }
  }
  unsetenv("NEURON_NATIVE_KERNELS");
}

TEST_CASE("native exp activation gives the simulator's bits on CPUs with and without AVX-512") {
  // exp of fp32 rows into bf16 with their sums (flash attention's p) and into fp32 without,
  // compiled for this host (its AVX-512 rows where it has them: instr_kernels.cpp) and as for
  // a CPU without AVX512-BF16 or without AVX-512 (NativeCompileOptions::cpu_features: those
  // paths must compile, and the functions for an ISA a CPU lacks must never reach its code
  // generator). Each gives the simulator's bits; the simulator takes the library's path for
  // this CPU, which tests/exec/test_builtins_avx512.cpp checks against the scalar rule.
  const DType bf16 = DType::bfloat16;
  const int64_t P = 16;
  for (int64_t F : {512, 77}) {
    CAPTURE(F);
    auto x = random_values(P * F, 31, -40.0f, 10.0f), bias = random_values(P, 32, -1.0f, 1.0f);
    // Special values in every third row; the other rows' sums stay finite.
    const float specials[] = {NAN, -INFINITY, INFINITY, -1e30f, 95.0f, 1e-40f};
    for (size_t i = 0; i < x.size(); i += 41)
      if (i / F % 3 == 2) x[i] = specials[(i / 41) % 6];
    for (DType out : {bf16, f32}) {
      const bool reduce = out == bf16;
      InstrArgs a;
      a.func = ActFunc::exp;
      a.scale = 0.125;
      a.reduce_op = AluOp::add;
      a.bias_tile = true;
      ProgNode act = instr(Opcode::activation, sb(out, 8192, P, {row(F)}),
                           {sb(f32, 0, P, {row(F)}), sb(f32, 4096, P, {row(1)})}, a);
      std::vector<TensorDecl> decls = {decl("x", {P, F}, f32, kIn), decl("b", {P, 1}, f32, kIn),
                                       decl("out", {P, F}, out, kOut)};
      if (reduce) {
        act.instr.has_reduce_res = true;
        act.instr.reduce_res = sb(f32, 12288, P, {row(1)});
        decls.push_back(decl("sum", {P, 1}, f32, kOut));
      }
      std::vector<ProgNode> body = {dma(sb(f32, 0, P, {row(F)}), hbm2(0, f32, P, F, F)),
                                    dma(sb(f32, 4096, P, {row(1)}), hbm2(1, f32, P, 1, 1)), act,
                                    dma(hbm2(2, out, P, F, F), sb(out, 8192, P, {row(F)}))};
      if (reduce) body.push_back(dma(hbm2(3, f32, P, 1, 1), sb(f32, 12288, P, {row(1)})));
      const Program p = program(decls, body);
      auto tensors = [&] {
        std::vector<Tensor> t = {vals(x, {P, F}), vals(bias, {P, 1}), Tensor::empty({P, F}, out)};
        if (reduce) t.push_back(Tensor::empty({P, 1}, f32));
        return t;
      };
      std::vector<Tensor> sim = tensors();
      simulate(p, sim);
      const std::vector<Tensor> sim_out(sim.begin() + 2, sim.end());
      // Unoptimized too: nothing folds the untaken path away there.
      for (int opt_level : {2, 0})
        for (const char* features : {"", "-avx512bf16", "-avx512f"}) {
          CAPTURE(std::string(features));
          CAPTURE(opt_level);
          NativeCompileOptions o;
          o.cpu_features = features;
          o.opt_level = opt_level;
          std::vector<Tensor> nat = tensors();
          compile_native(p, o).run(nat);
          check_bit_identical(sim_out, std::vector<Tensor>(nat.begin() + 2, nat.end()));
        }
    }
  }
}

TEST_CASE("native fp32 -> bf16 copy gives the simulator's bits on CPUs with and without it") {
  // tensor_copy's AVX512-BF16 rows (instr_kernels.cpp), and the paths of CPUs without them.
  const DType bf16 = DType::bfloat16;
  const int64_t P = 8;
  for (int64_t F : {512, 77}) {
    CAPTURE(F);
    auto x = random_values(P * F, 41, -300.0f, 300.0f);
    const float specials[] = {NAN, -INFINITY, INFINITY, 1e-40f, -1e-45f, 3.4e38f};
    for (size_t i = 0; i < x.size(); i += 23)
      if (i / F % 2 == 1) x[i] = specials[(i / 23) % 6];
    const Program p = unary_program(P, F, f32, bf16,
                                    instr(Opcode::tensor_copy, sb(bf16, 8192, P, {row(F)}),
                                          {sb(f32, 0, P, {row(F)})}, InstrArgs{}));
    std::vector<Tensor> sim = {vals(x, {P, F}), Tensor::empty({P, F}, bf16)};
    simulate(p, sim);
    for (const char* features : {"", "-avx512bf16"}) {
      CAPTURE(std::string(features));
      NativeCompileOptions o;
      o.cpu_features = features;
      std::vector<Tensor> nat = {vals(x, {P, F}), Tensor::empty({P, F}, bf16)};
      compile_native(p, o).run(nat);
      check_bit_identical({sim[1]}, {nat[1]});
    }
    // Only removals: an added feature, or an entry without a sign, is refused.
    for (const char* bad : {"+avx512fp16", "avx512f", "-avx512bf16,,-avx512f"}) {
      CAPTURE(std::string(bad));
      NativeCompileOptions o;
      o.cpu_features = bad;
      CHECK_THROWS_WITH_AS(compile_native(p, o), doctest::Contains("does not remove a feature"),
                           UserError);
    }
  }
}

TEST_CASE("native tensor_tensor in fp32 and bitwise int32") {
  const int P = 8, F = 20;
  auto x = random_values(P * F, 10), y = random_values(P * F, 11);
  for (AluOp op : {AluOp::add, AluOp::multiply, AluOp::maximum, AluOp::divide, AluOp::mod,
                   AluOp::greater}) {
    CAPTURE(static_cast<int>(op));
    InstrArgs a;
    a.op0 = op;
    Program p = program(
        {decl("x", {P, F}, f32, kIn), decl("y", {P, F}, f32, kIn), decl("out", {P, F}, f32, kOut)},
        {dma(sb(f32, 0, P, {row(F)}), hbm2(0, f32, P, F, F)),
         dma(sb(f32, 4096, P, {row(F)}), hbm2(1, f32, P, F, F)),
         instr(Opcode::tensor_tensor, sb(f32, 8192, P, {row(F)}),
               {sb(f32, 0, P, {row(F)}), sb(f32, 4096, P, {row(F)})}, a),
         dma(hbm2(2, f32, P, F, F), sb(f32, 8192, P, {row(F)}))});
    auto r = run_both(p, {vals(x, {P, F}), vals(y, {P, F}), Tensor::empty({P, F}, f32)});
    if (op == AluOp::add) {
      std::vector<double> ref(P * F);
      for (int i = 0; i < P * F; ++i) ref[i] = double(x[i]) + y[i];
      check_reference(r, 0, ref);
    }
  }
  // int32 bitwise xor: exact bit patterns.
  const DType i32 = DType::int32;
  std::vector<float> xi(P * F), yi(P * F);
  for (int i = 0; i < P * F; ++i) xi[i] = float(i * 37 % 1000 - 500), yi[i] = float(i * 11 % 256);
  InstrArgs a;
  a.op0 = AluOp::bitwise_xor;
  Program p = program(
      {decl("x", {P, F}, i32, kIn), decl("y", {P, F}, i32, kIn), decl("out", {P, F}, i32, kOut)},
      {dma(sb(i32, 0, P, {row(F)}), hbm2(0, i32, P, F, F)),
       dma(sb(i32, 4096, P, {row(F)}), hbm2(1, i32, P, F, F)),
       instr(Opcode::tensor_tensor, sb(i32, 8192, P, {row(F)}),
             {sb(i32, 0, P, {row(F)}), sb(i32, 4096, P, {row(F)})}, a),
       dma(hbm2(2, i32, P, F, F), sb(i32, 8192, P, {row(F)}))});
  auto r = run_both(p, {vals(xi, {P, F}, i32), vals(yi, {P, F}, i32), Tensor::empty({P, F}, i32)});
  std::vector<double> ref(P * F);
  for (int i = 0; i < P * F; ++i) ref[i] = double(int32_t(xi[i]) ^ int32_t(yi[i]));
  check_reference(r, 0, ref);
}

TEST_CASE("native tensor_scalar with immediates, reverse and a column operand") {
  const int P = 8, F = 16;
  auto x = random_values(P * F, 12), col = random_values(P, 13, 0.5f, 2.0f);
  InstrArgs a;
  a.op0 = AluOp::subtract;
  a.reverse0 = true;  // 3 - x
  a.imm0 = 3.0;
  a.op1 = AluOp::multiply;
  a.operand1_tile = true;  // * col[p]
  Program p = program(
      {decl("x", {P, F}, f32, kIn), decl("c", {P, 1}, f32, kIn), decl("out", {P, F}, f32, kOut)},
      {dma(sb(f32, 0, P, {row(F)}), hbm2(0, f32, P, F, F)),
       dma(sb(f32, 4096, P, {row(1)}), hbm2(1, f32, P, 1, 1)),
       instr(Opcode::tensor_scalar, sb(f32, 8192, P, {row(F)}),
             {sb(f32, 0, P, {row(F)}), sb(f32, 4096, P, {row(1)})}, a),
       dma(hbm2(2, f32, P, F, F), sb(f32, 8192, P, {row(F)}))});
  auto r = run_both(p, {vals(x, {P, F}), vals(col, {P, 1}), Tensor::empty({P, F}, f32)});
  std::vector<double> ref(P * F);
  for (int q = 0; q < P; ++q)
    for (int f = 0; f < F; ++f) ref[q * F + f] = (3.0 - x[q * F + f]) * col[q];
  check_reference(r, 0, ref);
}

TEST_CASE("native tensor_reduce over one and two free axes") {
  const int P = 8, A = 6, B = 10;
  auto x = random_values(P * A * B, 14);
  for (std::vector<int> axes : {std::vector<int>{2}, std::vector<int>{1, 2}, std::vector<int>{1}}) {
    InstrArgs a;
    a.reduce_op = AluOp::maximum;
    a.axes = axes;
    const int out_f = axes.size() == 2 ? 1 : axes[0] == 2 ? A : B;
    Program p = program(
        {decl("x", {P, A * B}, f32, kIn), decl("out", {P, out_f}, f32, kOut)},
        {dma(sb(f32, 0, P, {row(A * B)}), hbm2(0, f32, P, A * B, A * B)),
         instr(Opcode::tensor_reduce, sb(f32, 8192, P, {row(out_f)}),
               {sb(f32, 0, P, {{B, A}, {1, B}})}, a),
         dma(hbm2(1, f32, P, out_f, out_f), sb(f32, 8192, P, {row(out_f)}))});
    auto r = run_both(p, {vals(x, {P, A * B}), Tensor::empty({P, out_f}, f32)});
    std::vector<double> ref(P * out_f, -INFINITY);
    for (int q = 0; q < P; ++q)
      for (int i = 0; i < A; ++i)
        for (int j = 0; j < B; ++j) {
          const int o = axes.size() == 2 ? 0 : axes[0] == 2 ? i : j;
          ref[q * out_f + o] = std::fmax(ref[q * out_f + o], x[q * A * B + i * B + j]);
        }
    check_reference(r, 0, ref);
  }
}

// docs/numerics.md "Reductions", written out plainly: value i into lane i mod 16, then lanes
// j and j + h added for h = 8, 4, 2, 1.
float lane_blocked_sum(const float* v, int n) {
  float lane[16] = {};
  for (int i = 0; i < n; ++i) lane[i % 16] = lane[i % 16] + v[i];
  for (int h = 8; h >= 1; h /= 2)
    for (int j = 0; j < h; ++j) lane[j] = lane[j] + lane[j + h];
  return lane[0];
}

TEST_CASE("reductions add in the lane-blocked order, natively and simulated") {
  // Row 0: 2^24 then 31 ones. Left to right every 1 is lost to rounding (16777216); the
  // lanes hold 2^24 + 1 -> 2^24 and 15 twos, and the tree gives 16777216 + 2 + 4 + 8 + 16 =
  // 16777246 (exact: 16777247). Rows 1-2: random values, against the order written out.
  const int P = 3, A = 4, B = 10, F = A * B;
  auto x = random_values(P * F, 21, -100.0f, 100.0f);
  for (int i = 0; i < 32; ++i) x[i] = i == 0 ? 16777216.0f : 1.0f;
  for (int i = 32; i < F; ++i) x[i] = 0.0f;
  Tensor in = vals(x, {P, F});
  InstrArgs sum;
  sum.reduce_op = AluOp::add;
  sum.axes = {1, 2};
  InstrArgs sub = sum;
  sub.reduce_op = AluOp::subtract;
  InstrArgs act;
  act.func = ActFunc::copy;
  act.reduce_op = AluOp::add;
  ProgNode copy_reduce =
      instr(Opcode::activation, sb(f32, 16384, P, {row(F)}), {sb(f32, 0, P, {row(F)})}, act);
  copy_reduce.instr.has_reduce_res = true;
  copy_reduce.instr.reduce_res = sb(f32, 8192, P, {row(1)});
  // Over two reduced axes [A, B] (row-major positions), one axis of [A*B], the activation's
  // reduce_res, and subtract (the negated sum).
  Program p = program(
      {decl("x", {P, F}, f32, kIn), decl("two_axes", {P, 1}, f32, kOut),
       decl("act", {P, 1}, f32, kOut), decl("neg", {P, 1}, f32, kOut)},
      {dma(sb(f32, 0, P, {row(F)}), hbm2(0, f32, P, F, F)),
       instr(Opcode::tensor_reduce, sb(f32, 4096, P, {row(1)}), {sb(f32, 0, P, {{B, A}, {1, B}})},
             sum),
       copy_reduce,
       instr(Opcode::tensor_reduce, sb(f32, 12288, P, {row(1)}), {sb(f32, 0, P, {{B, A}, {1, B}})},
             sub),
       dma(hbm2(1, f32, P, 1, 1), sb(f32, 4096, P, {row(1)})),
       dma(hbm2(2, f32, P, 1, 1), sb(f32, 8192, P, {row(1)})),
       dma(hbm2(3, f32, P, 1, 1), sb(f32, 12288, P, {row(1)}))});
  auto r = run_both(p, {in, Tensor::empty({P, 1}, f32), Tensor::empty({P, 1}, f32),
                        Tensor::empty({P, 1}, f32)});
  CHECK(r.native[0].get(0) == 16777246.0f);
  for (int q = 0; q < P; ++q) {
    const float want = lane_blocked_sum(x.data() + q * F, F);
    CHECK(r.native[0].get(q) == want);
    CHECK(r.native[1].get(q) == want);
    CHECK(r.native[2].get(q) == -want);
  }
}

TEST_CASE("row reductions run rows eight at a time, each in its own lane-blocked order") {
  // 19 rows (two groups of eight and three alone) of 45 values (two whole blocks of 16 and a
  // tail); row 5 starts with 2^24 and ones, where the order shows (see the test above).
  const int P = 19, F = 45;
  auto x = random_values(P * F, 31, -100.0f, 100.0f);
  for (int i = 0; i < F; ++i) x[5 * F + i] = i == 0 ? 16777216.0f : 1.0f;
  InstrArgs sum;
  sum.reduce_op = AluOp::add;
  sum.axes = {1};
  InstrArgs mx = sum;
  mx.reduce_op = AluOp::maximum;
  Program p = program(
      {decl("x", {P, F}, f32, kIn), decl("sum", {P, 1}, f32, kOut), decl("max", {P, 1}, f32, kOut)},
      {dma(sb(f32, 0, P, {row(F)}), hbm2(0, f32, P, F, F)),
       instr(Opcode::tensor_reduce, sb(f32, 4096, P, {row(1)}), {sb(f32, 0, P, {row(F)})}, sum),
       instr(Opcode::tensor_reduce, sb(f32, 8192, P, {row(1)}), {sb(f32, 0, P, {row(F)})}, mx),
       dma(hbm2(1, f32, P, 1, 1), sb(f32, 4096, P, {row(1)})),
       dma(hbm2(2, f32, P, 1, 1), sb(f32, 8192, P, {row(1)}))});
  auto r = run_both(p, {vals(x, {P, F}), Tensor::empty({P, 1}, f32), Tensor::empty({P, 1}, f32)});
  for (int q = 0; q < P; ++q) {
    CAPTURE(q);
    CHECK(r.native[0].get(q) == lane_blocked_sum(x.data() + q * F, F));
    CHECK(r.native[1].get(q) == *std::max_element(x.begin() + q * F, x.begin() + (q + 1) * F));
  }
  // Left to right, row 5 would stay 2^24.
  CHECK(r.native[0].get(5) > 16777216.0f);
}

TEST_CASE("native memset, iota, affine_select and tensor_copy_predicated") {
  const int P = 4, F = 12;
  const DType i32 = DType::int32;
  InstrArgs io;
  io.pattern = {1, F};
  io.offset = -5;
  io.channel_multiplier = 100;
  InstrArgs sel;
  sel.pattern = {-1, F};
  sel.channel_multiplier = 1;
  sel.cmp_op = AluOp::greater_equal;  // keep where p - f >= 0 (lower triangle)
  sel.imm0 = -7.0;
  InstrArgs ms;
  ms.imm0 = 2.5;
  Program p = program(
      {decl("x", {P, F}, f32, kIn), decl("iota", {P, F}, i32, kOut),
       decl("sel", {P, F}, f32, kOut), decl("pred", {P, F}, f32, kOut)},
      {dma(sb(f32, 0, P, {row(F)}), hbm2(0, f32, P, F, F)),
       instr(Opcode::iota, sb(i32, 4096, P, {row(F)}), {}, io),
       instr(Opcode::affine_select, sb(f32, 8192, P, {row(F)}), {sb(f32, 0, P, {row(F)})}, sel),
       instr(Opcode::memset, sb(f32, 12288, P, {row(F)}), {}, ms),
       // where x > 0 (x itself as the predicate), copy x over the 2.5s
       instr(Opcode::tensor_copy_predicated, sb(f32, 12288, P, {row(F)}),
             {sb(f32, 0, P, {row(F)}), sb(f32, 8192, P, {row(F)})}),
       dma(hbm2(1, i32, P, F, F), sb(i32, 4096, P, {row(F)})),
       dma(hbm2(2, f32, P, F, F), sb(f32, 8192, P, {row(F)})),
       dma(hbm2(3, f32, P, F, F), sb(f32, 12288, P, {row(F)}))});
  auto x = random_values(P * F, 15);
  auto r = run_both(p, {vals(x, {P, F}), Tensor::empty({P, F}, i32), Tensor::empty({P, F}, f32),
                        Tensor::empty({P, F}, f32)});
  std::vector<double> iota(P * F), sref(P * F), pref(P * F);
  for (int q = 0; q < P; ++q)
    for (int f = 0; f < F; ++f) {
      iota[q * F + f] = 100 * q + f - 5;
      sref[q * F + f] = q - f >= 0 ? x[q * F + f] : -7.0;
      pref[q * F + f] = sref[q * F + f] != 0 ? x[q * F + f] : 2.5;
    }
  check_reference(r, 0, iota);
  check_reference(r, 1, sref);
  check_reference(r, 2, pref);
}

TEST_CASE("native dma between patterns of different shapes and a rotating buffer in a loop") {
  // out[i] = 2 * x[i] for 6 tiles of [8, 16]; the SBUF tile rotates over 3 slots.
  const int P = 8, F = 16, T = 6;
  auto x = random_values(T * P * F, 16);
  InstrArgs two;
  two.op0 = AluOp::multiply;
  two.imm0 = 2.0;
  AccessPattern tile = sb(f32, 0, P, {row(F)});
  tile.rotation = {"i0", 3, F * 4};
  AccessPattern tile2 = sb(f32, 4096, P, {{4, 4}, {1, 4}});  // [P, 4, 4] view of 16 floats
  tile2.rotation = {"i0", 3, F * 4};
  Program p = program(
      {decl("x", {T * P, F}, f32, kIn), decl("out", {T * P, F}, f32, kOut)},
      {loop("i0", T,
            {dma(tile, hbm2(0, f32, P, F, F, Affine::var("i0", P * F))),
             instr(Opcode::tensor_scalar, tile2, {tile}, two),
             dma(hbm(1, f32, Affine::var("i0", P * F), {{F, P}, {4, 4}, {1, 4}}), tile2)})});
  NativeOptions o;
  o.threads = 2;
  auto r = run_both(p, {vals(x, {T * P, F}), Tensor::empty({T * P, F}, f32)}, {1}, o);
  std::vector<double> ref(T * P * F);
  for (int i = 0; i < T * P * F; ++i) ref[i] = 2.0 * x[i];
  check_reference(r, 0, ref);
}

TEST_CASE("native grid: program ids in HBM offsets on several threads") {
  // A [3, 5] grid; program (i, j) computes out[i, j, :] = x[i, j, :] + 1 for rows of 7.
  const int F = 7;
  InstrArgs one;
  one.op0 = AluOp::add;
  one.imm0 = 1.0;
  Affine off = Affine::var("pid0", 5 * F) + Affine::var("pid1", F);
  Program p = program(
      {decl("x", {15, F}, f32, kIn), decl("out", {15, F}, f32, kOut)},
      {dma(sb(f32, 0, 1, {row(F)}), hbm(0, f32, off, {{F, 1}, {1, F}})),
       instr(Opcode::tensor_scalar, sb(f32, 64, 1, {row(F)}), {sb(f32, 0, 1, {row(F)})}, one),
       dma(hbm(1, f32, off, {{F, 1}, {1, F}}), sb(f32, 64, 1, {row(F)}))});
  auto x = random_values(15 * F, 17);
  for (int threads : {1, 4}) {
    NativeOptions o;
    o.threads = threads;
    auto r = run_both(p, {vals(x, {15, F}), Tensor::empty({15, F}, f32)}, {3, 5}, o);
    std::vector<double> ref(15 * F);
    for (int i = 0; i < 15 * F; ++i) ref[i] = double(x[i]) + 1.0;
    check_reference(r, 0, ref);
  }
}

TEST_CASE("native device_print writes what the simulator writes") {
  const int P = 2, F = 3;
  ProgNode pr = instr(Opcode::device_print, {}, {sb(f32, 0, P, {row(F)})});
  pr.instr.args.prefix = "x:";
  Program p = program({decl("x", {P, F}, f32, kIn)},
                      {dma(sb(f32, 0, P, {row(F)}), hbm2(0, f32, P, F, F)), pr});
  Tensor x = vals({1, 2, 3, 4, 5, 6}, {P, F});
  std::ostringstream s, n;
  SimOptions so;
  so.print = &s;
  simulate(p, {x}, {2}, so);
  NativeOptions no;
  no.print = &n;
  no.threads = 2;
  compile_native(p).run({x}, {2}, no);
  CHECK(s.str() == n.str());
  CHECK(n.str().find("x: [2, 3] float32") != std::string::npos);
}
