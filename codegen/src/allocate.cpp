// allocate: gives every SBUF/PSUM buffer a byte offset within each partition and its rotating
// slots. Allocation is a stack: a block's buffers are freed when the block ends.
#include <map>

#include "neuron/codegen/pipeline.hpp"
#include "neuron/ir/visitor.hpp"
#include "neuron/runtime/target.hpp"
#include "view_util.hpp"

namespace neuron {

namespace {

using namespace passes;

constexpr int64_t sbuf_align = 64;

int64_t align_up(int64_t v, int64_t a) {
  return (v + a - 1) / a * a;
}

struct LoopCtx {
  std::string var;
  int64_t extent = 0;
  LoopKind kind = LoopKind::sequential;
};

class Allocator : public IRMutator {
 public:
  explicit Allocator(const Target& t) : target_(t) {}

  StmtPtr mutate_For(const For& n, const StmtPtr& self) override {
    pending_ = LoopCtx{n.var, n.extent, n.loop_kind};
    StmtPtr body = mutate(n.body);
    pending_.reset();
    return body == n.body ? self : For::make(n.var, n.extent, n.loop_kind, body, n.span);
  }

  StmtPtr mutate_Block(const Block& n, const StmtPtr& self) override {
    // Allocs directly in a loop body rotate across that loop's iterations; nested blocks don't.
    auto saved_loop = block_loop_;
    block_loop_ = pending_;
    pending_.reset();
    int64_t sbuf_top = sbuf_top_, psum_top = psum_banks_;
    size_t sbuf_live = sbuf_live_.size(), psum_live = psum_live_.size();
    StmtPtr out = IRMutator::mutate_Block(n, self);
    sbuf_top_ = sbuf_top;
    psum_banks_ = psum_top;
    sbuf_live_.resize(sbuf_live);
    psum_live_.resize(psum_live);
    block_loop_ = saved_loop;
    return out;
  }

  StmtPtr mutate_Alloc(const Alloc& n, const StmtPtr& self) override {
    pending_.reset();
    const Buffer& b = *n.buffer;
    if (!is_on_chip(b.memory)) return self;
    int64_t slots = 1;
    std::string slot_var;
    if (block_loop_ && block_loop_->kind == LoopKind::affine && block_loop_->extent > 1) {
      slots = std::min<int64_t>(2, block_loop_->extent);
      slot_var = block_loop_->var;
    }
    auto nb = std::make_shared<Buffer>(b);
    // Rotation is an optimisation: when two slots do not fit, fall back to one before failing.
    if (b.memory == Memory::sbuf) {
      int64_t offset = align_up(sbuf_top_, sbuf_align);
      if (slots > 1 && offset + b.slot_bytes() * slots > target_.sbuf_bytes_per_partition)
        slots = 1;
      nb->offset = offset;
      nb->slots = slots;
      nb->slot_var = slots > 1 ? slot_var : "";
      sbuf_live_.push_back(nb);
      sbuf_top_ = offset + b.slot_bytes() * slots;
      if (sbuf_top_ > target_.sbuf_bytes_per_partition)
        user_error(n.span, "sbuf-capacity", "SBUF needs {} bytes per partition but {} has {}: {}",
                   sbuf_top_, target_.name, target_.sbuf_bytes_per_partition,
                   live_list(sbuf_live_));
    } else {
      int64_t banks_per_slot =
          align_up(b.slot_bytes(), target_.psum_bank_bytes) / target_.psum_bank_bytes;
      if (slots > 1 && psum_banks_ + banks_per_slot * slots > target_.psum_banks) slots = 1;
      nb->offset = psum_banks_ * target_.psum_bank_bytes;
      nb->slots = slots;
      nb->slot_var = slots > 1 ? slot_var : "";
      psum_live_.push_back(nb);
      psum_banks_ += banks_per_slot * slots;
      if (psum_banks_ > target_.psum_banks)
        user_error(n.span, "psum-capacity", "PSUM needs {} banks of {} bytes but {} has {}: {}",
                   psum_banks_, target_.psum_bank_bytes, target_.name, target_.psum_banks,
                   live_list(psum_live_));
    }
    remap_[n.buffer.get()] = nb;
    return Alloc::make(nb, n.span);
  }

  StmtPtr mutate_Op(const Op& n, const StmtPtr& self) override {
    std::vector<Arg> args = n.args;
    bool changed = false;
    for (auto& a : args)
      if (auto v = std::get_if<Access>(&a.value)) {
        auto it = remap_.find(v->buffer.get());
        if (it != remap_.end()) {
          v->buffer = it->second;
          changed = true;
        }
      }
    return changed ? Op::make(n.code, std::move(args), n.span) : self;
  }

 private:
  const Target& target_;
  std::optional<LoopCtx> pending_, block_loop_;
  int64_t sbuf_top_ = 0, psum_banks_ = 0;
  std::vector<BufferPtr> sbuf_live_, psum_live_;
  std::map<const Buffer*, BufferPtr> remap_;

  static std::string live_list(const std::vector<BufferPtr>& live) {
    std::vector<std::string> parts;
    for (auto& b : live)
      parts.push_back(fmt::format("{} ({} B) x{} slot{}", buffer_str(*b), b->slot_bytes(), b->slots,
                                  b->slots == 1 ? "" : "s"));
    return fmt::format("{}", fmt::join(parts, ", "));
  }
};

}  // namespace

Kernel allocate(const Kernel& k, const std::string& target) {
  Allocator a(target_by_name(target));
  Kernel out = k;
  out.body = a.mutate(k.body);
  return out;
}

}  // namespace neuron
