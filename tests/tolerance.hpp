// Per-dtype tolerances for comparing kernel results with a reference: the one place they live.
#pragma once
#include <cmath>
#include <cstdint>
#include <string>

#include <fmt/format.h>

#include "neuron/base/dtype.hpp"

namespace neuron::testing {

// |got - ref| <= atol + rtol * |ref|. rtol is about one unit in the last place of the output
// dtype (results are rounded once to it); atol covers fp32 accumulation of long sums and
// values near zero.
struct Tolerance {
  double rtol, atol;
};

inline Tolerance tolerance_for(DType t) {
  switch (t) {
    case DType::float32: return {1e-5, 1e-5};
    case DType::bfloat16: return {1.0 / 128, 1e-2};   // 8 significand bits
    case DType::float16: return {1.0 / 1024, 1e-3};   // 11 significand bits
    case DType::float8_e4m3: return {1.0 / 8, 1.0 / 16};
    case DType::float8_e5m2: return {1.0 / 4, 1.0 / 8};
    default: return {0, 0};  // integers are exact
  }
}

// The worst violation over all elements: 0 when everything is within tolerance; otherwise a
// message naming the first bad element.
struct Comparison {
  int64_t bad = 0;
  std::string first;
};

template <typename Got, typename Ref>
Comparison compare(int64_t n, Got got, Ref ref, Tolerance tol) {
  Comparison c;
  for (int64_t i = 0; i < n; ++i) {
    double g = got(i), r = ref(i);
    bool ok = std::fabs(g - r) <= tol.atol + tol.rtol * std::fabs(r) || (std::isnan(g) && std::isnan(r));
    if (!ok && c.bad++ == 0) c.first = fmt::format("element {}: got {} want {}", i, g, r);
  }
  return c;
}

}  // namespace neuron::testing

namespace neuron::testing {

// Library kernels (tests/library) chain many roundings: long fp32 sums, intermediates rounded
// to the input dtype before a matmul (attention's probabilities, gradients of scores). Their
// results are checked element-wise (|got - ref| <= atol + rtol * |ref|) and in the mean:
// mean|got - ref| <= mean_rel * mean|ref| + mean_abs. The absolute terms are for results that
// cancel (gradients, column sums of O(1) terms): their error is that of the terms, not of the
// result. Inputs in the tests are O(1).
struct LibraryTolerance {
  Tolerance element;
  double mean_rel, mean_abs;
};

inline LibraryTolerance library_tolerance(DType t) {
  switch (t) {
    // fp32 sums of up to ~10^4 O(1) terms: partial sums of ~10^2 round at ~10^-5 each, a random
    // walk over the terms stays below ~10^-4.
    case DType::float32: return {{1e-4, 1e-4}, 1e-5, 1e-5};
    // bf16 results: half an ulp is 2^-9 relative; intermediates in bf16 add a few such
    // errors; element bound 4 ulps, mean bound 2 ulps.
    case DType::bfloat16: return {{1.0 / 64, 1.0 / 64}, 1.0 / 128, 1.0 / 256};
    case DType::float16: return {{1.0 / 512, 1.0 / 512}, 1.0 / 1024, 1.0 / 2048};
    default: return {tolerance_for(t), 0.0, 0.0};
  }
}

}  // namespace neuron::testing
