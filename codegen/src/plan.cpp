// Static checks and access bounds of an engine program for the native backend (plan.hpp).
#include "neuron/codegen/plan.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <optional>

#include "neuron/base/error.hpp"
#include "neuron/codegen/instr_calls.hpp"

namespace neuron::native {

int64_t bytes_per_partition(const Target& t, Memory m) {
  return m == Memory::psum ? t.psum_bytes_per_partition : t.sbuf_bytes_per_partition;
}

NormLayout normalize(const AccessPattern& ap, const Instr& in, int64_t pb) {
  const int64_t es = dtype_bytes(ap.dtype);
  const size_t nd = ap.dims.size();
  if (nd > static_cast<size_t>(kDims))
    user_error(in.span, "native-unsupported",
               "{}: an access pattern with {} dims; the native backend takes at most {}",
               opcode_name(in.op), nd, kDims);
  NormLayout l;
  for (int i = 0; i < kDims; ++i) l.size[i] = 1, l.stride[i] = 0;
  if (nd == 0) return l;
  // Dim 0 stays first; size-1 dims go right after it so the innermost dim stays innermost.
  const bool chip = is_on_chip(ap.memory);
  l.size[0] = ap.dims[0].size;
  l.stride[0] = ap.dims[0].stride * (chip ? pb : es);
  const size_t pad = static_cast<size_t>(kDims) - nd;
  for (size_t i = 1; i < nd; ++i) {
    l.size[i + pad] = ap.dims[i].size;
    l.stride[i + pad] = ap.dims[i].stride * es;
  }
  for (int i = 0; i < kDims; ++i) l.count *= l.size[i];
  return l;
}

bool same_shape(const std::vector<const NormLayout*>& ls) {
  for (auto* l : ls)
    if (l)
      for (int i = 0; i < kDims; ++i)
        if (l->size[i] != ls[0]->size[i]) return false;
  return true;
}

Span1 extent(int64_t start, const std::vector<AccessPattern::Dim>& dims, size_t first, int64_t unit,
             int64_t last_unit) {
  int64_t lo = start, hi = start;
  for (size_t i = first; i < dims.size(); ++i) {
    const int64_t reach = dims[i].stride * (dims[i].size - 1) * unit;
    (reach < 0 ? lo : hi) += reach;
  }
  return {lo, hi + last_unit};
}

namespace {

bool apart(Span1 a, Span1 b) {
  return a.hi <= b.lo || b.hi <= a.lo;
}

}  // namespace

bool may_overlap(const AccessPattern& a, const AccessPattern& b) {
  if (a.memory != b.memory) return false;
  if (!is_on_chip(a.memory)) {
    if (a.tensor != b.tensor) return false;
    // One tensor: apart when the offsets differ by a constant and the element ranges, shifted
    // by it, do not meet. The operands of one instruction (or of one straight run) see the
    // same loop variables and program ids, so equal terms are equal values; not registers,
    // which an instruction between two others may set. A matmul's row group stores
    // out[pid * rows + c, n0 + ...] for c = 0, 128, ...: one run (lower_program.cpp) now takes
    // them all, and each PSUM copy fuses with its store.
    const Affine diff = a.offset - b.offset;
    if (!diff.is_constant() || a.dims.empty() || b.dims.empty()) return true;
    for (const Affine::Term& t : a.offset.terms)
      if (is_register_var(t.var)) return true;
    return !apart(extent(diff.constant, a.dims, 0, 1, 1), extent(0, b.dims, 0, 1, 1));
  }
  if (a.dims.empty() || b.dims.empty()) return true;
  // Partitions: dim 0 is {step (0 or 1), count} from `partition`.
  if (a.partition.is_constant() && b.partition.is_constant()) {
    auto parts = [](const AccessPattern& p) {
      const int64_t n = p.dims[0].stride == 0 ? 1 : p.dims[0].size;
      return Span1{p.partition.constant, p.partition.constant + n};
    };
    if (apart(parts(a), parts(b))) return false;
  }
  if (!a.offset.is_constant() || !b.offset.is_constant()) return true;
  return !apart(partition_bytes(a), partition_bytes(b));
}

Span1 partition_bytes(const AccessPattern& p) {
  const int64_t es = dtype_bytes(p.dtype);
  Span1 s = extent(p.offset.constant, p.dims, 1, es, es);
  if (!p.rotation.var.empty() && p.rotation.count > 1)
    s.hi += (p.rotation.count - 1) * p.rotation.bytes;
  return s;
}

std::vector<std::pair<const AccessPattern*, bool>> operands_of(const Instr& in) {
  std::vector<std::pair<const AccessPattern*, bool>> ops;
  if (opcode_has_dst(in.op)) ops.push_back({&in.dst, true});
  for (const AccessPattern& s : in.src) ops.push_back({&s, false});
  if (in.has_reduce_res) ops.push_back({&in.reduce_res, true});
  return ops;
}

bool partition_local(const Instr& in, int64_t& partitions) {
  switch (in.op) {
    case Opcode::tensor_tensor:
    case Opcode::tensor_scalar:
    case Opcode::activation:
    case Opcode::tensor_copy:
    case Opcode::tensor_copy_predicated:
    case Opcode::memset:
      break;
    case Opcode::tensor_reduce:
      for (int ax : in.args.axes)
        if (ax == 0) return false;
      break;
    case Opcode::dma_copy:
      if (in.args.indirect != InstrArgs::Indirect::none) return false;
      break;
    default:
      return false;
  }
  partitions = -1;
  for (auto [ap, written] : operands_of(in)) {
    if (ap->dims.empty()) return false;
    if (partitions < 0) partitions = ap->dims[0].size;
    if (ap->dims[0].size != partitions) return false;
  }
  return partitions > 0;
}

bool contracting_matmul(const Instr& in, int64_t& partitions) {
  if (in.op != Opcode::nc_matmul || in.src.size() != 2 || in.args.accumulate == -1 ||
      in.dst.memory != Memory::psum || in.dst.dtype != DType::float32 ||
      (in.src[0].dtype == DType::bfloat16 && in.src[1].dtype == DType::bfloat16))
    return false;
  const AccessPattern &st = in.src[0], &mv = in.src[1];
  if (st.dims.empty() || mv.dims.empty() || st.dims[0].size != mv.dims[0].size) return false;
  partitions = st.dims[0].size;
  return partitions > 0;
}

bool same_partition_map(const AccessPattern& a, const AccessPattern& b) {
  if (a.memory != b.memory || a.dims.empty() || b.dims.empty() || a.dims[0].stride == 0)
    return false;
  if (is_on_chip(a.memory))
    return a.dims[0].stride == b.dims[0].stride && a.partition == b.partition;
  // In memory: one view whose rows (dims[0], the partitions it moves) share no element, so
  // block b of both is the same rows (an output read, then rewritten in place).
  int64_t span = 1;
  for (size_t d = 1; d < a.dims.size(); ++d)
    span += (a.dims[d].size - 1) * std::abs(a.dims[d].stride);
  return a == b && std::abs(a.dims[0].stride) >= span;
}

bool matmul_fast_layout(const Instr& in, const NormLayout& dst, const NormLayout& st,
                        const NormLayout& mv) {
  // [rows, 1, 1, 1, cols] with unit element stride: row r at base + r * stride[0].
  auto rows_cols = [](const NormLayout& l, int es) {
    for (int i = 1; i < kDims - 1; ++i)
      if (l.size[i] != 1) return false;
    return (l.stride[kDims - 1] == es || l.size[kDims - 1] == 1) && l.stride[0] % es == 0 &&
           l.stride[0] > 0;
  };
  return rows_cols(dst, 4) && rows_cols(st, dtype_bytes(in.src[0].dtype)) &&
         rows_cols(mv, dtype_bytes(in.src[1].dtype));
}

namespace {

void check_body(const std::vector<ProgNode>& body) {
  for (auto& n : body) {
    if (n.kind == ProgNode::Kind::loop)
      check_body(n.body);
    else
      check_instr_shapes(n.instr);
  }
}

// Loop variables in scope: name -> extent (-1: a dynamic loop, its extent known at run time).
using Scope = std::map<std::string, int64_t>;

int pid_axis(const std::string& var, const char* prefix) {
  const size_t n = std::char_traits<char>::length(prefix);
  if (var.size() == n + 1 && var.compare(0, n, prefix) == 0 && var[n] >= '0' && var[n] <= '3')
    return var[n] - '0';
  return -1;
}

// [lo, hi] of an affine expression (+ rotation) over the loop box; pid terms go to pid/npid.
// Returns false when the expression depends on a register or a dynamic loop (the access is then
// checked at run time).
bool fold(const Affine& a, const Rotation* rot, const Scope& scope, const Instr& in, int64_t& lo,
          int64_t& hi, std::array<int64_t, 4>& pid, std::array<int64_t, 4>& npid) {
  lo = hi = a.constant;
  bool known = true;
  const bool rotates = rot && !rot->var.empty() && rot->count > 1;
  for (auto& t : a.terms) {
    if (int ax = pid_axis(t.var, "pid"); ax >= 0) {
      pid[static_cast<size_t>(ax)] += t.coeff;
      continue;
    }
    if (int ax = pid_axis(t.var, "npid"); ax >= 0) {
      npid[static_cast<size_t>(ax)] += t.coeff;
      continue;
    }
    if (is_register_var(t.var)) {
      known = false;
      continue;
    }
    auto it = scope.find(t.var);
    NEURON_ASSERT(it != scope.end(), "engine program uses unknown variable '{}' at {}", t.var,
                  in.span.str());
    if (it->second < 0) {
      known = false;
      continue;
    }
    if (rotates && t.var == rot->var) continue;  // folded with the rotation below
    const int64_t end = t.coeff * (it->second - 1);
    lo += std::min<int64_t>(0, end);
    hi += std::max<int64_t>(0, end);
  }
  if (rotates) {
    auto it = scope.find(rot->var);
    NEURON_ASSERT(it != scope.end(), "rotation over unknown loop variable '{}' at {}", rot->var,
                  in.span.str());
    // Exact over the loop: c * v + (v mod count) * bytes is not monotonic in v.
    if (it->second < 0) {  // a dynamic loop: every slot, c * v unknown
      if (a.coeff_of(rot->var) != 0) known = false;
      hi += (rot->count - 1) * rot->bytes;
      return known;
    }
    const int64_t c = a.coeff_of(rot->var);
    int64_t rlo = INT64_MAX, rhi = INT64_MIN;
    for (int64_t v = 0; v < it->second; ++v) {
      const int64_t x = c * v + (v % rot->count) * rot->bytes;
      rlo = std::min(rlo, x);
      rhi = std::max(rhi, x);
    }
    lo += rlo;
    hi += rhi;
  }
  return known;
}

void add_access(ProgramBounds& b, const Instr& in, const AccessPattern& pattern, const char* what,
                bool writes, const Scope& scope) {
  // An indirect DMA's HBM side: its rows are data (checked by the kernel, one by one, against
  // indirect_rows), so the static bound covers all the rows of the indexed dim.
  AccessPattern rows_view;
  const bool indirect =
      in.op == Opcode::dma_copy && in.args.indirect != InstrArgs::Indirect::none &&
      &pattern == (in.args.indirect == InstrArgs::Indirect::src ? &in.src[0] : &in.dst);
  if (indirect) {
    rows_view = pattern;
    rows_view.dims.at(0).size = in.args.indirect_rows;
  }
  const AccessPattern& ap = indirect ? rows_view : pattern;
  AccessBound ab;
  ab.in = &in;
  ab.what = what;
  ab.ap = &pattern;  // (rows_view is local; memory and tensor are the same)
  ab.writes = writes;
  int64_t count = 1, elo = 0, ehi = 0;
  const bool chip = is_on_chip(ap.memory);
  for (size_t i = 0; i < ap.dims.size(); ++i) {
    count *= ap.dims[i].size;
    if (chip && i == 0) continue;
    const int64_t span = ap.dims[i].stride * (ap.dims[i].size - 1);
    (span < 0 ? elo : ehi) += span;
  }
  if (count <= 0) return;
  int64_t olo, ohi;
  ab.dynamic = !fold(ap.offset, &ap.rotation, scope, in, olo, ohi, ab.pid, ab.npid);
  if (chip) {
    const int64_t es = dtype_bytes(ap.dtype);
    ab.lo = olo + elo * es;
    ab.hi = ohi + ehi * es + es - 1;
    int64_t plo, phi;
    ab.dynamic |= !fold(ap.partition, nullptr, scope, in, plo, phi, ab.ppid, ab.pnpid);
    const int64_t pspan = ap.dims.empty() ? 0 : ap.dims[0].stride * (ap.dims[0].size - 1);
    ab.plo = plo + std::min<int64_t>(0, pspan);
    ab.phi = phi + std::max<int64_t>(0, pspan);
  } else {
    ab.lo = olo + elo;
    ab.hi = ohi + ehi;
  }
  b.accesses.push_back(ab);
}

void bounds_body(const std::vector<ProgNode>& body, Scope& scope, ProgramBounds& b) {
  for (auto& n : body) {
    if (n.kind == ProgNode::Kind::loop) {
      const bool dynamic = n.loop_kind == LoopKind::dynamic;
      if (!dynamic && n.extent <= 0) continue;
      auto it = scope.find(n.var);
      std::optional<int64_t> saved;
      if (it != scope.end()) saved = it->second;
      scope[n.var] = dynamic ? -1 : n.extent;
      bounds_body(n.body, scope, b);
      if (saved)
        scope[n.var] = *saved;
      else
        scope.erase(n.var);
      continue;
    }
    const Instr& in = n.instr;
    for (auto& s : in.src) add_access(b, in, s, "source", false, scope);
    if (opcode_has_dst(in.op)) add_access(b, in, in.dst, "destination", true, scope);
    if (in.has_reduce_res) add_access(b, in, in.reduce_res, "reduce_res", true, scope);
  }
}

int64_t eval_pids(const std::array<int64_t, 4>& c, const int64_t* pid) {
  int64_t v = 0;
  for (size_t a = 0; a < 4; ++a) v += c[a] * pid[a];
  return v;
}

// Extremes of sum(c[a] * pid[a]) over the grid box.
std::pair<int64_t, int64_t> pid_range(const std::array<int64_t, 4>& c,
                                      const std::vector<int64_t>& grid) {
  int64_t lo = 0, hi = 0;
  for (size_t a = 0; a < grid.size(); ++a) {
    const int64_t end = c[a] * (grid[a] - 1);
    lo += std::min<int64_t>(0, end);
    hi += std::max<int64_t>(0, end);
  }
  return {lo, hi};
}

}  // namespace

void check_program(const Program& p) {
  check_body(p.body);
}

ProgramBounds analyze_bounds(const Program& p) {
  ProgramBounds b;
  Scope scope;
  bounds_body(p.body, scope, b);
  return b;
}

namespace {
bool reads_flags(const Instr& in) {
  switch (in.op) {
    case Opcode::nc_matmul:
    case Opcode::nc_matmul_mx:
      return in.args.accumulate == -1;
    case Opcode::psum_flags_set:
    case Opcode::psum_flags_get:
      return true;
    default:
      return false;
  }
}

bool reads_flags(const std::vector<ProgNode>& body) {
  for (auto& n : body) {
    if (n.kind == ProgNode::Kind::loop ? reads_flags(n.body) : reads_flags(n.instr)) return true;
  }
  return false;
}
}  // namespace

bool reads_psum_flags(const Program& p) {
  return reads_flags(p.body);
}

bool set_at_run_time(const Affine& a, const std::set<std::string>& dynamic_loops) {
  for (auto& t : a.terms)
    if (is_register_var(t.var) || dynamic_loops.count(t.var)) return true;
  return false;
}

bool placed_at_run_time(const AccessPattern& ap, const std::set<std::string>& dynamic_loops) {
  return set_at_run_time(ap.partition, dynamic_loops) || set_at_run_time(ap.offset, dynamic_loops) ||
         (!ap.rotation.var.empty() && dynamic_loops.count(ap.rotation.var));
}

int64_t tile_end(const AccessPattern& ap) {
  const int64_t slots = ap.rotation.var.empty() ? 1 : std::max<int64_t>(ap.rotation.count, 1);
  return ap.alloc.hi + (slots - 1) * ap.rotation.bytes;
}

Pitch physical_pitch(const Program& p, const ProgramBounds& b, const Target& t) {
  auto pitch = [&](Memory m) {
    const int64_t full = bytes_per_partition(t, m);
    int64_t hi = 0;
    for (const AccessBound& ab : b.accesses) {
      if (ab.ap->memory != m) continue;
      if (ab.dynamic && ab.ap->alloc.known()) {  // kept inside its tile when it runs
        hi = std::max(hi, tile_end(*ab.ap));
        continue;
      }
      bool whole = ab.dynamic || ab.lo < 0;
      for (size_t a = 0; a < 4; ++a) whole = whole || ab.pid[a] != 0 || ab.npid[a] != 0;
      hi = whole ? full : std::max(hi, ab.hi + 1);
      if (whole) break;
    }
    // An odd number of lines even where the program may touch the whole partition: a
    // target's size may be a multiple of 4 KiB (trn2's PSUM, 16 KiB), which maps every row of
    // a tile onto the same L1 sets. The extra line is never addressed.
    int64_t lines = std::max<int64_t>(1, (std::min(hi, full) + 63) / 64);
    if (lines % 2 == 0) ++lines;
    return lines * 64;
  };
  return Pitch{pitch(Memory::sbuf), pitch(Memory::psum)};
}

LaunchExtent check_launch(const Program& p, const ProgramBounds& b, const Target& t,
                          const std::vector<int64_t>& tensor_elements,
                          const std::vector<int64_t>& grid) {
  int64_t npid[4] = {1, 1, 1, 1};
  for (size_t a = 0; a < grid.size(); ++a) npid[a] = grid[a];
  int64_t total = 1;
  for (int64_t g : grid) total *= g;
  LaunchExtent ext;
  for (const AccessBound& ab : b.accesses) {
    const AccessPattern& ap = *ab.ap;
    const bool chip = is_on_chip(ap.memory);
    if (ab.dynamic) {  // checked at run time by the generated code: inside its tile, if known
      if (chip && ab.writes) {
        int64_t& w = ap.memory == Memory::sbuf ? ext.sbuf_written : ext.psum_written;
        w = ap.alloc.known() ? std::max(w, tile_end(ap)) : bytes_per_partition(t, ap.memory);
      }
      continue;
    }
    const int64_t limit =
        chip ? bytes_per_partition(t, ap.memory) : tensor_elements[static_cast<size_t>(ap.tensor)];
    const int64_t nconst = eval_pids(ab.npid, npid), pconst = eval_pids(ab.pnpid, npid);
    auto [dlo, dhi] = pid_range(ab.pid, grid);
    auto [qlo, qhi] = pid_range(ab.ppid, grid);
    const bool ok = ab.lo + nconst + dlo >= 0 && ab.hi + nconst + dhi < limit &&
                    (!chip || (ab.plo + pconst + qlo >= 0 && ab.phi + pconst + qhi < t.partitions));
    if (ok) {
      if (chip && ab.writes) {
        int64_t& w = ap.memory == Memory::sbuf ? ext.sbuf_written : ext.psum_written;
        w = std::max(w, ab.hi + nconst + dhi + 1);
      }
      continue;
    }
    // Find the first program (row-major) that goes out of bounds, for the message.
    int64_t pid[4] = {0, 0, 0, 0};
    for (int64_t flat = 0; flat < total; ++flat) {
      int64_t rest = flat;
      for (int a = static_cast<int>(grid.size()) - 1; a >= 0; --a) {
        pid[a] = rest % grid[static_cast<size_t>(a)];
        rest /= grid[static_cast<size_t>(a)];
      }
      const int64_t lo = ab.lo + nconst + eval_pids(ab.pid, pid);
      const int64_t hi = ab.hi + nconst + eval_pids(ab.pid, pid);
      std::string where;
      for (size_t a = 0; a < grid.size(); ++a)
        where += fmt::format("{}pid{}={}", a ? ", " : "", a, pid[a]);
      if (chip) {
        const int64_t plo = ab.plo + pconst + eval_pids(ab.ppid, pid);
        const int64_t phi = ab.phi + pconst + eval_pids(ab.ppid, pid);
        if (plo < 0 || phi >= t.partitions)
          user_error(ab.in->span, "out-of-bounds",
                     "{} of {} touches partitions {}..{}, outside the {} partitions of {} ({}; "
                     "over all iterations of its loops)",
                     ab.what, opcode_name(ab.in->op), plo, phi, t.partitions,
                     memory_name(ap.memory), where);
        if (lo < 0 || hi >= limit)
          user_error(ab.in->span, "out-of-bounds",
                     "{} of {} touches bytes [{}, {}) of each partition, outside the {} bytes of "
                     "a {} partition ({}; over all iterations of its loops)",
                     ab.what, opcode_name(ab.in->op), lo, hi + 1, limit, memory_name(ap.memory),
                     where);
      } else if (lo < 0 || hi >= limit) {
        const TensorDecl& decl = p.tensors[static_cast<size_t>(ap.tensor)];
        user_error(ab.in->span, "out-of-bounds",
                   "{} of {} touches elements {}..{} of tensor '{}' (shape [{}], {} elements) "
                   "({}; over all iterations of its loops)",
                   ab.what, opcode_name(ab.in->op), lo, hi, decl.name, fmt::join(decl.shape, ", "),
                   limit, where);
      }
    }
    internal_error("bounds of {} at {} fail over the grid but at no program",
                   opcode_name(ab.in->op), ab.in->span.str());
  }
  ext.sbuf_written = std::min(ext.sbuf_written, t.sbuf_bytes_per_partition);
  ext.psum_written = std::min(ext.psum_written, t.psum_bytes_per_partition);
  return ext;
}

}  // namespace neuron::native
