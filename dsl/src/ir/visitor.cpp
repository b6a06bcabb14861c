// Default traversal for IRVisitor and IRMutator.
#include "neuron/ir/visitor.hpp"

namespace neuron {

void IRVisitor::visit(const StmtPtr& s) {
  if (!s) return;
  switch (s->kind) {
#define X(k)        \
  case StmtKind::k: \
    return visit_##k(static_cast<const k&>(*s));
    NEURON_STMT_KINDS(X)
#undef X
  }
}

void IRVisitor::visit_Block(const Block& n) {
  for (auto& s : n.stmts) visit(s);
}
void IRVisitor::visit_For(const For& n) { visit(n.body); }
void IRVisitor::visit_Alloc(const Alloc&) {}
void IRVisitor::visit_Op(const Op&) {}

StmtPtr IRMutator::mutate(const StmtPtr& s) {
  if (!s) return s;
  switch (s->kind) {
#define X(k)        \
  case StmtKind::k: \
    return mutate_##k(static_cast<const k&>(*s), s);
    NEURON_STMT_KINDS(X)
#undef X
  }
  return s;
}

StmtPtr IRMutator::mutate_Block(const Block& n, const StmtPtr& self) {
  std::vector<StmtPtr> out;
  bool changed = false;
  for (auto& s : n.stmts) {
    StmtPtr m = mutate(s);
    changed |= m != s;
    // A mutator deletes a statement by returning nullptr.
    if (m) out.push_back(std::move(m));
  }
  return changed ? Block::make(std::move(out), n.span) : self;
}

StmtPtr IRMutator::mutate_For(const For& n, const StmtPtr& self) {
  StmtPtr body = mutate(n.body);
  return body == n.body ? self : n.with_body(body);
}

StmtPtr IRMutator::mutate_Alloc(const Alloc&, const StmtPtr& self) { return self; }
StmtPtr IRMutator::mutate_Op(const Op&, const StmtPtr& self) { return self; }

}  // namespace neuron
