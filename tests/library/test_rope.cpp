// kernels/rope.hpp: rotate-half rope forward and backward over odd lengths, fp32 and bf16.
#include <doctest/doctest.h>

#include <cmath>

#include "library_check.hpp"
#include "neuron/kernels/rope.hpp"
#include "reference.hpp"

using namespace neuron;
using namespace neuron::testing;
namespace kn = neuron::kernels;

namespace {

void run_rope(int64_t B, int64_t H, int64_t L, int64_t D, DType dt, bool native_only = false) {
  CAPTURE(B);
  CAPTURE(H);
  CAPTURE(L);
  CAPTURE(D);
  CAPTURE(dtype_name(dt));
  Tensor x = random_tensor({B, H, L, D}, dt, 51, -2, 2);
  Tensor cos = Tensor::empty({L, D / 2}, dt), sin = Tensor::empty({L, D / 2}, dt);
  for (int64_t l = 0; l < L; ++l)
    for (int64_t i = 0; i < D / 2; ++i) {
      const double theta = l * std::pow(10000.0, -2.0 * i / D);
      cos.set(l * (D / 2) + i, static_cast<float>(std::cos(theta)));
      sin.set(l * (D / 2) + i, static_cast<float>(std::sin(theta)));
    }
  const std::vector<TensorSpec> specs{{{B, H, L, D}, dt}, {{L, D / 2}, dt}, {{L, D / 2}, dt}};
  auto fwd = trace(
      "rope", [](nl::tensor x, nl::tensor c, nl::tensor s) { return kn::rope(x, c, s); }, specs);
  auto bwd = trace(
      "rope_backward",
      [](nl::tensor dy, nl::tensor c, nl::tensor s) { return kn::rope_backward(dy, c, s); }, specs);
  auto y = ref::rope(values(x), values(cos), values(sin), B * H, L, D);
  auto dx = ref::rope(values(x), values(cos), values(sin), B * H, L, D, -1);
  auto grid = kn::rope_grid({B, H, L, D});
  if (native_only) {
    check_native(fwd, {x, cos, sin}, grid, {y}, {"y"});
    check_native(bwd, {x, cos, sin}, grid, {dx}, {"dx"});
  } else {
    check_kernel(fwd, {x, cos, sin}, grid, {y}, {"y"});
    check_kernel(bwd, {x, cos, sin}, grid, {dx}, {"dx"});
  }
}

}  // namespace

TEST_CASE("rope forward and backward") {
  run_rope(1, 1, 1, 2, DType::float32);
  run_rope(2, 3, 129, 64, DType::float32);
  run_rope(1, 2, 7, 128, DType::bfloat16);
}

TEST_CASE("rope: larger sizes natively") {
  run_rope(2, 8, 1000, 128, DType::float32, true);
}
