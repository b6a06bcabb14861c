// allocate: gives every SBUF/PSUM buffer a byte offset within each partition and its rotating
// slots. Buffers are stacked (a block's buffers are popped when it ends), which keeps every
// buffer's bytes distinct from its neighbours' so the engines can overlap their work. When the
// stack would overflow, a buffer goes into the first hole left by dead buffers instead: a
// buffer lives from the first to the last statement of its block that uses it (a use inside a
// nested loop counts as a use by that statement; it is placed when the first comes, not at its
// Alloc). So an unrolled loop (static_range, Python range) allocating a tile per iteration, or
// a list of tiles declared up front and used one after another, fits as long as the live tiles
// do. Rotation is an
// optimisation: when a buffer fits nowhere while rotating buffers are live, the largest of those
// loses a slot and the allocation starts over, so a block tile that was multi-buffered first does
// not push a later, larger one out of SBUF; and a buffer short of its slots takes them from a
// larger rotating one the same way (pipelining small tiles is cheaper).
//
// PSUM is placed in bytes too, with one more rule: no slot straddles a 2 KiB bank (a matmul
// accumulates within one bank), so several small tiles share a bank as on hardware (four
// [128, 128] fp32 tiles per bank). A rotating PSUM buffer's slots are whole banks apart (lower
// rotates PSUM by bank-rounded strides), so slot i of a buffer at byte b lies at b + i banks.
//
// First, each Alloc moves into the innermost one-trip scope holding all its uses (sink_allocs),
// so that a buffer declared early but used in one unrolled iteration lives only there.
//
// A target of several cores ("trn2x2": the programs of an LNC grid traced into one body) is
// each core's SBUF and PSUM side by side: a tile of core c (Buffer::core; -1 counts as core 0)
// is placed in core c's part, checked against one core's capacity, as on hardware, where a
// core cannot borrow its sibling's memory.
#include <algorithm>
#include <map>
#include <set>

#include "neuron/codegen/pipeline.hpp"
#include "neuron/ir/visitor.hpp"
#include "neuron/base/target.hpp"
#include "view_util.hpp"

namespace neuron {

namespace {

using namespace passes;

constexpr int64_t sbuf_align = 64;
constexpr int64_t psum_align = 64;

int64_t align_up(int64_t v, int64_t a) {
  return (v + a - 1) / a * a;
}

struct LoopCtx {
  std::string var;
  int64_t extent = 0;
  LoopKind kind = LoopKind::sequential;
};

// Live ranges of one memory, in bytes per partition (a rotating PSUM buffer has one per slot).
class Space {
 public:
  struct Range {
    BufferPtr buffer;
    int64_t begin, end;
    const Buffer* original = nullptr;  // the buffer as written (its key across retries)
  };
  std::vector<Range> live;

  int64_t stack = 0;  // the stack top: every live range ends at or below it

  // The lowest start (a multiple of `align`) where `size` units fit between live ranges.
  int64_t first_fit(int64_t size, int64_t align) const {
    std::vector<Range> sorted = live;
    std::sort(sorted.begin(), sorted.end(),
              [](const Range& a, const Range& b) { return a.begin < b.begin; });
    int64_t at = 0;
    for (auto& r : sorted) {
      if (at + size <= r.begin) break;
      at = std::max(at, align_up(r.end, align));
    }
    return at;
  }
  // Where `slots` slots of `size` units go (fewer slots when they fit nowhere, down to 1): on the
  // stack when it has room, else in the first hole between live ranges.
  int64_t place(int64_t size, int64_t& slots, int64_t align, int64_t capacity) const {
    for (int64_t n = slots; n >= 1; --n) {
      const int64_t on_stack = align_up(stack, align);
      const int64_t at = on_stack + size * n <= capacity ? on_stack : first_fit(size * n, align);
      if (at + size * n <= capacity || n == 1) {
        slots = n;
        return at;
      }
    }
    return 0;  // unreachable: the n == 1 round returns
  }
  // Whether `slots` slots of `size` bytes, `stride` apart, fit at `at` without straddling a
  // bank or touching a live range.
  bool fits_banked(int64_t at, int64_t size, int64_t slots, int64_t stride, int64_t bank,
                   int64_t capacity) const {
    if (size <= bank && at % bank + size > bank) return false;
    if (at + (slots - 1) * stride + size > capacity) return false;
    for (int64_t i = 0; i < slots; ++i) {
      const int64_t lo = at + i * stride, hi = lo + size;
      for (auto& r : live)
        if (lo < r.end && r.begin < hi) return false;
    }
    return true;
  }
  // PSUM's `place`: on the stack when it has room, else the lowest place that fits, with fewer
  // slots when none does. When even one slot fits nowhere, the first bank-respecting place on
  // the stack (past capacity: the caller reports it).
  int64_t place_banked(int64_t size, int64_t& slots, int64_t stride, int64_t align,
                       int64_t bank, int64_t capacity) const {
    if (size > bank) align = bank;  // a bad multi-bank tile (verify names it): whole banks
    for (int64_t n = slots; n >= 1; --n)
      for (int64_t from : {align_up(stack, align), int64_t{0}})
        for (int64_t at = from; at + (n - 1) * stride + size <= capacity; at += align)
          if (fits_banked(at, size, n, stride, bank, capacity)) {
            slots = n;
            return at;
          }
    slots = 1;
    int64_t at = align_up(stack, align);
    return size <= bank && at % bank + size > bank ? align_up(at, bank) : at;
  }
  void take(BufferPtr b, int64_t begin, int64_t end, const Buffer* original) {
    live.push_back({std::move(b), begin, end, original});
    stack = std::max(stack, end);
  }
  int64_t top() const {
    int64_t t = 0;
    for (auto& r : live) t = std::max(t, r.end);
    return t;
  }
  void release(const Buffer* b) {
    live.erase(std::remove_if(live.begin(), live.end(),
                              [&](const Range& r) { return r.buffer.get() == b; }),
               live.end());
  }
};

// Thrown when a buffer does not fit while `demote` rotates: retry with it one slot shorter.
struct Demote {
  const Buffer* demote;
  int64_t slots;  // its slot count at the failure
};

class Allocator : public IRMutator {
 public:
  Allocator(const Target& t, const std::map<const Buffer*, int64_t>& max_slots)
      : target_(t), max_slots_(max_slots), sbuf_(size_t(t.cores)), psum_(size_t(t.cores)) {}

  StmtPtr mutate_For(const For& n, const StmtPtr& self) override {
    pending_ = LoopCtx{n.var, n.extent, n.loop_kind};
    StmtPtr body = mutate(n.body);
    pending_.reset();
    return body == n.body ? self : n.with_body(body);
  }

  StmtPtr mutate_Block(const Block& n, const StmtPtr& self) override {
    // Allocs directly in a loop body rotate across that loop's iterations; nested blocks don't.
    auto saved_loop = block_loop_;
    block_loop_ = pending_;
    pending_.reset();
    std::vector<int64_t> sbuf_stacks, psum_stacks;
    for (auto& c : sbuf_) sbuf_stacks.push_back(c.stack);
    for (auto& c : psum_) psum_stacks.push_back(c.stack);
    // Index of the first and the last statement using each buffer allocated in this block.
    std::map<const Buffer*, size_t> first_use, last_use;
    for (size_t i = 0; i < n.stmts.size(); ++i) {
      if (auto a = n.stmts[i]->as<Alloc>()) last_use[a->buffer.get()] = i;
      Uses u;
      u.visit(n.stmts[i]);
      for (auto* b : u.buffers)
        if (auto it = last_use.find(b); it != last_use.end()) {
          it->second = i;
          first_use.try_emplace(b, i);
        }
    }
    std::vector<std::vector<const Buffer*>> dies_after(n.stmts.size());
    for (auto& [b, last] : last_use) dies_after[last].push_back(b);
    // A buffer is placed when its first user comes, not at its Alloc: tiles declared together
    // up front (a list of tiles, nki-library's modular allocator) but used one after another
    // then share space as they do in the kernel's own layout.
    std::map<size_t, std::vector<size_t>> place_before;  // user index -> Alloc indices
    std::vector<StmtPtr> out;
    bool changed = false;
    for (size_t i = 0; i < n.stmts.size(); ++i) {
      if (auto a = n.stmts[i]->as<Alloc>(); a && is_on_chip(a->buffer->memory)) {
        if (auto it = first_use.find(a->buffer.get()); it != first_use.end()) {
          place_before[it->second].push_back(i);
          out.push_back(n.stmts[i]);  // replaced by the placed Alloc below
          continue;
        }
      }
      if (auto it = place_before.find(i); it != place_before.end())
        for (size_t at : it->second) {
          out[at] = mutate(n.stmts[at]);
          changed = true;
        }
      StmtPtr m = mutate(n.stmts[i]);
      changed |= m != n.stmts[i];
      out.push_back(m);
      for (const Buffer* b : dies_after[i]) {
        auto it = remap_.find(b);  // off-chip buffers were never placed: nothing to release
        if (it == remap_.end()) continue;
        for (auto* spaces : {&sbuf_, &psum_})
          for (auto& c : *spaces) c.release(it->second.get());
      }
    }
    block_loop_ = saved_loop;
    for (size_t c = 0; c < sbuf_.size(); ++c) {
      sbuf_[c].stack = sbuf_stacks[c];
      psum_[c].stack = psum_stacks[c];
    }
    return changed ? Block::make(std::move(out), n.span) : self;
  }

  StmtPtr mutate_Alloc(const Alloc& n, const StmtPtr& self) override {
    pending_.reset();
    const Buffer& b = *n.buffer;
    if (!is_on_chip(b.memory)) return self;
    int64_t slots = 1;
    std::string slot_var;
    if (block_loop_ && block_loop_->extent > 1) {
      // SBUF tiles rotate over three slots, so a load into a slot can start (its DMA takes about
      // a microsecond to begin) while the two before it are still being read; PSUM over two.
      // A tile allocated in a loop body is a fresh tile every iteration whatever the loop kind
      // (a sequential loop carries its values in tiles allocated outside it), so both rotate.
      slots = std::min<int64_t>(b.memory == Memory::sbuf ? 3 : 2, block_loop_->extent);
      if (auto it = max_slots_.find(n.buffer.get()); it != max_slots_.end())
        slots = std::min(slots, it->second);
      slot_var = block_loop_->var;
    }
    auto nb = std::make_shared<Buffer>(b);
    const int64_t core = core_of(b, n.span);
    // Rotation is an optimisation: with fewer slots, or one, before failing.
    if (b.memory == Memory::sbuf) {
      Space& space = sbuf_[size_t(core)];
      const int64_t cap = target_.sbuf_bytes_per_partition / target_.cores, wanted = slots;
      int64_t offset = space.place(b.slot_bytes(), slots, sbuf_align, cap);
      // Short of slots while a larger buffer rotates: pipelining the small one is worth more.
      if (slots < wanted) demote_larger(space, b.slot_bytes());
      place(*nb, core * cap + offset, slots, slot_var);
      space.take(nb, offset, offset + b.slot_bytes() * slots, n.buffer.get());
      if (offset + b.slot_bytes() * slots > cap) {
        demote_one(space);
        user_error(n.span, "sbuf-capacity", "SBUF needs {} bytes per partition{} but {} has {}: {}",
                   space.top(), of_core(core), per_core_name(), cap, live_list(space));
      }
    } else {
      Space& space = psum_[size_t(core)];
      const int64_t bank = target_.psum_bank_bytes, size = b.slot_bytes();
      const int64_t banks = target_.psum_banks / target_.cores;
      const int64_t stride = align_up(size, bank), cap = banks * bank;
      int64_t offset = space.place_banked(size, slots, stride, psum_align, bank, cap);
      place(*nb, core * cap + offset, slots, slot_var);
      for (int64_t i = 0; i < slots; ++i)
        space.take(nb, offset + i * stride, offset + i * stride + size, n.buffer.get());
      if (offset + (slots - 1) * stride + size > cap) {
        demote_one(space);
        user_error(n.span, "psum-capacity", "PSUM needs {} banks of {} bytes{} but {} has {}: {}",
                   align_up(space.top(), bank) / bank, bank, of_core(core), per_core_name(),
                   banks, live_list(space));
      }
    }
    remap_[n.buffer.get()] = nb;
    return Alloc::make(nb, n.span);
  }

  StmtPtr mutate_Op(const Op& n, const StmtPtr& self) override {
    return rebind_buffers(n, self, remap_);
  }

 private:
  const Target& target_;
  const std::map<const Buffer*, int64_t>& max_slots_;
  std::optional<LoopCtx> pending_, block_loop_;
  std::vector<Space> sbuf_, psum_;  // per core
  std::map<const Buffer*, BufferPtr> remap_;

  // The core whose memory holds `b`: its own, or core 0 for a tile of no core.
  int64_t core_of(const Buffer& b, const Span& span) const {
    if (b.core >= target_.cores)
      user_error(span, "target", "tile '{}' belongs to core {} but target {} has {} core{}",
                 b.name, b.core, target_.name, target_.cores, target_.cores == 1 ? "" : "s");
    return std::max(b.core, 0);
  }
  // How messages name one core's memory: "trn2" for a core of "trn2x2".
  const std::string& per_core_name() const {
    return target_.cores == 1 ? target_.name : target_.generation;
  }
  std::string of_core(int64_t core) const {
    return target_.cores == 1 ? "" : fmt::format(" on core {} of {}", core, target_.cores);
  }

  // Out of space: if a live buffer rotates, throw to retry with the largest one a slot shorter.
  static void demote_one(const Space& s) {
    const Space::Range* best = nullptr;
    for (auto& r : s.live)
      if (r.buffer->slots > 1 && (!best || r.buffer->slot_bytes() > best->buffer->slot_bytes()))
        best = &r;
    if (best) throw Demote{best->original, best->buffer->slots};
  }

  // A live buffer rotating slots larger than `bytes`: throw to retry with it a slot shorter.
  static void demote_larger(const Space& s, int64_t bytes) {
    const Space::Range* best = nullptr;
    for (auto& r : s.live)
      if (r.buffer->slots > 1 && r.buffer->slot_bytes() > bytes &&
          (!best || r.buffer->slot_bytes() > best->buffer->slot_bytes()))
        best = &r;
    if (best) throw Demote{best->original, best->buffer->slots};
  }

  static void place(Buffer& b, int64_t offset, int64_t slots, const std::string& slot_var) {
    b.offset = offset;
    b.slots = slots;
    b.slot_var = slots > 1 ? slot_var : "";
  }

  static std::string live_list(const Space& s) {
    std::vector<std::string> parts;
    std::set<const Buffer*> seen;  // a rotating PSUM buffer has a range per slot
    for (auto& r : s.live)
      if (seen.insert(r.buffer.get()).second)
        parts.push_back(fmt::format("{} ({} B) x{} slot{}", buffer_str(*r.buffer),
                                  r.buffer->slot_bytes(), r.buffer->slots,
                                  r.buffer->slots == 1 ? "" : "s"));
    return fmt::format("{}", fmt::join(parts, ", "));
  }
};

// A statement that only clears `b` for a fresh tile (fresh_psum's memset right after an Alloc).
bool clears_only(const StmtPtr& s, const Buffer* b) {
  auto op = s->as<Op>();
  if (!op || op->code != Opcode::memset) return false;
  Uses u;
  u.visit(s);
  return u.buffers.size() == 1 && *u.buffers.begin() == b;
}

// A scope an Alloc may move into without changing what the kernel means: a nested block or a
// loop of one iteration (the legacy layer traces each unrolled iteration as one), not a loop
// that repeats (a tile allocated in its body would be a fresh tile every iteration).
bool one_trip_scope(const StmtPtr& s) {
  if (s->as<Block>()) return true;
  auto f = s->as<For>();
  return f && !f->is_dynamic() && f->extent == 1;
}

StmtPtr prepend(const StmtPtr& scope, std::vector<StmtPtr> first) {
  auto into = [&](const StmtPtr& body) {
    std::vector<StmtPtr> stmts = std::move(first);
    if (auto b = body->as<Block>())
      stmts.insert(stmts.end(), b->stmts.begin(), b->stmts.end());
    else
      stmts.push_back(body);
    return Block::make(std::move(stmts), body->span);
  };
  if (auto f = scope->as<For>()) return f->with_body(into(f->body));
  return into(scope);
}

// Moves each on-chip Alloc (with its fresh-tile clear) into the innermost one-trip scope that
// holds all its uses, so that a buffer lives only where it is used. NKI allocates each block of
// a tensor with block dims (`nl.ndarray((n, nl.par_dim(128), 512), buffer=nl.psum)`) by its own
// live range; the legacy layer allocates every block where the tensor is declared, and the
// unrolled loops then touch one block per iteration, so this lets them share PSUM as they do
// on hardware (attention tutorials v3, v8a-v11).
StmtPtr sink_allocs(const StmtPtr& s) {
  if (auto f = s->as<For>()) {
    StmtPtr body = sink_allocs(f->body);
    return body == f->body ? s : f->with_body(body);
  }
  auto blk = s->as<Block>();
  if (!blk) return s;
  const auto& in = blk->stmts;
  std::vector<std::set<const Buffer*>> uses(in.size());
  for (size_t i = 0; i < in.size(); ++i)
    if (!in[i]->as<Alloc>()) {
      Uses u;
      u.visit(in[i]);
      uses[i] = std::move(u.buffers);
    }
  std::map<size_t, std::vector<StmtPtr>> moved;  // user index -> statements moved into it
  std::vector<bool> gone(in.size(), false);
  for (size_t i = 0; i < in.size(); ++i) {
    auto a = in[i]->as<Alloc>();
    if (!a || !is_on_chip(a->buffer->memory)) continue;
    const Buffer* b = a->buffer.get();
    std::vector<size_t> users;
    for (size_t j = i + 1; j < in.size(); ++j)
      if (uses[j].count(b)) users.push_back(j);
    // (fresh_psum's clear comes right before the tile's first user)
    const bool cleared = users.size() == 2 && clears_only(in[users[0]], b);
    if (users.size() != 1 + (cleared ? 1 : 0)) continue;
    const size_t target = users.back();
    if (!one_trip_scope(in[target])) continue;
    moved[target].push_back(in[i]);
    gone[i] = true;
    if (cleared) {
      moved[target].push_back(in[users[0]]);
      gone[users[0]] = true;
    }
  }
  std::vector<StmtPtr> out;
  bool changed = !moved.empty();
  for (size_t i = 0; i < in.size(); ++i) {
    if (gone[i]) continue;
    StmtPtr m = in[i];
    if (auto it = moved.find(i); it != moved.end()) m = prepend(m, std::move(it->second));
    StmtPtr sunk = sink_allocs(m);
    changed |= sunk != in[i];
    out.push_back(sunk);
  }
  return changed ? Block::make(std::move(out), blk->span) : s;
}

}  // namespace

Kernel allocate(const Kernel& k, const std::string& target) {
  std::map<const Buffer*, int64_t> max_slots;
  const StmtPtr sunk = sink_allocs(k.body);
  while (true) {
    try {
      Allocator a(target_by_name(target), max_slots);
      Kernel out = k;
      out.body = a.mutate(sunk);
      return out;
    } catch (const Demote& d) {
      max_slots[d.demote] = d.slots - 1;  // each retry takes a slot away: this terminates
    }
  }
}

}  // namespace neuron
