// Differential testing: run a kernel on the simulator AND natively with the same inputs, check
// both against an independent reference and against each other.
//
// Sim vs native is bit for bit, for every dtype: both executors take every number from the same
// builtins (runtime/builtins.hpp; the native copy is compiled with -ffp-contract=off so no
// multiply-add is fused that g++ keeps apart), and the native matmul kernel is bit-exact to the
// builtins' fma order by contract. Any tolerance is only against the reference
// (tests/tolerance.hpp). docs/native.md explains this choice.
#pragma once
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "neuron/runtime/native/native.hpp"
#include "neuron/runtime/run.hpp"
#include "neuron/runtime/sim.hpp"
#include "tolerance.hpp"

namespace neuron::testing {

struct BothResults {
  std::vector<Tensor> sim, native;
};

// A traced kernel through the pipeline with the default options (what a user's call does).
inline Compiled compile_default(const Kernel& k) {
  return compile(k, default_compile_options());
}

// Index of the first element whose bytes differ, or -1.
inline int64_t first_bit_difference(const Tensor& a, const Tensor& b) {
  const size_t e = static_cast<size_t>(dtype_bytes(a.dtype()));
  const auto* pa = a.data_as<const unsigned char>();
  const auto* pb = b.data_as<const unsigned char>();
  for (int64_t i = 0; i < a.elements(); ++i)
    if (std::memcmp(pa + i * e, pb + i * e, e) != 0) return i;
  return -1;
}

inline void check_bit_identical(const std::vector<Tensor>& sim, const std::vector<Tensor>& nat) {
  REQUIRE(sim.size() == nat.size());
  for (size_t o = 0; o < sim.size(); ++o) {
    REQUIRE(sim[o].shape() == nat[o].shape());
    REQUIRE(sim[o].dtype() == nat[o].dtype());
    const int64_t i = first_bit_difference(sim[o], nat[o]);
    INFO("output ", o, " element ", i, ": simulator ", (i >= 0 ? sim[o].get(i) : 0.0f),
         " native ", (i >= 0 ? nat[o].get(i) : 0.0f));
    CHECK(i == -1);
  }
}

// Runs on both executors with the same inputs; outputs are fresh zero-filled tensors.
inline BothResults run_both(const Compiled& c, const std::vector<Tensor>& inputs,
                            const std::vector<int64_t>& grid = {1}, NativeOptions opts = {}) {
  BothResults r;
  r.sim = simulate(c, inputs, grid);
  r.native = run_native(c, inputs, grid, opts);
  check_bit_identical(r.sim, r.native);
  return r;
}

// Hand-built engine programs: `tensors` holds inputs then outputs; the outputs are copied so
// each executor writes its own. Returns the outputs of both.
inline BothResults run_both(const Program& p, const std::vector<Tensor>& tensors,
                            const std::vector<int64_t>& grid = {1}, NativeOptions opts = {}) {
  auto fresh = [&] {
    std::vector<Tensor> all;
    size_t i = 0;
    for (auto& d : p.tensors) {
      if (d.role == TensorDecl::Role::scratch) continue;
      const Tensor& t = tensors[i++];
      if (d.role == TensorDecl::Role::input) {
        all.push_back(t);
      } else {
        Tensor copy = Tensor::empty(t.shape(), t.dtype());
        std::memcpy(copy.data(), t.data(), t.bytes());
        all.push_back(copy);
      }
    }
    return all;
  };
  std::vector<Tensor> s = fresh(), n = fresh();
  simulate(p, s, grid);
  compile_native(p).run(n, grid, opts);
  BothResults r;
  size_t i = 0;
  for (auto& d : p.tensors) {
    if (d.role == TensorDecl::Role::scratch) continue;
    if (d.role == TensorDecl::Role::output) {
      r.sim.push_back(s[i]);
      r.native.push_back(n[i]);
    }
    ++i;
  }
  check_bit_identical(r.sim, r.native);
  return r;
}

// Checks one output of both executors against a reference computed by the test.
inline void check_reference(const BothResults& r, size_t output, const std::vector<double>& ref,
                            Tolerance tol) {
  for (const auto* outs : {&r.sim, &r.native}) {
    const Tensor& t = (*outs)[output];
    REQUIRE(static_cast<size_t>(t.elements()) == ref.size());
    Comparison c = compare(
        t.elements(), [&](int64_t i) { return double(t.get(i)); },
        [&](int64_t i) { return ref[static_cast<size_t>(i)]; }, tol);
    INFO((outs == &r.sim ? "simulator: " : "native: "), c.first);
    CHECK(c.bad == 0);
  }
}
inline void check_reference(const BothResults& r, size_t output, const std::vector<double>& ref) {
  check_reference(r, output, ref, tolerance_for(r.sim[output].dtype()));
}

// The whole check in one call: both executors, bit-identical, and every output near `refs`.
inline BothResults check_differential(const Compiled& c, const std::vector<Tensor>& inputs,
                                      const std::vector<std::vector<double>>& refs,
                                      const std::vector<int64_t>& grid = {1},
                                      NativeOptions opts = {}) {
  BothResults r = run_both(c, inputs, grid, opts);
  REQUIRE(refs.size() == r.sim.size());
  for (size_t o = 0; o < refs.size(); ++o) check_reference(r, o, refs[o]);
  return r;
}

}  // namespace neuron::testing

namespace neuron::testing {

// For hand-built engine programs tested against the simulator: simulates into `tensors` (as
// neuron::simulate does) and runs the same program natively on copies of every tensor; all
// tensors must end bit-identical, so each simulator test is also a native test.
inline void simulate_both(const Program& p, const std::vector<Tensor>& tensors,
                          const std::vector<int64_t>& grid = {1}) {
  std::vector<Tensor> copies;
  for (const Tensor& t : tensors) {
    Tensor c = Tensor::empty(t.shape(), t.dtype());
    if (t.bytes()) std::memcpy(c.data(), t.data(), t.bytes());
    copies.push_back(c);
  }
  compile_native(p).run(copies, grid);
  simulate(p, tensors, grid);
  check_bit_identical(tensors, copies);
}

}  // namespace neuron::testing
