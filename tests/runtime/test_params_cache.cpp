// Compile-time kernel parameters and the compile cache: the key is the IR text, so parameter
// values that trace to the same IR share a compile and values that change it never collide.
#include <doctest/doctest.h>

#include <cmath>

#include "cache_test_util.hpp"
#include "neuron/neuron.hpp"
#include "neuron/runtime/native/native.hpp"

using namespace neuron;
using namespace neuron::cache_test;

TEST_CASE("kernel parameters: values that leave the IR alone share one native compile") {
  TempDir d;
  EnvGuard dir("NEURON_CACHE_DIR", d.str().c_str());
  EnvGuard mode("NEURON_CACHE", nullptr);
  auto kernel = [](nl::tensor x, double factor, int unused) {
    auto out = nl::ndarray(x.shape(), x.dtype(), nl::shared_hbm, "out");
    nl::store(out, nl::load(x) * factor);
    return out;
  };
  auto key = [&](double factor, int unused) {
    Kernel k = trace("scale", kernel, {{{128, 8}, DType::float32}}, params(factor, unused));
    return compile_native(k).report();
  };
  CompileReport first = key(2.0, 0);
  CompileReport same_ir = key(2.0, 1);
  CHECK(same_ir.key == first.key);
  CHECK(same_ir.cache == "memory");  // no recompile for a parameter the IR does not show
  CompileReport other = key(std::nextafter(2.0, 3.0), 0);
  CHECK(other.key != first.key);  // one ulp apart: different IR, different key
  CHECK(other.cache == "cold");
}
