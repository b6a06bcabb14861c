// Structural equality and hashing of the Kernel IR. Spans never take part.
#pragma once
#include <cstddef>

#include "neuron/ir/ir.hpp"

namespace neuron {

bool equal(const Kernel& a, const Kernel& b);
bool equal(const StmtPtr& a, const StmtPtr& b);
bool equal(const Access& a, const Access& b);
size_t hash_value(const Kernel& k);
size_t hash_value(const StmtPtr& s);

}  // namespace neuron
