// Inputs and configs shared by the attention tests.
#pragma once
#include "library_check.hpp"
#include "neuron/kernels/attention.hpp"
#include "reference.hpp"

namespace neuron::testing {

struct AttentionInputs {
  Tensor q, k, v;
};

inline AttentionInputs make_inputs(const ref::AttentionShape& a, DType dt, uint32_t seed) {
  return {random_tensor({a.B, a.Hq, a.L, a.E}, dt, seed, -1.5, 1.5),
          random_tensor({a.B, a.Hkv, a.S, a.E}, dt, seed + 1, -1.5, 1.5),
          random_tensor({a.B, a.Hkv, a.S, a.Ev}, dt, seed + 2)};
}

inline kernels::AttentionConfig config_of(const ref::AttentionShape& a) {
  kernels::AttentionConfig cfg;
  cfg.causal = a.causal;
  cfg.causal_offset = a.offset;
  if (a.scale > 0) cfg.scale = a.scale;
  return cfg;
}

}  // namespace neuron::testing
