// RMSNorm as a user would write it: out = x / sqrt(mean(x^2) + eps) * w over the last axis,
// 128 rows per program (launch with grid {rows / 128}); computed in fp32, stored in x's dtype.
// The peer in bench/compare.py is torch.nn.functional.rms_norm.
#pragma once
#include <neuron/neuron.hpp>

namespace bench {
namespace nl = neuron::nl;

inline nl::tensor rmsnorm(nl::tensor x, nl::tensor w, float eps) {
  auto out = nl::ndarray(x.shape(), x.dtype(), nl::shared_hbm, "out");
  auto rows = nl::ds(nl::program_id(0) * nl::tile_size::pmax, nl::tile_size::pmax);
  auto t = nl::load(x(rows), nl::float32);
  auto ms = nl::mean(nl::square(t), 1);  // [128, 1]
  auto inv = nl::rsqrt(ms + eps);        // [128, 1]
  auto wt = nl::load(w, nl::float32);    // [1, cols], broadcast over the rows
  nl::store(out(rows), nl::multiply(t * inv, wt, x.dtype()));
  return out;
}

}  // namespace bench
