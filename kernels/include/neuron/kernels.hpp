// The kernel library (docs/kernels.md): every family's header.
#pragma once
#include "neuron/kernels/attention.hpp"
#include "neuron/kernels/attention_backward.hpp"
#include "neuron/kernels/matmul.hpp"
#include "neuron/kernels/norms.hpp"
#include "neuron/kernels/registered.hpp"
#include "neuron/kernels/rope.hpp"
#include "neuron/kernels/softmax.hpp"
#include "neuron/kernels/swiglu.hpp"
