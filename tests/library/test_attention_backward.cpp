// kernels/attention_backward.hpp: dq, dk, dv from the saved logsumexp against float64
// gradients, causal or not, GQA (dk, dv summed over the group), L != S, E != Ev, fully masked
// rows, bf16; both executors.
#include <doctest/doctest.h>

#include "attention_cases.hpp"
#include "library_check.hpp"
#include "neuron/kernels.hpp"  // the umbrella header: every family
#include "reference.hpp"

using namespace neuron;
using namespace neuron::testing;
namespace kn = neuron::kernels;

namespace {

// math: attention_math_backward (from the inputs and dout only).
void run_backward(const ref::AttentionShape& a, DType dt, bool native_only = false,
                  bool math = false) {
  CAPTURE(a.B);
  CAPTURE(a.Hq);
  CAPTURE(a.Hkv);
  CAPTURE(a.L);
  CAPTURE(a.S);
  CAPTURE(a.E);
  CAPTURE(a.Ev);
  CAPTURE(a.causal);
  CAPTURE(a.offset);
  CAPTURE(dtype_name(dt));
  AttentionInputs in = make_inputs(a, dt, 61);
  Tensor dout = random_tensor({a.B, a.Hq, a.L, a.Ev}, dt, 64);
  // The saved forward results as the forward kernel would hand them over: out in dt, lse fp32.
  auto fwd = ref::attention(a, values(in.q), values(in.k), values(in.v));
  Tensor out = Tensor::empty({a.B, a.Hq, a.L, a.Ev}, dt),
         lse = Tensor::empty({a.B, a.Hq, a.L}, DType::float32);
  for (int64_t i = 0; i < out.elements(); ++i) out.set(i, static_cast<float>(fwd.out[i]));
  for (int64_t i = 0; i < lse.elements(); ++i) lse.set(i, static_cast<float>(fwd.lse[i]));
  auto want = ref::attention_backward(a, values(in.q), values(in.k), values(in.v), values(dout));
  const kn::AttentionConfig cfg = config_of(a);
  CAPTURE(math);
  Kernel k = trace("attention_backward",
                   [cfg, math](nl::tensor q, nl::tensor k, nl::tensor v, nl::tensor o,
                               nl::tensor dout, nl::tensor lse) {
                     return math ? kn::attention_math_backward(q, k, v, dout, std::nullopt, cfg)
                                 : kn::attention_backward(q, k, v, o, dout, lse, cfg);
                   },
                   {{{a.B, a.Hq, a.L, a.E}, dt},
                    {{a.B, a.Hkv, a.S, a.E}, dt},
                    {{a.B, a.Hkv, a.S, a.Ev}, dt},
                    {{a.B, a.Hq, a.L, a.Ev}, dt},
                    {{a.B, a.Hq, a.L, a.Ev}, dt},
                    {{a.B, a.Hq, a.L}, DType::float32}});
  auto grid = kn::attention_backward_grid({a.B, a.Hq, a.L, a.E}, {a.B, a.Hkv, a.S, a.E});
  const std::vector<Tensor> ins{in.q, in.k, in.v, out, dout, lse};
  if (native_only)
    check_native(k, ins, grid, {want.dq, want.dk, want.dv}, {"dq", "dk", "dv"});
  else
    check_kernel(k, ins, grid, {want.dq, want.dk, want.dv}, {"dq", "dk", "dv"});
}

}  // namespace

TEST_CASE("attention backward: non-causal, odd lengths, L != S, E != Ev, GQA") {
  run_backward({2, 2, 1, 7, 600, 16, 8}, DType::float32);
}

TEST_CASE("attention backward: causal, fully masked rows, GQA") {
  run_backward({1, 4, 2, 130, 70, 16, 40, true}, DType::float32);
  run_backward({1, 1, 1, 150, 20, 8, 8, true, -135}, DType::float32);
  run_backward({1, 2, 2, 40, 200, 8, 8, true, 160}, DType::float32);
}

TEST_CASE("attention backward: causal key and query tiles in rolled loops (L, S >= 512)") {
  run_backward({1, 1, 1, 1100, 1100, 16, 8, true}, DType::float32);  // then unrolled tails
  run_backward({1, 2, 1, 700, 1000, 8, 8, true, -135}, DType::float32);  // GQA, rows 0..134 see none
}

TEST_CASE("attention backward: bf16") {
  run_backward({1, 4, 2, 129, 100, 64, 40, true}, DType::bfloat16);
}

TEST_CASE("attention backward: head dims over 128 contract in chunks of 128 partitions") {
  run_backward({1, 2, 1, 130, 100, 192, 160}, DType::float32);  // E = 128 + 64, GQA
  run_backward({1, 1, 1, 70, 90, 129, 300, true}, DType::float32);
  run_backward({1, 1, 1, 129, 130, 256, 256, true}, DType::bfloat16, /*native_only=*/true);
}

TEST_CASE("attention backward: larger sizes natively") {
  run_backward({1, 4, 1, 300, 300, 128, 128, true}, DType::bfloat16, /*native_only=*/true);
}

TEST_CASE("attention math backward: the online statistics over key blocks, masks, GQA, bf16") {
  run_backward({2, 2, 1, 7, 600, 16, 8}, DType::float32, false, true);  // two key blocks
  run_backward({1, 4, 2, 130, 70, 16, 40, true}, DType::float32, false, true);
  run_backward({1, 1, 1, 150, 20, 8, 8, true, -135}, DType::float32, false, true);    // no keys
  run_backward({1, 2, 1, 700, 1000, 8, 8, true, -135}, DType::float32, false, true);  // rolled
  run_backward({1, 2, 1, 130, 100, 192, 160}, DType::float32, false, true);           // E over 128
  run_backward({1, 4, 2, 129, 100, 64, 40, true}, DType::bfloat16, false, true);
}
