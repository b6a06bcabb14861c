// kernels/norms.hpp: rms_norm and layer_norm forward and backward (dx, dweight, dbias), with
// and without weight/bias, odd sizes, fp32 and bf16, several programs (partial sums added
// here, as the caller does).
#include <doctest/doctest.h>

#include "library_check.hpp"
#include "neuron/kernels/norms.hpp"
#include "reference.hpp"

using namespace neuron;
using namespace neuron::testing;
namespace kn = neuron::kernels;

namespace {

struct Case {
  bool layer;
  int64_t R, D;
  DType dt = DType::float32;
  bool weight = true, bias = true;  // bias: layer norm only
  int64_t programs = 1;
};

// Rows of a [programs, D] partial-sum output added up.
std::vector<double> summed(const Tensor& partial) {
  const int64_t P = partial.shape()[0], D = partial.shape()[1];
  std::vector<double> s(static_cast<size_t>(D), 0.0);
  for (int64_t p = 0; p < P; ++p)
    for (int64_t c = 0; c < D; ++c) s[c] += partial.get(p * D + c);
  return s;
}

void run_norm(const Case& cs, bool native_only = false) {
  CAPTURE(cs.layer);
  CAPTURE(cs.R);
  CAPTURE(cs.D);
  CAPTURE(dtype_name(cs.dt));
  CAPTURE(cs.weight);
  CAPTURE(cs.bias);
  CAPTURE(cs.programs);
  const int64_t R = cs.R, D = cs.D;
  const bool bias = cs.layer && cs.bias;
  kn::NormConfig cfg{1e-5, cs.programs};
  Tensor x = random_tensor({R, D}, cs.dt, 31, -2, 3), dy = random_tensor({R, D}, cs.dt, 32);
  Tensor w = random_tensor({D}, cs.dt, 33, 0.5, 1.5), b = random_tensor({D}, cs.dt, 34);
  auto wv = values(w), bv = values(b);
  const auto grid = kn::norm_grid(cfg);
  const bool layer = cs.layer;

  std::vector<TensorSpec> specs{{{R, D}, cs.dt}};
  std::vector<Tensor> ins{x};
  if (cs.weight) specs.push_back({{D}, cs.dt}), ins.push_back(w);
  if (bias) specs.push_back({{D}, cs.dt}), ins.push_back(b);
  Kernel fwd;
  if (!cs.weight)
    fwd = trace(
        "norm", [=](nl::tensor x) { return layer ? kn::layer_norm(x, cfg) : kn::rms_norm(x, cfg); },
        specs);
  else if (!bias)
    fwd = trace(
        "norm",
        [=](nl::tensor x, nl::tensor w) {
          return layer ? kn::layer_norm(x, w, cfg) : kn::rms_norm(x, w, cfg);
        },
        specs);
  else
    fwd = trace(
        "norm",
        [=](nl::tensor x, nl::tensor w, nl::tensor b) { return kn::layer_norm(x, w, b, cfg); },
        specs);
  auto y_ref = ref::norm(cs.layer, values(x), R, D, cfg.eps, cs.weight ? &wv : nullptr,
                         bias ? &bv : nullptr);

  auto g =
      ref::norm_backward(cs.layer, values(x), R, D, cfg.eps, cs.weight ? &wv : nullptr, values(dy));
  Kernel bwd;
  std::vector<Tensor> bins{x};
  if (cs.weight) {
    bins.push_back(w);
    bwd = trace("norm_backward",
                [=](nl::tensor x, nl::tensor w, nl::tensor dy) {
                  return layer ? kn::layer_norm_backward(x, w, dy, cfg)
                               : kn::rms_norm_backward(x, w, dy, cfg);
                },
                {{{R, D}, cs.dt}, {{D}, cs.dt}, {{R, D}, cs.dt}});
  } else {
    bwd = trace("norm_backward",
                [=](nl::tensor x, nl::tensor dy) {
                  return layer ? kn::layer_norm_backward(x, dy, cfg)
                               : kn::rms_norm_backward(x, dy, cfg);
                },
                {{{R, D}, cs.dt}, {{R, D}, cs.dt}});
  }
  bins.push_back(dy);

  std::vector<Tensor> outs;
  if (native_only) {
    check_native(fwd, ins, grid, {y_ref}, {"y"});
    outs = run_native(compile(bwd, default_compile_options()), bins, grid);
  } else {
    check_kernel(fwd, ins, grid, {y_ref}, {"y"});
    BothResults r = run_both(compile(bwd, default_compile_options()), bins, grid);
    outs = r.sim;  // bit-identical to r.native
  }
  check_close(outs[0], g.dx, "dx", native_only ? "native" : "both");
  if (cs.weight) {
    REQUIRE(outs.size() == (cs.layer ? 3u : 2u));
    CHECK(outs[1].shape() == std::vector<int64_t>{cs.programs, D});
    // The partial sums are fp32; their sum is compared at fp32 tolerance scaled by the inputs'.
    Tensor dw = Tensor::empty({D}, cs.dt), db = Tensor::empty({D}, cs.dt);
    auto dws = summed(outs[1]);
    for (int64_t c = 0; c < D; ++c) dw.set(c, static_cast<float>(dws[c]));
    check_close(dw, g.dw, "dweight", "both");
    if (cs.layer) {
      auto dbs = summed(outs[2]);
      for (int64_t c = 0; c < D; ++c) db.set(c, static_cast<float>(dbs[c]));
      check_close(db, g.db, "dbias", "both");
    }
  }
}

// The *_with_stats forward returns y and the row statistics ([R, 1] fp32: mean for layer_norm,
// rstd); the backward given them computes what the recomputing backward does, bit for bit (the
// same statistics reach the same instructions), on both executors.
void run_norm_stats(const Case& cs) {
  CAPTURE(cs.layer);
  CAPTURE(cs.R);
  CAPTURE(cs.D);
  CAPTURE(dtype_name(cs.dt));
  CAPTURE(cs.weight);
  const int64_t R = cs.R, D = cs.D;
  const bool layer = cs.layer;
  kn::NormConfig cfg{1e-5, cs.programs};
  Tensor x = random_tensor({R, D}, cs.dt, 41, -2, 3), dy = random_tensor({R, D}, cs.dt, 42);
  Tensor w = random_tensor({D}, cs.dt, 43, 0.5, 1.5);
  const auto grid = kn::norm_grid(cfg);
  std::optional<Tensor> wt;
  if (cs.weight) wt = w;

  // Forward: y and the statistics against float64.
  auto xv = values(x);
  std::vector<double> mean(static_cast<size_t>(R)), rstd(static_cast<size_t>(R));
  for (int64_t r = 0; r < R; ++r) {
    double m = 0, v = 0;
    for (int64_t c = 0; c < D; ++c) m += xv[r * D + c];
    m = layer ? m / double(D) : 0.0;
    for (int64_t c = 0; c < D; ++c) v += (xv[r * D + c] - m) * (xv[r * D + c] - m);
    mean[r] = m;
    rstd[r] = 1.0 / std::sqrt(v / double(D) + cfg.eps);
  }
  auto wv = values(w);
  auto y_ref = ref::norm(layer, xv, R, D, cfg.eps, cs.weight ? &wv : nullptr, nullptr);
  std::vector<TensorSpec> specs{{{R, D}, cs.dt}};
  std::vector<Tensor> ins{x};
  if (cs.weight) specs.push_back({{D}, cs.dt}), ins.push_back(w);
  const bool has_w = cs.weight;
  Kernel fwd = trace(
      "norm_stats",
      [=](auto... ts) {
        const std::vector<nl::tensor> in{ts...};
        std::optional<nl::tensor> wi;
        if (has_w) wi = in[1];
        return layer ? kn::layer_norm_with_stats(in[0], wi, std::nullopt, cfg)
                     : kn::rms_norm_with_stats(in[0], wi, cfg);
      },
      specs);
  std::vector<std::vector<double>> refs{y_ref};
  if (layer) refs.push_back(mean);
  refs.push_back(rstd);
  BothResults f = check_kernel(fwd, ins, grid, refs);

  // Backward from the statistics = backward recomputing them, bit for bit.
  std::vector<TensorSpec> bspecs{{{R, D}, cs.dt}};
  std::vector<Tensor> bins{x};
  if (cs.weight) bspecs.push_back({{D}, cs.dt}), bins.push_back(w);
  bspecs.push_back({{R, D}, cs.dt});
  bins.push_back(dy);
  Kernel recompute = trace(
      "norm_backward",
      [=](auto... ts) {
        const std::vector<nl::tensor> in{ts...};
        if (!has_w)
          return std::vector<nl::tensor>{layer ? kn::layer_norm_backward(in[0], in[1], cfg)
                                               : kn::rms_norm_backward(in[0], in[1], cfg)};
        return layer ? kn::layer_norm_backward(in[0], in[1], in[2], cfg)
                     : kn::rms_norm_backward(in[0], in[1], in[2], cfg);
      },
      bspecs);
  std::vector<TensorSpec> sspecs = bspecs;
  std::vector<Tensor> sins = bins;
  for (size_t i = 1; i < f.sim.size(); ++i)  // mean (layer_norm), rstd
    sspecs.push_back({{R, 1}, DType::float32}), sins.push_back(f.sim[i]);
  Kernel from_stats = trace(
      "norm_backward_stats",
      [=](auto... ts) {
        const std::vector<nl::tensor> in{ts...};
        const size_t n = has_w ? 3 : 2;
        kn::SavedStats saved{layer ? std::optional<nl::tensor>(in[n]) : std::nullopt,
                             in[layer ? n + 1 : n]};
        std::optional<nl::tensor> wi;
        if (has_w) wi = in[1];
        return layer ? kn::layer_norm_backward(in[0], wi, saved, in[n - 1], cfg)
                     : kn::rms_norm_backward(in[0], wi, saved, in[n - 1], cfg);
      },
      sspecs);
  BothResults a = run_both(compile(recompute, default_compile_options()), bins, grid);
  BothResults b = run_both(compile(from_stats, default_compile_options()), sins, grid);
  REQUIRE(a.sim.size() == b.sim.size());
  for (size_t i = 0; i < a.sim.size(); ++i) {
    CAPTURE(i);
    CHECK(first_bit_difference(a.sim[i], b.sim[i]) == -1);
    CHECK(first_bit_difference(a.native[i], b.native[i]) == -1);
  }
  auto g = ref::norm_backward(layer, xv, R, D, cfg.eps, cs.weight ? &wv : nullptr, values(dy));
  check_close(b.sim[0], g.dx, "dx", "both");
}

}  // namespace

TEST_CASE("norms: the forward's saved statistics serve the backward") {
  run_norm_stats({true, 129, 127});
  run_norm_stats({true, 300, 17, DType::bfloat16, false, false, 3});
  run_norm_stats({false, 200, 33, DType::float32, true, false, 2});
  run_norm_stats({false, 7, 40, DType::bfloat16, false});
}

TEST_CASE("norms: saved statistics of the wrong kind or shape are refused") {
  kn::NormConfig cfg{};
  auto kernel_with = [&](bool layer, std::vector<TensorSpec> specs) {
    return trace(
        "bad_stats",
        [=](auto... ts) {
        const std::vector<nl::tensor> in{ts...};
          kn::SavedStats saved{specs.size() == 4 ? std::optional<nl::tensor>(in[2]) : std::nullopt,
                               in[1]};
          return layer ? kn::layer_norm_backward(in[0], std::nullopt, saved, in.back(), cfg)
                       : kn::rms_norm_backward(in[0], std::nullopt, saved, in.back(), cfg);
        },
        specs);
  };
  const TensorSpec x{{8, 16}, DType::float32}, col{{8, 1}, DType::float32};
  CHECK_THROWS_WITH_AS(kernel_with(true, {x, col, x}), doctest::Contains("takes the mean and the rstd as its saved statistics"),
                       UserError);
  CHECK_THROWS_WITH_AS(kernel_with(false, {x, col, col, x}), doctest::Contains("takes only the rstd as its saved statistics"),
                       UserError);
  CHECK_THROWS_WITH_AS(kernel_with(false, {x, {{8, 2}, DType::float32}, x}),
                       doctest::Contains("saved rstd is float32 [8, 2]; it must be float32 [8, 1]"),
                       UserError);
}

TEST_CASE("rms_norm forward and backward") {
  run_norm({false, 1, 1});
  run_norm({false, 129, 600, DType::bfloat16});
  run_norm({false, 256, 33, DType::float32, false, false, 2});
}

TEST_CASE("layer_norm forward and backward") {
  run_norm({true, 129, 127});
  run_norm({true, 7, 40, DType::float32, false, false});
  run_norm({true, 9, 33, DType::float32, true, false});
  run_norm({true, 300, 17, DType::bfloat16, true, true, 3});
}

TEST_CASE("norms: larger sizes natively") {
  run_norm({true, 1000, 4096, DType::float32, true, true, kn::split_rows(1000)}, true);
}

// Rows longer than kn::kNormWholeBackward / kNormWholeForward take column chunks: the
// statistics and the row means of the backward over passes, dweight / dbias accumulated in HBM.
TEST_CASE("norms: rows longer than a chunk") {
  const int64_t back = kn::kNormWholeBackward + 5, both = kn::kNormWholeForward + 2 * 37;
  run_norm({true, 5, back, DType::float32, true, false});
  run_norm({false, 130, back, DType::bfloat16, true, false, 2});
  run_norm({true, 3, both, DType::float32, true, true});
  run_norm({false, 4, both, DType::bfloat16, false});
  run_norm_stats({true, 6, both, DType::bfloat16, true, true, 2});
  run_norm_stats({false, 3, back});
}
