// A kernel with parameters, traced two ways: neuron::trace with neuron::params(...) (the
// values in the order the function takes them) and neuron::trace_registered (by name, with
// defaults for what is not given). Both give the same IR; the simulator's output is checked
// against a double-precision reference.
#include "scaled_activation.hpp"

#include <cmath>
#include <cstdio>

int main() {
  using neuron::DType;
  const int64_t n = 256, f = 64;
  auto direct = neuron::trace(
      "scaled_activation", examples::scaled_activation, {{{n, f}, DType::float32, "x"}},
      neuron::params(0.5, examples::Act::tanh, true, DType::float32, int64_t{64}));
  auto by_name = neuron::trace_registered(
      "scaled_activation", {{{n, f}, DType::float32}},
      {{"scale", 0.5}, {"act", std::string("tanh")}, {"negate", true}, {"rows", int64_t{64}}});
  if (neuron::print(direct) != neuron::print(by_name)) {
    std::printf("the registered kernel traced differently\n");
    return 1;
  }
  auto x = neuron::Tensor::empty({n, f}, DType::float32);
  for (int64_t i = 0; i < n * f; ++i) x.set(i, 3 * std::sin(0.11 * double(i)));
  auto out = neuron::simulate(direct, {x})[0];
  double worst = 0;
  for (int64_t i = 0; i < n * f; ++i)
    worst = std::fmax(worst, std::fabs(out.get(i) - std::tanh(-0.5 * double(x.get(i)))));
  std::printf("scaled_activation %lldx%lld (tanh, scale -0.5, 64-row tiles): max abs error %g\n",
              (long long)n, (long long)f, worst);
  return worst < 1e-5 ? 0 : 1;
}
