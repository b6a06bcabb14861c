// Row softmax: out[i, :] = exp(x[i, :] - max(x[i, :])) / sum(exp(...)), 128 rows per program.
#pragma once
#include <neuron/neuron.hpp>

namespace examples {
namespace nl = neuron::nl;

// Launch with grid {N / 128}. Rows live on partitions, so the reductions run along the free
// axis and their [128, 1] results broadcast back over the row.
inline nl::tensor softmax(nl::tensor x) {
  auto out = nl::ndarray(x.shape(), x.dtype(), nl::shared_hbm, "out");
  auto rows = nl::ds(nl::program_id(0) * nl::tile_size::pmax, nl::tile_size::pmax);
  auto t = nl::load(x(rows), nl::float32);
  auto row_max = nl::max(t, 1);               // Vector engine reduction -> [128, 1]
  auto e = nl::exp(t - row_max);              // Vector subtract, Scalar engine exp
  auto inv = nl::reciprocal(nl::sum(e, 1));   // [128, 1]
  nl::store(out(rows), nl::multiply(e, inv, x.dtype()));
  return out;
}

// The C++ twin of tests/python/test_ir.py's softmax; the library's is registered as "softmax".
NEURON_KERNEL(row_softmax, softmax,
              "row softmax of a [N, F] tensor; launch grid (N / 128,): 128 rows per program",
              neuron::inputs("x"));

}  // namespace examples
