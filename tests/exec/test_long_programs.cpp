// A long unrolled program's LLVM IR grows with what each instruction does, not with the number
// of tensors times the number of parts (codegen/llvm/lower_program.cpp): each part loads only
// the tensor pointers it uses, and host-kernel views copy their constant sizes and strides from
// one shared constant. vLLM's paged attention (4,566 tensors, 495 parts) had 18.9 million IR
// instructions before, 1.9 million after (docs/native.md).
#include <doctest/doctest.h>

#include <string>

#include "exec/differential.hpp"
#include "exec/sim_test_util.hpp"
#include "neuron/codegen/jit.hpp"
#include "runtime/cache_test_util.hpp"

using namespace neuron;
using namespace neuron::sim_test;
using namespace neuron::testing;

namespace {
constexpr DType f32 = DType::float32;
constexpr int64_t R = 32, C = 24;
constexpr int kTensors = 24, kReps = 12;

// Input k is used by kReps consecutive steps: load it, multiply by (rep + 1), store the tile to
// its own block of rows of out. 864 instructions: split into parts of 256 (lower_program.cpp),
// each touching a handful of the 24 inputs.
Program many_tensors() {
  std::vector<TensorDecl> decls;
  for (int k = 0; k < kTensors; ++k)
    decls.push_back(decl("x" + std::to_string(k), {R, C}, f32, kIn));
  decls.push_back(decl("out", {kTensors * kReps * R, C}, f32, kOut));
  auto tile = [](int64_t i) { return sb(f32, i * C * 4, R, {row(C)}); };
  std::vector<ProgNode> body;
  for (int k = 0; k < kTensors; ++k)
    for (int rep = 0; rep < kReps; ++rep) {
      InstrArgs scale;
      scale.op0 = AluOp::multiply;
      scale.imm0 = rep + 1;
      body.push_back(dma(tile(0), hbm2(k, f32, R, C, C)));
      body.push_back(instr(Opcode::tensor_scalar, tile(1), {tile(0)}, scale));
      body.push_back(dma(hbm2(kTensors, f32, R, C, C, (k * kReps + rep) * R * C), tile(1)));
    }
  Program p = program(std::move(decls), std::move(body));
  int id = 0;
  for (ProgNode& n : p.body) n.instr.id = id++;
  return p;
}

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}
}  // namespace

TEST_CASE("each part of a long program loads only the tensor pointers it uses") {
  Program p = many_tensors();
  for (bool bitcode : {true, false}) {
    CAPTURE(bitcode);
    native::JitOptions jo;
    jo.bitcode_kernels = bitcode;
    const std::string ir = native::program_llvm_ir(p, jo, /*optimize=*/false);
    const size_t parts = count(ir, "define internal void @neuron_part_") +
                         count(ir, "define void @neuron_part_");
    REQUIRE(parts >= 3);
    // Every part loaded all 25 pointers before (25 per part); now each input once, plus out
    // and an input cut by a part boundary once more per part.
    const size_t loads = count(ir, "getelementptr i8*, i8** %0, i64 ");
    CHECK(loads <= kTensors + 2 * parts);
    CHECK(loads >= kTensors + 1);
  }
}

TEST_CASE("host-kernel views copy their constant fields from one shared constant") {
  Program p = many_tensors();
  native::JitOptions jo;
  jo.bitcode_kernels = false;
  const std::string ir = native::program_llvm_ir(p, jo, false);
  // Three view shapes (x's rows, the tiles, out's rows), each a constant; no field stored
  // one at a time.
  CHECK(count(ir, "@llvm.memcpy") > 0);
  CHECK(count(ir, "store i64 ") == 0);
  jo.bitcode_kernels = true;  // inlined kernels keep the stores they specialize on
  CHECK(count(native::program_llvm_ir(p, jo, false), "store i64 ") > 0);
}

TEST_CASE("a long program gives the simulator's bits with host and with bitcode kernels") {
  Program p = many_tensors();
  std::vector<Tensor> tensors;
  std::vector<std::vector<float>> x;
  for (int k = 0; k < kTensors; ++k) {
    x.push_back(random_values(R * C, 40 + k));
    tensors.push_back(Tensor::from_floats(x.back(), {R, C}, f32));
  }
  tensors.push_back(Tensor::empty({kTensors * kReps * R, C}, f32));
  std::vector<double> ref;
  for (int k = 0; k < kTensors; ++k)
    for (int rep = 0; rep < kReps; ++rep)
      for (float v : x[k]) ref.push_back(double(v * float(rep + 1)));  // one fp32 rounding
  for (std::string kernels : {"host", "bitcode"}) {
    CAPTURE(kernels);
    cache_test::EnvGuard mode("NEURON_NATIVE_KERNELS", kernels.c_str());
    CHECK(compile_native(p).report().options.find("kernels=" + kernels) != std::string::npos);
    check_reference(run_both(p, tensors), 0, ref, Tolerance{0, 0});
  }
}
