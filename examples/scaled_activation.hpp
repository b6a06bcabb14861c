// A kernel with compile-time parameters, registered by name so Python can call it:
//   out = act(±scale * x), in `out_dtype`, `rows` rows per tile.
#pragma once
#include <neuron/neuron.hpp>

namespace examples {
namespace nl = neuron::nl;

enum class Act { none, relu, exp, tanh };

// The parameters come after the tensors, as ordinary C++ values: tracing uses them (here the
// tile height, a constant, which functions to record and the output dtype), so the IR holds
// their effect and nothing else; two values that trace to the same IR share one compile.
inline nl::tensor scaled_activation(nl::tensor x, double scale, Act act, bool negate,
                                    neuron::DType out_dtype, int64_t rows) {
  const int64_t N = x.shape()[0], F = x.shape()[1];
  if (rows < 1 || rows > nl::tile_size::pmax || N % rows != 0)
    neuron::user_error(neuron::Span::current(), "kernel-param",
                       "rows = {} must divide the {} rows of x and be in 1..{}", rows, N,
                       nl::tile_size::pmax);
  auto out = nl::ndarray({N, F}, out_dtype, nl::shared_hbm, "out");
  for (auto i : nl::affine_range(N / rows)) {
    auto t = nl::load(x(nl::ds(i * rows, rows)), nl::float32);
    auto y = nl::multiply(t, negate ? -scale : scale);
    switch (act) {
      case Act::none:
        break;
      case Act::relu:
        y = nl::relu(y);
        break;
      case Act::exp:
        y = nl::exp(y);
        break;
      case Act::tanh:
        y = nl::tanh(y);
        break;
    }
    nl::store(out(nl::ds(i * rows, rows)), nl::copy(y, out_dtype));
  }
  return out;
}

// One line registers it: name, function, doc, tensor arguments, then each parameter with its
// type, default and doc, in the order the function takes them.
NEURON_KERNEL(scaled_activation, scaled_activation,
              "out = act(+-scale * x) over a [N, F] tensor, `rows` rows per tile",
              neuron::inputs("x"), neuron::param<double>("scale", 1.0, "the multiplier"),
              neuron::choice("act", Act::relu,
                             {{"none", Act::none},
                              {"relu", Act::relu},
                              {"exp", Act::exp},
                              {"tanh", Act::tanh}},
                             "the activation applied after scaling"),
              neuron::param<bool>("negate", false, "multiply by -scale instead"),
              neuron::param<neuron::DType>("out_dtype", neuron::DType::float32, "the output dtype"),
              neuron::param<int64_t>("rows", 128, "rows per tile (divides N, at most 128)"));

}  // namespace examples
