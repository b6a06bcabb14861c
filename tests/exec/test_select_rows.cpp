// max8, nc_find_index8, nc_match_replace8, bn_stats and tensor_partition_reduce on long rows
// (the kernels' 16-at-a-time paths: instr_kernels.cpp), on both executors, against references
// written here from the rules (docs/language-reference.md, docs/numerics.md "Reductions"):
// ties, NaN, signed zeros, infinities, rows that are not fp32, and sums whose bits depend on
// the order.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "exec/differential.hpp"
#include "neuron/isa.hpp"
#include "neuron/language.hpp"
#include "neuron/trace.hpp"

namespace nl = neuron::nl;
namespace isa = neuron::isa;
using neuron::DType;
using neuron::Tensor;
using neuron::testing::compile_default;
using neuron::testing::run_both;

namespace {

uint32_t bits(float f) {
  return std::bit_cast<uint32_t>(f);
}

// f rounded to bf16 (to nearest, ties to even; NaN kept as it is): a tile's value, written
// from the rule (docs/numerics.md) rather than taken from the builtins under test.
float bf16_value(float f) {
  if (std::isnan(f)) return f;
  uint32_t u = bits(f);
  u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  float g;
  std::memcpy(&g, &u, 4);
  return g;
}

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// Rows of F values: row kinds that reach every branch of the fast paths.
std::vector<std::vector<float>> test_rows(int64_t F, int count) {
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<std::vector<float>> rows;
  for (int r = 0; r < count; ++r) {
    std::vector<float> x(static_cast<size_t>(F));
    for (auto& v : x) v = u(gen);
    switch (r % 8) {
      case 1:  // few distinct values: ties at the 8th place across many groups
        for (auto& v : x) v = std::floor((v + 1) * 3);
        break;
      case 2:  // ascending: every value enters the list
        for (int64_t j = 0; j < F; ++j) x[static_cast<size_t>(j)] = static_cast<float>(j) * 0.5f;
        break;
      case 3:  // zeros of both signs, and -inf
        for (int64_t j = 0; j < F; ++j)
          x[static_cast<size_t>(j)] = j % 5 == 0 ? -kInf : (j % 3 ? 0.0f : -0.0f);
        break;
      case 4:  // a NaN among the first 8
        x[static_cast<size_t>(std::min<int64_t>(3, F - 1))] = kNaN;
        break;
      case 5:  // a NaN late in the row
        x[static_cast<size_t>(std::max<int64_t>(F - 20, 0))] = kNaN;
        break;
      case 6:  // +inf and the largest values in the tail (past the whole groups of 16)
        x[static_cast<size_t>(F - 1)] = kInf;
        x[static_cast<size_t>(std::max<int64_t>(F - 2, 0))] = 7.0f;
        break;
      default:
        break;
    }
    rows.push_back(x);
  }
  return rows;
}

Tensor tensor_of(const std::vector<std::vector<float>>& rows) {
  const int64_t P = static_cast<int64_t>(rows.size()), F = static_cast<int64_t>(rows[0].size());
  Tensor t = Tensor::empty({P, F}, DType::float32);
  for (int64_t p = 0; p < P; ++p)
    for (int64_t j = 0; j < F; ++j)
      t.set(p * F + j, rows[static_cast<size_t>(p)][static_cast<size_t>(j)]);
  return t;
}

// max8's rule as written: insertion into a descending list of 8, after equal values, and once
// full only when above the last.
std::vector<float> max8_rule(const std::vector<float>& x) {
  std::vector<float> top;
  for (float v : x) {
    if (top.size() == 8 && !(v > top[7])) continue;
    if (top.size() == 8) top.pop_back();
    size_t k = top.size();
    while (k > 0 && v > top[k - 1]) --k;
    top.insert(top.begin() + static_cast<std::ptrdiff_t>(k), v);
  }
  return top;
}

// The position of the (skip + 1)-th value equal to v, or -1.
int64_t nth_equal(const std::vector<float>& x, float v, int skip) {
  for (size_t j = 0; j < x.size(); ++j)
    if (x[j] == v && skip-- == 0) return static_cast<int64_t>(j);
  return -1;
}

// Lane-blocked fp32 sum (docs/numerics.md "Reductions").
float lane_sum(const std::vector<float>& v) {
  float lane[16] = {};
  for (size_t i = 0; i < v.size(); ++i) lane[i % 16] += v[i];
  for (int h = 8; h >= 1; h /= 2)
    for (int j = 0; j < h; ++j) lane[j] += lane[j + h];
  return lane[0];
}

}  // namespace

TEST_CASE("max8 on long rows keeps the rule's top 8: ties, NaN, signed zeros, infinities") {
  for (int64_t F : {16, 37, 512, 2000}) {
    const auto rows = test_rows(F, 16);
    auto k = neuron::trace("max8_rows",
                           [&](nl::tensor x) {
                             auto out = nl::ndarray({16, 8}, nl::float32, nl::shared_hbm);
                             auto m = nl::ndarray({16, 8}, nl::float32);
                             isa::max8(m, nl::load(x));
                             nl::store(out, m);
                             return out;
                           },
                           {{{16, F}, DType::float32}});
    auto r = run_both(compile_default(k), {tensor_of(rows)});
    for (int64_t p = 0; p < 16; ++p) {
      const auto want = max8_rule(rows[static_cast<size_t>(p)]);
      for (int64_t k8 = 0; k8 < 8; ++k8) {
        INFO("F=", F, " row ", p, " place ", k8);
        CHECK(bits(r.sim[0].get(p * 8 + k8)) == bits(want[static_cast<size_t>(k8)]));
      }
    }
  }
}

TEST_CASE("nc_find_index8 and nc_match_replace8 on long rows, bf16 data included") {
  const int64_t F = 600;
  auto rows = test_rows(F, 16);
  for (auto& x : rows)  // repeat the row's first value further on, so a repeated val skips it
    for (int64_t j = 0; j < F; j += 97) x[static_cast<size_t>(j)] = x[0];
  for (DType dt : {DType::float32, DType::bfloat16}) {
    auto k = neuron::trace("find8_rows",
                           [&](nl::tensor x, nl::tensor v) {
                             auto ix = nl::ndarray({16, 8}, nl::uint32, nl::shared_hbm);
                             auto rep = nl::ndarray({16, F}, nl::float32, nl::shared_hbm);
                             auto t32 = nl::load(x);
                             auto t = nl::ndarray({16, F}, dt);
                             isa::tensor_copy(t, t32);
                             auto vals = nl::load(v);
                             auto i = nl::ndarray({16, 8}, nl::uint32);
                             isa::nc_find_index8(i, t, vals);
                             auto out = nl::ndarray({16, F}, dt);
                             isa::nc_match_replace8(out, t, vals, -5.0);
                             auto o32 = nl::ndarray({16, F}, nl::float32);
                             isa::tensor_copy(o32, out);
                             nl::store(ix, i);
                             nl::store(rep, o32);
                             return std::vector<nl::tensor>{ix, rep};
                           },
                           {{{16, F}, DType::float32}, {{16, 8}, DType::float32}});
    // The row's values as the kernel compares them (rounded to bf16 where the tile is bf16).
    auto as_dt = [&](float f) { return dt == DType::float32 ? f : bf16_value(f); };
    std::vector<std::vector<float>> seen = rows;
    for (auto& x : seen)
      for (auto& f : x) f = as_dt(f);
    Tensor vals = Tensor::empty({16, 8}, DType::float32);
    std::vector<std::vector<float>> want_vals(16);
    for (int64_t p = 0; p < 16; ++p) {
      const auto& x = seen[static_cast<size_t>(p)];
      // Values present (some twice, the first value three times), one absent, one NaN.
      std::vector<float> v = {x[0], x[F / 2], x[0], x[5], 12345.0f, x[F - 1], x[0], kNaN};
      want_vals[static_cast<size_t>(p)] = v;
      for (int64_t k8 = 0; k8 < 8; ++k8) vals.set(p * 8 + k8, v[static_cast<size_t>(k8)]);
    }
    auto r = run_both(compile_default(k), {tensor_of(rows), vals});
    for (int64_t p = 0; p < 16; ++p) {
      const auto& x = seen[static_cast<size_t>(p)];
      const auto& v = want_vals[static_cast<size_t>(p)];
      std::vector<float> replaced = x;
      for (int k8 = 0; k8 < 8; ++k8) {
        int before = 0, after = 0;
        for (int j = 0; j < 8; ++j) {
          before += j < k8 && v[static_cast<size_t>(j)] == v[static_cast<size_t>(k8)];
          after += j > k8 && v[static_cast<size_t>(j)] == v[static_cast<size_t>(k8)];
        }
        const int64_t fwd = nth_equal(x, v[static_cast<size_t>(k8)], before);
        INFO("dtype ", neuron::dtype_name(dt), " row ", p, " slot ", k8);
        // -1 is all ones in the uint32 tile (read back as a float, as Tensor::get gives it).
        CHECK(r.sim[0].get(p * 8 + k8) == static_cast<float>(fwd < 0 ? 0xffffffffu : fwd));
        const int64_t rev = nth_equal(x, v[static_cast<size_t>(k8)], after);
        if (rev >= 0) replaced[static_cast<size_t>(rev)] = -5.0f;
      }
      for (int64_t j = 0; j < F; ++j) {
        INFO("dtype ", neuron::dtype_name(dt), " row ", p, " element ", j);
        CHECK(bits(r.sim[1].get(p * F + j)) == bits(replaced[static_cast<size_t>(j)]));
      }
    }
  }
}

TEST_CASE("bn_stats sums each parity in the lane-blocked order, bit for bit") {
  // 2^24 then ones: left to right every one is lost (the sum stays 2^24), in 16 lanes the ones
  // of the other lanes add up first; so the bits show the order.
  for (int64_t F : {1, 2, 3, 33, 64, 150, 512}) {
    std::vector<std::vector<float>> rows = test_rows(F, 8);
    for (int p = 0; p < 8; ++p)
      for (auto& v : rows[static_cast<size_t>(p)])
        if (std::isnan(v) || std::isinf(v)) v = 1.5f;
    for (int64_t j = 0; j < F; ++j) {
      rows[0][static_cast<size_t>(j)] = j < 2 ? 16777216.0f : 1.0f;
      rows[1][static_cast<size_t>(j)] = static_cast<float>(j % 7) * 1e6f + 0.1f;
    }
    for (DType dt : {DType::float32, DType::bfloat16}) {
      auto k = neuron::trace("bn_rows",
                             [&](nl::tensor x) {
                               auto out = nl::ndarray({8, 6}, nl::float32, nl::shared_hbm);
                               auto t = nl::ndarray({8, F}, dt);
                               isa::tensor_copy(t, nl::load(x));
                               auto s = nl::ndarray({8, 6}, nl::float32);
                               isa::bn_stats(s, t);
                               nl::store(out, s);
                               return out;
                             },
                             {{{8, F}, DType::float32}});
      auto r = run_both(compile_default(k), {tensor_of(rows)});
      for (int64_t p = 0; p < 8; ++p)
        for (int parity = 0; parity < 2; ++parity) {
          std::vector<float> v;
          for (int64_t j = parity; j < F; j += 2) {
            const float f = rows[static_cast<size_t>(p)][static_cast<size_t>(j)];
            v.push_back(dt == DType::bfloat16 ? bf16_value(f) : f);  // the tile's value
          }
          const float count = static_cast<float>(v.size());
          const float mean = v.empty() ? 0.0f : lane_sum(v) / count;
          std::vector<float> sq;
          for (float f : v) {
            const float e = f - mean;
            sq.push_back(e * e);
          }
          INFO("F=", F, " dtype ", neuron::dtype_name(dt), " row ", p, " parity ", parity);
          CHECK(r.sim[0].get(p * 6 + 3 * parity) == count);
          CHECK(bits(r.sim[0].get(p * 6 + 3 * parity + 1)) == bits(mean));
          CHECK(bits(r.sim[0].get(p * 6 + 3 * parity + 2)) == bits(lane_sum(sq)));
        }
      if (F >= 34) {  // row 0: left to right, every one after 2^24 is lost; not in 16 lanes
        float ltr = 0;
        for (int64_t j = 0; j < F; j += 2) ltr += rows[0][static_cast<size_t>(j)];
        CHECK(bits(r.sim[0].get(1)) != bits(ltr / r.sim[0].get(0)));
      }
    }
  }
}

TEST_CASE("tensor_partition_reduce of bf16 partitions: each column's chain in partition order") {
  const int64_t P = 32, F = 70;
  // Magnitudes 2^0 .. 2^22 apart between partitions, so that a sum's bits depend on its order.
  std::vector<std::vector<float>> rows = test_rows(F, static_cast<int>(P));
  for (int64_t p = 0; p < P; ++p)
    for (auto& v : rows[static_cast<size_t>(p)])
      v = std::isnan(v) ? 0.25f : std::ldexp(v, static_cast<int>((p * 5) % 23));
  auto k = neuron::trace("preduce_rows",
                         [&](nl::tensor x) {
                           auto sum = nl::ndarray({1, F}, nl::float32, nl::shared_hbm);
                           auto mn = nl::ndarray({1, F}, nl::float32, nl::shared_hbm);
                           auto mx = nl::ndarray({1, F}, nl::float32, nl::shared_hbm);
                           auto t = nl::ndarray({P, F}, nl::bfloat16);
                           isa::tensor_copy(t, nl::load(x));
                           auto a = nl::ndarray({1, F}, nl::float32);
                           isa::tensor_partition_reduce(a, nl::add, t);
                           auto b = nl::ndarray({1, F}, nl::float32);
                           isa::tensor_partition_reduce(b, nl::minimum, t);
                           auto c = nl::ndarray({1, F}, nl::float32);
                           isa::tensor_partition_reduce(c, nl::maximum, t);
                           nl::store(sum, a);
                           nl::store(mn, b);
                           nl::store(mx, c);
                           return std::vector<nl::tensor>{sum, mn, mx};
                         },
                         {{{P, F}, DType::float32}});
  auto r = run_both(compile_default(k), {tensor_of(rows)});
  for (int64_t j = 0; j < F; ++j) {
    float s = bf16_value(rows[0][static_cast<size_t>(j)]), lo = s, hi = s;
    for (int64_t p = 1; p < P; ++p) {
      const float v = bf16_value(rows[static_cast<size_t>(p)][static_cast<size_t>(j)]);
      s = s + v;
      const float wl = v != v ? lo : v, wh = v != v ? hi : v;  // min_f32 / max_f32 (builtins.hpp)
      lo = lo < wl ? lo : wl;
      hi = hi > wh ? hi : wh;
    }
    INFO("column ", j);
    CHECK(bits(r.sim[0].get(j)) == bits(s));
    CHECK(bits(r.sim[1].get(j)) == bits(lo));
    CHECK(bits(r.sim[2].get(j)) == bits(hi));
  }
}
