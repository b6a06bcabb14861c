// kernels/matmul.hpp: matmul and linear over odd sizes, both operand layouts, fp32 and bf16,
// bias and activation epilogues, several SPMD programs; simulator and native against float64.
#include <doctest/doctest.h>

#include "library_check.hpp"
#include "neuron/kernels/matmul.hpp"
#include "reference.hpp"

using namespace neuron;
using namespace neuron::testing;
namespace kn = neuron::kernels;

namespace {

struct Case {
  int64_t M, K, N;
  DType dtype = DType::float32;
  bool ta = false, tb = false, bias = false;
  std::optional<ActFunc> act = std::nullopt;
  int64_t programs = 1;
  bool stream_a = false;  // no A panel: A tiles load inside the K loop
  int64_t column_programs = 1;
};

void run_case(const Case& cs, bool native_only = false) {
  CAPTURE(cs.M);
  CAPTURE(cs.K);
  CAPTURE(cs.N);
  CAPTURE(dtype_name(cs.dtype));
  CAPTURE(cs.ta);
  CAPTURE(cs.tb);
  CAPTURE(cs.bias);
  CAPTURE(cs.programs);
  CAPTURE(cs.stream_a);
  CAPTURE(cs.column_programs);
  kn::MatmulConfig cfg;
  cfg.transpose_a = cs.ta;
  cfg.transpose_b = cs.tb;
  cfg.activation = cs.act;
  cfg.programs = cs.programs;
  cfg.column_programs = cs.column_programs;
  if (cs.stream_a) cfg.panel_bytes = 0;
  std::vector<int64_t> ashape =
      cs.ta ? std::vector<int64_t>{cs.K, cs.M} : std::vector<int64_t>{cs.M, cs.K};
  std::vector<int64_t> bshape =
      cs.tb ? std::vector<int64_t>{cs.N, cs.K} : std::vector<int64_t>{cs.K, cs.N};
  Tensor a = random_tensor(ashape, cs.dtype, 1), b = random_tensor(bshape, cs.dtype, 2);
  Tensor bias = random_tensor({cs.N}, cs.dtype, 3);
  std::vector<TensorSpec> specs{{ashape, cs.dtype}, {bshape, cs.dtype}};
  std::vector<Tensor> inputs{a, b};
  Kernel k;
  if (cs.bias) {
    specs.push_back({{cs.N}, cs.dtype});
    inputs.push_back(bias);
    k = trace(
        "matmul_bias",
        [cfg](nl::tensor x, nl::tensor y, nl::tensor z) { return kn::matmul(x, y, z, cfg); },
        specs);
  } else {
    k = trace(
        "matmul", [cfg](nl::tensor x, nl::tensor y) { return kn::matmul(x, y, cfg); }, specs);
  }
  auto bias_v = values(bias);
  auto want = ref::matmul(values(a), values(b), cs.M, cs.K, cs.N, cs.ta, cs.tb,
                          cs.bias ? &bias_v : nullptr, cs.act);
  if (native_only)
    check_native(k, inputs, kn::matmul_grid(cfg), {want});
  else
    check_kernel(k, inputs, kn::matmul_grid(cfg), {want});
}

}  // namespace

TEST_CASE("matmul: odd sizes and both layouts of each operand, fp32") {
  for (Case cs : {Case{1, 1, 1}, Case{7, 129, 127}, Case{129, 7, 130}, Case{128, 128, 512},
                  Case{130, 300, 513, DType::float32, true, false},
                  Case{127, 129, 200, DType::float32, false, true},
                  Case{200, 131, 129, DType::float32, true, true}})
    run_case(cs);
}

TEST_CASE("matmul: bf16 operands accumulate in fp32") {
  for (Case cs : {Case{7, 300, 33, DType::bfloat16}, Case{129, 256, 520, DType::bfloat16, true},
                  Case{65, 129, 127, DType::bfloat16, false, true}})
    run_case(cs);
}

TEST_CASE("matmul: fused bias and activation epilogues") {
  for (Case cs : {Case{130, 64, 100, DType::float32, false, false, true},
                  Case{9, 40, 600, DType::float32, false, true, true, ActFunc::relu},
                  Case{33, 70, 50, DType::float32, true, false, false, ActFunc::gelu},
                  Case{64, 96, 80, DType::bfloat16, false, true, true, ActFunc::silu},
                  Case{20, 30, 40, DType::float32, false, false, true, ActFunc::tanh}})
    run_case(cs);
}

TEST_CASE("matmul: rows split over SPMD programs") {
  CHECK(kn::split_rows(1000) == 5);
  CHECK(kn::split_rows(1009) == 1);
  CHECK(kn::split_rows(100) == 1);
  for (Case cs : {Case{256, 64, 96, DType::float32, false, false, false, std::nullopt, 2},
                  Case{300, 50, 70, DType::float32, false, true, true, ActFunc::relu, 3}})
    run_case(cs);
}

TEST_CASE("matmul: columns split over SPMD programs (few rows)") {
  CHECK(kn::split_columns(4096) == 8);
  CHECK(kn::split_columns(1400) == 2);  // 700 each: a full 512 and a 188 tail per program
  CHECK(kn::split_columns(1000) == 1);
  kn::MatmulConfig cfg;
  cfg.column_programs = 3;
  CHECK(kn::matmul_grid(cfg) == std::vector<int64_t>{1, 3});
  Case decode{1, 300, 1400, DType::float32, false, true, true};  // linear's layout, a bias
  decode.column_programs = 2;
  Case bf16{3, 129, 1030, DType::bfloat16, false, false, false, ActFunc::relu};
  bf16.column_programs = 2;
  Case both{256, 70, 96, DType::float32, true, false, false, std::nullopt, 2};
  both.column_programs = 3;  // 32 columns each, with two row programs
  for (const Case& cs : {decode, bf16, both}) run_case(cs);
}

TEST_CASE("matmul: A streamed through the K loop when its panel is over budget") {
  for (bool ta : {false, true}) {
    Case cs{130, 300, 70, DType::float32, ta, !ta, true};
    cs.stream_a = true;
    run_case(cs);
  }
}

TEST_CASE("linear is x @ w.T + bias") {
  const int64_t M = 33, K = 65, N = 47;
  Tensor x = random_tensor({M, K}, DType::float32, 4), w = random_tensor({N, K}, DType::float32, 5);
  Tensor b = random_tensor({N}, DType::float32, 6);
  auto k =
      trace("linear", [](nl::tensor x, nl::tensor w, nl::tensor b) { return kn::linear(x, w, b); },
            {{{M, K}, DType::float32}, {{N, K}, DType::float32}, {{N}, DType::float32}});
  auto bv = values(b);
  check_kernel(k, {x, w, b}, {1}, {ref::matmul(values(x), values(w), M, K, N, false, true, &bv)});
}

TEST_CASE("matmul: larger sizes natively") {
  run_case(
      Case{1000, 129, 300, DType::float32, false, true, true, ActFunc::relu, kn::split_rows(1000)},
      /*native_only=*/true);
  run_case(Case{384, 1000, 260, DType::bfloat16, true, false, false, std::nullopt, 3},
           /*native_only=*/true);
}

TEST_CASE("matmul: bad arguments are user errors naming the values") {
  auto bad = [](std::vector<TensorSpec> specs, kn::MatmulConfig cfg) {
    return trace(
        "bad", [cfg](nl::tensor x, nl::tensor y) { return kn::matmul(x, y, cfg); }, specs);
  };
  CHECK_THROWS_WITH_AS(bad({{{4, 5}, DType::float32}, {{6, 7}, DType::float32}}, {}),
                       doctest::Contains("contraction sizes differ"), UserError);
  kn::MatmulConfig three;
  three.programs = 3;
  CHECK_THROWS_WITH_AS(bad({{{4, 5}, DType::float32}, {{5, 7}, DType::float32}}, three),
                       doctest::Contains("programs=3 must divide M=4"), UserError);
  kn::MatmulConfig cols;
  cols.column_programs = 2;
  CHECK_THROWS_WITH_AS(bad({{{4, 5}, DType::float32}, {{5, 7}, DType::float32}}, cols),
                       doctest::Contains("column_programs=2 must divide N=7"), UserError);
}
