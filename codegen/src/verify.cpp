// The verifier: every rule of TRAINIUM.md "Rules a kernel must obey" and NKI_API.md section 7,
// for nl helpers and ISA instructions alike (the pipeline runs it before and after legalize).
#include <algorithm>
#include <optional>
#include <set>

#include "neuron/base/target.hpp"
#include "neuron/codegen/pipeline.hpp"
#include "neuron/dsl/syntax.hpp"
#include "view_util.hpp"

namespace neuron {

namespace {

// Decimal text of a 128-bit bound (fmt 9 cannot format __int128 portably).
std::string wide_str(__int128 v) {
  if (v >= INT64_MIN && v <= INT64_MAX) return fmt::to_string(static_cast<int64_t>(v));
  return v < 0 ? "below -2^63" : "beyond 2^63";
}

using namespace passes;

// Buffers larger than this are not a kernel anyone can run (256 TiB), and the rule keeps every
// later size and address computation far from int64 overflow.
constexpr int64_t kMaxBufferBytes = int64_t{1} << 48;

void check_buffer_size(const Buffer& b, const Span& span) {
  __int128 bytes = dtype_bytes(b.dtype);
  for (auto d : b.shape) {
    if (d < 1)
      user_error(span, "shape-mismatch", "buffer {} has a dimension of size {}", buffer_str(b), d);
    bytes *= d;
    if (bytes > kMaxBufferBytes)
      user_error(span, "tensor-size",
                 "buffer {} is larger than the {} bytes a buffer may have", buffer_str(b),
                 kMaxBufferBytes);
  }
}

bool is_bitwise(AluOp op) {
  return op == AluOp::bitwise_and || op == AluOp::bitwise_or || op == AluOp::bitwise_xor ||
         op == AluOp::left_shift || op == AluOp::right_shift;
}

bool is_reduction(AluOp op) {
  switch (op) {
    case AluOp::add:
    case AluOp::subtract:
    case AluOp::multiply:
    case AluOp::maximum:
    case AluOp::minimum:
    case AluOp::bitwise_and:
    case AluOp::bitwise_or:
    case AluOp::bitwise_xor:
    case AluOp::logical_and:
    case AluOp::logical_or:
    case AluOp::logical_xor:
      return true;
    default:
      return false;
  }
}

// Ops that run on a compute engine (everything but DMA, registers and prints): the
// signature keeps all their views on chip, and their operands must be partition-aligned.
bool is_compute(Opcode c) {
  for (auto& a : opcode_signature(c))
    if (a.is_view() && (a.memories & ~unsigned{ON_CHIP})) return false;
  return true;
}

bool value_has_kind(const Value& v, ArgKind k) {
  switch (k) {
    case ArgKind::view:
    case ArgKind::index:
      return std::holds_alternative<Access>(v);
    case ArgKind::integer:
      return std::holds_alternative<int64_t>(v);
    case ArgKind::number:
      return std::holds_alternative<int64_t>(v) || std::holds_alternative<double>(v);
    case ArgKind::name:
      return std::holds_alternative<std::string>(v);
    case ArgKind::ints:
      return std::holds_alternative<std::vector<int64_t>>(v) || std::holds_alternative<int64_t>(v);
    case ArgKind::view_or_number:
      return std::holds_alternative<Access>(v) || std::holds_alternative<int64_t>(v) ||
             std::holds_alternative<double>(v);
  }
  return false;
}

// program_id / num_programs variables: "pid<axis>", "npid<axis>".
bool is_grid_var(const std::string& v) {
  for (int axis = 0; axis < 4; ++axis)
    if (v == program_id_var(axis) || v == num_programs_var(axis)) return true;
  return false;
}

class Verifier {
 public:
  Verifier(const Kernel& k, const Target& t) : target_(t) {
    scopes_.emplace_back();
    for (auto& b : k.inputs) scopes_.back().push_back(b->name);
    for (auto& b : k.outputs) scopes_.back().push_back(b->name);
  }

  void walk(const StmtPtr& s) {
    if (!s) return;
    if (auto b = s->as<Block>()) {
      scopes_.emplace_back();
      for (auto& st : b->stmts) walk(st);
      scopes_.pop_back();
    } else if (auto f = s->as<For>()) {
      if (f->is_dynamic()) check_dynamic_loop(*f);
      // A dynamic loop's extent is known at run time only (-1: unbounded, checked there).
      loops_.emplace_back(f->var, f->is_dynamic() ? kUnknownExtent : f->extent);
      walk(f->body);
      loops_.pop_back();
    } else if (auto a = s->as<Alloc>()) {
      check_alloc(*a);
      scopes_.back().push_back(a->buffer->name);
    } else if (auto op = s->as<Op>()) {
      check_op(*op);
    }
  }

 private:
  static constexpr int64_t kUnknownExtent = -1;
  const Target& target_;
  std::vector<std::vector<std::string>> scopes_;
  std::vector<std::pair<std::string, int64_t>> loops_;
  // The dim of an indirect DMA's HBM view whose positions are row indices read at run time:
  // {argument, dim}; its static bounds are not checked (the executors check each row).
  std::pair<std::string, size_t> indirect_dim_{"", 0};

  // Registers and the variables of dynamic loops: known only at run time.
  bool runtime_var(const std::string& v) const {
    if (is_register_var(v)) return true;
    auto ext = loop_extent(v);
    return ext && *ext == kUnknownExtent;
  }

  void check_dynamic_loop(const For& f) {
    if (f.step <= 0)
      user_error(f.span, "range", "a runtime loop's step must be a positive integer, got {}",
                 f.step);
    if (!f.cond.empty() && !is_register_var(f.cond))
      user_error(f.span, "register", "a while loop's condition must be a register, got '{}'",
                 f.cond);
    for (const Affine* e : {&f.start, &f.stop})
      for (auto& t : e->terms)
        if (!is_register_var(t.var) && !loop_extent(t.var) && !is_grid_var(t.var))
          user_error(f.span, "loop-scope",
                     "a runtime loop's bound uses '{}', which is not a register, the variable of "
                     "an enclosing loop or a program id",
                     t.var);
  }

  bool in_scope(const std::string& name) const {
    for (auto& sc : scopes_)
      if (std::find(sc.begin(), sc.end(), name) != sc.end()) return true;
    return false;
  }

  std::optional<int64_t> loop_extent(const std::string& var) const {
    for (auto it = loops_.rbegin(); it != loops_.rend(); ++it)
      if (it->first == var) return it->second;
    return std::nullopt;
  }

  void check_alloc(const Alloc& a) {
    NEURON_ASSERT(a.buffer, "Alloc without a buffer");
    const Buffer& b = *a.buffer;
    check_buffer_size(b, a.span);
    if (!is_on_chip(b.memory)) return;
    if (b.shape.size() < 2)
      user_error(a.span, "tile-rank",
                 "on-chip buffer {} has {} dimension(s); SBUF/PSUM tiles need at least 2 "
                 "(partition dim first, e.g. [{}, 1])",
                 buffer_str(b), b.shape.size(), b.shape.empty() ? 1 : b.shape[0]);
    if (b.shape[0] > target_.partitions)
      user_error(a.span, "partition-size",
                 "buffer {} has {} partitions; the partition dimension (dim 0) is at most {}",
                 buffer_str(b), b.shape[0], target_.partitions);
    // A PSUM buffer may span several banks (nki-library's top-k keeps [128, 1024] fp32 index
    // tiles in PSUM on trn2; the allocator gives it whole banks); a matmul writes within one
    // (matmul_shape).
    const int64_t psum_bytes = target_.psum_banks * target_.psum_bank_bytes;
    if (b.memory == Memory::psum && b.slot_bytes() > psum_bytes)
      user_error(a.span, "psum-bank",
                 "PSUM buffer {} needs {} bytes per partition but PSUM holds {} ({} banks of {})",
                 buffer_str(b), b.slot_bytes(), psum_bytes, target_.psum_banks,
                 target_.psum_bank_bytes);
  }

  // Indirect rows (src_rows / dst_rows): an integer [P, 1] SBUF tile whose element p is the row
  // of the HBM side moved by partition p; that row dim is the HBM view's first kept dim, taken
  // whole from row 0 (size P, step 1).
  void check_indirect(const Op& op, std::string_view opname) {
    const bool src = op.has("src_rows"), dst = op.has("dst_rows");
    const int64_t mode = op.get_int("oob_mode", 0);
    if (mode != 0 && mode != 1)
      user_error(op.span, "unknown-arg", "{}: oob_mode is 0 (error) or 1 (skip), got {}", opname,
                 mode);
    if (!src && !dst) return;  // oob_mode skips a copy a runtime offset moves out of range
    if (src && dst)
      user_error(op.span, "indirect-dma", "{}: give src_rows or dst_rows, not both", opname);
    const char* side = src ? "src" : "dst";
    const char* rows_arg = src ? "src_rows" : "dst_rows";
    const Access& hbm = view(op, side);
    const Access& other = view(op, src ? "dst" : "src");
    const Access& rows = view(op, rows_arg);
    if (!is_hbm(hbm.buffer->memory) || !is_on_chip(other.buffer->memory))
      user_error(op.span, "indirect-dma",
                 "{}: {} selects rows of '{}' in {}; indirect rows index an HBM tensor moved to "
                 "or from SBUF",
                 opname, rows_arg, hbm.buffer->name, memory_name(hbm.buffer->memory));
    if (rows.buffer->memory != Memory::sbuf || dtype_is_float(rows.dtype()))
      user_error(op.span, "indirect-dma",
                 "{}: {} must be an integer SBUF tile, got '{}' ({} in {})", opname, rows_arg,
                 rows.buffer->name, dtype_name(rows.dtype()),
                 memory_name(rows.buffer->memory));
    const int64_t P = partitions(other);
    if (partitions(rows) != P || free_elements(rows) != 1)
      user_error(op.span, "shape-mismatch",
                 "{}: {} has shape {}; it must be [{}, 1], one row index per partition of '{}'",
                 opname, rows_arg, shape_str(pattern_shape(rows)), P, other.buffer->name);
    const size_t d = rows_dim(hbm);
    const DimSlice& r = hbm.dims.at(d);
    if (!r.start.is_constant() || r.start.constant < 0 || r.step < 1 || r.size != P)
      user_error(op.span, "indirect-dma",
                 "{}: dim {} of '{}' is the row dim {} selects; index it as a:a+{}*k:k with a "
                 "constant a >= 0 and k >= 1 (the rows come from the index tile), got start {}, "
                 "size {}, step {}",
                 opname, d, hbm.buffer->name, rows_arg, P, r.start.str(), r.size, r.step);
    indirect_dim_ = {side, d};
  }

  // ---- arguments -------------------------------------------------------------------------

  void check_args(const Op& op, std::string_view name) {
    auto& specs = opcode_signature(op.code);
    for (auto& a : op.args) {
      auto it = std::find_if(specs.begin(), specs.end(),
                             [&](const ArgSpec& s) { return a.name == s.name; });
      if (it == specs.end())
        user_error(op.span, "unknown-arg", "{} has no argument '{}'", name, a.name);
      if (!value_has_kind(a.value, it->kind))
        user_error(op.span, "unknown-arg", "{} argument '{}' must be {}", name, a.name,
                   arg_kind_text(it->kind));
    }
    for (auto& s : specs)
      if (s.required && !op.has(s.name))
        user_error(op.span, "unknown-arg", "{} is missing its required argument '{}'", name,
                   s.name);
  }

  AluOp alu(const Op& op, std::string_view opname, const char* arg, int need_arity = 0) {
    std::string s = op.get_string(arg);
    auto a = alu_op_from_name(s);
    if (!a)
      user_error(op.span, "unknown-arg", "{}: {}=\"{}\" is not an ALU operator", opname, arg, s);
    if (need_arity && alu_op_arity(*a) != need_arity)
      user_error(op.span, "unknown-arg", "{}: {}=\"{}\" is not a binary operator", opname, arg, s);
    return *a;
  }

  void act_func(const Op& op, std::string_view opname, const char* arg) {
    std::string s = op.get_string(arg);
    if (!act_func_from_name(s))
      user_error(op.span, "unknown-arg", "{}: {}=\"{}\" is not an activation function", opname, arg,
                 s);
  }

  // ---- views -----------------------------------------------------------------------------

  void check_view(const Op& op, std::string_view opname, const std::string& arg, const Access& a) {
    if (!a.buffer)
      user_error(op.span, "unknown-arg", "{} argument '{}' views no buffer", opname, arg);
    const Buffer& b = *a.buffer;
    if (!in_scope(b.name))
      user_error(op.span, "buffer-scope",
                 "{} argument '{}' uses buffer '{}' outside the block that allocates it", opname,
                 arg, b.name);
    if (a.as_dtype && (!is_on_chip(b.memory) || a.storage.empty()))
      user_error(op.span, "unsupported", "{} argument '{}' reads {} as {}: reinterpreting views "
                 "are of on-chip tiles, with a storage shape", opname, arg, buffer_str(b),
                 dtype_name(*a.as_dtype));
    if (!a.storage.empty()) check_storage(op, opname, arg, a);
    if (!a.order.empty()) check_order(op, opname, arg, a);
    if (a.dims.size() != a.storage_shape().size())
      user_error(op.span, "shape-mismatch",
                 "{} argument '{}' indexes {} dimension(s) of {} which has {}", opname, arg,
                 a.dims.size(), buffer_str(b), a.storage_shape().size());
    for (size_t d = 0; d < a.dims.size(); ++d) check_bounds(op, opname, arg, a, d);
    if (!is_on_chip(b.memory)) return;
    if (a.dims[0].size > target_.partitions)
      user_error(op.span, "partition-size",
                 "{} argument '{}' spans {} partitions of '{}'; at most {}", opname, arg,
                 a.dims[0].size, b.name, target_.partitions);
    // On chip an access walks consecutive partitions (.ap's first entry strides by one
    // partition; step 0 is a one-partition broadcast): t[0:128:2] of a tile has no pattern.
    const DimSlice& rows = a.dims[0];
    if (rows.size > 1 && rows.step != 1 && rows.step != 0)
      user_error(op.span, "access-pattern",
                 "{} argument '{}' steps through the partitions of '{}' by {} ({} of them "
                 "from {}); "
                 "on-chip views walk consecutive partitions: load the rows you need into a tile "
                 "from HBM, or keep the partition subscript's step 1",
                 opname, arg, b.name, rows.step, rows.size, rows.start.str());
    if (opcode_level(op.code) == OpLevel::Isa) {
      size_t free = 0;
      for (size_t d = 1; d < a.dims.size(); ++d) free += a.dims[d].keep;
      if (free > 4)
        user_error(op.span, "free-dims",
                   "{} argument '{}' has {} free dimensions; an access pattern has at most 4",
                   opname, arg, free);
    }
    if (is_compute(op.code)) check_start_partition(op, opname, arg, a);
  }

  // A view of the storage seen with another shape (ir.hpp Access::storage): the elements it
  // touches are the buffer's (on chip, of each partition: the partitions kept). The storage's
  // outermost dim may run past the buffer's end (a pattern's last step). A start's loop
  // variables count at their largest and a program id as the dim's last index; a register (or
  // a dynamic loop's variable) counts at 0, because the instruction checks the elements it
  // touches when it runs: a runtime offset into a view whose last row overhangs the end
  // (ap(scalar_offset=...) from a mid-row origin) is only an error if it reaches past the end.
  void check_storage(const Op& op, std::string_view opname, const std::string& arg,
                     const Access& a) {
    const Buffer& b = *a.buffer;
    const bool on_chip = is_on_chip(b.memory);
    const std::vector<int64_t>& S = a.storage;
    if (on_chip && S[0] != b.shape[0])
      user_error(op.span, "shape-mismatch", "{} argument '{}' sees {} as [{}], which changes its "
                 "partition dim", opname, arg, buffer_str(b), fmt::join(S, ", "));
    __int128 last = a.origin, stride = 1;
    for (size_t d = S.size(); d-- > (on_chip ? 1 : 0);) {
      const DimSlice& s = a.dims[d];
      __int128 hi =
          __int128(s.start.constant) + std::max<__int128>(0, __int128(s.size - 1) * s.step);
      for (auto& t : s.start.terms) {
        if (runtime_var(t.var)) continue;  // checked when the instruction runs
        auto ext = loop_extent(t.var);
        if (!ext) {  // a program id: the dim's last index, as before
          hi = S[d] - 1;
          break;
        }
        hi += std::max<__int128>(0, __int128(t.coeff) * std::max<int64_t>(*ext - 1, 0));
      }
      last += hi * stride;
      stride *= S[d];
    }
    // In elements of the view's dtype (a reinterpreting view counts its own).
    const int64_t bytes = (on_chip ? b.free_elements() : b.elements()) * dtype_bytes(b.dtype);
    const int64_t have = bytes / dtype_bytes(a.dtype());
    if (a.origin < 0 || last >= have)
      user_error(op.span, "shape-mismatch",
                 "{} argument '{}' sees {} as [{}]{} from element {}: it reaches element {}, "
                 "past its {} elements{}", opname, arg, buffer_str(b), fmt::join(S, ", "),
                 a.as_dtype ? fmt::format(" {}", dtype_name(*a.as_dtype)) : "", a.origin,
                 static_cast<int64_t>(last), have, on_chip ? " per partition" : "");
  }

  // A transposing view (ir.hpp Access::order) lists each kept storage dim once; on chip the
  // partition dim comes first.
  void check_order(const Op& op, std::string_view opname, const std::string& arg,
                   const Access& a) {
    std::vector<int> want;
    for (size_t d = 0; d < a.dims.size(); ++d)
      if (a.dims[d].keep) want.push_back(static_cast<int>(d));
    std::vector<int> got = a.order;
    std::sort(got.begin(), got.end());
    const bool partition_first = !is_on_chip(a.buffer->memory) || a.order[0] == 0;
    if (got != want || !partition_first)
      user_error(op.span, "shape-mismatch",
                 "{} argument '{}' orders the dims of '{}' as [{}], which {}", opname, arg,
                 a.buffer->name, fmt::join(a.order, ", "),
                 got != want ? "is not one of each kept dim" : "moves the partition dim");
  }

  void check_bounds(const Op& op, std::string_view opname, const std::string& arg, const Access& a,
                    size_t d) {
    // A body under a zero-trip loop never runs: its indices have no range to check.
    for (auto& [var, extent] : loops_)
      if (extent == 0) return;
    const DimSlice& s = a.dims[d];
    if (indirect_dim_.first == arg && indirect_dim_.second == d) return;
    int64_t dim = a.storage_shape()[d];
    if (s.size < 1)
      user_error(op.span, "shape-mismatch",
                 "{} argument '{}' is an empty view of '{}' (size {} in dim {}): an instruction "
                 "needs at least one element; skip the instruction when its slice is empty",
                 opname, arg, a.buffer->name, s.size, d);
    // Loop variables range over 0..extent-1; program ids (and anything unknown) are unbounded,
    // so a side of the range that depends on them is not checked.
    // 128-bit arithmetic: starts, coefficients and sizes near INT64_MAX must give an error,
    // not a signed overflow.
    __int128 lo = s.start.constant, hi = s.start.constant;
    bool lo_known = true, hi_known = true;
    for (auto& t : s.start.terms) {
      auto ext = loop_extent(t.var);
      if (runtime_var(t.var)) {
        // A register or a dynamic loop: this side is checked when the instruction runs.
        if (d == 0 && is_on_chip(a.buffer->memory))
          user_error(op.span, "dynamic-partition",
                     "{} argument '{}' selects partitions of '{}' with '{}', a value known only at "
                     "run time; on-chip partitions must be static (index rows of an HBM tensor "
                     "with an index tile instead)",
                     opname, arg, a.buffer->name, t.var);
        (t.coeff > 0 ? hi_known : lo_known) = false;
        if (is_register_var(t.var)) (t.coeff > 0 ? lo_known : hi_known) = false;  // any sign
        continue;
      }
      if (!ext) {
        if (!is_grid_var(t.var))
          user_error(op.span, "loop-scope",
                     "{} argument '{}' indexes dim {} of '{}' with '{}', which is not the "
                     "variable of an enclosing loop",
                     opname, arg, d, a.buffer->name, t.var);
        (t.coeff > 0 ? hi_known : lo_known) = false;
        continue;
      }
      __int128 top = __int128(t.coeff) * std::max<int64_t>(*ext - 1, 0);
      lo += std::min<__int128>(0, top);
      hi += std::max<__int128>(0, top);
    }
    __int128 span = __int128(s.step) * (s.size - 1);
    lo += std::min<__int128>(0, span);
    hi += std::max<__int128>(0, span);
    if ((lo_known && lo < 0) || (hi_known && hi >= dim))
      user_error(op.span, "out-of-bounds",
                 "{} argument '{}' reads indices {}..{} of dim {} of {} (start {}, size {}, "
                 "step {}), outside 0..{}",
                 opname, arg, lo_known ? wide_str(lo) : "?", hi_known ? wide_str(hi) : "?", d, buffer_str(*a.buffer), s.start.str(),
                 s.size, s.step, dim - 1);
  }

  void check_start_partition(const Op& op, std::string_view opname, const std::string& arg,
                             const Access& a) {
    const DimSlice& p = a.dims[0];
    if (p.step == 0) return;  // one partition broadcast: legalize moves it with a DMA
    int64_t n = p.size;
    // The engines address partitions in quadrants: a view of more than half the partitions
    // starts at 0, of more than a quarter at 0 or the half, else at any quadrant boundary.
    const int64_t P = target_.partitions;
    int64_t align = n > P / 2 ? P : n > P / 4 ? P / 2 : P / 4;
    std::string allowed;
    for (int64_t s = 0; s < P; s += align)
      allowed += (s == 0 ? "" : s + align >= P ? " or " : ", ") + std::to_string(s);
    // MX scales may sit 4, 8 or 12 partitions into each quadrant (docs/mx.md: four tensors'
    // scales packed into one tile, the view starting that far in).
    const bool mx_scale = ((op.code == Opcode::quantize_mx && arg == "dst_scale") ||
                           (op.code == Opcode::nc_matmul_mx && arg.ends_with("_scale")));
    int64_t offset = 0;
    if (mx_scale) {
      const int64_t in_quadrant = ((p.start.constant % 32) + 32) % 32;
      if (in_quadrant == 4 || in_quadrant == 8 || in_quadrant == 12) offset = in_quadrant;
    }
    // An affine start stays aligned for every value of its variables exactly when the
    // constant and every coefficient are multiples of the alignment.
    bool ok = (p.start.constant - offset) % align == 0;
    for (auto& t : p.start.terms) ok = ok && t.coeff % align == 0;
    if (!ok)
      user_error(op.span, "start-partition",
                 "{} argument '{}' covers {} partitions of '{}' starting at partition {}; a "
                 "view of {} partitions must start at {}{}",
                 opname, arg, n, a.buffer->name, p.start.str(), n, allowed,
                 mx_scale ? " (MX scales: or 4, 8 or 12 partitions after that)" : "");
  }

  // ---- per-opcode rules ------------------------------------------------------------------

  const Access& view(const Op& op, const char* name) {
    auto a = op.access(name);
    NEURON_ASSERT(a, "argument {} checked but missing", name);
    return *a;
  }

  // Every view in a memory its signature allows (ops.hpp), index views of integers.
  void check_memories(const Op& op, std::string_view opname) {
    const auto& sig = opcode_signature(op.code);
    // The matmul family writes PSUM only; its memory rule has its own name.
    const bool matmul = std::any_of(sig.begin(), sig.end(), [](const ArgSpec& a) {
      return a.slot == ArgSlot::dst && a.memories == PSUM;
    });
    for (auto& spec : sig) {
      const Access* a = op.access(spec.name);
      if (!a || !a->buffer) continue;
      const Buffer& b = *a->buffer;
      if (spec.kind == ArgKind::index && dtype_is_float(a->dtype()))
        user_error(op.span, "dtype", "{}: '{}' is {}; indices are integers", opname, spec.name,
                   dtype_name(a->dtype()));
      if (memory_in(b.memory, spec.memories)) continue;
      if (is_hbm(b.memory) && is_compute(op.code))
        user_error(op.span, "engine-memory",
                   "{} argument '{}' is the {} buffer '{}'; engines compute only on SBUF/PSUM "
                   "(move it on chip with {})",
                   opname, spec.name, memory_name(b.memory), b.name,
                   dsl::spell("nl::load or isa::dma_copy", "nl.load or nisa.dma_copy"));
      std::string want = memory_set_text(spec.memories);
      if (b.memory == Memory::psum && opcode_engine(op.code) == Engine::dma)
        want += " (DMA cannot reach PSUM)";
      user_error(op.span, matmul ? "matmul-memory" : "engine-memory",
                 "{} argument '{}' is in {} (buffer '{}'); it must be in {}", opname, spec.name,
                 memory_name(b.memory), b.name, want);
    }
  }

  void same_layout(const Op& op, std::string_view opname, const char* a_name, const char* b_name) {
    auto a = op.access(a_name);
    auto b = op.access(b_name);
    if (!a || !b) return;
    if (partitions(*a) != partitions(*b) || free_elements(*a) != free_elements(*b))
      user_error(op.span, "shape-mismatch",
                 "{}: '{}' {} and '{}' {} need the same partition count and elements per "
                 "partition",
                 opname, a_name, shape_str(pattern_shape(*a)), b_name,
                 shape_str(pattern_shape(*b)));
  }

  // The partition dim and the free dims other than size-1 ones: [128, 1, 8] and [128, 8] (a
  // dropped dim) describe the same elements in the same order.
  static std::vector<int64_t> squeezed(const std::vector<int64_t>& s) {
    std::vector<int64_t> out{s.empty() ? 1 : s[0]};
    for (size_t i = 1; i < s.size(); ++i)
      if (s[i] != 1) out.push_back(s[i]);
    return out;
  }

  void same_shape(const Op& op, std::string_view opname, const char* a_name, const char* b_name) {
    auto a = op.access(a_name);
    auto b = op.access(b_name);
    if (!a || !b) return;
    if (squeezed(pattern_shape(*a)) != squeezed(pattern_shape(*b)))
      user_error(op.span, "shape-mismatch", "{}: '{}' has shape {} but '{}' has shape {}", opname,
                 a_name, shape_str(pattern_shape(*a)), b_name, shape_str(pattern_shape(*b)));
  }

  void same_elements(const Op& op, std::string_view opname) {
    auto& d = view(op, "dst");
    auto& s = view(op, "src");
    if (view_elements(d) != view_elements(s))
      user_error(op.span, "shape-mismatch", "{}: dst {} has {} elements but src {} has {}", opname,
                 shape_str(pattern_shape(d)), view_elements(d), shape_str(pattern_shape(s)),
                 view_elements(s));
  }

  // A per-partition scalar operand: [P, 1] with P the partitions of `data`.
  void column(const Op& op, std::string_view opname, const char* arg, const char* data) {
    auto a = op.access(arg);
    if (!a) return;
    auto& d = view(op, data);
    if (partitions(*a) != partitions(d) || free_elements(*a) != 1)
      user_error(op.span, "shape-mismatch", "{}: '{}' has shape {}; it must be [{}, 1]", opname,
                 arg, shape_str(pattern_shape(*a)), partitions(d));
  }

  void float_operands(const Op& op, std::string_view opname,
                      std::initializer_list<const char*> args) {
    for (auto n : args) {
      auto a = op.access(n);
      if (a && (!dtype_is_float(a->dtype()) || a->dtype() == DType::float8_e8m0fnu))
        user_error(op.span, "dtype",
                   "{}: '{}' is {}; matmul operands must be float8_e4m3, float8_e5m2, "
                   "float8_e4m3fn, bfloat16, float16 or float32",
                   opname, n, dtype_name(a->dtype()));
    }
  }

  void integer_operands(const Op& op, std::string_view opname, AluOp alu_op,
                        std::initializer_list<const char*> args) {
    if (!is_bitwise(alu_op)) return;
    for (auto n : args) {
      auto a = op.access(n);
      if (a && dtype_is_float(a->dtype()))
        user_error(op.span, "dtype", "{}: bitwise operator '{}' needs integer tiles but '{}' is {}",
                   opname, alu_op_name(alu_op), n, dtype_name(a->dtype()));
    }
  }

  // A matmul accumulates within one PSUM bank: its result may not cross a bank boundary of a
  // buffer that spans several (checked where the result's position is known when compiling).
  void bank_of_result(const Op& op, std::string_view opname, const Access& dst) {
    if (dst.buffer->memory != Memory::psum ||
        dst.buffer->slot_bytes() <= target_.psum_bank_bytes)
      return;
    const std::vector<int64_t> R = row_strides(dst.storage_shape());
    int64_t lo = 0, hi = 0;
    for (size_t d = 1; d < dst.dims.size(); ++d) {
      const DimSlice& s = dst.dims[d];
      if (!s.start.is_constant()) return;
      lo += s.start.constant * R[d];
      hi += (s.start.constant + s.step * (s.size - 1)) * R[d];
    }
    const int64_t es = dtype_bytes(dst.dtype()), bank = target_.psum_bank_bytes;
    if ((lo * es) / bank != (hi * es + es - 1) / bank)
      user_error(op.span, "psum-bank",
                 "{}: the result goes to bytes [{}, {}) of each partition of PSUM buffer '{}', "
                 "across a {}-byte bank boundary; a matmul accumulates within one bank, so "
                 "write each bank's columns with a matmul of its own",
                 opname, lo * es, hi * es + es, dst.buffer->name, bank);
  }

  void matmul_shape(const Op& op, std::string_view opname, int64_t k1, int64_t m, int64_t k2,
                    int64_t n, const Access& dst) {
    if (k1 != k2)
      user_error(op.span, "matmul-shape",
                 "{}: contraction sizes differ: stationary has K={} partitions, moving K={}",
                 opname, k1, k2);
    if (k1 > target_.partitions)
      user_error(op.span, "matmul-shape", "{}: K={} exceeds {}", opname, k1, target_.partitions);
    if (m > target_.gemm_stationary_fmax)
      user_error(op.span, "matmul-shape", "{}: stationary free size M={} exceeds {}", opname, m,
                 target_.gemm_stationary_fmax);
    if (n > target_.gemm_moving_fmax)
      user_error(op.span, "matmul-shape", "{}: moving free size N={} exceeds {}", opname, n,
                 target_.gemm_moving_fmax);
    if (partitions(dst) != m || free_elements(dst) != n)
      user_error(op.span, "matmul-shape", "{}: dst has shape {} but the product is [{}, {}]",
                 opname, shape_str(pattern_shape(dst)), m, n);
    bank_of_result(op, opname, dst);
    // NeuronCore-v4 can also write bf16 results (NKI_API.md 6.5).
    const bool bf16_ok = target_.generation == "trn3" && op.code == Opcode::nc_matmul;
    if (dst.dtype() != DType::float32 && !(bf16_ok && dst.dtype() == DType::bfloat16))
      user_error(op.span, "psum-dtype", "{}: dst '{}' is {}; matmul results in PSUM are float32{}",
                 opname, dst.buffer->name, dtype_name(dst.dtype()),
                 target_.generation == "trn3" ? " or bfloat16" : "");
  }

  void reduce_axes(const Op& op, std::string_view opname, const Access& x, const Access& dst) {
    auto shape = pattern_shape(x);
    auto axes = op.get_ints("axes");
    if (axes.empty()) user_error(op.span, "reduce-axis", "{}: no axes given to reduce", opname);
    std::set<int64_t> seen;
    for (auto ax : axes) {
      if (ax == 0)
        user_error(op.span, "reduce-axis",
                   "{}: axis 0 is the partition dimension; only free axes 1..{} can be reduced",
                   opname, shape.size() - 1);
      if (ax < 0 || ax >= static_cast<int64_t>(shape.size()))
        user_error(op.span, "reduce-axis", "{}: axis {} is out of range for a view of shape {}",
                   opname, ax, shape_str(shape));
      if (!seen.insert(ax).second)
        user_error(op.span, "reduce-axis", "{}: axis {} is listed twice", opname, ax);
    }
    // dst is the input with the reduced axes set to 1; size-1 dims may be dropped.
    auto expect = shape;
    for (auto ax : axes) expect[ax] = 1;
    if (squeezed(expect) != squeezed(pattern_shape(dst)))
      user_error(op.span, "shape-mismatch",
                 "{}: dst has shape {} but reducing {} over axes [{}] gives {}", opname,
                 shape_str(pattern_shape(dst)), shape_str(shape), fmt::join(axes, ", "),
                 shape_str(expect));
  }

  void check_pattern(const Op& op, std::string_view opname, const Access& dst) {
    auto pat = op.get_ints("pattern");
    if (pat.empty() || pat.size() % 2 != 0 || pat.size() > 8)
      user_error(op.span, "unknown-arg",
                 "{}: pattern must be 1 to 4 [stride, count] pairs, got {} integers", opname,
                 pat.size());
    int64_t count = 1;
    for (size_t i = 1; i < pat.size(); i += 2) count *= pat[i];
    if (count != free_elements(dst))
      user_error(op.span, "shape-mismatch",
                 "{}: pattern covers {} elements per partition but dst {} has {}", opname, count,
                 shape_str(pattern_shape(dst)), free_elements(dst));
  }

  void check_op(const Op& op) {
    // nl.unary names the function the user called (nl.exp), as Python and C++ spell it.
    const std::string unary_name =
        op.code == Opcode::nl_unary && op.has("func")
            ? std::string(dsl::spell("nl::", "nl.")) + op.get_string("func")
            : std::string();
    std::string_view opname = unary_name.empty() ? opcode_name(op.code) : unary_name;
    check_args(op, opname);
    indirect_dim_ = {"", 0};
    if (op.code == Opcode::nl_load || op.code == Opcode::nl_store || op.code == Opcode::dma_copy)
      check_indirect(op, opname);
    for (auto& a : op.args)
      if (auto v = std::get_if<Access>(&a.value)) check_view(op, opname, a.name, *v);

    check_memories(op, opname);
    check_mx(op, opname);

    auto mem = [&](const char* n) { return view(op, n).buffer->memory; };
    switch (op.code) {
      case Opcode::nl_load:
        same_elements(op, opname);
        break;
      case Opcode::nl_store:
        same_elements(op, opname);
        break;
      case Opcode::nl_copy:
        if (is_hbm(mem("dst")) || is_hbm(mem("src")))  // a DMA: it cannot reach PSUM
          for (const char* side : {"dst", "src"})
            if (mem(side) == Memory::psum)
              user_error(op.span, "engine-memory",
                         "{} argument '{}' is in psum (buffer '{}'); it must be in SBUF or HBM "
                         "when the other side is in HBM (a DMA)",
                         opname, side, view(op, side).buffer->name);
        same_elements(op, opname);
        break;
      case Opcode::dma_copy:
        if (op.get_int("bitcast", 0) != 0) {  // a reinterpreting copy moves bytes
          auto &d = view(op, "dst"), &s = view(op, "src");
          const int64_t db = view_elements(d) * dtype_bytes(d.dtype()),
                        sb = view_elements(s) * dtype_bytes(s.dtype());
          if (db != sb)
            user_error(op.span, "shape-mismatch",
                       "{}: dst {} {} holds {} bytes but the reinterpreted src {} {} holds {}",
                       opname, shape_str(pattern_shape(d)), dtype_name(d.dtype()), db,
                       shape_str(pattern_shape(s)), dtype_name(s.dtype()), sb);
        } else {
          same_elements(op, opname);
        }
        break;
      case Opcode::tensor_copy:
        // NKI: "the output tile has the same partition axis size and also the same number of
        // elements per partition as the input tile": the free dims may be shaped differently
        // (both sides walked in row-major order, as every element-wise instruction is).
        same_layout(op, opname, "dst", "src");
        break;
      case Opcode::nl_matmul: {
        float_operands(op, opname, {"x", "y"});
        auto &x = view(op, "x"), &y = view(op, "y");
        bool tx = op.get_int("transpose_x", 0) != 0;
        // transpose_x=0: x is [M, K] and is transposed through PSUM first, so M is its
        // partition count and K (its free size) becomes the contraction partitions.
        int64_t k = tx ? partitions(x) : free_elements(x);
        int64_t m = tx ? free_elements(x) : partitions(x);
        matmul_shape(op, opname, k, m, partitions(y), free_elements(y), view(op, "dst"));
        break;
      }
      case Opcode::nc_matmul: {
        float_operands(op, opname, {"stationary", "moving"});
        auto &s = view(op, "stationary"), &m = view(op, "moving");
        matmul_shape(op, opname, partitions(s), free_elements(s), partitions(m), free_elements(m),
                     view(op, "dst"));
        break;
      }
      case Opcode::nl_transpose:
      case Opcode::nc_transpose:
      case Opcode::nc_transpose_vector: {
        const char* src = op.code == Opcode::nl_transpose ? "src" : "data";
        auto &d = view(op, "dst"), &s = view(op, src);
        if (free_elements(s) > target_.partitions)
          user_error(op.span, "shape-mismatch",
                     "{}: '{}' has {} elements per partition; a transpose takes at most {}", opname,
                     src, free_elements(s), target_.partitions);
        if (partitions(d) != free_elements(s) || free_elements(d) != partitions(s))
          user_error(op.span, "shape-mismatch",
                     "{}: dst has shape {} but transposing {} gives [{}, {}]", opname,
                     shape_str(pattern_shape(d)), shape_str(pattern_shape(s)), free_elements(s),
                     partitions(s));
        break;
      }
      case Opcode::nl_unary: {
        act_func(op, opname, "func");
        auto& x = view(op, "x");
        if (!dtype_is_float(x.dtype()))
          user_error(op.span, "dtype", "{}: '{}' is {}; activation functions take float tiles",
                     opname, x.buffer->name, dtype_name(x.dtype()));
        same_shape(op, opname, "dst", "x");
        break;
      }
      case Opcode::nl_binary: {
        AluOp a = alu(op, opname, "op", 2);
        if (!op.access("x") && !op.access("y"))
          user_error(op.span, "unknown-arg", "{}: at least one of 'x' and 'y' must be a tile",
                     opname);
        integer_operands(op, opname, a, {"dst", "x", "y"});
        same_shape(op, opname, "dst", "x");
        same_shape(op, opname, "dst", "y");
        break;
      }
      case Opcode::nl_reduce: {
        std::string r = op.get_string("op");
        if (r != "add" && r != "maximum" && r != "minimum" && r != "mean")
          user_error(op.span, "unknown-arg",
                     "{}: op=\"{}\" is not a reduction (add, maximum, minimum, mean)", opname, r);
        reduce_axes(op, opname, view(op, "x"), view(op, "dst"));
        break;
      }
      case Opcode::nl_where:
        same_shape(op, opname, "dst", "cond");
        same_shape(op, opname, "dst", "x");
        same_shape(op, opname, "dst", "y");
        break;
      case Opcode::activation: {
        act_func(op, opname, "func");
        if (op.has("reduce_op") && op.get_string("reduce_op") != "add")
          user_error(op.span, "unknown-arg",
                     "{}: reduce_op=\"{}\"; activation reduces with add only", opname,
                     op.get_string("reduce_op"));
        same_layout(op, opname, "dst", "data");
        column(op, opname, "bias", "data");
        column(op, opname, "scale", "data");
        column(op, opname, "reduce_res", "data");
        break;
      }
      case Opcode::tensor_tensor: {
        AluOp a = alu(op, opname, "op", 2);
        if (mem("data1") == Memory::psum && mem("data2") == Memory::psum)
          user_error(op.span, "engine-memory",
                     "{}: 'data1' and 'data2' are both in PSUM; at most one input may be", opname);
        integer_operands(op, opname, a, {"dst", "data1", "data2"});
        same_layout(op, opname, "dst", "data1");
        same_layout(op, opname, "dst", "data2");
        break;
      }
      case Opcode::tensor_tensor_scan: {
        alu(op, opname, "op0", 2);
        alu(op, opname, "op1", 2);
        if (mem("data0") == Memory::psum && mem("data1") == Memory::psum)
          user_error(op.span, "engine-memory",
                     "{}: 'data0' and 'data1' are both in PSUM; at most one input may be", opname);
        same_layout(op, opname, "dst", "data0");
        same_layout(op, opname, "dst", "data1");
        column(op, opname, "initial", "data0");
        break;
      }
      case Opcode::tensor_scalar: {
        AluOp a0 = alu(op, opname, "op0");
        integer_operands(op, opname, a0, {"dst", "data"});
        if (op.has("op1")) {
          const AluOp a1 = alu(op, opname, "op1");
          integer_operands(op, opname, a1, {"dst", "data"});
          // NKI_API.md 5.1: the two stages are both bitwise or both arithmetic
          if (a0 != AluOp::bypass && a1 != AluOp::bypass && is_bitwise(a0) != is_bitwise(a1))
            user_error(op.span, "alu-op",
                       "{}: op0 '{}' and op1 '{}' mix a bitwise and an arithmetic operator; its "
                       "two stages are both bitwise or both arithmetic (split them into two "
                       "instructions)",
                       opname, alu_op_name(a0), alu_op_name(a1));
        }
        same_layout(op, opname, "dst", "data");
        column(op, opname, "operand0", "data");
        column(op, opname, "operand1", "data");
        break;
      }
      case Opcode::tensor_reduce: {
        AluOp a = alu(op, opname, "op");
        if (!is_reduction(a))
          user_error(op.span, "unknown-arg", "{}: op=\"{}\" cannot be used as a reduction", opname,
                     alu_op_name(a));
        reduce_axes(op, opname, view(op, "data"), view(op, "dst"));
        break;
      }
      case Opcode::tensor_copy_predicated:
        if (mem("src") == Memory::psum && mem("predicate") == Memory::psum)
          user_error(op.span, "engine-memory",
                     "{}: 'src' and 'predicate' are both in PSUM; at most one may be", opname);
        same_layout(op, opname, "dst", "src");
        same_layout(op, opname, "dst", "predicate");
        break;
      case Opcode::memset:
        break;
      case Opcode::iota: {
        auto& d = view(op, "dst");
        if (d.dtype() == DType::bool_)
          user_error(op.span, "dtype", "{}: dst '{}' is bool; iota writes integer or float tiles",
                     opname, d.buffer->name);
        check_pattern(op, opname, d);
        break;
      }
      case Opcode::affine_select: {
        if (op.has("cmp_op")) alu(op, opname, "cmp_op", 2);
        same_layout(op, opname, "dst", "on_true");
        check_pattern(op, opname, view(op, "dst"));
        break;
      }
      case Opcode::device_print:
        break;
      case Opcode::nc_n_gather:
      case Opcode::local_gather:
        break;
      case Opcode::register_load:
      case Opcode::register_store: {
        const char* a = op.code == Opcode::register_load ? "src" : "dst";
        if (view_elements(view(op, a)) != 1)
          user_error(op.span, "register", "{}: '{}' has shape {}; a register holds one element",
                     opname, a, shape_str(pattern_shape(view(op, a))));
        check_register(op, opname, "reg");
        break;
      }
      case Opcode::register_move:
        check_register(op, opname, "reg");
        if (op.has("src")) check_register(op, opname, "src");
        if (op.has("src") == op.has("value"))
          user_error(op.span, "unknown-arg", "{}: give a value or a src register, not {}", opname,
                     op.has("src") ? "both" : "neither");
        break;
      default:  // no rule beyond the signature's; shape rules: InstrDef<op>::check (instrs/)
        break;
    }
  }

  // MX x4 data (dtype.hpp) is opaque: DMA and engine copies move it unchanged (same dtype on
  // both sides, or a bitcast copy), memset writes 0, and only quantize_mx / nc_matmul_mx, which
  // need NeuronCore-v4, compute with it.
  void check_mx(const Op& op, std::string_view opname) {
    const bool mx_op = op.code == Opcode::nc_matmul_mx || op.code == Opcode::quantize_mx;
    if (mx_op && target_.name != "trn3")
      user_error(op.span, "target",
                 "{} needs NeuronCore-v4 (trn3) but this kernel compiles for {}; use "
                 "@nki.jit(platform_target=\"trn3\") or neuron.kernel(target=\"trn3\")",
                 opname, target_.name);
    const Access* mx = nullptr;
    std::string mx_arg;
    for (auto& a : op.args)
      if (auto v = std::get_if<Access>(&a.value); v && dtype_is_mx(v->dtype())) {
        mx = v;
        mx_arg = a.name;
      }
    if (!mx || mx_op) return;
    const bool copy = op.code == Opcode::dma_copy || op.code == Opcode::tensor_copy ||
                      op.code == Opcode::nl_load || op.code == Opcode::nl_store ||
                      op.code == Opcode::nl_copy;
    if (copy) {
      if (op.get_int("bitcast", 0) != 0) return;
      auto d = op.access("dst"), s = op.access("src");
      if (d && s && d->dtype() == s->dtype()) return;
      user_error(op.span, "dtype",
                 "{}: copies {} to {}; MX x4 data is copied unchanged only (the same dtype on "
                 "both sides), or reinterpreted with a .ap(dtype=...) view",
                 opname, d ? dtype_name(d->dtype()) : "?",
                 s ? dtype_name(s->dtype()) : "?");
    }
    if (op.code == Opcode::memset && op.get_float("value", 0.0) == 0.0) return;
    user_error(op.span, "dtype",
               "{}: '{}' ('{}') is {}, packed MX data: only DMA and tensor copies, memset 0, "
               "quantize_mx and nc_matmul_mx take x4 tiles",
               opname, mx_arg, mx->buffer->name, dtype_name(mx->dtype()));
  }

  void check_register(const Op& op, std::string_view opname, const char* arg) {
    const std::string r = op.get_string(arg);
    if (!is_register_var(r))
      user_error(op.span, "register", "{}: {}='{}' is not a register (r0, r1, ...)", opname, arg,
                 r);
  }
};

}  // namespace

void verify(const Kernel& k, const std::string& target) {
  const Target& t = target_by_name(target);
  for (auto& io : {&k.inputs, &k.outputs})
    for (auto& b : *io) {
      NEURON_ASSERT(b, "kernel {} has a null input/output buffer", k.name);
      check_buffer_size(*b, b->span.known() ? b->span : k.span);
      if (is_on_chip(b->memory))
        user_error(b->span, "engine-memory",
                   "kernel argument '{}' is in {}; kernel inputs and outputs live in HBM", b->name,
                   memory_name(b->memory));
    }
  Verifier v(k, t);
  v.walk(k.body);
}

}  // namespace neuron
