// Repeated call signatures (codegen/llvm/outline_calls.cpp): an unrolled program's calls that
// agree on every constant share one compiled copy, which takes each call's own operands; the
// results are the simulator's bits, each call writing its own place.
#include <doctest/doctest.h>

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
