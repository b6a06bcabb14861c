// fresh_psum: gives nc_matmul's accumulate=auto its meaning on rotating storage. "Auto" means
// the first matmul into a PSUM tile overwrites and later ones add; both executors decide this
// from a per-byte "last written by a matmul" flag. A tile allocated inside a loop reuses the
// storage of an earlier iteration (rotating slots), whose flags are still set, so without this
// pass its first matmul would add onto a stale result. A memset right after the allocation
// clears the flags (any non-matmul write does) and gives the fresh tile defined contents.
#include <set>

#include "neuron/codegen/pipeline.hpp"
#include "neuron/ir/visitor.hpp"

namespace neuron {

namespace {

class AutoAccumulateTargets : public IRVisitor {
 public:
  std::set<std::string> names;
  void visit_Op(const Op& op) override {
    const bool matmul = op.code == Opcode::nc_matmul || op.code == Opcode::nc_matmul_mx;
    if (!matmul || op.get_int("accumulate", -1) != -1) return;
    if (auto dst = op.access("dst")) names.insert(dst->buffer->name);
  }
};

class ClearAtAllocation : public IRMutator {
 public:
  explicit ClearAtAllocation(std::set<std::string> names) : names_(std::move(names)) {}

  StmtPtr mutate_Block(const Block& n, const StmtPtr& self) override {
    std::vector<StmtPtr> out;
    bool changed = false;
    for (auto& s : n.stmts) {
      StmtPtr m = mutate(s);
      changed |= m != s;
      out.push_back(m);
      auto alloc = s->as<Alloc>();
      if (alloc && alloc->buffer->memory == Memory::psum && names_.count(alloc->buffer->name)) {
        out.push_back(Op::make(Opcode::memset,
                               {{"dst", Access::whole(alloc->buffer)}, {"value", 0.0}},
                               alloc->span));
        changed = true;
      }
    }
    return changed ? Block::make(std::move(out), n.span) : self;
  }

 private:
  std::set<std::string> names_;
};

}  // namespace

Kernel fresh_psum(const Kernel& k) {
  AutoAccumulateTargets targets;
  targets.visit(k.body);
  if (targets.names.empty()) return k;
  Kernel out = k;
  out.body = ClearAtAllocation(std::move(targets.names)).mutate(k.body);
  return out;
}

}  // namespace neuron
