// The example kernels, run on the simulator AND natively: both executors must agree bit for bit
// and both must match independent double-precision references. (The examples' matmul programs
// use the library's kernel, tested in tests/library.)
#include <doctest/doctest.h>

#include <cmath>
#include <random>

#include "exec/differential.hpp"
#include "softmax.hpp"
#include "vector_add.hpp"

using namespace neuron;
using namespace neuron::testing;

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

std::vector<double> reference(int64_t n, const std::function<double(int64_t)>& f) {
  std::vector<double> r(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) r[static_cast<size_t>(i)] = f(i);
  return r;
}

}  // namespace

TEST_CASE("vector_add over an SPMD grid matches a + b on both executors") {
  for (DType dtype : {DType::float32, DType::bfloat16, DType::float16}) {
    CAPTURE(dtype_name(dtype));
    const int64_t n = 512, f = 256;
    auto k = trace("vector_add", examples::vector_add, {{{n, f}, dtype}, {{n, f}, dtype}});
    Compiled c = compile(k, default_compile_options());
    Tensor a = random_tensor({n, f}, dtype, 1), b = random_tensor({n, f}, dtype, 2);
    // fp32 arithmetic on the engine, one rounding to the output dtype: exact.
    auto ref = reference(n * f, [&](int64_t i) { return round_to(dtype, double(a.get(i)) + b.get(i)); });
    for (int threads : {1, 2, 3}) {
      CAPTURE(threads);
      NativeOptions o;
      o.threads = threads;
      RunReport rep;
      o.report = &rep;
      BothResults r = run_both(c, {a, b}, {n / 128}, o);
      check_reference(r, 0, ref, {0, 0});
      CHECK(rep.threads == threads);
      CHECK(rep.programs == n / 128);
    }
  }
}

TEST_CASE("row softmax matches a double-precision reference on both executors") {
  for (DType dtype : {DType::float32, DType::bfloat16}) {
    CAPTURE(dtype_name(dtype));
    const int64_t n = 384, f = 320;
    auto k = trace("softmax", examples::softmax, {{{n, f}, dtype}});
    Compiled c = compile(k, default_compile_options());
    Tensor x = random_tensor({n, f}, dtype, 5, 6.0f);
    auto ref = reference(n * f, [&](int64_t i) {
      int64_t r = i / f;
      double mx = -INFINITY, sum = 0;
      for (int64_t j = 0; j < f; ++j) mx = std::fmax(mx, x.get(r * f + j));
      for (int64_t j = 0; j < f; ++j) sum += std::exp(double(x.get(r * f + j)) - mx);
      return std::exp(double(x.get(i)) - mx) / sum;
    });
    NativeOptions o;
    o.threads = 2;
    check_reference(run_both(c, {x}, {n / 128}, o), 0, ref);
  }
}
