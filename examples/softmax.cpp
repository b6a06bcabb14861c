// Runs the row softmax on the simulator and checks it against a double-precision reference.
#include "softmax.hpp"

#include <cmath>
#include <cstdio>

int main() {
  using neuron::DType;
  const int64_t n = 512, f = 384;
  auto kernel = neuron::trace("softmax", examples::softmax, {{{n, f}, DType::float32}});
  auto x = neuron::Tensor::empty({n, f}, DType::float32);
  for (int64_t i = 0; i < n * f; ++i) x.set(i, 4 * std::sin(0.37f * i));
  auto out = neuron::simulate(kernel, {x}, {n / 128})[0];
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
  std::printf("softmax %lldx%lld on the simulator: max abs error %g\n", (long long)n,
              (long long)f, worst);
  return worst < 1e-6 ? 0 : 1;
}
