// early_psum_reads: moves each instruction that reads a PSUM tile up to right after the last
// statement it depends on, so a tile's result leaves PSUM as soon as it is complete. PSUM holds
// eight 2 KiB banks per partition; a kernel that accumulates a list of tiles in one loop and
// drains them in the next (nki-library's MoE blockwise matmul sharded on I: twelve
// [128, 512] fp32 tiles, one bank each) fits only when the drains interleave with the
// accumulations, which neuronx-cc's scheduler does and the allocator's program order does not.
// The pipeline runs this only for a kernel that does not fit as written (pipeline.cpp).
//
// A move keeps the meaning: the instruction goes after every statement that writes what it
// reads or reads or writes what it writes (buffer by buffer; all of HBM counts as one buffer,
// since kernel tensors may alias). The block's Allocs go first (an Alloc only names a tile; the
// allocator places it at its first use), so a drain may move above its destination's Alloc. An
// instruction whose views use registers stays where it is, as does everything that is not an
// instruction (loops keep their place; their contents count as the loop's uses).
#include <map>
#include <set>

#include "neuron/codegen/pipeline.hpp"
#include "neuron/ir/visitor.hpp"
#include "view_util.hpp"

namespace neuron {

namespace {

// What a statement reads and writes, by buffer (nested statements included).
struct Effects : IRVisitor {
  static inline const Buffer* const hbm = nullptr;  // every HBM tensor, as one
  std::set<const Buffer*> reads, writes;
  bool registers = false, reads_psum = false;

  static const Buffer* key(const Access& a) {
    return passes::is_hbm(a.buffer->memory) ? hbm : a.buffer.get();
  }
  void visit_Op(const Op& op) override {
    const auto& sig = opcode_signature(op.code);
    if (op.code == Opcode::register_load || op.code == Opcode::register_store ||
        op.code == Opcode::register_move)
      registers = true;
    for (auto& arg : op.args) {
      auto v = std::get_if<Access>(&arg.value);
      if (!v) continue;
      bool source = true;
      for (auto& spec : sig)
        if (arg.name == spec.name) source = spec.is_source();
      (source ? reads : writes).insert(key(*v));
      reads_psum |= source && v->buffer->memory == Memory::psum;
      for (auto& d : v->dims)
        for (auto& t : d.start.terms)
          if (is_register_var(t.var)) registers = true;
    }
  }
};

class Hoist : public IRMutator {
 public:
  StmtPtr mutate_Block(const Block& n, const StmtPtr& self) override {
    // Statements that stay are anchors; a moved instruction joins the group right after the
    // anchor it must follow (group 0, with the Allocs, precedes the first anchor), behind the
    // group's earlier members. Per buffer: the latest group that wrote it, that touched it.
    std::vector<std::vector<StmtPtr>> groups(1);
    std::map<const Buffer*, size_t> last_write, last_touch;
    bool changed = false;
    auto at_least = [](const std::map<const Buffer*, size_t>& m, const Buffer* b, size_t& g) {
      if (auto it = m.find(b); it != m.end()) g = std::max(g, it->second);
    };
    for (auto& s : n.stmts) {
      StmtPtr m = mutate(s);
      changed |= m != s;
      if (m->as<Alloc>()) {
        changed |= groups.size() > 1;
        groups[0].push_back(m);
        continue;
      }
      Effects e;
      e.visit(m);
      size_t g = groups.size();  // a new anchor
      if (m->as<Op>() && !e.registers && e.reads_psum) {
        g = 0;
        for (auto* b : e.reads) at_least(last_write, b, g);
        for (auto* b : e.writes) at_least(last_touch, b, g);
      }
      if (g == groups.size()) {
        groups.emplace_back();
      } else if (g + 1 < groups.size()) {
        changed = true;
      }
      groups[g].push_back(m);
      auto mark = [&](std::map<const Buffer*, size_t>& map, const Buffer* b) {
        auto [it, fresh] = map.try_emplace(b, g);
        if (!fresh) it->second = std::max(it->second, g);
      };
      for (auto* b : e.writes) mark(last_write, b), mark(last_touch, b);
      for (auto* b : e.reads) mark(last_touch, b);
    }
    if (!changed) return self;
    std::vector<StmtPtr> out;
    for (auto& grp : groups) out.insert(out.end(), grp.begin(), grp.end());
    return Block::make(std::move(out), n.span);
  }
};

}  // namespace

Kernel early_psum_reads(const Kernel& k) {
  Kernel out = k;
  out.body = Hoist().mutate(k.body);
  return out;
}

}  // namespace neuron
