// Kernels with compile-time parameters: neuron::trace(name, fn, specs, neuron::params(...))
// passes them after the tensors; what they change in the IR is all the IR holds of them.
#include <doctest/doctest.h>

#include <cmath>

#include "neuron/ir/equality.hpp"
#include "neuron/ir/printer.hpp"
#include "neuron/language.hpp"
#include "neuron/trace.hpp"

using namespace neuron;

namespace {

enum class Choice { add, multiply };

// rows: tile height (loop extent); factor: a constant in the IR; op: which op is recorded;
// dtype: the output type; label: a parameter the body never uses.
nl::tensor scaled(nl::tensor x, int64_t rows, double factor, Choice op, DType dtype,
                  std::string label) {
  const int64_t N = x.shape()[0], F = x.shape()[1];
  auto out = nl::ndarray({N, F}, dtype, nl::shared_hbm, "out");
  for (auto i : nl::affine_range(N / rows)) {
    auto t = nl::load(x(nl::ds(i * rows, rows)));
    auto y = op == Choice::add ? nl::add(t, factor) : nl::multiply(t, factor);
    nl::store(out(nl::ds(i * rows, rows)), nl::copy(y, dtype));
  }
  return out;
}

const std::vector<TensorSpec> specs = {{{256, 64}, DType::float32, "x"}};

std::string traced(int64_t rows, double factor, Choice op, DType dtype, std::string label = "a") {
  return print(trace("scaled", scaled, specs, params(rows, factor, op, dtype, label)));
}

}  // namespace

TEST_CASE("params: values reach the kernel after its tensors and shape the IR") {
  std::string base = traced(128, 2.0, Choice::multiply, DType::float32);
  CHECK(base.find("affine_range(2)") != std::string::npos);
  CHECK(base.find("2.0") != std::string::npos);
  CHECK(base.find("multiply") != std::string::npos);
  // Each parameter that changes what is traced changes the IR text (the cache key's input).
  CHECK(traced(64, 2.0, Choice::multiply, DType::float32).find("affine_range(4)") !=
        std::string::npos);
  CHECK(traced(128, 3.0, Choice::multiply, DType::float32) != base);
  CHECK(traced(128, 2.0, Choice::add, DType::float32) != base);
  CHECK(traced(128, 2.0, Choice::multiply, DType::bfloat16) != base);
  // A parameter the body ignores leaves the IR identical: one compile serves both.
  CHECK(traced(128, 2.0, Choice::multiply, DType::float32, "another label") == base);
}

TEST_CASE("params: floats one ulp apart, and 0.0 and -0.0, trace to different IR") {
  const double one = 1.0, next = std::nextafter(1.0, 2.0);
  CHECK(traced(128, one, Choice::multiply, DType::float32) !=
        traced(128, next, Choice::multiply, DType::float32));
  CHECK(traced(128, 0.0, Choice::add, DType::float32) !=
        traced(128, -0.0, Choice::add, DType::float32));
}

TEST_CASE("params: lambdas, generic lambdas and parameters of any type") {
  auto fill = [](nl::tensor x, auto value, bool twice) {
    auto out = nl::ndarray(x.shape(), x.dtype(), nl::shared_hbm, "out");
    auto t = nl::full(x.shape(), double(value), x.dtype());
    nl::store(out, twice ? t + t : t);
    return out;
  };
  Kernel a = trace("fill", fill, {{{128, 8}, DType::float32}}, params(3, true));
  Kernel b = trace("fill", fill, {{{128, 8}, DType::float32}}, params(3.0f, true));
  CHECK(equal(a, b));  // int 3 and float 3 give the same fill value, so the same IR
  CHECK(!equal(a, trace("fill", fill, {{{128, 8}, DType::float32}}, params(3, false))));
}

TEST_CASE("params: a call that does not match the kernel's signature is call-signature") {
  auto kernel = [](nl::tensor x, int64_t rows) {
    auto out = nl::ndarray(x.shape(), x.dtype(), nl::shared_hbm);
    nl::store(out, nl::load(x(nl::ds(0, rows))));
    return out;
  };
  try {
    trace("k", kernel, {{{128, 8}, DType::float32}}, params(std::string("128")));
    FAIL("no error");
  } catch (const UserError& e) {
    CHECK(e.rule() == "call-signature");
    CHECK(e.message().find("followed by the 1 values given to neuron::params") !=
          std::string::npos);
  }
  // Without the parameter the kernel function cannot be called either.
  CHECK_THROWS_AS(trace("k", kernel, {{{128, 8}, DType::float32}}), UserError);
}
