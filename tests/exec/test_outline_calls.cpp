// Repeated call signatures (codegen/llvm/outline_calls.cpp): an unrolled program's calls that
// agree on every constant share one compiled copy, which takes each call's own operands; the
// results are the simulator's bits, each call writing its own place.
#include <doctest/doctest.h>

#include <algorithm>
#include <functional>

#include "exec/differential.hpp"
#include "exec/sim_test_util.hpp"
#include "neuron/codegen/jit.hpp"

using namespace neuron;
using namespace neuron::sim_test;
using namespace neuron::testing;

namespace {
constexpr DType f32 = DType::float32;
constexpr int64_t R = 64, C = 40;

// x loaded once; `copies` times: a tile = x * 2 (the same instruction at another destination)
// stored to its own block of rows of out. Each tensor_scalar reads x, not the one before, so no
// two form a fused chain. trips: the whole done in a loop of that many trips.
Program repeated(int copies, int64_t trips = 1) {
  InstrArgs twice;
  twice.op0 = AluOp::multiply;
  twice.imm0 = 2.0;
  auto t = [](int64_t k) { return sb(f32, k * C * 4, R, {row(C)}); };
  std::vector<ProgNode> body = {dma(t(0), hbm2(0, f32, R, C, C))};
  for (int k = 1; k <= copies; ++k) {
    body.push_back(instr(Opcode::tensor_scalar, t(k), {t(0)}, twice));
    body.push_back(dma(hbm2(1, f32, R, C, C, (k - 1) * R * C), t(k)));
  }
  if (trips > 1) body = {loop("i0", trips, std::move(body))};
  Program p = program({decl("x", {R, C}, f32, kIn), decl("out", {copies * R, C}, f32, kOut)},
                      std::move(body));
  int id = 0;
  std::function<void(std::vector<ProgNode>&)> number = [&](std::vector<ProgNode>& nodes) {
    for (ProgNode& n : nodes) {
      n.instr.id = id++;
      number(n.body);
    }
  };
  number(p.body);
  return p;
}
// x loaded once; `copies` times: (x * 2) + 1 through an intermediate tile, a fused chain of two
// steps (docs/native.md "Fused chains"), stored to its own block of rows of out. Every third
// copy adds 3 instead: two chain signatures.
Program chained(int copies) {
  auto scalar = [](AluOp op, double v) {
    InstrArgs a;
    a.op0 = op;
    a.imm0 = v;
    return a;
  };
  auto t = [](int64_t k) { return sb(f32, k * C * 4, R, {row(C)}); };
  std::vector<ProgNode> body = {dma(t(0), hbm2(0, f32, R, C, C))};
  for (int k = 1; k <= copies; ++k) {
    body.push_back(instr(Opcode::tensor_scalar, t(2 * k - 1), {t(0)}, scalar(AluOp::multiply, 2)));
    body.push_back(instr(Opcode::tensor_scalar, t(2 * k), {t(2 * k - 1)},
                         scalar(AluOp::add, k % 3 == 0 ? 3.0 : 1.0)));
    body.push_back(dma(hbm2(1, f32, R, C, C, (k - 1) * R * C), t(2 * k)));
  }
  Program p = program({decl("x", {R, C}, f32, kIn), decl("out", {copies * R, C}, f32, kOut)},
                      std::move(body));
  int id = 0;
  for (ProgNode& n : p.body) n.instr.id = id++;
  return p;
}
}  // namespace

TEST_CASE("a call signature repeated 16 times or more is compiled once, each call its own") {
  for (int copies : {15, 20}) {
    CAPTURE(copies);
    Program p = repeated(copies);
    native::JitOptions jo;
    const std::string ir = native::program_llvm_ir(p, jo, false);
    CHECK((ir.find("@neuron_sig") != std::string::npos) == (copies >= 16));
    auto x = random_values(R * C, 5);
    auto r = run_both(p, {Tensor::from_floats(x, {R, C}, f32),
                          Tensor::empty({copies * R, C}, f32)});
    std::vector<double> ref;
    for (int k = 0; k < copies; ++k)
      for (float v : x) ref.push_back(2.0 * v);
    check_reference(r, 0, ref, Tolerance{0, 0});
  }
}

TEST_CASE("calls in a loop of more than 4 trips stay inlined where they are") {
  for (int64_t trips : {4, 5}) {
    CAPTURE(trips);
    Program p = repeated(20, trips);
    native::JitOptions jo;
    CHECK((native::program_llvm_ir(p, jo, false).find("@neuron_sig") != std::string::npos) ==
          (trips <= 4));
    auto x = random_values(R * C, 6);
    run_both(p, {Tensor::from_floats(x, {R, C}, f32), Tensor::empty({20 * R, C}, f32)});
  }
}

TEST_CASE("repeated fused chains share one compiled copy per signature") {
  // 48 chains: 32 of x * 2 + 1 and 16 of x * 2 + 3, each chain's code one constant array.
  Program p = chained(48);
  native::JitOptions jo;
  const std::string ir = native::program_llvm_ir(p, jo, false);
  std::vector<std::string> wrappers;  // each chain wrapper's definition line
  for (size_t at = ir.find("define internal void @neuron_sig"); at != std::string::npos;
       at = ir.find("define internal void @neuron_sig", at + 1))
    if (ir.compare(ir.find('.', at) + 1, 14, "neuron_k_chain") == 0)
      wrappers.push_back(ir.substr(at, ir.find('\n', at) - at));
  REQUIRE(wrappers.size() == 2);
  // It takes the views' places (x's tile and the destination), and builds the views itself
  // from their constant sizes and strides, so the chain specializes on them.
  for (const std::string& w : wrappers) {
    INFO(w);
    CHECK(std::count(w.begin(), w.end(), ',') == 1);
    CHECK(w.find("i8* %0, i8* %1") != std::string::npos);
  }
  auto x = random_values(R * C, 7);
  auto r = run_both(p, {Tensor::from_floats(x, {R, C}, f32), Tensor::empty({48 * R, C}, f32)});
  std::vector<double> ref;
  for (int k = 1; k <= 48; ++k)
    for (float v : x) ref.push_back(double(2.0f * v + (k % 3 == 0 ? 3.0f : 1.0f)));
  check_reference(r, 0, ref, Tolerance{0, 0});
}
