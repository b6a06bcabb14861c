// Helpers shared by the nl and isa implementations: fresh tiles, broadcasting views, operand
// conversion to IR values. Internal to the DSL sources.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "neuron/dsl/builder.hpp"
#include "neuron/dsl/tensor.hpp"

namespace neuron::dsl {

// The view of a handle; a default-constructed handle is a UserError ("empty-handle").
const Access& view_of(const nl::tensor& t, const Span& span);

// A new buffer in `memory` (Alloc in the current block) and its whole view.
nl::tensor new_tile(std::vector<int64_t> shape, DType dtype, Memory memory, const Span& span,
                    const std::string& name = "");

// The common shape of operands under numpy broadcasting (rule "broadcast"): size-1 dims
// expand. Tiles broadcast between equal ranks only; pad_ranks (numpy's full rule, for the
// legacy API's index grids) first pads shorter shapes with leading 1s.
std::vector<int64_t> broadcast_shape(const std::vector<std::vector<int64_t>>& shapes,
                                     const Span& span, bool pad_ranks = false);
// The view `a` seen with `shape`: size-1 dims that must grow become step-0 dims.
Access broadcast_view(const Access& a, const std::vector<int64_t>& shape, const Span& span);

// An nl::operand as an IR value: its (broadcast) view, or its float immediate.
Value operand_value(const nl::operand& x, const std::vector<int64_t>& shape, const Span& span);

// A memset value: an int for integer tiles given an integral value, else a float.
Value fill_value(double v, DType dtype);

}  // namespace neuron::dsl
