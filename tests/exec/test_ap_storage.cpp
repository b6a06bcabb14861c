// Access patterns that split or merge a buffer's dims (nl::ap): the view walks the buffer's
// storage seen with another row-major shape (ir.hpp Access::storage). Both executors against a
// plain C++ reference, the IR text round trip of such a view, and the verifier's rule for a
// storage shape that is not the buffer's elements.
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
