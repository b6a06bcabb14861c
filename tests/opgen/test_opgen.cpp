// neuron-opgen end to end: the build ran the tool on fused_ops.hpp and compiled the registration
// code it wrote into this program (CMakeLists.txt, "neuron-opgen"). The operators must be in
// the registry with their tensors, typed parameters, defaults and doc comments, and run like
// the functions themselves, against a double-precision reference.
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "opgen/fused_ops.hpp"

using namespace neuron;

TEST_CASE("neuron-opgen registers the marked kernels with their signatures and docs") {
  const RegisteredKernel* k = Registry::global().find("scaled_add");
  REQUIRE(k != nullptr);
  CHECK(k->inputs == std::vector<std::string>{"x", "y"});
  REQUIRE(k->params.size() == 3);
  CHECK(k->params[0].name == "alpha");
  CHECK(k->params[0].kind == ParamKind::real);
  CHECK(std::get<double>(*k->params[0].default_value) == 0.5);
  CHECK(k->params[1].kind == ParamKind::choice);
  CHECK(k->params[1].choices == std::vector<std::string>{"none", "relu", "tanh"});
  CHECK(std::get<std::string>(*k->params[1].default_value) == "relu");
  CHECK(std::get<bool>(*k->params[2].default_value) == false);
  CHECK(k->doc.find("out = act(x * alpha + y)") != std::string::npos);
  CHECK(k->params[0].doc == "the multiplier of x");  // the comment just before it
  CHECK(k->params[1].doc.empty());                   // none before `act`
  // The registration's span is the operator's line in the header (#line in the written code).
  CHECK(k->span.file.find("fused_ops.hpp") != std::string::npos);
  CHECK(k->span.line == 14);
  CHECK(Registry::global().find("row_stats") != nullptr);
  CHECK(Registry::global().find("helper") == nullptr);  // not marked
  // A std::string default and multi-word integer types (`unsigned`, `long long`).
  const RegisteredKernel* r = Registry::global().find("row_reduce");
  REQUIRE(r != nullptr);
  REQUIRE(r->params.size() == 3);
  CHECK(r->params[0].kind == ParamKind::string);
  CHECK(std::get<std::string>(*r->params[0].default_value) == "max");
  CHECK(std::get<int64_t>(*r->params[1].default_value) == 2);
  CHECK(std::get<int64_t>(*r->params[2].default_value) == -3);
}

TEST_CASE("a generated registration traces and runs like the kernel function") {
  const int64_t n = 64, f = 48;
  Tensor x = Tensor::empty({n, f}, DType::float32), y = Tensor::empty({n, f}, DType::float32);
  for (int64_t i = 0; i < n * f; ++i) {
    x.set(i, std::sin(0.1f * i) * 3);
    y.set(i, std::cos(0.07f * i));
  }
  auto k = trace_registered("scaled_add", {{{n, f}, DType::float32}, {{n, f}, DType::float32}},
                            {{"act", std::string("tanh")}, {"alpha", 2.0}});
  auto out = simulate(k, {x, y}, {1})[0];
  for (int64_t i = 0; i < n * f; ++i)
    CHECK(out.get(i) == doctest::Approx(std::tanh(2.0 * x.get(i) + y.get(i))).epsilon(1e-5));
  auto stats = simulate(trace_registered("row_stats", {{{n, f}, DType::float32}}), {x}, {1});
  REQUIRE(stats.size() == 2);
  double s = 0, m = -1e30;
  for (int64_t j = 0; j < f; ++j) s += x.get(j), m = std::fmax(m, x.get(j));
  CHECK(stats[0].get(0) == doctest::Approx(s).epsilon(1e-5));
  CHECK(stats[1].get(0) == m);
  auto by_default = simulate(trace_registered("row_reduce", {{{n, f}, DType::float32}}), {x}, {1});
  CHECK(by_default[0].get(0) == doctest::Approx(2 * m - 3).epsilon(1e-5));
  auto summed = simulate(trace_registered("row_reduce", {{{n, f}, DType::float32}},
                                          {{"mode", std::string("sum")}, {"times", int64_t{3}}}),
                         {x}, {1});
  CHECK(summed[0].get(0) == doctest::Approx(3 * s - 3).epsilon(1e-5));
}

TEST_CASE("neuron-opgen writes the operators' schemas") {
  std::ifstream in(NEURON_OPGEN_SCHEMA);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string js = ss.str();
  CHECK(js.find("\"schema\": \"scaled_add(Tensor x, Tensor y, float alpha=0.5, str "
                "act=\\\"relu\\\", bool negate=False) -> Tensor\"") != std::string::npos);
  CHECK(js.find("\"schema\": \"row_stats(Tensor x) -> (Tensor, Tensor)\"") != std::string::npos);
  CHECK(js.find("\"schema\": \"row_reduce(Tensor x, str mode=\\\"max\\\", int times=2, int "
                "shift=-3) -> Tensor\"") != std::string::npos);
  CHECK(js.find("\"namespace\": \"opgen_test\"") != std::string::npos);
}
