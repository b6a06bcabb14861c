// Transposed matmuls (plan.hpp transposed_matmuls, neuron_k_matmul_at): `nc_transpose(X <- S);
// copy(Y <- X); nc_matmul(D <- Y^T @ V)` runs natively as one product reading S's rows. Which
// triples qualify (nothing reads X or Y again before they are overwritten, no operand shares
// their bytes), that the fused code computes the simulator's bits, signed zeros included, and
// that NEURON_TRANSPOSED_MATMUL=0 turns it off.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>

#include "exec/differential.hpp"
#include "exec/sim_test_util.hpp"
#include "neuron/base/config.hpp"
#include "neuron/base/error.hpp"
#include "neuron/codegen/jit.hpp"
#include "neuron/codegen/plan.hpp"

using namespace neuron;
using namespace neuron::sim_test;
using namespace neuron::testing;

namespace {
constexpr DType f32 = DType::float32;
constexpr int64_t M = 64, K = 96, N = 80;  // S [M, K], V [K, N], out [M, N]

constexpr DType bf16 = DType::bfloat16;

// SBUF: S at 0, V at 1024, Y at 2048, the result at 3072. PSUM: X at 0, D at 2048 (or `d_at`).
// The operands in fp32 or bf16 (`dt`); D and the result are fp32.
AccessPattern S(DType dt = f32) {
  return sb(dt, 0, M, {row(K)});
}
AccessPattern V(DType dt = f32) {
  return sb(dt, 1024, K, {row(N)});
}
AccessPattern X(DType dt = f32) {
  return ps(dt, 0, K, {row(M)});
}
AccessPattern Y(DType dt = f32) {
  return sb(dt, 2048, K, {row(M)});
}
AccessPattern D(int64_t at = 2048) { return ps(f32, at, M, {row(N)}); }
AccessPattern O() { return sb(f32, 3072, M, {row(N)}); }

void number(std::vector<ProgNode>& body, int& next) {
  for (ProgNode& n : body) {
    if (n.kind == ProgNode::Kind::loop)
      number(n.body, next);
    else
      n.instr.id = next++;
  }
}

// The triple with an identity-activation (Scalar engine) or tensor_copy (Vector) evacuation.
std::vector<ProgNode> triple(bool activation, int accumulate = 0, int64_t d_at = 2048,
                             DType dt = f32) {
  InstrArgs copy;
  copy.func = ActFunc::copy;
  InstrArgs mm;
  mm.accumulate = accumulate;
  return {instr(Opcode::nc_transpose, X(dt), {S(dt)}),
          activation ? instr(Opcode::activation, Y(dt), {X(dt)}, copy)
                     : instr(Opcode::tensor_copy, Y(dt), {X(dt)}),
          instr(Opcode::nc_matmul, D(d_at), {Y(dt), V(dt)}, mm)};
}

// Loads x and v, runs `middle`, stores D (through SBUF) to out and `extra` after it.
Program make(std::vector<ProgNode> middle, std::vector<ProgNode> extra = {}, int64_t d_at = 2048,
             std::vector<ProgNode> before = {}, DType dt = f32) {
  std::vector<ProgNode> body{dma(S(dt), hbm2(0, dt, M, K, K)), dma(V(dt), hbm2(1, dt, K, N, N))};
  for (ProgNode& n : before) body.push_back(std::move(n));
  for (ProgNode& n : middle) body.push_back(std::move(n));
  body.push_back(instr(Opcode::tensor_copy, O(), {D(d_at)}));
  body.push_back(dma(hbm2(2, f32, M, N, N), O()));
  for (ProgNode& n : extra) body.push_back(std::move(n));
  Program p = program({decl("x", {M, K}, dt, kIn), decl("v", {K, N}, dt, kIn),
                       decl("out", {M, N}, f32, kOut), decl("out2", {K, M}, f32, kOut)},
                      std::move(body));
  int next = 0;
  number(p.body, next);
  return p;
}

// x with signed zeros in it (row 0 all -0, some +0), v positive in column 0; in `dt`.
std::vector<Tensor> inputs(DType dt = f32) {
  auto x = random_values(M * K, 21);
  auto v = random_values(K * N, 22);
  for (int64_t k = 0; k < K; ++k) x[k] = -0.0f;
  for (size_t i = K; i < x.size(); i += 13) x[i] = i % 2 ? 0.0f : -0.0f;
  for (int64_t k = 0; k < K; ++k) v[k * N] = 1.0f + static_cast<float>(k);
  return {Tensor::from_floats(x, {M, K}, dt), Tensor::from_floats(v, {K, N}, dt),
          Tensor::empty({M, N}, f32), Tensor::empty({K, M}, f32)};
}

bool fused_in_ir(const Program& p, bool on = true) {
  native::JitOptions jo;
  jo.transposed_matmul = on;
  return native::program_llvm_ir(p, jo, false).find("matmul_at") != std::string::npos;
}

// out = x @ v in float64 (the fused and unfused forms both compute it with fma per k).
void check_product(const BothResults& r, const std::vector<Tensor>& in) {
  std::vector<double> ref(M * N, 0.0);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k)
        ref[m * N + n] += double(in[0].get(m * K + k)) * in[1].get(k * N + n);
  check_reference(r, 0, ref, Tolerance{1e-3, 1e-3});
}
}  // namespace

TEST_CASE("transposed matmul: the triple runs as one product with the simulator's bits") {
  for (bool activation : {true, false}) {
    CAPTURE(activation);
    const Program p = make(triple(activation));
    const auto plan = native::transposed_matmuls(p);
    REQUIRE(plan.size() == 1);
    const native::TransposedMatmul& tm = plan.begin()->second;
    CHECK(tm.transpose_id == 2);
    CHECK(tm.copy_id == 3);
    CHECK(tm.matmul_id == 4);
    CHECK(tm.canonical_zero == activation);
    CHECK(fused_in_ir(p));
    CHECK_FALSE(fused_in_ir(p, false));
    auto in = inputs();
    for (const char* on : {"1", "0"}) {
      CAPTURE(on);
      setenv("NEURON_TRANSPOSED_MATMUL", on, 1);
      check_product(run_both(p, in), in);
    }
    unsetenv("NEURON_TRANSPOSED_MATMUL");
  }
}

TEST_CASE("transposed matmul: bf16 operands run as one product with the simulator's bits") {
  // bf16 S, X, Y, V into fp32 PSUM (flash attention's p @ v in bf16): neuron_matmul_bf16_at.
  // The identity activation's -0 -> +0 shows nowhere under the bf16 rule, so both copies fuse.
  for (bool activation : {true, false}) {
    CAPTURE(activation);
    const Program p = make(triple(activation, 0, 2048, bf16), {}, 2048, {}, bf16);
    REQUIRE(native::transposed_matmuls(p).size() == 1);
    CHECK(fused_in_ir(p));
    auto in = inputs(bf16);
    for (const char* on : {"1", "0"}) {
      CAPTURE(on);
      setenv("NEURON_TRANSPOSED_MATMUL", on, 1);
      check_product(run_both(p, in), in);
    }
    unsetenv("NEURON_TRANSPOSED_MATMUL");
  }
  // An fp32 V with bf16 S: no fused form (the bf16 rule takes two bf16 operands).
  std::vector<ProgNode> mixed = triple(true, 0, 2048, bf16);
  mixed[2].instr.src[1] = V(f32);
  CHECK(native::transposed_matmuls(make(mixed, {}, 2048, {}, bf16)).empty());
}

TEST_CASE("transposed matmul: a bf16 transpose under an fp32 product in one PSUM bank") {
  // D (fp32 [M, N]) at X's place (bf16 [K, M]), as the allocator lays out attention's p^T and
  // its product in bf16: the bytes of X outside D are found across the two dtypes; fused when
  // the matmul overwrites, not when it adds.
  const Program over = make(triple(true, 0, 0, bf16), {}, 0, {}, bf16);
  CHECK(native::transposed_matmuls(over).size() == 1);
  auto in = inputs(bf16);
  check_product(run_both(over, in), in);
  CHECK(native::transposed_matmuls(make(triple(true, 1, 0, bf16), {}, 0, {}, bf16)).empty());
}

TEST_CASE("transposed matmul: -0 read as +0 exactly where the Scalar engine's copy makes it") {
  // D preset to -0, then a matmul adding x's row 0 (all -0) times v's column 0 (positive): the
  // activation copy turns -0 into +0, so -0 + +0 = +0; a tensor_copy keeps -0, -0 + -0 = -0.
  InstrArgs neg_zero;
  neg_zero.imm0 = -0.0;
  for (bool activation : {true, false}) {
    CAPTURE(activation);
    const Program p = make(triple(activation, 1), {}, 2048,
                           {instr(Opcode::memset, D(), {}, neg_zero)});
    REQUIRE(native::transposed_matmuls(p).size() == 1);
    auto r = run_both(p, inputs());
    CHECK(r.native[0].get(0) == 0.0f);
    CHECK(std::signbit(r.native[0].get(0)) == !activation);
  }
}

TEST_CASE("transposed matmul: a product written where the transpose was, the rest unread") {
  // D at X's place (the allocator reuses a dead transpose's PSUM): fused when the matmul
  // overwrites, not when it adds (it would read the transpose's values).
  const Program over = make(triple(true, 0, 0), {}, 0);
  CHECK(native::transposed_matmuls(over).size() == 1);
  auto in = inputs();
  check_product(run_both(over, in), in);
  CHECK(native::transposed_matmuls(make(triple(true, 1, 0), {}, 0)).empty());
}

TEST_CASE("transposed matmul: not fused when X or Y is read again or shares an operand's bytes") {
  auto in = inputs();
  // Y stored after the matmul: it must be written.
  const Program y_read = make(triple(true), {dma(hbm2(3, f32, K, M, M), Y())});
  CHECK(native::transposed_matmuls(y_read).empty());
  CHECK_FALSE(fused_in_ir(y_read));
  run_both(y_read, in);
  // X copied out later.
  const Program x_read =
      make(triple(false), {instr(Opcode::tensor_copy, sb(f32, 4096, K, {row(M)}), {X()}),
                           dma(hbm2(3, f32, K, M, M), sb(f32, 4096, K, {row(M)}))});
  CHECK(native::transposed_matmuls(x_read).empty());
  run_both(x_read, in);
  // Overwritten first, then read: dead, fused.
  const Program y_rewritten =
      make(triple(true), {instr(Opcode::memset, Y(), {}), dma(hbm2(3, f32, K, M, M), Y())});
  CHECK(native::transposed_matmuls(y_rewritten).size() == 1);
  run_both(y_rewritten, in);
  // Half of Y rewritten, then all of it read: the other half is still the copy's.
  const Program half = make(
      triple(true),
      {instr(Opcode::memset, sb(f32, 2048, K, {row(M / 2)}), {}), dma(hbm2(3, f32, K, M, M), Y())});
  CHECK(native::transposed_matmuls(half).empty());
  run_both(half, in);
  // An evacuation with a scale is not a copy.
  std::vector<ProgNode> scaled = triple(true);
  scaled[1].instr.args.scale = 2.0;
  CHECK(native::transposed_matmuls(make(scaled)).empty());
}

TEST_CASE("transposed matmul: in a loop, the next trip's reads before the triple count") {
  auto in = inputs();
  // Each trip: the triple, then out = D. Fused: the next trip rewrites X and Y first.
  std::vector<ProgNode> body = triple(true);
  Program looped = make({loop("i", 3, body)});
  CHECK(native::transposed_matmuls(looped).size() == 1);
  check_product(run_both(looped, in), in);
  // A trip that stores Y before the triple reads the previous trip's Y: not fused.
  std::vector<ProgNode> reads_first{dma(hbm2(3, f32, K, M, M), Y())};
  for (ProgNode& n : triple(true)) reads_first.push_back(n);
  Program carried = make({loop("i", 3, reads_first)});
  CHECK(native::transposed_matmuls(carried).empty());
  run_both(carried, in);
}

TEST_CASE("NEURON_TRANSPOSED_MATMUL must be 0 or 1") {
  setenv("NEURON_TRANSPOSED_MATMUL", "yes", 1);
  CHECK_THROWS_WITH_AS(config(), doctest::Contains("NEURON_TRANSPOSED_MATMUL='yes' is not 0 or 1"),
                       UserError);
  unsetenv("NEURON_TRANSPOSED_MATMUL");
}

TEST_CASE("transposed matmul: a read placed by a register counts where its tile lies") {
  // After the triple, a column of another tile read at a register's offset: with the tile's
  // allocation known (kept inside it when it runs) it cannot reach Y; without, it might.
  AccessPattern col = sb(f32, 4096, K, {row(1)});
  col.offset = Affine(4096) + Affine::var("r0", 4);
  ProgNode reg =
      instr(Opcode::register_load, AccessPattern{}, {sb(DType::int32, 5000, 1, {row(1)})});
  reg.instr.args.reg = "r0";
  std::vector<ProgNode> extra{reg, instr(Opcode::tensor_copy, sb(f32, 6000, K, {row(1)}), {col})};
  CHECK(native::transposed_matmuls(make(triple(true), extra)).empty());
  extra[1].instr.src[0].alloc = {K, 4096, 4096 + 4 * M};
  CHECK(native::transposed_matmuls(make(triple(true), extra)).size() == 1);
}
