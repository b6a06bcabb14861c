// The dynamic half of the IR on both executors: indirect DMA rows, gathers, registers (dynamic
// offsets), runtime loops, and a block-sparse kernel that reads its block list at run time.
// Every result is checked against a plain C++ reference and sim == native bit for bit.
#include <doctest/doctest.h>

#include <algorithm>
#include <numeric>
#include <string>

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

Tensor ramp(std::vector<int64_t> shape, float scale = 1.0f, DType dt = DType::float32) {
  Tensor t = Tensor::empty(std::move(shape), dt);
  for (int64_t i = 0; i < t.elements(); ++i) t.set(i, scale * static_cast<float>(i % 977));
  return t;
}

Tensor ints(std::vector<int64_t> shape, const std::vector<int64_t>& v) {
  Tensor t = Tensor::empty(std::move(shape), DType::int32);
  for (int64_t i = 0; i < t.elements(); ++i) t.set(i, static_cast<float>(v[static_cast<size_t>(i)]));
  return t;
}

// Both executors must fail with a UserError whose message contains every piece of `needles`.
void both_fail(const std::function<void()>& run_sim, const std::function<void()>& run_native,
               const std::vector<std::string>& needles) {
  for (auto* run : {&run_sim, &run_native}) {
    std::string msg;
    try {
      (*run)();
    } catch (const neuron::UserError& e) {
      msg = e.what();
    }
    INFO(msg);
    CHECK(!msg.empty());
    for (auto& n : needles) CHECK(msg.find(n) != std::string::npos);
  }
}

}  // namespace

TEST_CASE("indirect load gathers rows; a bad row index names itself, or is skipped") {
  // table [100, 64]; idx [32, 1]: out[p, :] = table[idx[p], :].
  auto kernel = [](nl::oob_mode oob) {
    return neuron::trace("gather_rows",
                         [oob](nl::tensor table, nl::tensor idx) {
                           auto out = nl::ndarray({32, 64}, nl::float32, nl::shared_hbm);
                           auto rows = nl::load(idx);
                           nl::store(out, nl::load_rows(table, rows, oob));
                           return out;
                         },
                         {{{100, 64}, DType::float32}, {{32, 1}, DType::int32}});
  };
  Tensor table = ramp({100, 64});
  std::vector<int64_t> iv(32);
  for (int64_t p = 0; p < 32; ++p) iv[p] = (p * 37 + 5) % 100;
  auto c = compile_default(kernel(nl::oob_mode::error));
  auto r = run_both(c, {table, ints({32, 1}, iv)});
  for (int64_t p = 0; p < 32; ++p)
    for (int64_t f = 0; f < 64; ++f)
      REQUIRE(r.sim[0].get(p * 64 + f) == table.get(iv[p] * 64 + f));

  iv[7] = 100;  // one past the last row
  Tensor bad = ints({32, 1}, iv);
  auto sim = [&] { neuron::simulate(c, {table, bad}); };
  auto nat = [&] { neuron::run_native(c, {table, bad}); };
  both_fail(sim, nat, {"row index 100", "element 7", "100 rows", "'in0'", "oob_mode=skip",
                       "test_dynamic.cpp"});

  auto skip = compile_default(kernel(nl::oob_mode::skip));
  auto s = run_both(skip, {table, bad});
  for (int64_t f = 0; f < 64; ++f) CHECK(s.sim[0].get(7 * 64 + f) == 0.0f);  // left alone
  CHECK(s.sim[0].get(8 * 64) == table.get(iv[8] * 64));
}

TEST_CASE("indirect store scatters rows") {
  auto k = neuron::trace("scatter_rows",
                         [](nl::tensor src, nl::tensor idx) {
                           auto out = nl::ndarray({50, 16}, nl::float32, nl::shared_hbm);
                           nl::store_rows(out, nl::load(idx), nl::load(src));
                           return out;
                         },
                         {{{16, 16}, DType::float32}, {{16, 1}, DType::int32}});
  std::vector<int64_t> iv(16);
  for (int64_t p = 0; p < 16; ++p) iv[p] = 49 - 3 * p;
  Tensor src = ramp({16, 16}, 0.5f);
  auto r = run_both(compile_default(k), {src, ints({16, 1}, iv)});
  for (int64_t row = 0; row < 50; ++row) {
    auto it = std::find(iv.begin(), iv.end(), row);
    for (int64_t f = 0; f < 16; ++f) {
      float want = it == iv.end() ? 0.0f : src.get((it - iv.begin()) * 16 + f);
      REQUIRE(r.sim[0].get(row * 16 + f) == want);
    }
  }
}

TEST_CASE("nc_n_gather and local_gather pick elements by index") {
  auto k = neuron::trace("gathers",
                         [](nl::tensor data, nl::tensor idx, nl::tensor lidx) {
                           auto g = nl::ndarray({32, 8}, nl::float32, nl::shared_hbm);
                           auto l = nl::ndarray({32, 6}, nl::float32, nl::shared_hbm);
                           auto d = nl::load(data);
                           auto gt = nl::ndarray({32, 8}, nl::float32);
                           isa::nc_n_gather(gt, d, nl::load(idx));
                           nl::store(g, gt);
                           auto lt = nl::ndarray({32, 6}, nl::float32);
                           isa::local_gather(lt, d, nl::load(lidx), /*per=*/2, /*valid=*/3);
                           nl::store(l, lt);
                           return std::tuple{g, l};
                         },
                         {{{32, 40}, DType::float32},
                          {{32, 8}, DType::int32},
                          {{32, 1}, DType::uint16}});
  Tensor data = ramp({32, 40});
  std::vector<int64_t> gi(32 * 8), li(32);
  for (size_t i = 0; i < gi.size(); ++i) gi[i] = static_cast<int64_t>((i * 13) % 40);
  for (size_t i = 0; i < li.size(); ++i) li[i] = static_cast<int64_t>((i * 7) % 38);
  Tensor lidx = Tensor::empty({32, 1}, DType::uint16);
  for (int64_t i = 0; i < 32; ++i) lidx.set(i, static_cast<float>(li[static_cast<size_t>(i)]));
  auto r = run_both(compile_default(k), {data, ints({32, 8}, gi), lidx});
  for (int64_t p = 0; p < 32; ++p)
    for (int64_t j = 0; j < 8; ++j)
      REQUIRE(r.sim[0].get(p * 8 + j) == data.get(p * 40 + gi[static_cast<size_t>(p * 8 + j)]));
  // Group g's k-th index is lidx[16g + k % 16, k / 16]: with one column, lidx[16g + k].
  for (int64_t p = 0; p < 32; ++p)
    for (int64_t kk = 0; kk < 3; ++kk)
      for (int64_t e = 0; e < 2; ++e) {
        const int64_t start = li[static_cast<size_t>(16 * (p / 16) + kk)];
        REQUIRE(r.sim[1].get(p * 6 + kk * 2 + e) == data.get(p * 40 + start + e));
      }
}

TEST_CASE("nl::gather_flattened reads each partition's flattened row; a bad index faults") {
  // data [16, 4, 6] (24 elements per partition), indices [16, 2, 5]: the result has indices'
  // shape and result[p, a, b] = data[p, flat indices[p, a, b]].
  auto k = neuron::trace("gather_flat",
                         [](nl::tensor data, nl::tensor idx) {
                           auto out = nl::ndarray({16, 2, 5}, nl::float32, nl::shared_hbm);
                           nl::store(out, nl::gather_flattened(nl::load(data), nl::load(idx)));
                           return out;
                         },
                         {{{16, 4, 6}, DType::float32}, {{16, 2, 5}, DType::int32}});
  Tensor data = ramp({16, 4, 6}, 0.5f);
  std::vector<int64_t> gi(16 * 10);
  for (size_t i = 0; i < gi.size(); ++i) gi[i] = static_cast<int64_t>((i * 7 + 3) % 24);
  auto c = compile_default(k);
  auto r = run_both(c, {data, ints({16, 2, 5}, gi)});
  for (int64_t p = 0; p < 16; ++p)
    for (int64_t j = 0; j < 10; ++j)
      REQUIRE(r.sim[0].get(p * 10 + j) ==
              data.get(p * 24 + gi[static_cast<size_t>(p * 10 + j)]));
  gi[37] = 24;  // one past partition 3's row
  Tensor bad = ints({16, 2, 5}, gi);
  both_fail([&] { neuron::simulate(c, {data, bad}); },
            [&] { neuron::run_native(c, {data, bad}); }, {"24", "test_dynamic.cpp"});
}

TEST_CASE("a register read from data offsets a load (dynamic scalar offset)") {
  auto k = neuron::trace("dyn_offset",
                         [](nl::tensor x, nl::tensor which) {
                           auto out = nl::ndarray({128, 32}, nl::float32, nl::shared_hbm);
                           nl::index r = nl::register_alloc();
                           nl::register_load(r, nl::load(which));
                           nl::store(out, nl::load(x(nl::ds(r * 128, 128), nl::ds(0, 32))));
                           return out;
                         },
                         {{{512, 32}, DType::float32}, {{1, 1}, DType::int32}});
  Tensor x = ramp({512, 32});
  auto c = compile_default(k);
  for (int64_t block : {0, 3}) {
    auto r = run_both(c, {x, ints({1, 1}, {block})});
    for (int64_t i = 0; i < 128 * 32; ++i) REQUIRE(r.sim[0].get(i) == x.get(block * 128 * 32 + i));
  }
  Tensor four = ints({1, 1}, {4});
  auto sim = [&] { neuron::simulate(c, {x, four}); };
  auto nat = [&] { neuron::run_native(c, {x, four}); };
  both_fail(sim, nat, {"out-of-bounds", "test_dynamic.cpp"});
}

TEST_CASE("runtime loops: trip counts read from data, while loops, one compile for all") {
  // out[0:128, :] = sum over i < n of x[i*128 : (i+1)*128, :], n read at run time.
  auto k = neuron::trace(
      "dyn_sum",
      [](nl::tensor x, nl::tensor n) {
        auto out = nl::ndarray({128, 16}, nl::float32, nl::shared_hbm);
        auto acc = nl::zeros({128, 16}, nl::float32);
        nl::index trips = nl::register_alloc();
        nl::register_load(trips, nl::load(n));
        for (nl::index i : nl::dynamic_range(trips)) acc += nl::load(x(nl::ds(i * 128, 128), nl::ds(0, 16)));
        // And a while loop counting down from the same number: cnt = 2 * trips.
        auto cnt = nl::zeros({1, 1}, nl::float32);
        nl::while_loop(trips, [&](nl::index r) {
          cnt += 2.0;
          auto t = nl::ndarray({1, 1}, nl::int32);
          nl::register_store(t, r);
          auto dec = nl::ndarray({1, 1}, nl::int32);
          isa::tensor_scalar(dec, t, nl::subtract, 1.0);
          nl::index next = nl::register_alloc();
          nl::register_load(next, dec);
          return next;
        });
        auto cnt_out = nl::ndarray({1, 1}, nl::float32, nl::shared_hbm);
        nl::store(cnt_out, cnt);
        nl::store(out, acc);
        return std::tuple{out, cnt_out};
      },
      {{{640, 16}, DType::float32}, {{1, 1}, DType::int32}});
  Tensor x = ramp({640, 16}, 0.25f);
  auto c = compile_default(k);
  for (int64_t n : {0, 1, 5}) {
    auto r = run_both(c, {x, ints({1, 1}, {n})});
    for (int64_t e = 0; e < 128 * 16; ++e) {
      float want = 0;
      for (int64_t i = 0; i < n; ++i) want += x.get(i * 128 * 16 + e);
      REQUIRE(r.sim[0].get(e) == doctest::Approx(want));
    }
    CHECK(r.sim[1].get(0) == static_cast<float>(2 * n));
  }
}

TEST_CASE("block-sparse: the list of non-empty blocks is read at run time, one compile") {
  // y = sum over the listed blocks j of x_block(j) * w[j]: blocks[0] = count, blocks[1..] = ids.
  constexpr int64_t B = 8, R = 128, F = 32;
  auto k = neuron::trace(
      "block_sparse",
      [](nl::tensor x, nl::tensor blocks) {
        auto y = nl::ndarray({R, F}, nl::float32, nl::shared_hbm);
        auto acc = nl::zeros({R, F}, nl::float32);
        auto list = nl::load(blocks);  // [1, 1 + B] int32
        nl::index n = nl::register_alloc();
        nl::register_load(n, list(0, nl::ds(0, 1)));
        for (nl::index i : nl::dynamic_range(n)) {
          nl::index id = nl::register_alloc();
          // The i-th listed block: a dynamic free-dim offset into the list tile.
          nl::register_load(id, list(0, nl::ds(i + 1, 1)));
          acc += nl::load(x(nl::ds(id * R, R), nl::ds(0, F)));
        }
        nl::store(y, acc);
        return y;
      },
      {{{B * R, F}, DType::float32}, {{1, 1 + B}, DType::int32}});
  auto c = compile_default(k);  // one compile serves every mask below
  Tensor x = ramp({B * R, F}, 0.125f);
  for (const std::vector<int64_t>& ids : {std::vector<int64_t>{1, 4, 6}, {0, 2, 3, 5, 7}}) {
    std::vector<int64_t> lst(1 + B, 0);
    lst[0] = static_cast<int64_t>(ids.size());
    std::copy(ids.begin(), ids.end(), lst.begin() + 1);
    auto r = run_both(c, {x, ints({1, 1 + B}, lst)});
    for (int64_t e = 0; e < R * F; ++e) {
      float want = 0;
      for (int64_t id : ids) want += x.get(id * R * F + e);
      REQUIRE(r.sim[0].get(e) == doctest::Approx(want));
    }
  }
}

TEST_CASE("unary functions of integer tiles go through fp32 and back, as in Python") {
  // nl::floor / nl::abs / -x of int32 and int8 tiles (an activation function takes floats: the
  // tile is copied to fp32 first, and the result converted back to the tile's dtype).
  auto c =
      compile_default(neuron::trace("int_unary",
                                    [](nl::tensor a, nl::tensor b) {
                                      auto o1 = nl::ndarray({8, 16}, nl::int32, nl::shared_hbm);
                                      auto o2 = nl::ndarray({8, 16}, nl::int8, nl::shared_hbm);
                                      auto o3 = nl::ndarray({8, 16}, nl::float32, nl::shared_hbm);
                                      auto ta = nl::load(a), tb = nl::load(b);
                                      nl::store(o1, -nl::abs(ta));
                                      nl::store(o2, nl::negative(tb));
                                      nl::store(o3, nl::exp(ta, nl::float32));
                                      return std::vector<nl::tensor>{o1, o2, o3};
                                    },
                                    {{{8, 16}, DType::int32}, {{8, 16}, DType::int8}}));
  Tensor a = ints({8, 16}, [] {
    std::vector<int64_t> v(128);
    for (int64_t i = 0; i < 128; ++i) v[i] = (i % 11) - 5;
    return v;
  }());
  Tensor b = Tensor::empty({8, 16}, DType::int8);
  for (int64_t i = 0; i < 128; ++i) b.set(i, static_cast<float>((i % 9) - 4));
  auto r = run_both(c, {a, b});
  for (int64_t i = 0; i < 128; ++i) {
    const int64_t x = (i % 11) - 5;
    REQUIRE(r.sim[0].get(i) == static_cast<float>(-std::abs(x)));
    REQUIRE(r.sim[1].get(i) == static_cast<float>(-((i % 9) - 4)));
    REQUIRE(r.sim[2].get(i) == doctest::Approx(std::exp(static_cast<double>(x))).epsilon(1e-6));
  }
}
