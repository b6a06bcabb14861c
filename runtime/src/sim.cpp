// The simulator: call checks, SPMD grid, memories, loop walk, bounds checks and the timing model.
// What each instruction computes is not here: it runs the instruction kernels (instr_kernels.hpp)
// with the arguments instr_calls.hpp gives, exactly as native code does.
#include "neuron/runtime/sim.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <new>
#include <set>
#include <string>

#include <sys/mman.h>

#include "neuron/base/error.hpp"
#include "neuron/base/print.hpp"
#include "neuron/base/target.hpp"
#include "neuron/codegen/fault.hpp"
#include "neuron/codegen/instr_calls.hpp"
#include "neuron/codegen/plan.hpp"
#include "neuron/runtime/profile.hpp"
#include "neuron/runtime/timing.hpp"

namespace neuron {
namespace sim {

namespace {

// Variable slots: pid0..3, npid0..3, then loop variables by name.
constexpr int kPidSlot = 0, kNpidSlot = 4, kFirstLoopSlot = 8;

struct CAffine {
  int64_t constant = 0;
  std::vector<std::pair<int, int64_t>> terms;
  int64_t eval(const std::vector<int64_t>& env) const {
    int64_t v = constant;
    for (auto& [slot, c] : terms) v += c * env[static_cast<size_t>(slot)];
    return v;
  }
};

struct CPattern {
  const AccessPattern* ap = nullptr;
  CAffine partition, offset;
  int rot_slot = -1;
  // A register or a dynamic loop decides its place: it must stay inside its tile's allocation.
  bool dynamic = false;
};

struct CInstr {
  const Instr* in = nullptr;
  int timing = -1;  // TimingModel instruction index
  CPattern dst, reduce_res;
  std::vector<CPattern> src;
};

struct CNode {
  bool loop = false;
  int slot = -1;
  int64_t extent = 0;
  // A dynamic loop: trip count from start/stop/step when it starts, or while cond_slot != 0.
  bool dynamic = false;
  CAffine start, stop;
  int64_t step = 1;
  int cond_slot = -1;
  std::vector<CNode> body;
  CInstr instr;
};

class Slots {
 public:
  Slots() {
    for (int a = 0; a < 4; ++a) {
      by_name_[program_id_var(a)] = kPidSlot + a;
      by_name_[num_programs_var(a)] = kNpidSlot + a;
    }
    names_.resize(kFirstLoopSlot);
    for (int a = 0; a < 4; ++a) {
      names_[kPidSlot + a] = program_id_var(a);
      names_[kNpidSlot + a] = num_programs_var(a);
    }
  }
  int get_or_add(const std::string& name) {
    auto it = by_name_.find(name);
    if (it != by_name_.end()) return it->second;
    int s = static_cast<int>(names_.size());
    by_name_[name] = s;
    names_.push_back(name);
    return s;
  }
  int lookup(const std::string& name, const Span& span) {
    if (is_register_var(name)) return get_or_add(name);  // registers start at 0
    auto it = by_name_.find(name);
    NEURON_ASSERT(it != by_name_.end(), "engine program uses unknown variable '{}' at {}", name,
                  span.str());
    return it->second;
  }
  const std::vector<std::string>& names() const { return names_; }

 private:
  std::map<std::string, int> by_name_;
  std::vector<std::string> names_;
};

CAffine compile_affine(const Affine& a, Slots& slots, const Span& span) {
  CAffine c;
  c.constant = a.constant;
  for (auto& t : a.terms) c.terms.emplace_back(slots.lookup(t.var, span), t.coeff);
  return c;
}

// `dynamic_vars`: the variables of the dynamic loops around the instruction.
CPattern compile_pattern(const AccessPattern& ap, Slots& slots, const Span& span,
                         const std::set<std::string>& dynamic_vars) {
  CPattern c;
  c.ap = &ap;
  c.partition = compile_affine(ap.partition, slots, span);
  c.offset = compile_affine(ap.offset, slots, span);
  if (!ap.rotation.var.empty() && ap.rotation.count > 1)
    c.rot_slot = slots.lookup(ap.rotation.var, span);
  c.dynamic = native::placed_at_run_time(ap, dynamic_vars);
  return c;
}

std::vector<CNode> compile_body(const std::vector<ProgNode>& body, Slots& slots,
                                std::set<std::string>& dynamic_vars) {
  std::vector<CNode> out;
  for (auto& n : body) {
    CNode c;
    if (n.kind == ProgNode::Kind::loop) {
      c.loop = true;
      c.slot = slots.get_or_add(n.var);
      c.extent = n.extent;
      if (n.loop_kind == LoopKind::dynamic) {
        c.dynamic = true;
        Span none;
        c.start = compile_affine(n.start, slots, none);
        c.stop = compile_affine(n.stop, slots, none);
        c.step = n.step;
        if (!n.cond.empty()) c.cond_slot = slots.get_or_add(n.cond);
      }
      const bool added = c.dynamic && dynamic_vars.insert(n.var).second;
      c.body = compile_body(n.body, slots, dynamic_vars);
      if (added) dynamic_vars.erase(n.var);
    } else {
      const Instr& in = n.instr;
      c.instr.in = &in;
      if (!in.args.reg.empty()) slots.get_or_add(in.args.reg);
      if (!in.args.src_reg.empty()) slots.get_or_add(in.args.src_reg);
      if (opcode_has_dst(in.op))
        c.instr.dst = compile_pattern(in.dst, slots, in.span, dynamic_vars);
      if (in.has_reduce_res)
        c.instr.reduce_res = compile_pattern(in.reduce_res, slots, in.span, dynamic_vars);
      for (auto& s : in.src)
        c.instr.src.push_back(compile_pattern(s, slots, in.span, dynamic_vars));
    }
    out.push_back(std::move(c));
  }
  return out;
}

// Zero-filled memory from mmap: the kernel hands out zero pages lazily, so a 27 MiB SBUF costs
// nothing until touched. (calloc does not guarantee that: once glibc's heap has grown, it
// serves such a block from the heap and memsets all of it, 87% of a small kernel's run time.)
class ZeroedBytes {
 public:
  ZeroedBytes() = default;
  ZeroedBytes(const ZeroedBytes&) = delete;
  ZeroedBytes& operator=(const ZeroedBytes&) = delete;
  ~ZeroedBytes() { release(); }
  void allocate(size_t n) {
    release();
    size_ = n == 0 ? 1 : n;
    void* p = mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      size_ = 0;
      throw std::bad_alloc();
    }
    mem_ = static_cast<std::byte*>(p);
  }
  std::byte* data() const { return mem_; }

 private:
  void release() {
    if (mem_) munmap(mem_, size_);
    mem_ = nullptr;
  }
  std::byte* mem_ = nullptr;
  size_t size_ = 0;
};

// The memories of one SPMD program and everything needed to resolve patterns against them.
struct Machine {
  const Program* prog = nullptr;
  int partitions = 128;
  int64_t sbuf_pb = 0, psum_pb = 0;  // bytes per partition
  ZeroedBytes sbuf, psum, psum_flags;
  int64_t sbuf_dirty = 0, psum_dirty = 0;  // bytes per partition written since the last reset
  std::vector<Tensor> hbm;                 // Program::tensors order
  std::vector<int64_t> env;
  Slots* slots = nullptr;
  size_t grid_dims = 1;
  std::ostream* print = nullptr;
  bool execute = true;
  TimingModel* timing = nullptr;
  int64_t flat_pid = 0;
  std::vector<Footprint> reads, writes;  // reused per instruction

  void reset_on_chip() {
    for (int p = 0; p < partitions; ++p) {
      std::memset(sbuf.data() + p * sbuf_pb, 0, static_cast<size_t>(sbuf_dirty));
      std::memset(psum.data() + p * psum_pb, 0, static_cast<size_t>(psum_dirty));
      std::memset(psum_flags.data() + p * psum_pb, 0, static_cast<size_t>(psum_dirty));
    }
    sbuf_dirty = psum_dirty = 0;
  }

  // The program ids alone: what a fault raised by an instruction kernel names on both
  // executors (the native code does not keep loop variables or registers where it could show them).
  std::string pid_str() const {
    std::string s;
    auto& names = slots->names();
    for (size_t i = 0; i < std::min(names.size(), grid_dims); ++i)
      s += fmt::format("{}{}={}", i ? ", " : "", names[i], env[i]);
    return s;
  }

  std::string env_str() const {
    std::string s;
    auto& names = slots->names();
    for (size_t i = 0; i < names.size(); ++i) {
      if (i < static_cast<size_t>(kFirstLoopSlot) && i >= grid_dims) continue;  // npid, unused pid
      if (!s.empty()) s += ", ";
      s += fmt::format("{}={}", names[i], env[i]);
    }
    return s;
  }

  // Smallest and largest value of sum(stride * idx) over the dims from `first` (dim 0 spans
  // `rows` rows when given: an indirect DMA's HBM side).
  static std::pair<int64_t, int64_t> reach(const AccessPattern& ap, size_t first, int64_t rows) {
    int64_t lo = 0, hi = 0;
    for (size_t i = first; i < ap.dims.size(); ++i) {
      const int64_t size = i == 0 && rows > 0 ? rows : ap.dims[i].size;
      int64_t span = ap.dims[i].stride * (size - 1);
      (span < 0 ? lo : hi) += span;
    }
    return {lo, hi};
  }

  // A dma_copy with oob_mode skip whose HBM side a runtime offset (a register, a dynamic loop)
  // moves outside its tensor is skipped, as NKI's DMA skips out-of-bounds accesses; the native
  // code does the same (codegen/llvm/lower_program.cpp check_dynamic).
  bool skipped_copy(const CInstr& ci) const {
    const Instr& in = *ci.in;
    if (in.op != Opcode::dma_copy || !in.args.oob_skip ||
        in.args.indirect != InstrArgs::Indirect::none)
      return false;
    for (const CPattern* cp : {&ci.dst, &ci.src[0]}) {
      const AccessPattern& ap = *cp->ap;
      if (is_on_chip(ap.memory)) continue;
      const int64_t off = cp->offset.eval(env);
      auto [lo, hi] = reach(ap, 0, 0);
      if (off + lo < 0 || off + hi >= hbm[static_cast<size_t>(ap.tensor)].elements()) return true;
    }
    return false;
  }

  // Resolves a pattern into the kernels' view for the current iteration and checks every element
  // it touches. `what` names the operand.
  // `rows`: an indirect DMA's HBM side, whose dim 0 positions are data: its bounds are checked
  // over all `rows` rows of the indexed dim (the kernel checks each row index).
  native::NView resolve(const CPattern& cp, const Instr& in, const char* what, bool writes,
                        native::NormLayout& l, int64_t rows = 0) {
    const AccessPattern& ap = *cp.ap;
    const int64_t esize = dtype_bytes(ap.dtype);
    int64_t count = 1;
    for (auto& d : ap.dims) {
      if (d.size < 0)
        user_error(in.span, "out-of-bounds", "{} of {} has a negative dimension size {}", what,
                   opcode_name(in.op), d.size);
      count *= d.size;
    }
    auto extent = [&](size_t first) { return reach(ap, first, rows); };
    native::NView v{};
    if (is_on_chip(ap.memory)) {
      NEURON_ASSERT(!ap.dims.empty(), "on-chip pattern without a partition dim at {}",
                    in.span.str());
      const bool sb = ap.memory == Memory::sbuf;
      const int64_t pb = sb ? sbuf_pb : psum_pb;
      int64_t p0 = cp.partition.eval(env);
      int64_t off = cp.offset.eval(env), slot = 0;
      if (cp.rot_slot >= 0) {
        int64_t r = env[static_cast<size_t>(cp.rot_slot)] % ap.rotation.count;
        if (r < 0) r += ap.rotation.count;
        slot = r * ap.rotation.bytes;
        off += slot;
      }
      const int64_t pstep = ap.dims[0].stride, pcount = ap.dims[0].size;
      auto [flo, fhi] = extent(1);
      if (count > 0) {
        int64_t plo = p0 + std::min<int64_t>(0, pstep * (pcount - 1));
        int64_t phi = p0 + std::max<int64_t>(0, pstep * (pcount - 1));
        if (plo < 0 || phi >= partitions)
          user_error(in.span, "out-of-bounds",
                     "{} of {} touches partitions {}..{}, outside the {} partitions of {} "
                     "(start partition {}, step {}, count {}; {})",
                     what, opcode_name(in.op), plo, phi, partitions, memory_name(ap.memory), p0,
                     pstep, pcount, env_str());
        int64_t blo = off + flo * esize, bhi = off + fhi * esize + esize;
        if (blo < 0 || bhi > pb)
          user_error(in.span, "out-of-bounds",
                     "{} of {} touches bytes [{}, {}) of each partition, outside the {} bytes of "
                     "a {} partition (byte offset {}, element indices {}..{}; {})",
                     what, opcode_name(in.op), blo, bhi, pb, memory_name(ap.memory), off, flo, fhi,
                     env_str());
        if (cp.dynamic && ap.alloc.known()) {
          const int64_t alo = ap.alloc.lo + slot, ahi = ap.alloc.hi + slot;
          if (plo < 0 || phi >= ap.alloc.partitions || blo < alo || bhi > ahi)
            user_error(in.span, "out-of-bounds",
                       "{} of {} touches partitions {}..{} and bytes [{}, {}) of each, outside "
                       "its tile (partitions 0..{}, bytes [{}, {})); a register or a dynamic loop "
                       "made the index ({}): keep it inside the tile",
                       what, opcode_name(in.op), plo, phi, blo, bhi, ap.alloc.partitions - 1,
                       alo, ahi, env_str());
        }
        if (writes) (sb ? sbuf_dirty : psum_dirty) = std::max(sb ? sbuf_dirty : psum_dirty, bhi);
      }
      const int64_t base = p0 * pb + off;
      v.base = reinterpret_cast<char*>((sb ? sbuf.data() : psum.data()) + base);
      if (!sb) v.flags = reinterpret_cast<uint8_t*>(psum_flags.data()) + base;
      l = native::normalize(ap, in, pb);
    } else {
      NEURON_ASSERT(ap.tensor >= 0 && ap.tensor < static_cast<int>(hbm.size()),
                    "pattern names tensor {} of {} at {}", ap.tensor, hbm.size(), in.span.str());
      Tensor& t = hbm[static_cast<size_t>(ap.tensor)];
      const TensorDecl& decl = prog->tensors[static_cast<size_t>(ap.tensor)];
      NEURON_ASSERT(t.dtype() == ap.dtype, "pattern dtype {} differs from tensor '{}' dtype {}",
                    dtype_name(ap.dtype), decl.name, dtype_name(t.dtype()));
      int64_t off = cp.offset.eval(env);
      auto [lo, hi] = extent(0);
      if (count > 0 && (off + lo < 0 || off + hi >= t.elements()))
        user_error(in.span, "out-of-bounds",
                   "{} of {} touches elements {}..{} of tensor '{}' (shape [{}], {} elements) at "
                   "element offset {} ({})",
                   what, opcode_name(in.op), off + lo, off + hi, decl.name,
                   fmt::join(t.shape(), ", "), t.elements(), off, env_str());
      v.base = static_cast<char*>(t.data()) + off * esize;
      l = native::normalize(ap, in, 0);
    }
    std::copy(l.size, l.size + native::kDims, v.size);
    std::copy(l.stride, l.stride + native::kDims, v.stride);
    return v;
  }

  // The bytes a pattern touches now, for the timing model's dependence tracking.
  bool footprint(const CPattern& cp, Footprint& f) const {
    const AccessPattern& ap = *cp.ap;
    int64_t lo = 0, hi = 0, count = 1;
    const size_t first = is_on_chip(ap.memory) ? 1 : 0;
    for (size_t i = 0; i < ap.dims.size(); ++i) {
      count *= ap.dims[i].size;
      if (i < first) continue;
      int64_t span = ap.dims[i].stride * (ap.dims[i].size - 1);
      (span < 0 ? lo : hi) += span;
    }
    if (count <= 0) return false;
    if (first == 1) {
      const int64_t esize = dtype_bytes(ap.dtype);
      f.space = ap.memory == Memory::sbuf ? 0 : 1;
      int64_t p0 = cp.partition.eval(env);
      int64_t pspan = ap.dims[0].stride * (ap.dims[0].size - 1);
      f.p_lo = p0 + std::min<int64_t>(0, pspan);
      f.p_hi = p0 + std::max<int64_t>(0, pspan) + 1;
      int64_t off = cp.offset.eval(env);
      if (cp.rot_slot >= 0) {
        int64_t r = env[static_cast<size_t>(cp.rot_slot)] % ap.rotation.count;
        off += (r < 0 ? r + ap.rotation.count : r) * ap.rotation.bytes;
      }
      f.lo = off + lo * esize;
      f.hi = off + hi * esize + esize;
      f.bytes = std::min(f.hi - f.lo, count / std::max<int64_t>(ap.dims[0].size, 1) * esize);
      f.row_stride = 0;
      return true;
    }
    f.space = 2 + ap.tensor;
    f.p_lo = 0;
    f.p_hi = 1;
    int64_t off = cp.offset.eval(env);
    f.row_stride = 0;
    // A row-major box: rows `dims[0].stride` apart, the inner dims inside one row.
    if (ap.dims.size() >= 2 && ap.dims[0].stride > 0) {
      const int64_t s = ap.dims[0].stride;
      int64_t a = off + lo, b = off + (hi - ap.dims[0].stride * (ap.dims[0].size - 1));
      if (a >= 0 && a / s == b / s) {
        f.row_stride = s;
        f.rows = ap.dims[0].size;
        f.col_lo = a % s;
        f.col_hi = b % s + 1;
      }
    }
    f.lo = off + lo;
    f.hi = off + hi + 1;
    return true;
  }

  void time_instr(const CInstr& ci) {
    const Instr& in = *ci.in;
    reads.clear();
    writes.clear();
    Footprint f;
    for (auto& s : ci.src)
      if (footprint(s, f)) reads.push_back(f);
    if (opcode_has_dst(in.op) && footprint(ci.dst, f)) writes.push_back(f);
    if (in.has_reduce_res && footprint(ci.reduce_res, f)) writes.push_back(f);
    timing->issue(ci.timing, reads, writes, flat_pid);
  }

  void run_instr(const CInstr& ci) {
    if (timing) time_instr(ci);
    if (!execute || skipped_copy(ci)) return;
    Executor e{*this, ci};
    native::call_instr(e, *ci.in);
    native::raise_fault(*prog, native::take_fault(), pid_str());
  }

  // The simulator's executor of instr_calls.hpp: operands resolved (and bounds-checked) for the
  // current iteration, kernels called directly.
  struct Executor {
    Machine& m;
    const CInstr& ci;
    native::NView views[8];
    int used = 0;
    std::string header;

    using View = const native::NView*;
    View view(const AccessPattern& ap, const Instr& in, native::NormLayout& l) {
      NEURON_ASSERT(used < 8, "{} has more operands than the simulator holds", opcode_name(in.op));
      const auto side = in.args.indirect;
      const int64_t rows = in.args.indirect_rows;
      if (&ap == &in.dst)
        return keep(m.resolve(ci.dst, in, "destination", true, l,
                              side == InstrArgs::Indirect::dst ? rows : 0));
      if (&ap == &in.reduce_res) return keep(m.resolve(ci.reduce_res, in, "reduce_res", true, l));
      for (size_t i = 0; i < in.src.size(); ++i)
        if (&ap == &in.src[i])
          return keep(m.resolve(ci.src[i], in, "source", false, l,
                                i == 0 && side == InstrArgs::Indirect::src ? rows : 0));
      internal_error("{} at {}: operand is not one of the instruction's", opcode_name(in.op),
                     in.span.str());
    }
    View no_view() { return nullptr; }
    View value_pattern(const native::NormLayout& l) {
      native::NView v{};
      std::copy(l.size, l.size + native::kDims, v.size);
      std::copy(l.stride, l.stride + native::kDims, v.stride);
      return keep(v);
    }
    const char* text(const std::string& s) {
      header = s;
      return header.c_str();
    }
    template <class R, class... P, class... A>
    void call(R (*kernel)(P...), const char*, const A&... args) {
      kernel(static_cast<P>(args)...);
    }
    using Int = int64_t;
    Int reg(const std::string& r) { return m.env[reg_slot(r)]; }
    Int integer(int64_t v) { return v; }
    void set_reg(const std::string& r, Int v) {
      m.env[reg_slot(r)] = static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint64_t>(v)));
    }
    template <class... P, class... A>
    void call_into(const std::string& r, int64_t (*kernel)(P...), const char*, const A&... args) {
      m.env[reg_slot(r)] = kernel(static_cast<P>(args)...);
    }
    size_t reg_slot(const std::string& r) {
      return static_cast<size_t>(m.slots->lookup(r, ci.in->span));
    }
    View keep(const native::NView& v) {
      views[used] = v;
      return &views[used++];
    }
  };

  void run(const std::vector<CNode>& body) {
    for (auto& n : body) {
      if (!n.loop) {
        run_instr(n.instr);
        continue;
      }
      int64_t extent = n.extent;
      if (n.dynamic && n.cond_slot < 0) {
        const int64_t span = n.stop.eval(env) - n.start.eval(env);
        extent = span > 0 ? (span + n.step - 1) / n.step : 0;
      }
      const size_t var = static_cast<size_t>(n.slot);
      if (n.cond_slot >= 0) {
        for (env[var] = 0; env[static_cast<size_t>(n.cond_slot)] != 0; ++env[var]) run(n.body);
      } else {
        for (env[var] = 0; env[var] < extent; ++env[var]) run(n.body);
      }
      env[var] = 0;
    }
  }
};

bool is_dynamic(const std::vector<ProgNode>& body) {
  for (auto& n : body) {
    if (n.kind == ProgNode::Kind::loop) {
      if (n.loop_kind == LoopKind::dynamic || is_dynamic(n.body)) return true;
    } else if (!n.instr.args.reg.empty()) {
      return true;
    }
  }
  return false;
}

void register_instrs(std::vector<CNode>& body, TimingModel& tm) {
  for (auto& n : body) {
    if (n.loop)
      register_instrs(n.body, tm);
    else
      n.instr.timing = tm.add_instr(*n.instr.in);
  }
}

std::string shape_str(const std::vector<int64_t>& s) {
  return fmt::format("[{}]", fmt::join(s, ", "));
}

}  // namespace
}  // namespace sim

void check_call(const Program& p, const std::vector<Tensor>& tensors,
                const std::vector<int64_t>& grid, bool check_tensors) {
  using sim::shape_str;
  // The caller passes inputs then outputs; scratch tensors are the executor's.
  std::vector<const TensorDecl*> params;
  for (auto& t : p.tensors)
    if (t.role != TensorDecl::Role::scratch) params.push_back(&t);
  if (check_tensors && tensors.size() != params.size()) {
    std::vector<std::string> names;
    for (auto* d : params) names.push_back(d->name);
    user_error(Span{}, "call-signature", "kernel '{}' takes {} tensors ({}) but was called with {}",
               p.name, params.size(), fmt::join(names, ", "), tensors.size());
  }
  for (size_t i = 0; i < (check_tensors ? params.size() : 0); ++i) {
    const TensorDecl& d = *params[i];
    const Tensor& t = tensors[i];
    // MX x4 data crosses the host boundary as its raw bits (uint32 / uint16 arrays).
    const bool raw_mx = dtype_is_mx(d.dtype) && !dtype_is_float(t.dtype()) &&
                        !dtype_is_signed(t.dtype()) && dtype_bytes(t.dtype()) == dtype_bytes(d.dtype);
    if (t.shape() != d.shape || (t.dtype() != d.dtype && !raw_mx))
      user_error(Span{}, "call-signature",
                 "tensor '{}' (argument {}) of kernel '{}': expected {} {}, got {} {}", d.name, i,
                 p.name, shape_str(d.shape), dtype_name(d.dtype), shape_str(t.shape()),
                 dtype_name(t.dtype()));
    if (t.elements() > 0 && t.data() == nullptr)
      user_error(Span{}, "call-signature", "tensor '{}' (argument {}) has no data", d.name, i);
  }
  if (grid.empty() || grid.size() > 4)
    user_error(Span{}, "grid", "launch grid must have 1 to 4 dims, got {}", grid.size());
  for (int64_t g : grid)
    if (g < 1) user_error(Span{}, "grid", "launch grid dims must be >= 1, got {}", shape_str(grid));
}

void simulate(const Program& p, const std::vector<Tensor>& tensors,
              const std::vector<int64_t>& grid, const SimOptions& opts) {
  using namespace sim;
  const bool timing_only = !opts.execute && tensors.empty();
  check_call(p, tensors, grid, /*check_tensors=*/!timing_only);
  if (!opts.execute && is_dynamic(p.body))
    user_error(Span{}, "timing-only",
               "kernel '{}' has runtime loops or registers, whose values come from its data, so "
               "it cannot be simulated for timing only: simulate it with its inputs",
               p.name);
  native::check_program(p);  // the instructions' shape rules, as native code checks them

  const Target& target = p.target.empty() ? default_target() : target_by_name(p.target);
  Slots slots;
  std::set<std::string> dynamic_vars;
  std::vector<CNode> body = compile_body(p.body, slots, dynamic_vars);

  Machine m;
  m.prog = &p;
  m.partitions = target.partitions;
  m.sbuf_pb = target.sbuf_bytes_per_partition;
  m.psum_pb = target.psum_bytes_per_partition;
  m.sbuf.allocate(static_cast<size_t>(m.partitions * m.sbuf_pb));
  m.psum.allocate(static_cast<size_t>(m.partitions * m.psum_pb));
  m.psum_flags.allocate(static_cast<size_t>(m.partitions * m.psum_pb));
  m.slots = &slots;
  m.grid_dims = grid.size();
  m.print = opts.print ? opts.print : &std::cout;
  m.env.assign(slots.names().size(), 0);
  m.execute = opts.execute;
  size_t next = 0;
  for (auto& d : p.tensors) {
    if (!m.execute) break;  // timing only: HBM is never touched
    if (d.role == TensorDecl::Role::scratch)
      m.hbm.push_back(Tensor::empty(d.shape, d.dtype));
    else if (const Tensor& t = tensors[next++]; t.dtype() != d.dtype)  // raw MX bits
      m.hbm.push_back(Tensor::borrow(t.data(), t.shape(), d.dtype));
    else
      m.hbm.push_back(t);
  }
  std::unique_ptr<TimingModel> timing;
  if (opts.profile) {
    *opts.profile = Profile{};
    timing = std::make_unique<TimingModel>(target, p, *opts.profile);
    register_instrs(body, *timing);
    // Reads of HBM tensors that nothing writes can never be waited on: skip tracking them.
    std::vector<bool> written(p.tensors.size(), false);
    auto mark = [&](auto&& self, const std::vector<ProgNode>& nodes) -> void {
      for (auto& n : nodes) {
        if (n.kind == ProgNode::Kind::loop) {
          self(self, n.body);
        } else if (opcode_has_dst(n.instr.op) && !is_on_chip(n.instr.dst.memory) &&
                   n.instr.dst.tensor >= 0 &&
                   static_cast<size_t>(n.instr.dst.tensor) < written.size()) {
          written[static_cast<size_t>(n.instr.dst.tensor)] = true;
        }
      }
    };
    mark(mark, p.body);
    timing->set_hbm_written(std::move(written));
    opts.profile->executed = opts.execute;
    m.timing = timing.get();
  }

  // device_print output goes to the run's stream (the kernels write to this thread's stream).
  struct PrintTo {
    std::ostream* saved = native::print_stream();
    explicit PrintTo(std::ostream* os) { native::set_print_stream(os); }
    ~PrintTo() { native::set_print_stream(saved); }
  } print_to(m.print);
  int64_t total = 1;
  for (int64_t g : grid) total *= g;
  for (size_t a = 0; a < 4; ++a) m.env[kNpidSlot + a] = a < grid.size() ? grid[a] : 1;
  for (int64_t flat = 0; flat < total; ++flat) {
    // Row-major: the last grid dim varies fastest.
    int64_t rest = flat;
    for (int a = static_cast<int>(grid.size()) - 1; a >= 0; --a) {
      m.env[static_cast<size_t>(kPidSlot + a)] = rest % grid[static_cast<size_t>(a)];
      rest /= grid[static_cast<size_t>(a)];
    }
    m.flat_pid = flat;
    // Loop variables and registers start at 0 in every program.
    std::fill(m.env.begin() + kFirstLoopSlot, m.env.end(), 0);
    if (flat > 0 && m.execute) {
      m.reset_on_chip();
      for (size_t i = 0; i < p.tensors.size(); ++i)
        if (p.tensors[i].role == TensorDecl::Role::scratch)
          std::memset(m.hbm[i].data(), 0, m.hbm[i].bytes());
    }
    m.run(body);
  }
  if (timing) {
    timing->finish();
    opts.profile->programs = total;
  }
}

}  // namespace neuron
