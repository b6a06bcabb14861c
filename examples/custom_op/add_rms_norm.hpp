// A user-written fused operator: residual add + RMSNorm, the pair every pre-norm transformer
// block runs between its sublayers. Unfused it reads x and residual, writes h, reads h twice
// more (statistics, normalising); fused it reads each input once per row tile and writes both
// results from SBUF.
//
// NEURON_OP(my_ops) makes it the PyTorch operator torch.ops.my_ops.add_rms_norm once the
// library built by CMakeLists.txt is loaded with neuron.load_ops (see run.py).
#pragma once
#include <neuron/kernels/tiling.hpp>
#include <neuron/neuron.hpp>
#include <neuron/op.hpp>

#include <algorithm>
#include <tuple>

namespace my_ops {
namespace nl = neuron::nl;

// h = x + residual; out = h * rsqrt(mean(h^2, -1) + eps) * weight, for x, residual [R, D] and
// weight [D]; returns (out, h). Statistics in fp32, results in x's dtype; any R and D.
NEURON_OP(my_ops)
inline std::tuple<nl::tensor, nl::tensor> add_rms_norm(nl::tensor x, nl::tensor residual,
                                                       nl::tensor weight, double eps = 1e-6) {
  const int64_t R = x.shape()[0], D = x.shape()[1];
  auto out = nl::ndarray({R, D}, x.dtype(), nl::shared_hbm, "out");
  auto h_out = nl::ndarray({R, D}, x.dtype(), nl::shared_hbm, "h");
  const int64_t P = std::min<int64_t>(R, nl::tile_size::pmax);
  auto w = neuron::kernels::load_broadcast_row(weight, P, nl::float32, "weight");  // once
  // 128 rows at a time on the partitions (a rolled loop, plus one tile for a remainder).
  neuron::kernels::for_each_tile(R, P, [&](nl::index, nl::index r0, int64_t rows) {
    auto tile = nl::ds(r0, rows);
    auto h = nl::load(x(tile, nl::all), nl::float32) +
             nl::load(residual(tile, nl::all), nl::float32);
    auto rstd = nl::rsqrt(nl::mean(nl::square(h), 1) + eps);  // [rows, 1]
    nl::store(out(tile, nl::all), nl::multiply(h * rstd, w(nl::ds(0, rows), nl::all), x.dtype()));
    nl::store(h_out(tile, nl::all), nl::copy(h, x.dtype()));
  });
  return {out, h_out};
}

}  // namespace my_ops
