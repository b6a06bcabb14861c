// Runs the library's row softmax (kernels/include/neuron/kernels/softmax.hpp) on the simulator
// and checks it against a double-precision reference.
#include <cmath>
#include <cstdio>
#include <neuron/kernels/softmax.hpp>

#include "neuron/neuron.hpp"

namespace kn = neuron::kernels;

int main() {
  using neuron::DType;
  const int64_t n = 512, f = 384;
  // Four SPMD programs of 128 rows each; every reduction runs along a row (the free axis).
  const kn::SoftmaxConfig cfg{kn::split_rows(n, 4)};
  auto kernel =
      neuron::trace("softmax", [cfg](neuron::nl::tensor x) { return kn::softmax(x, cfg); },
                    {{{n, f}, DType::float32}});
  auto x = neuron::Tensor::empty({n, f}, DType::float32);
  for (int64_t i = 0; i < n * f; ++i) x.set(i, 4 * std::sin(0.37f * i));
  auto out = neuron::simulate(kernel, {x}, kn::softmax_grid(cfg))[0];
  double worst = 0;
  for (int64_t r = 0; r < n; ++r) {
    double mx = -INFINITY, sum = 0;
    for (int64_t c = 0; c < f; ++c) mx = std::fmax(mx, x.get(r * f + c));
    for (int64_t c = 0; c < f; ++c) sum += std::exp(double(x.get(r * f + c)) - mx);
    for (int64_t c = 0; c < f; ++c) {
      double ref = std::exp(double(x.get(r * f + c)) - mx) / sum;
      worst = std::fmax(worst, std::fabs(out.get(r * f + c) - ref));
    }
  }
  std::printf("softmax %lldx%lld on the simulator (%lld programs): max abs error %g\n",
              (long long)n, (long long)f, (long long)cfg.programs, worst);
  return worst < 1e-6 ? 0 : 1;
}
