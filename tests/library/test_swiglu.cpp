// kernels/swiglu.hpp: forward and backward over odd sizes and rows wider than a chunk, fp32
// and bf16, several programs.
#include <doctest/doctest.h>

#include "library_check.hpp"
#include "neuron/kernels/swiglu.hpp"
#include "reference.hpp"

using namespace neuron;
using namespace neuron::testing;
namespace kn = neuron::kernels;

namespace {

void run_swiglu(int64_t R, int64_t H, DType dt, int64_t programs = 1, bool native_only = false) {
  CAPTURE(R);
  CAPTURE(H);
  CAPTURE(dtype_name(dt));
  kn::SwigluConfig cfg{programs};
  Tensor x = random_tensor({R, 2 * H}, dt, 41, -4, 4), dy = random_tensor({R, H}, dt, 42);
  auto fwd =
      trace("swiglu", [cfg](nl::tensor x) { return kn::swiglu(x, cfg); }, {{{R, 2 * H}, dt}});
  auto bwd = trace("swiglu_backward",
                   [cfg](nl::tensor x, nl::tensor dy) { return kn::swiglu_backward(x, dy, cfg); },
                   {{{R, 2 * H}, dt}, {{R, H}, dt}});
  auto y = ref::swiglu(values(x), R, H);
  auto dx = ref::swiglu_backward(values(x), values(dy), R, H);
  auto grid = kn::swiglu_grid(cfg);
  if (native_only) {
    check_native(fwd, {x}, grid, {y}, {"y"});
    check_native(bwd, {x, dy}, grid, {dx}, {"dx"});
  } else {
    check_kernel(fwd, {x}, grid, {y}, {"y"});
    check_kernel(bwd, {x, dy}, grid, {dx}, {"dx"});
  }
}

}  // namespace

TEST_CASE("swiglu forward and backward") {
  run_swiglu(1, 1, DType::float32);
  run_swiglu(129, 40, DType::bfloat16);
  run_swiglu(4, kn::kSwigluChunk + 3, DType::float32);
  run_swiglu(256, 16, DType::float32, 2);
}

TEST_CASE("swiglu: larger sizes natively") {
  run_swiglu(1000, 2752, DType::bfloat16, kn::split_rows(1000), true);
}
