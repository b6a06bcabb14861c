// The library tier's harness: seeded random inputs, both executors (bit-identical, see
// tests/exec/differential.hpp) and a float64 reference written in the test.
#pragma once
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "exec/differential.hpp"
#include "neuron/neuron.hpp"
#include "tolerance.hpp"

namespace neuron::testing {

// Uniform values in [lo, hi), rounded to `dtype` (so the reference reads what the kernel reads).
inline Tensor random_tensor(const std::vector<int64_t>& shape, DType dtype, uint32_t seed,
                            double lo = -1.0, double hi = 1.0) {
  Tensor t = Tensor::empty(shape, dtype);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  for (int64_t i = 0; i < t.elements(); ++i) t.set(i, static_cast<float>(u(rng)));
  return t;
}

// The tensor's elements as doubles.
inline std::vector<double> values(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.elements()));
  for (int64_t i = 0; i < t.elements(); ++i) v[static_cast<size_t>(i)] = t.get(i);
  return v;
}

// Compares one result with its reference under the library tolerance of the result's dtype
// (tests/tolerance.hpp): element-wise, and the mean error against the mean magnitude.
inline void check_close(const Tensor& got, const std::vector<double>& ref, const char* what,
                        const char* executor) {
  REQUIRE(static_cast<size_t>(got.elements()) == ref.size());
  const LibraryTolerance tol = library_tolerance(got.dtype());
  int64_t bad = 0;
  std::string first;
  double err = 0, mag = 0;
  bool nan = false;
  for (int64_t i = 0; i < got.elements(); ++i) {
    const double g = got.get(i), r = ref[static_cast<size_t>(i)];
    if (std::isnan(g)) nan = true;
    if (std::isinf(r) && g == r) continue;  // -inf logsumexp of a fully masked row
    const double e = std::fabs(g - r);
    if (!(e <= tol.element.atol + tol.element.rtol * std::fabs(r)) && bad++ == 0)
      first = fmt::format("element {}: got {} want {}", i, g, r);
    err += e;
    mag += std::fabs(r);
  }
  const std::string where = std::string(executor) + " " + what;
  INFO(where, ": ", bad, " elements out of tolerance, first ", first);
  CHECK(bad == 0);
  CHECK_FALSE(nan);
  // The mean error may also reach the absolute bound: outputs that cancel (a gradient near
  // zero) carry errors of the size of their terms, not of their result.
  const double n = static_cast<double>(ref.size());
  INFO(where, ": mean error ", err / n, " mean magnitude ", mag / n);
  CHECK(err / n <= tol.mean_rel * mag / n + tol.mean_abs);
}

// Runs `k` on the simulator and natively (bit-identical) and checks output o against refs[o].
inline BothResults check_kernel(const Kernel& k, const std::vector<Tensor>& inputs,
                                const std::vector<int64_t>& grid,
                                const std::vector<std::vector<double>>& refs,
                                const std::vector<std::string>& names = {}) {
  Compiled c = compile(k, default_compile_options());
  NativeOptions o;
  o.threads = 2;
  BothResults r = run_both(c, inputs, grid, o);
  REQUIRE(r.sim.size() == refs.size());
  for (size_t i = 0; i < refs.size(); ++i) {
    const std::string name = i < names.size() ? names[i] : "output " + std::to_string(i);
    check_close(r.sim[i], refs[i], name.c_str(), "simulator");
    check_close(r.native[i], refs[i], name.c_str(), "native");
  }
  return r;
}

// Native only, for sizes the simulator would take too long on.
inline std::vector<Tensor> check_native(const Kernel& k, const std::vector<Tensor>& inputs,
                                        const std::vector<int64_t>& grid,
                                        const std::vector<std::vector<double>>& refs,
                                        const std::vector<std::string>& names = {}) {
  Compiled c = compile(k, default_compile_options());
  NativeOptions o;
  o.threads = 2;
  auto outs = run_native(c, inputs, grid, o);
  REQUIRE(outs.size() == refs.size());
  for (size_t i = 0; i < refs.size(); ++i) {
    const std::string name = i < names.size() ? names[i] : "output " + std::to_string(i);
    check_close(outs[i], refs[i], name.c_str(), "native");
  }
  return outs;
}

}  // namespace neuron::testing
