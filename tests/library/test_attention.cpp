// kernels/attention.hpp: flash attention forward (out and logsumexp) against float64, causal
// or not, GQA, L != S, E != Ev, odd lengths, fully masked rows, bf16; both executors.
#include <doctest/doctest.h>

#include "attention_cases.hpp"
#include "library_check.hpp"
#include "neuron/kernels/attention.hpp"
#include "reference.hpp"

using namespace neuron;
using namespace neuron::testing;
namespace kn = neuron::kernels;

namespace {

Kernel forward_kernel(const ref::AttentionShape& a, DType dt, bool stream) {
  kn::AttentionConfig cfg = config_of(a);
  if (stream) cfg.resident_kv_bytes = 0;
  return trace(
      "attention_forward",
      [cfg](nl::tensor q, nl::tensor k, nl::tensor v) {
        return kn::attention_forward(q, k, v, cfg);
      },
      {{{a.B, a.Hq, a.L, a.E}, dt}, {{a.B, a.Hkv, a.S, a.E}, dt}, {{a.B, a.Hkv, a.S, a.Ev}, dt}});
}

// stream: K and V read from HBM per key block instead of kept on chip.
void run_forward(const ref::AttentionShape& a, DType dt, bool native_only = false,
                 bool stream = false) {
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
  CAPTURE(stream);
  AttentionInputs in = make_inputs(a, dt, 11);
  auto want = ref::attention(a, values(in.q), values(in.k), values(in.v));
  Kernel k = forward_kernel(a, dt, stream);
  auto grid = kn::attention_grid({a.B, a.Hq, a.L, a.E}, {a.B, a.Hkv, a.S, a.E});
  if (native_only)
    check_native(k, {in.q, in.k, in.v}, grid, {want.out, want.lse}, {"out", "lse"});
  else
    check_kernel(k, {in.q, in.k, in.v}, grid, {want.out, want.lse}, {"out", "lse"});
}

}  // namespace

TEST_CASE("attention forward: non-causal, odd lengths, L != S, E != Ev, GQA") {
  run_forward({2, 2, 1, 7, 600, 16, 8}, DType::float32);  // B = 2, two key blocks with a tail
  run_forward({1, 1, 1, 1, 1, 128, 128, false, 0, 0.3}, DType::float32);
}

TEST_CASE("attention forward: causal, top-left and bottom-right diagonals") {
  run_forward({1, 4, 2, 130, 70, 16, 40, true}, DType::float32);     // L > S, GQA
  run_forward({1, 2, 2, 40, 200, 8, 8, true, 160}, DType::float32);  // offset S - L
}

TEST_CASE("attention forward: causal query tiles in rolled groups of four (L >= 512)") {
  run_forward({1, 1, 1, 1100, 1100, 16, 8, true}, DType::float32);  // 2 groups, then a tail
  run_forward({1, 2, 1, 600, 1000, 8, 8, true, 400}, DType::float32);  // bottom-right, GQA
  run_forward({1, 1, 1, 800, 800, 8, 8, true, -135}, DType::float32);  // rows 0..134 see none
}

TEST_CASE("attention forward: fully masked rows give out 0 and lse -inf, no NaN") {
  // Offset -135: queries 0..134 (more than a tile) see no key.
  run_forward({1, 1, 1, 150, 20, 8, 8, true, -135}, DType::float32);
}

TEST_CASE("attention forward: bf16 with fp32 statistics") {
  run_forward({1, 4, 2, 129, 100, 64, 40, true}, DType::bfloat16);
}

TEST_CASE("attention forward: K and V streamed from HBM instead of kept on chip") {
  run_forward({2, 2, 1, 7, 600, 16, 8}, DType::float32, false, /*stream=*/true);
  run_forward({1, 2, 2, 40, 200, 8, 8, true, 160}, DType::float32, false, /*stream=*/true);
}

TEST_CASE("attention forward: head dims over 128 contract in chunks of 128 partitions") {
  run_forward({1, 2, 1, 130, 200, 192, 160}, DType::float32);  // E = 128 + 64, GQA
  run_forward({1, 1, 1, 70, 90, 129, 300, true}, DType::float32);  // a 1-partition chunk
  run_forward({1, 1, 1, 40, 300, 256, 64, true, 260}, DType::float32, false, /*stream=*/true);
  run_forward({1, 1, 1, 129, 130, 512, 512}, DType::bfloat16, /*native_only=*/true);
}

TEST_CASE("attention forward: larger sizes natively") {
  run_forward({1, 4, 1, 384, 384, 128, 128, true}, DType::bfloat16, /*native_only=*/true);
}

TEST_CASE("attention forward: bad shapes are user errors") {
  auto bad = [](std::vector<int64_t> qs, std::vector<int64_t> ks, std::vector<int64_t> vs) {
    return trace(
        "bad",
        [](nl::tensor q, nl::tensor k, nl::tensor v) { return kn::attention_forward(q, k, v); },
        {{qs, DType::float32}, {ks, DType::float32}, {vs, DType::float32}});
  };
  CHECK_THROWS_WITH_AS(bad({1, 3, 8, 16}, {1, 2, 8, 16}, {1, 2, 8, 16}),
                       doctest::Contains("the 3 query heads must be a multiple of the 2"),
                       UserError);
  CHECK_THROWS_WITH_AS(bad({1, 1, 8, 16}, {1, 1, 8, 32}, {1, 1, 8, 16}),
                       doctest::Contains("shapes do not match"), UserError);
  CHECK_THROWS_WITH_AS(bad({1, 1, 8, 520}, {1, 1, 8, 520}, {1, 1, 8, 16}),
                       doctest::Contains("head dims E=520 and Ev=16 must be at most 512"),
                       UserError);
  CHECK_THROWS_WITH_AS(bad({1, 1, 8, 16}, {1, 1, 8, 16}, {1, 1, 8, 513}),
                       doctest::Contains("Ev=513"), UserError);
}
