// Read-only traversal and rewriting of the Kernel IR, dispatched from the NEURON_STMT_KINDS list.
#pragma once
#include "neuron/ir/ir.hpp"

namespace neuron {

// Walks every statement; override the kinds you care about and call the base to recurse.
class IRVisitor {
 public:
  virtual ~IRVisitor() = default;
  void visit(const StmtPtr& s);
#define X(k) virtual void visit_##k(const k& node);
  NEURON_STMT_KINDS(X)
#undef X
};

// Rebuilds statements; returns the same pointer when nothing below changed, so passes can tell
// "unchanged" cheaply (pointer equality of the result with the input).
class IRMutator {
 public:
  virtual ~IRMutator() = default;
  StmtPtr mutate(const StmtPtr& s);
#define X(k) virtual StmtPtr mutate_##k(const k& node, const StmtPtr& self);
  NEURON_STMT_KINDS(X)
#undef X
};

}  // namespace neuron
