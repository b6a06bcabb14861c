// Access patterns that split or merge a buffer's dims (nl::ap): the view walks the buffer's
// storage seen with another row-major shape (ir.hpp Access::storage). Both executors against a
// plain C++ reference, the IR text round trip of such a view, and the verifier's rule for a
// storage shape that is not the buffer's elements; a tile's bytes read as another dtype (nl::ap_as).
#include <doctest/doctest.h>

#include <string>

#include "exec/differential.hpp"
#include "neuron/ir/equality.hpp"
#include "neuron/ir/printer.hpp"
#include "neuron/isa.hpp"
#include "neuron/language.hpp"
#include "neuron/trace.hpp"

namespace nl = neuron::nl;
namespace isa = neuron::isa;
using neuron::DType;
using neuron::Tensor;

namespace {

constexpr int64_t S = 512, H = 8, J = S / 128;

// x, flat [S H], read as [128, J, H] (an HBM dim split in three) into a [128, J H] tile seen as
// [128, J, H] (a free dim split on chip), doubled, then merged back ([128, J, H] -> [128, J H]).
neuron::Kernel split_kernel() {
  return neuron::trace(
      "split_rows",
      [](nl::tensor x) {
        auto t = nl::ndarray({128, J * H}, nl::float32, nl::sbuf);
        auto tv = nl::ap(t, {{J * H, 128}, {H, J}, {1, H}});
        isa::dma_copy(tv, nl::ap(x, {{J * H, 128}, {H, J}, {1, H}}));
        auto twice = nl::ndarray({128, J, H}, nl::float32, nl::sbuf);
        isa::tensor_scalar(twice, tv, nl::multiply, 2.0f);
        auto out = nl::ndarray({128, J * H}, nl::float32, nl::shared_hbm);
        isa::dma_copy(out, nl::ap(twice, {{J * H, 128}, {1, J * H}}));
        return out;
      },
      {{{S * H}, DType::float32}});
}

// The kernel's IR text parses back to the same kernel (equal, same hash, same text).
void check_round_trip(const neuron::Kernel& k, const std::string& text) {
  neuron::Kernel back = neuron::parse_kernel(text);
  CHECK(neuron::equal(back, k));
  CHECK(neuron::hash_value(back) == neuron::hash_value(k));
  CHECK(neuron::print(back) == text);
}

// The UserError message of compiling the kernel `text` describes ("" when it compiles).
std::string compile_error(const std::string& text) {
  try {
    neuron::compile(neuron::parse_kernel(text), neuron::default_compile_options());
  } catch (const neuron::UserError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("ap views that split or merge dims walk the storage in another shape, on both executors") {
  auto k = split_kernel();
  Tensor x = Tensor::empty({S * H}, DType::float32);
  for (int64_t i = 0; i < S * H; ++i) x.set(i, static_cast<float>(i % 1013) * 0.25f);
  auto r = neuron::testing::run_both(neuron::compile(k, neuron::default_compile_options()), {x});
  for (int64_t p = 0; p < 128; ++p)
    for (int64_t j = 0; j < J; ++j)
      for (int64_t h = 0; h < H; ++h)
        REQUIRE(r.sim[0].get(p * J * H + j * H + h) == 2.0f * x.get(p * J * H + j * H + h));
}

TEST_CASE("a view of reshaped storage round-trips through the IR text; a wrong shape is refused") {
  auto k = split_kernel();
  std::string text = neuron::print(k);
  INFO(text);
  // x and t are split ([128, 4, 8]); twice, a [128, 4, 8] tile, is merged.
  CHECK(text.find(" as [128, 4, 8][") != std::string::npos);
  const std::string merged = " as [128, 32][0:+128, 0:+32]";
  const auto at = text.find(merged);
  REQUIRE(at != std::string::npos);
  check_round_trip(k, text);

  // The same view without the storage shape is another view (and has the wrong rank).
  std::string plain = text;
  plain.erase(at, std::string(" as [128, 32]").size());
  CHECK_THROWS_WITH(neuron::parse_kernel(plain), doctest::Contains("expected 3"));

  // A storage from another element (ir.hpp Access::origin) prints, parses and compiles.
  std::string moved = text;
  moved.replace(at, merged.size(), " as [128, 29] from 3[0:+128, 0:+29]");
  moved.replace(moved.find("out0[0:+128, 0:+32]"), std::string("out0[0:+128, 0:+32]").size(),
                "out0[0:+128, 0:+29]");
  neuron::Kernel from = neuron::parse_kernel(moved);
  CHECK(neuron::print(from) == moved);
  CHECK_FALSE(neuron::equal(from, k));
  CHECK(compile_error(moved).empty());

  // A storage shape with other elements, or other partitions, is the verifier's error.
  for (auto [view, why] :
       {std::pair{" as [128, 33][0:+128, 0:+33]", "reaches element 32, past its 32 elements"},
        std::pair{" as [128, 30] from 3[0:+128, 0:+30]", "reaches element 32, past its 32"},
        std::pair{" as [64, 64][0:+64, 0:+64]", "changes its partition dim"}}) {
    std::string bad = text;
    bad.replace(at, merged.size(), view);
    const std::string msg = compile_error(bad);
    INFO(msg);
    CHECK(msg.find("shape-mismatch") != std::string::npos);
    CHECK(msg.find(why) != std::string::npos);
  }
}

TEST_CASE("an ap walk out of storage order is one transposing view; a bad order is refused") {
  // x [4, 128, 8] read as [128, 4, 8]: partition p, block b, element e = x[b, p, e].
  auto k = neuron::trace(
      "transpose_blocks",
      [](nl::tensor x) {
        auto t = nl::ndarray({128, 4, 8}, nl::float32, nl::sbuf);
        isa::dma_copy(t, nl::ap(x, {{8, 128}, {128 * 8, 4}, {1, 8}}));
        auto out = nl::ndarray({128, 4, 8}, nl::float32, nl::shared_hbm);
        isa::dma_copy(out, t);
        return out;
      },
      {{{4, 128, 8}, DType::float32}});
  Tensor x = Tensor::empty({4, 128, 8}, DType::float32);
  for (int64_t i = 0; i < x.elements(); ++i) x.set(i, static_cast<float>(i));
  neuron::Compiled c = neuron::compile(k, neuron::default_compile_options());
  CHECK(c.program.body.size() == 2);  // one DMA in, one out: no per-block copies
  auto r = neuron::testing::run_both(c, {x});
  for (int64_t p = 0; p < 128; ++p)
    for (int64_t b = 0; b < 4; ++b)
      for (int64_t e = 0; e < 8; ++e)
        REQUIRE(r.sim[0].get((p * 4 + b) * 8 + e) == x.get((b * 128 + p) * 8 + e));

  std::string text = neuron::print(k);
  INFO(text);
  const std::string view = "in0[0:+4, 0:+128, 0:+8] order [1, 0, 2]";
  const auto at = text.find(view);
  REQUIRE(at != std::string::npos);
  check_round_trip(k, text);
  for (auto [order, why] : {std::pair{"order [1, 1, 2]", "is not one of each kept dim"},
                            std::pair{"order [1, 0]", "is not one of each kept dim"}}) {
    std::string bad = text;
    bad.replace(at + view.find("order"), std::string("order [1, 0, 2]").size(), order);
    const std::string msg = compile_error(bad);
    INFO(msg);
    CHECK(msg.find(why) != std::string::npos);
  }
}

TEST_CASE("a tile's bytes read as another dtype (nl::ap_as): both executors, text, verifier") {
  // x fp32 [128, 16]: its exponent fields through an int32 view, and 8 of its bytes' bf16
  // halves (halves 4..11 of each row: fp32 words 2..5).
  auto k = neuron::trace(
      "bit_fields",
      [](nl::tensor x) {
        auto t = nl::ndarray({128, 16}, nl::float32, nl::sbuf);
        isa::dma_copy(t, x);
        auto bits = nl::ap_as(t, DType::int32, {{16, 128}, {1, 16}});
        auto e = nl::ndarray({128, 16}, nl::int32, nl::sbuf);
        isa::tensor_scalar(e, bits, nl::right_shift, 23, false, nl::bitwise_and, 255);
        auto out = nl::ndarray({128, 16}, nl::int32, nl::shared_hbm);
        isa::dma_copy(out, e);
        auto halves = nl::ndarray({128, 8}, nl::bfloat16, nl::shared_hbm);
        isa::dma_copy(halves, nl::ap_as(t, DType::bfloat16, {{32, 128}, {1, 8}}, nl::index(4)));
        return std::vector<nl::tensor>{out, halves};
      },
      {{{128, 16}, DType::float32}});
  Tensor x = Tensor::empty({128, 16}, DType::float32);
  for (int64_t i = 0; i < x.elements(); ++i)
    x.set(i, static_cast<float>((i * 7919) % 2003 - 1000) * 0.37f);
  auto r = neuron::testing::run_both(neuron::compile(k, neuron::default_compile_options()), {x});
  const auto* words = static_cast<const uint32_t*>(x.data());
  const auto* got = static_cast<const int32_t*>(r.sim[0].data());
  const auto* halves = static_cast<const uint16_t*>(r.sim[1].data());
  for (int64_t p = 0; p < 128; ++p) {
    for (int64_t j = 0; j < 16; ++j)
      REQUIRE(got[p * 16 + j] == static_cast<int32_t>((words[p * 16 + j] >> 23) & 255));
    for (int64_t j = 0; j < 8; ++j) {  // half 4 + j of row p: word 2 + j / 2, low half first
      const uint32_t w = words[p * 16 + 2 + j / 2];
      REQUIRE(halves[p * 8 + j] == static_cast<uint16_t>(j % 2 ? w >> 16 : w & 0xFFFF));
    }
  }

  std::string text = neuron::print(k);
  INFO(text);
  const std::string view = " bitcast int32 as [128, 16][0:+128, 0:+16]";
  const auto at = text.find(view);
  REQUIRE(at != std::string::npos);
  check_round_trip(k, text);
  for (auto [bad_view, rule, why] :
       {std::tuple{" bitcast int32 as [128, 17][0:+128, 0:+17]", "shape-mismatch",
                   "as [128, 17] int32 from element 0: it reaches element 16, past its 16"},
        std::tuple{" bitcast int8 as [128, 65][0:+128, 0:+65]", "shape-mismatch",
                   "reaches element 64, past its 64 elements per partition"}}) {
    std::string bad = text;
    bad.replace(at, view.size(), bad_view);
    const std::string msg = compile_error(bad);
    INFO(msg);
    CHECK(msg.find(rule) != std::string::npos);
    CHECK(msg.find(why) != std::string::npos);
  }
  // On an HBM tensor it is not an IR view (HBM bit casts are DMA operands of the Python layer).
  std::string hbm = text;
  const std::string x_view = "dma_copy(dst=t0[0:+128, 0:+16], src=in0[0:+128, 0:+16])";
  const auto xa = hbm.find(x_view);
  REQUIRE(xa != std::string::npos);
  hbm.replace(xa, x_view.size(),
              "dma_copy(dst=t0[0:+128, 0:+16], src=in0 bitcast int32 as [128, 16][0:+128, 0:+16])");
  const std::string msg = compile_error(hbm);
  INFO(msg);
  CHECK(msg.find("reinterpreting views are of on-chip tiles") != std::string::npos);
}
