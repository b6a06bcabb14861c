// The umbrella header: the DSL (nl, isa, trace, the kernel registry), the compiler, the simulator
// and host tensors.
#pragma once
#include "neuron/codegen/pipeline.hpp"
#include "neuron/ir/printer.hpp"
#include "neuron/isa.hpp"
#include "neuron/language.hpp"
#include "neuron/registry.hpp"
#include "neuron/runtime/run.hpp"
#include "neuron/runtime/tensor.hpp"
#include "neuron/trace.hpp"
