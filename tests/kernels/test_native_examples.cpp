// Native backend on the example kernels: simulator and native agree bit for bit, and both match
// double-precision references written here.
#include <doctest/doctest.h>

#include <cmath>
#include <random>

#include "kernels/differential.hpp"
#include "matmul.hpp"
#include "softmax.hpp"
#include "vector_add.hpp"

using namespace neuron;
using namespace neuron::testing;

namespace {

Tensor random_tensor(std::vector<int64_t> shape, DType dt, uint32_t seed) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(rng);
  return Tensor::from_floats(v, std::move(shape), dt);
}

}  // namespace

TEST_CASE("native vector_add over a grid of 4 programs on 1, 2 and 3 threads") {
  const int64_t N = 512, F = 96;
  auto k = trace("vector_add", examples::vector_add,
                 {{{N, F}, DType::float32}, {{N, F}, DType::float32}});
  Compiled c = compile(k, default_compile_options());
  Tensor a = random_tensor({N, F}, DType::float32, 1), b = random_tensor({N, F}, DType::float32, 2);
  std::vector<double> ref(static_cast<size_t>(N * F));
  for (int64_t i = 0; i < N * F; ++i) ref[static_cast<size_t>(i)] = double(a.get(i)) + b.get(i);
  for (int threads : {1, 2, 3}) {
    CAPTURE(threads);
    NativeOptions o;
    o.threads = threads;
    RunReport rep;
    o.report = &rep;
    check_differential(c, {a, b}, {ref}, {N / 128}, o);
    CHECK(rep.threads == threads);
    CHECK(rep.programs == 4);
  }
}

TEST_CASE("native matmul example, fp32 and bf16") {
  struct Case {
    DType dt;
    int64_t M, K, N;
  };
  for (Case cs : {Case{DType::float32, 256, 256, 512}, Case{DType::bfloat16, 128, 256, 512},
                  Case{DType::float32, 128, 128, 256}}) {
    CAPTURE(dtype_name(cs.dt));
    CAPTURE(cs.N);
    auto k = trace("matmul", examples::matmul, {{{cs.K, cs.M}, cs.dt}, {{cs.K, cs.N}, cs.dt}});
    Compiled c = compile(k, default_compile_options());
    Tensor lhsT = random_tensor({cs.K, cs.M}, cs.dt, 3), rhs = random_tensor({cs.K, cs.N}, cs.dt, 4);
    std::vector<double> ref(static_cast<size_t>(cs.M * cs.N));
    for (int64_t m = 0; m < cs.M; ++m)
      for (int64_t n = 0; n < cs.N; ++n) {
        double s = 0;
        for (int64_t kk = 0; kk < cs.K; ++kk) s += double(lhsT.get(kk * cs.M + m)) * rhs.get(kk * cs.N + n);
        ref[static_cast<size_t>(m * cs.N + n)] = s;
      }
    // K-sums of 256 products of values in [-1, 1]: fp32 accumulation error ~ sqrt(K) ulp.
    Tolerance tol = cs.dt == DType::float32 ? Tolerance{1e-5, 1e-4} : tolerance_for(cs.dt);
    NativeOptions o;
    o.threads = 2;
    BothResults r = run_both(c, {lhsT, rhs}, {1}, o);
    check_reference(r, 0, ref, tol);
  }
}

TEST_CASE("native softmax over 3 programs") {
  const int64_t N = 384, F = 200;
  auto k = trace("softmax", examples::softmax, {{{N, F}, DType::float32}});
  Compiled c = compile(k, default_compile_options());
  Tensor x = random_tensor({N, F}, DType::float32, 5);
  std::vector<double> ref(static_cast<size_t>(N * F));
  for (int64_t i = 0; i < N; ++i) {
    double mx = -INFINITY, sum = 0;
    for (int64_t j = 0; j < F; ++j) mx = std::fmax(mx, x.get(i * F + j));
    for (int64_t j = 0; j < F; ++j) sum += std::exp(double(x.get(i * F + j)) - mx);
    for (int64_t j = 0; j < F; ++j)
      ref[static_cast<size_t>(i * F + j)] = std::exp(double(x.get(i * F + j)) - mx) / sum;
  }
  NativeOptions o;
  o.threads = 2;
  check_differential(c, {x}, {ref}, {N / 128}, o);
}
