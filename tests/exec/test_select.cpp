// Partition reduction, selection and statistics through the C++ DSL (isa.hpp) on both
// executors: max8, nc_find_index8, nc_match_replace8, bn_stats + bn_aggr,
// tensor_partition_reduce and nc_stream_shuffle against plain C++ references (sim == native
// bit for bit is checked by run_both).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
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

Tensor values(int64_t P, int64_t F, const std::function<float(int64_t, int64_t)>& f) {
  Tensor t = Tensor::empty({P, F}, DType::float32);
  for (int64_t p = 0; p < P; ++p)
    for (int64_t j = 0; j < F; ++j) t.set(p * F + j, f(p, j));
  return t;
}

}  // namespace

TEST_CASE("max8, nc_find_index8 and nc_match_replace8 (top-k steps)") {
  auto k = neuron::trace("top8",
                         [](nl::tensor x) {
                           auto mx = nl::ndarray({16, 8}, nl::float32, nl::shared_hbm);
                           auto ix = nl::ndarray({16, 8}, nl::uint32, nl::shared_hbm);
                           auto rep = nl::ndarray({16, 40}, nl::float32, nl::shared_hbm);
                           auto t = nl::load(x);
                           auto m = nl::ndarray({16, 8}, nl::float32);
                           isa::max8(m, t);
                           auto i = nl::ndarray({16, 8}, nl::uint32);
                           isa::nc_find_index8(i, t, m);
                           isa::nc_match_replace8(t, t, m, -100.0);
                           nl::store(mx, m);
                           nl::store(ix, i);
                           nl::store(rep, t);
                           return std::vector<nl::tensor>{mx, ix, rep};
                         },
                         {{{16, 40}, DType::float32}});
  // Values repeat (j % 13), so equal maxima take successive occurrences.
  Tensor x = values(16, 40, [](int64_t p, int64_t j) { return static_cast<float>((j * 7 + p) % 13); });
  auto r = run_both(compile_default(k), {x});
  for (int64_t p = 0; p < 16; ++p) {
    std::vector<std::pair<float, int64_t>> row;
    for (int64_t j = 0; j < 40; ++j) row.push_back({x.get(p * 40 + j), j});
    // Descending value, ascending index among equals: the order max8 + find_index8 pair them.
    std::stable_sort(row.begin(), row.end(),
                     [](const auto& a, const auto& b) { return a.first > b.first; });
    std::vector<bool> replaced(40, false);
    for (int64_t k8 = 0; k8 < 8; ++k8) {
      CHECK(r.sim[0].get(p * 8 + k8) == row[k8].first);
      CHECK(r.sim[1].get(p * 8 + k8) == static_cast<float>(row[k8].second));
      replaced[static_cast<size_t>(row[k8].second)] = true;
    }
    for (int64_t j = 0; j < 40; ++j)
      CHECK(r.sim[2].get(p * 40 + j) == (replaced[j] ? -100.0f : x.get(p * 40 + j)));
  }
}

TEST_CASE("bn_stats + bn_aggr, tensor_partition_reduce, nc_stream_shuffle") {
  std::vector<int64_t> mask(32, 255);
  for (int64_t i = 0; i < 16; ++i) mask[i] = 15 - i;
  auto k = neuron::trace("stats",
                         [&](nl::tensor x) {
                           auto mv = nl::ndarray({32, 2}, nl::float32, nl::shared_hbm);
                           auto col = nl::ndarray({1, 300}, nl::float32, nl::shared_hbm);
                           auto sh = nl::ndarray({32, 300}, nl::float32, nl::shared_hbm);
                           auto t = nl::load(x);
                           auto st = nl::ndarray({32, 12}, nl::float32);
                           isa::bn_stats(st(nl::ds(0, 32), nl::ds(0, 6)), t(nl::ds(0, 32), nl::ds(0, 150)));
                           isa::bn_stats(st(nl::ds(0, 32), nl::ds(6, 6)), t(nl::ds(0, 32), nl::ds(150, 150)));
                           auto a = nl::ndarray({32, 2}, nl::float32);
                           isa::bn_aggr(a, st);
                           auto c = nl::ndarray({1, 300}, nl::float32);
                           isa::tensor_partition_reduce(c, nl::maximum, t);
                           auto s = nl::zeros({32, 300}, nl::float32);
                           isa::nc_stream_shuffle(s, t, mask);
                           nl::store(mv, a);
                           nl::store(col, c);
                           nl::store(sh, s);
                           return std::vector<nl::tensor>{mv, col, sh};
                         },
                         {{{32, 300}, DType::float32}});
  Tensor x = values(32, 300, [](int64_t p, int64_t j) {
    return std::sin(0.37f * static_cast<float>(p * 300 + j)) * 4.0f + static_cast<float>(p);
  });
  auto r = run_both(compile_default(k), {x});
  for (int64_t p = 0; p < 32; ++p) {
    double sum = 0, sq = 0;
    for (int64_t j = 0; j < 300; ++j) sum += x.get(p * 300 + j);
    const double mean = sum / 300;
    for (int64_t j = 0; j < 300; ++j) sq += std::pow(x.get(p * 300 + j) - mean, 2);
    CHECK(r.sim[0].get(p * 2) == doctest::Approx(mean).epsilon(1e-5));
    CHECK(r.sim[0].get(p * 2 + 1) == doctest::Approx(sq / 300).epsilon(1e-4));
    for (int64_t j = 0; j < 300; ++j)
      CHECK(r.sim[2].get(p * 300 + j) == (p < 16 ? x.get((15 - p) * 300 + j) : 0.0f));
  }
  for (int64_t j = 0; j < 300; ++j) {
    float m = x.get(j);
    for (int64_t p = 1; p < 32; ++p) m = std::max(m, x.get(p * 300 + j));
    CHECK(r.sim[1].get(j) == m);
  }
}
