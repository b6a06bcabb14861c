// The example kernels on the simulator against independent double-precision references.
#include <doctest/doctest.h>

#include <cmath>
#include <random>

#include "matmul.hpp"
#include "softmax.hpp"
#include "tolerance.hpp"
#include "vector_add.hpp"

using neuron::DType;
using neuron::Tensor;
using neuron::testing::compare;
using neuron::testing::tolerance_for;

namespace {

Tensor random_tensor(std::vector<int64_t> shape, DType dtype, unsigned seed, float scale = 1) {
  Tensor t = Tensor::empty(shape, dtype);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  for (int64_t i = 0; i < t.elements(); ++i) t.set(i, u(rng));
  return t;
}

// Rounds a double to `dtype` the way a store does, through a one-element tensor.
double round_to(DType dtype, double v) {
  Tensor t = Tensor::empty({1}, dtype);
  t.set(0, static_cast<float>(v));
  return t.get(0);
}

}  // namespace

TEST_CASE("vector_add over an SPMD grid matches a + b") {
  for (DType dtype : {DType::float32, DType::bfloat16, DType::float16}) {
    CAPTURE(neuron::dtype_name(dtype));
    const int64_t n = 512, f = 256;
    auto k = neuron::trace("vector_add", examples::vector_add, {{{n, f}, dtype}, {{n, f}, dtype}});
    Tensor a = random_tensor({n, f}, dtype, 1), b = random_tensor({n, f}, dtype, 2);
    Tensor out = neuron::simulate(k, {a, b}, {n / 128})[0];
    // fp32 arithmetic on the engine, one rounding to the output dtype.
    auto c = compare(
        n * f, [&](int64_t i) { return out.get(i); },
        [&](int64_t i) { return round_to(dtype, double(a.get(i)) + b.get(i)); }, {0, 0});
    CHECK_MESSAGE(c.bad == 0, c.first);
  }
}

TEST_CASE("tiled matmul matches a double-precision reference") {
  struct Case {
    DType dtype;
    int64_t M, K, N;
  };
  for (Case cs : {Case{DType::float32, 128, 128, 512}, Case{DType::float32, 256, 384, 1024},
                  Case{DType::float32, 128, 256, 256}, Case{DType::bfloat16, 256, 256, 512},
                  Case{DType::bfloat16, 384, 128, 128}}) {
    CAPTURE(neuron::dtype_name(cs.dtype));
    CAPTURE(cs.M);
    CAPTURE(cs.K);
    CAPTURE(cs.N);
    auto k = neuron::trace("matmul", examples::matmul,
                           {{{cs.K, cs.M}, cs.dtype}, {{cs.K, cs.N}, cs.dtype}});
    Tensor lhsT = random_tensor({cs.K, cs.M}, cs.dtype, 3, 0.5f);
    Tensor rhs = random_tensor({cs.K, cs.N}, cs.dtype, 4, 0.5f);
    Tensor out = neuron::simulate(k, {lhsT, rhs})[0];
    auto ref = [&](int64_t i) {
      int64_t m = i / cs.N, n = i % cs.N;
      double s = 0;
      for (int64_t kk = 0; kk < cs.K; ++kk) s += double(lhsT.get(kk * cs.M + m)) * rhs.get(kk * cs.N + n);
      return s;
    };
    auto c = compare(cs.M * cs.N, [&](int64_t i) { return out.get(i); }, ref,
                     tolerance_for(cs.dtype));
    CHECK_MESSAGE(c.bad == 0, c.first);
  }
}

TEST_CASE("row softmax matches a double-precision reference") {
  for (DType dtype : {DType::float32, DType::bfloat16}) {
    CAPTURE(neuron::dtype_name(dtype));
    const int64_t n = 256, f = 320;
    auto k = neuron::trace("softmax", examples::softmax, {{{n, f}, dtype}});
    Tensor x = random_tensor({n, f}, dtype, 5, 6.0f);
    Tensor out = neuron::simulate(k, {x}, {n / 128})[0];
    auto ref = [&](int64_t i) {
      int64_t r = i / f;
      double mx = -INFINITY, sum = 0;
      for (int64_t c = 0; c < f; ++c) mx = std::fmax(mx, x.get(r * f + c));
      for (int64_t c = 0; c < f; ++c) sum += std::exp(double(x.get(r * f + c)) - mx);
      return std::exp(double(x.get(i)) - mx) / sum;
    };
    auto c = compare(n * f, [&](int64_t i) { return out.get(i); }, ref, tolerance_for(dtype));
    CHECK_MESSAGE(c.bad == 0, c.first);
  }
}
