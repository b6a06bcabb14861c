// kernels/softmax.hpp: softmax forward and backward over odd row counts, whole rows (one pass)
// and rows longer than kSoftmaxWhole (two passes; the second rescales the exp the first kept,
// in the output or in SBUF, or computes it again), fp32 and bf16, several programs.
#include <doctest/doctest.h>

#include "library_check.hpp"
#include "neuron/kernels/softmax.hpp"
#include "reference.hpp"

using namespace neuron;
using namespace neuron::testing;
namespace kn = neuron::kernels;

namespace {

void run_softmax(int64_t R, int64_t C, DType dt, int64_t programs = 1, bool native_only = false) {
  CAPTURE(R);
  CAPTURE(C);
  CAPTURE(dtype_name(dt));
  CAPTURE(programs);
  kn::SoftmaxConfig cfg{programs};
  Tensor x = random_tensor({R, C}, dt, 21, -6, 6), dy = random_tensor({R, C}, dt, 22);
  auto fwd = trace("softmax", [cfg](nl::tensor x) { return kn::softmax(x, cfg); }, {{{R, C}, dt}});
  auto y_ref = ref::softmax(values(x), R, C);
  // The backward takes y as the forward returned it (rounded to dt), like autograd does.
  Tensor y = Tensor::empty({R, C}, dt);
  for (int64_t i = 0; i < R * C; ++i) y.set(i, static_cast<float>(y_ref[i]));
  auto bwd = trace("softmax_backward",
                   [cfg](nl::tensor y, nl::tensor dy) { return kn::softmax_backward(y, dy, cfg); },
                   {{{R, C}, dt}, {{R, C}, dt}});
  auto dx_ref = ref::softmax_backward(values(y), values(dy), R, C);
  if (native_only) {
    check_native(fwd, {x}, kn::softmax_grid(cfg), {y_ref}, {"y"});
    check_native(bwd, {y, dy}, kn::softmax_grid(cfg), {dx_ref}, {"dx"});
  } else {
    check_kernel(fwd, {x}, kn::softmax_grid(cfg), {y_ref}, {"y"});
    check_kernel(bwd, {y, dy}, kn::softmax_grid(cfg), {dx_ref}, {"dx"});
  }
}

}  // namespace

TEST_CASE("softmax forward and backward: odd sizes, one pass") {
  run_softmax(1, 1, DType::float32);
  run_softmax(7, 129, DType::float32);
  run_softmax(130, 33, DType::bfloat16);
  run_softmax(256, 40, DType::float32, 2);
}

TEST_CASE("softmax forward and backward: whole rows longer than one chunk (one pass)") {
  run_softmax(3, kn::kSoftmaxChunk * 2 + 7, DType::float32);
  run_softmax(2, kn::kSoftmaxWhole, DType::bfloat16);
}

TEST_CASE("softmax forward and backward: rows longer than kSoftmaxWhole (two passes)") {
  run_softmax(3, kn::kSoftmaxWhole + kn::kSoftmaxChunk + 7, DType::float32);
  run_softmax(2, kn::kSoftmaxWhole + 1, DType::bfloat16);
  // fp32 reads back the exp it stored (the output is then not zeroed natively), per program;
  // bf16 keeps it in SBUF up to kSoftmaxKeepOnChip columns and computes it again past that.
  run_softmax(6, 2 * kn::kSoftmaxWhole + 5, DType::float32, 3);
  run_softmax(4, 2 * kn::kSoftmaxWhole + 5, DType::bfloat16, 2);
  run_softmax(2, kn::kSoftmaxKeepOnChip + 3, DType::bfloat16);
}

TEST_CASE("softmax: larger sizes natively") {
  run_softmax(129, 32007, DType::bfloat16, 1, true);
}
