// Runs the SPMD vector add on the simulator and checks it against a plain C++ loop.
#include "vector_add.hpp"

#include <cmath>
#include <cstdio>

int main() {
  using neuron::DType;
  const int64_t n = 1024, f = 512;
  auto kernel = neuron::trace("vector_add", examples::vector_add,
                              {{{n, f}, DType::float32}, {{n, f}, DType::float32}});
  auto a = neuron::Tensor::empty({n, f}, DType::float32);
  auto b = neuron::Tensor::empty({n, f}, DType::float32);
  for (int64_t i = 0; i < n * f; ++i) {
    a.set(i, std::sin(0.001f * i));
    b.set(i, std::cos(0.002f * i));
  }
  auto out = neuron::simulate(kernel, {a, b}, /*grid=*/{n / 128})[0];
  double worst = 0;
  for (int64_t i = 0; i < n * f; ++i)
    worst = std::fmax(worst, std::fabs(out.get(i) - (a.get(i) + b.get(i))));
  std::printf("vector_add %lldx%lld on the simulator, grid %lld: max abs error %g\n",
              (long long)n, (long long)f, (long long)(n / 128), worst);
  return worst == 0 ? 0 : 1;
}
