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

}  // namespace

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
