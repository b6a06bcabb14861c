// Bindings for the MX instructions (isa.hpp "MX") and the reinterpreting DMA copy behind
// `.ap(dtype=...)` views (python/neuron/access.py).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bindings.hpp"
#include "neuron/isa.hpp"

namespace py = pybind11;

namespace neuron::python {

void init_mx(py::module_& m) {
  m.def("nc_matmul_mx", [](const nl::tensor& dst, const nl::tensor& st, const nl::tensor& mv,
                           const nl::tensor& st_scale, const nl::tensor& mv_scale,
                           int64_t accumulate, const Span& span) {
    isa::nc_matmul_mx(dst, st, mv, st_scale, mv_scale, accumulate, span);
  });
  m.def("quantize_mx", [](const nl::tensor& dst, const nl::tensor& src,
                          const nl::tensor& dst_scale, const Span& span) {
    isa::quantize_mx(dst, src, dst_scale, span);
  });
  m.def("dma_copy_bitcast", [](const nl::tensor& dst, const nl::tensor& src, const Span& span) {
    isa::dma_copy_bitcast(dst, src, span);
  });
}

}  // namespace neuron::python
