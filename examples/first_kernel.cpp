// The kernel of docs/first-kernel.md, kept as a program so the guide stays true.
#include <neuron/neuron.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace nl = neuron::nl;

nl::tensor scaled_relu(nl::tensor x, nl::tensor bias) {
  const int64_t rows = x.shape()[0], cols = x.shape()[1];
  auto out = nl::ndarray({rows, cols}, x.dtype(), nl::shared_hbm, "out");
  auto b = nl::load(bias);                           // [1, cols], loaded once
  for (nl::index i : nl::affine_range(rows / nl::tile_size::pmax)) {
    auto tile = nl::ds(i * nl::tile_size::pmax, nl::tile_size::pmax);
    auto t = nl::load(x(tile, nl::all));             // HBM -> SBUF, [128, cols]
    auto y = nl::relu(t * 0.5f + b);                 // b broadcasts over the 128 rows
    nl::store(out(tile, nl::all), y);                // SBUF -> HBM
  }
  return out;
}

int main() {
  using neuron::DType;
  neuron::Kernel k = neuron::trace("scaled_relu", scaled_relu,
                                   {neuron::TensorSpec{{512, 256}, DType::float32},
                                    neuron::TensorSpec{{1, 256}, DType::float32}});
  std::puts(neuron::print(k).c_str());

  auto x = neuron::Tensor::empty({512, 256}, DType::float32);
  auto bias = neuron::Tensor::empty({1, 256}, DType::float32);
  for (int64_t i = 0; i < x.elements(); ++i) x.set(i, float(i % 17) - 8.0f);
  for (int64_t j = 0; j < 256; ++j) bias.set(j, 0.01f * j - 1.0f);

  std::vector<neuron::Tensor> outs = neuron::simulate(k, {x, bias});
  double worst = 0;
  for (int64_t i = 0; i < x.elements(); ++i) {
    double want = std::max(0.0, 0.5 * x.get(i) + bias.get(i % 256));
    worst = std::max(worst, std::abs(outs[0].get(i) - want));
  }
  std::printf("max abs error %g\n", worst);
  return worst < 1e-6 ? 0 : 1;
}
