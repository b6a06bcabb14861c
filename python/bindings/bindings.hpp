// Shared declarations of the neuron._C binding files: one init function per C++ area.
#pragma once
#include <pybind11/pybind11.h>

namespace neuron::python {

void init_ir(pybind11::module_& m);       // Span, Affine, DType, Memory, Kernel, print/parse
void init_trace(pybind11::module_& m);    // nl::tensor, tracing, nl and isa calls
void init_compile(pybind11::module_& m);  // compile, pass reports
void init_runtime(pybind11::module_& m);  // Tensor, simulate
void init_profile(pybind11::module_& m);  // Profile, timing-only simulation
void init_registry(pybind11::module_& m); // registered C++ kernels
void init_rules(pybind11::module_& m);    // C++ rules Python uses: promotion, shapes, messages
void init_random(pybind11::module_& m);   // rng, rand2, dropout, seeds and state
void init_dynamic(pybind11::module_& m);  // registers, runtime loops, .ap(), indirect rows, gathers
void init_mx(pybind11::module_& m);       // nc_matmul_mx, quantize_mx, bitcast DMA copies

}  // namespace neuron::python
