// NEURON_OP(namespace): marks a kernel function in a header as a PyTorch operator
// <namespace>::<function name> for neuron-opgen (tools/neuron_opgen.cpp), which reads the header
// with Clang and writes the code registering it (NEURON_KERNEL) and its operator schema:
//
//   // out = x * alpha + y, then relu if asked.
//   NEURON_OP(mylib) nl::tensor scaled_add(nl::tensor x, nl::tensor y, double alpha = 1.0,
//                                          bool relu = false);
//
// The tensors (nl::tensor) come first, then the parameters (bool, integers, floating point,
// std::string, neuron::DType, enums) with their defaults; the function returns nl::tensor or a
// std::tuple of them. The doc comment above the function becomes the operator's doc. Only
// Clang sees the mark (an annotate attribute); other compilers see nothing.
#pragma once

#if defined(__clang__)
#define NEURON_OP(ns) __attribute__((annotate("neuron_op:" #ns)))
#else
#define NEURON_OP(ns)
#endif
