// tile_versions: a tile that a statement overwrites whole, without reading it, starts a new
// value there; from that statement on it becomes a new buffer (a "version": same name, shape and
// dtype, its own Alloc right before the overwrite). The allocator then sees each value's own live
// range (from its first write to its last read) instead of one range from the tile's first use to
// its last, so a tile reloaded in every unrolled iteration leaves a hole between its last read in
// one iteration and its reload in the next, where other tiles fit. Published kernels rely on it:
// nki-library's MoE blockwise matmul keeps its token tiles ([3, 4] tiles of [128, 3072] bf16)
// across all blocks, yet they only hold data between the load and the transpose of each block,
// and the weights loaded in between need their bytes (on trn2 the kernel fits SBUF only so).
//
// Only a statement of the block that allocates the tile counts (it runs exactly once each time
// the block does; an overwrite inside a loop or a nested block may not run, or runs more than
// once), and only an instruction that writes every element of its destination: a matmul that
// does not accumulate, a DMA that does not scatter (dst_rows), the element-wise, copy,
// transpose, memset, iota and select instructions (opcode_writes_whole_dst, which the native
// backend's first_reads shares). Its destination must be the whole tile, and no other
// argument of it may name the tile. A DMA that skips out-of-bounds rows (oob_mode=skip) leaves
// those rows as they were, so it counts only with SkippedRows::undefined: the kernel then must
// not read rows such a DMA skipped in a tile it reloads (nki-library's MoE kernels skip padding
// tokens and never store their rows); pipeline.cpp asks for that only when nothing else fits.
#include <map>

#include "neuron/codegen/pipeline.hpp"
#include "neuron/ir/visitor.hpp"
#include "view_util.hpp"

namespace neuron {

namespace {

using passes::Uses;

bool writes_every_element(const Op& op, SkippedRows skipped) {
  if (opcode_writes_whole_dst(op.code)) return true;
  switch (op.code) {
    case Opcode::nc_matmul:
    case Opcode::nc_matmul_mx:
      return op.get_int("accumulate", -1) == 0;
    case Opcode::dma_copy:
      return !op.has("dst_rows") &&
             (op.get_int("oob_mode", 0) == 0 || skipped == SkippedRows::undefined);
    default:
      return false;
  }
}

// The view is the whole tile, each element once: every dim from 0, step 1, its full size.
bool covers_whole(const Access& a) {
  const Buffer& b = *a.buffer;
  const auto& st = a.storage_shape();
  if (!a.storage.empty() &&
      (a.origin != 0 || passes::product(st) * dtype_bytes(a.dtype()) !=
                            b.elements() * dtype_bytes(b.dtype)))
    return false;
  if (a.dims.size() != st.size()) return false;
  for (size_t d = 0; d < st.size(); ++d) {
    const DimSlice& s = a.dims[d];
    if (!s.start.is_constant() || s.start.constant != 0 || s.size != st[d]) return false;
    if (s.step != 1 && s.size != 1) return false;
  }
  return true;
}

// The on-chip tile `op` overwrites whole without reading it, or null.
const Buffer* killed(const Op& op, SkippedRows skipped) {
  if (!writes_every_element(op, skipped)) return nullptr;
  const Access* dst = op.access("dst");
  if (!dst || !is_on_chip(dst->buffer->memory) || !covers_whole(*dst)) return nullptr;
  for (auto& a : op.args)
    if (auto v = std::get_if<Access>(&a.value); v && a.name != "dst" && v->buffer == dst->buffer)
      return nullptr;
  return dst->buffer.get();
}

// Points the accesses of one statement (nested ones included) at the current versions.
class Rename : public IRMutator {
 public:
  explicit Rename(const std::map<const Buffer*, BufferPtr>& to) : to_(to) {}
  StmtPtr mutate_Op(const Op& n, const StmtPtr& self) override {
    return passes::rebind_buffers(n, self, to_);
  }

 private:
  const std::map<const Buffer*, BufferPtr>& to_;
};

class Versions : public IRMutator {
 public:
  explicit Versions(SkippedRows skipped) : skipped_(skipped) {}
  StmtPtr mutate_Block(const Block& n, const StmtPtr& self) override {
    struct Tile {
      BufferPtr current;  // the version statements now refer to
      Span span;          // of the tile's Alloc: a version is the user's same tile
      bool used = false;  // whether the current version has been touched yet
    };
    std::map<const Buffer*, Tile> tiles;  // the on-chip tiles this block allocates
    std::map<const Buffer*, BufferPtr> renamed;
    std::vector<StmtPtr> out;
    bool changed = false;
    for (auto& s : n.stmts) {
      StmtPtr m = mutate(s);  // nested blocks version their own tiles
      changed |= m != s;
      if (auto a = m->as<Alloc>(); a && is_on_chip(a->buffer->memory)) {
        tiles[a->buffer.get()] = Tile{a->buffer, a->span};
        out.push_back(m);
        continue;
      }
      if (auto op = m->as<Op>())
        if (auto b = killed(*op, skipped_); b && tiles.count(b) && tiles[b].used) {
          Tile& t = tiles[b];
          t.current = std::make_shared<Buffer>(*b);
          t.used = false;
          renamed[b] = t.current;
          out.push_back(Alloc::make(t.current, t.span));
          changed = true;
        }
      if (!renamed.empty()) m = Rename(renamed).mutate(m);
      Uses u;
      u.visit(s);
      for (auto* b : u.buffers)
        if (auto it = tiles.find(b); it != tiles.end()) it->second.used = true;
      out.push_back(m);
    }
    return changed ? Block::make(std::move(out), n.span) : self;
  }

 private:
  SkippedRows skipped_;
};

}  // namespace

Kernel tile_versions(const Kernel& k, SkippedRows skipped) {
  Kernel out = k;
  out.body = Versions(skipped).mutate(k.body);
  return out;
}

}  // namespace neuron
