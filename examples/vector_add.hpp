// SPMD vector add: each program of the grid adds one 128-row tile of a and b.
#pragma once
#include <neuron/neuron.hpp>

namespace examples {
namespace nl = neuron::nl;

// out[N, F] = a + b. Launch with grid {N / 128}: program p handles rows p*128 .. p*128+127.
inline nl::tensor vector_add(nl::tensor a, nl::tensor b) {
  auto out = nl::ndarray(a.shape(), a.dtype(), nl::shared_hbm, "out");
  auto rows = nl::ds(nl::program_id(0) * nl::tile_size::pmax, nl::tile_size::pmax);
  auto ta = nl::load(a(rows));  // HBM -> SBUF (DMA)
  auto tb = nl::load(b(rows));
  nl::store(out(rows), ta + tb);  // Vector engine add, then SBUF -> HBM
  return out;
}

NEURON_KERNEL(vector_add, vector_add,
              "out = a + b over [N, F] tensors; launch grid (N / 128,): one 128-row tile per "
              "program",
              neuron::inputs("a", "b"));

}  // namespace examples
