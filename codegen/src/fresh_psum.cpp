// fresh_psum: gives nc_matmul's accumulate=auto its meaning on rotating storage. "Auto" means
// the first matmul into a PSUM tile overwrites and later ones add; both executors decide this
// from a per-byte "last written by a matmul" flag. A tile allocated inside a loop reuses the
// storage of an earlier iteration (rotating slots), whose flags are still set, so without this
// pass its first matmul would add onto a stale result. A memset clears the flags (any
// non-matmul write does) and gives the fresh tile defined contents: right before the first
// statement of the allocating block that uses the tile, so the tile's life (allocate.cpp places
// a buffer at its first use) still starts where the kernel first uses it.
#include <set>

#include "neuron/codegen/pipeline.hpp"
#include "neuron/ir/visitor.hpp"
#include "view_util.hpp"

namespace neuron {

namespace {

using passes::Uses;

class AutoAccumulateTargets : public IRVisitor {
 public:
  std::set<std::string> names;
  void visit_Op(const Op& op) override {
    const bool matmul = op.code == Opcode::nc_matmul || op.code == Opcode::nc_matmul_mx;
    if (!matmul || op.get_int("accumulate", -1) != -1) return;
    if (auto dst = op.access("dst")) names.insert(dst->buffer->name);
  }
};

class ClearAtFirstUse : public IRMutator {
 public:
  explicit ClearAtFirstUse(std::set<std::string> names) : names_(std::move(names)) {}

  StmtPtr mutate_Block(const Block& n, const StmtPtr& self) override {
    std::vector<StmtPtr> out;
    std::vector<const Alloc*> waiting;  // allocated here, not used yet
    bool changed = false;
    for (auto& s : n.stmts) {
      StmtPtr m = mutate(s);
      changed |= m != s;
      if (auto alloc = s->as<Alloc>()) {
        if (alloc->buffer->memory == Memory::psum && names_.count(alloc->buffer->name))
          waiting.push_back(alloc);
        out.push_back(m);
        continue;
      }
      Uses u;
      u.visit(s);
      for (auto it = waiting.begin(); it != waiting.end();) {
        if (!u.buffers.count((*it)->buffer.get())) {
          ++it;
          continue;
        }
        out.push_back(Op::make(Opcode::memset,
                               {{"dst", Access::whole((*it)->buffer)}, {"value", 0.0}},
                               (*it)->span));
        changed = true;
        it = waiting.erase(it);
      }
      out.push_back(m);
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
  out.body = ClearAtFirstUse(std::move(targets.names)).mutate(k.body);
  return out;
}

}  // namespace neuron
