// KernelGen's dynamic half: registers, runtime loops, indirect DMA rows and gathers
// (kernel_gen.hpp says how they fit in a kernel).
//
// Every index read at run time comes from an index tile computed from the block of `ix` with
// tensor_scalar: (x * k) mod n, in 0..n-1 whatever the input holds; adding `shift` pushes some
// values out of range. The executors and the reference agree on what is in range; where they
// check differently (a register offset into an SBUF tile is checked against the whole SBUF
// partition by the executors, against the tile by the reference), only values that are in range,
// or far outside the partition, are generated.
#pragma once
#include <numeric>

#include "kernel_gen.hpp"

namespace neuron::fuzz {

// The kernel's one out-of-range index goes to the first site that draws it.
inline bool KernelGen::fault_site() {
  if (!fault_left_ || !chance(0.4)) return false;
  fault_left_ = false;
  may_fault_ = true;
  return true;
}

inline Access KernelGen::window_at(const BufferPtr& b, int64_t p, Affine f0, int64_t fn) const {
  Access a;
  a.buffer = b;
  a.dims = {DimSlice{Affine(0), p, 1, true}, DimSlice{std::move(f0), fn, 1, true}};
  return a;
}

inline Access KernelGen::element(const BufferPtr& b, int64_t p, int64_t f) const {
  Access a;
  a.buffer = b;
  a.dims = {DimSlice{Affine(p), 1, 1, true}, DimSlice{Affine(f), 1, 1, true}};
  return a;
}

// Index tiles of every integer width (narrow ones saturate: still in range when n fits).
inline DType KernelGen::index_dtype() {
  static const std::vector<DType> v = {DType::int32, DType::int32, DType::int16, DType::uint16,
                                       DType::uint8, DType::int8,  DType::uint32};
  return one_of(v);
}

// A new [P, cols] integer tile of values in 0..n-1 (+ shift), from columns of this block of ix.
inline BufferPtr KernelGen::index_tile(int64_t cols, int64_t n, DType dt, int64_t shift) {
  auto t = new_tile(Memory::sbuf, {P_, cols}, dt);
  std::vector<Arg> args = {{"dst", whole(t)}, {"data", window(xi_, P_, pick(0, F_ - cols), cols)}};
  auto op = [&](int i, const char* name, double v) {
    args.push_back({fmt::format("op{}", i), std::string(name)});
    args.push_back({fmt::format("operand{}", i), v});
    args.push_back({fmt::format("reverse{}", i), int64_t{0}});
  };
  if (shift == 0 && chance(0.6)) {  // spread the small input values over the range
    op(0, "multiply", static_cast<double>(one_of(std::vector<int64_t>{3, 7, 13, 37, -5})));
    op(1, "mod", static_cast<double>(n));
  } else {
    op(0, "mod", static_cast<double>(n));
    if (shift != 0) op(1, "add", static_cast<double>(shift));
  }
  emit(Opcode::tensor_scalar, std::move(args));
  return t;
}

// A new register holding a value in 0..n-1 (+ shift) read from an index tile.
inline std::string KernelGen::reg_in(int64_t n, int64_t shift) {
  const int64_t cols = pick(1, std::min<int64_t>(F_, 3));
  auto t = index_tile(cols, n, shift < 0 ? DType::int32 : index_dtype(), shift);
  std::string r = register_var(regs_++);
  emit(Opcode::register_load, {{"reg", r}, {"src", element(t, pick(0, P_ - 1), pick(0, cols - 1))}});
  if (chance(0.2)) {  // through a register move
    std::string r2 = register_var(regs_++);
    emit(Opcode::register_move, {{"reg", r2}, {"src", r}});
    return r2;
  }
  return r;
}

inline void KernelGen::dynamic_instr() {
  switch (pick(0, 10)) {
    case 0:
      return dyn_offset_load();
    case 1:
      return dyn_offset_window();
    case 2:
      return register_roundtrip();
    case 3:
    case 4:
      return dynamic_range_loop();
    case 5:
      return while_loop();
    case 6:
      return indirect_load();
    case 7:
      return indirect_store();
    case 8:
      return gather();
    default:
      return local_gather();
  }
}

// A block of a or b at a row read from data: a[r : r+P] or a[r*P : (r+1)*P] (a register in an
// HBM offset). Out of range on purpose: past the last row or before the first.
inline void KernelGen::dyn_offset_load() {
  const int64_t rows = G_ * L_ * P_;
  const bool blocks = chance(0.5);
  const int64_t n = blocks ? G_ * L_ : rows - P_ + 1;
  int64_t shift = 0;
  if (fault_site()) shift = chance(0.5) ? n + pick(0, 2) : -pick(1, 3);
  const std::string r = reg_in(n, shift);
  auto t = new_tile(Memory::sbuf, {P_, F_}, rand_dtype());
  Access src;
  src.buffer = chance(0.5) ? a_ : b_;
  src.dims = {DimSlice{Affine::var(r, blocks ? P_ : 1), P_, 1, true},
              DimSlice{Affine(0), F_, 1, true}};
  emit(chance(0.5) ? Opcode::dma_copy : Opcode::nl_load, {{"dst", whole(t)}, {"src", src}});
  tiles_.push_back({t});
}

// An element-wise instruction with a free-dim window of an SBUF tile at a register offset.
// Out of range on purpose: a million elements off, outside the partition.
inline void KernelGen::dyn_offset_window() {
  const int64_t fn = pick(1, F_);
  std::string r;
  if (fault_site()) {
    r = register_var(regs_++);
    emit(Opcode::register_move,
         {{"reg", r}, {"value", chance(0.5) ? int64_t{1} << 20 : -(int64_t{1} << 20)}});
  } else {
    r = reg_in(F_ - fn + 1);
  }
  Access dst = window(any_tile().buf, P_, pick(0, F_ - fn), fn);
  Access x = window(any_tile().buf, P_, pick(0, F_ - fn), fn);
  Access y = window(any_tile().buf, P_, pick(0, F_ - fn), fn);
  Access* operands[] = {&dst, &x, &y};
  operands[pick(0, 2)]->dims[1].start = Affine::var(r);
  if (chance(0.5))
    emit(Opcode::tensor_copy, {{"dst", dst}, {"src", x}});
  else
    emit(Opcode::tensor_tensor,
         {{"dst", dst}, {"data1", x}, {"data2", y}, {"op", one_of(detail::binary_ops())}});
}

// A register set from an index tile, any tile's element (floats round), an HBM element or a
// constant (wider than 32 bits: wraps), maybe moved, then stored into an element of a tile.
inline void KernelGen::register_roundtrip() {
  std::string r;
  switch (pick(0, 3)) {
    case 0:
      r = reg_in(pick(1, 300));
      break;
    case 1: {
      r = register_var(regs_++);
      emit(Opcode::register_load,
           {{"reg", r}, {"src", element(any_tile().buf, pick(0, P_ - 1), pick(0, F_ - 1))}});
      break;
    }
    case 2: {
      r = register_var(regs_++);
      Access src;
      src.buffer = ix_;
      src.dims = {DimSlice{row_ + pick(0, P_ - 1), 1, 1, true},
                  DimSlice{Affine(pick(0, F_ - 1)), 1, 1, true}};
      emit(Opcode::register_load, {{"reg", r}, {"src", src}});
      break;
    }
    default: {
      static const std::vector<int64_t> values = {0,       1,           -3,          1000,
                                                  70000,   -2147483648, 2147483647,  5000000000,
                                                  -5000000001};
      r = register_var(regs_++);
      emit(Opcode::register_move, {{"reg", r}, {"value", one_of(values)}});
    }
  }
  if (chance(0.3)) {
    std::string r2 = register_var(regs_++);
    emit(Opcode::register_move, {{"reg", r2}, {"src", r}});
    r = r2;
  }
  emit(Opcode::register_store,
       {{"dst", element(any_tile().buf, pick(0, P_ - 1), pick(0, F_ - 1))}, {"reg", r}});
}

// The body of a runtime loop: instructions whose windows move with the loop (offsets: index
// expressions and their largest value), and ordinary ones. Tiles created inside stay inside.
inline void KernelGen::loop_body(const std::vector<Offset>& offsets, std::vector<StmtPtr>& out) {
  std::vector<StmtPtr>* saved = body_;
  body_ = &out;
  const size_t live = tiles_.size();
  ++depth_;
  const int n = static_cast<int>(pick(1, 3));
  for (int i = 0; i < n; ++i) {
    const Offset& o = one_of(offsets);
    const int64_t room = F_ - std::max<int64_t>(o.max, 0);  // columns left at the largest offset
    const int kind = static_cast<int>(pick(0, 5));
    if (kind <= 1 && room >= 1) {  // T[:, o + c : +fn] op= X[:, c2 : +fn]
      const int64_t fn = pick(1, room), c = pick(0, room - fn);
      const BufferPtr t = any_tile().buf;
      Access dst = window_at(t, P_, o.expr + c, fn);
      emit(Opcode::tensor_tensor, {{"dst", dst},
                                   {"data1", dst},
                                   {"data2", window(any_tile().buf, P_, pick(0, F_ - fn), fn)},
                                   {"op", std::string(kind == 0 ? "add" : "maximum")}});
    } else if (kind == 2 && room >= 1) {  // columns of a or b that move with the loop
      const int64_t fn = pick(1, room), c = pick(0, room - fn);
      Access src;
      src.buffer = chance(0.5) ? a_ : b_;
      src.dims = {DimSlice{row_, P_, 1, true}, DimSlice{o.expr + c, fn, 1, true}};
      emit(Opcode::dma_copy,
           {{"dst", window(any_tile().buf, P_, pick(0, F_ - fn), fn)}, {"src", src}});
    } else if (kind == 3 && depth_ < 2 && chance(0.5)) {
      dynamic_instr();
    } else if (kind == 4) {
      add_tile_by_full_write();
    } else {
      random_instr();
    }
  }
  --depth_;
  tiles_.resize(live);
  body_ = saved;
}

// for i in dynamic_range(start, stop, step): stop = a register read from data (0..nt-1, or
// negative: no trips) plus maybe 1, i0 or pid0; start 0, 1 or a register; step 1..3.
inline void KernelGen::dynamic_range_loop() {
  const int64_t nt = pick(1, 5);
  const std::string stop_reg = reg_in(nt, chance(0.15) ? -pick(1, 5) : 0);
  Affine start(0);
  if (chance(0.25)) start = chance(0.5) ? Affine(1) : Affine::var(reg_in(nt));
  Affine stop = Affine::var(stop_reg);
  int64_t extra = 0;
  switch (pick(0, 5)) {
    case 0:
      stop += 1;
      extra = 1;
      break;
    case 1:
      stop += Affine::var("i0");
      extra = L_ - 1;
      break;
    case 2:
      if (G_ > 1) {
        stop += Affine::var("pid0");
        extra = G_ - 1;
      }
      break;
    default:
      break;
  }
  const int64_t step = chance(0.7) ? 1 : pick(2, 3);
  const int64_t top = nt - 1 + extra;  // stop's largest value; start >= 0
  const int64_t trips = (top + step - 1) / step;
  const std::string var = fmt::format("i{}", loop_vars_++);
  // The loop variable counts trips; start + step * var is the position in the range.
  std::vector<Offset> offsets = {{Affine::var(var), trips - 1},
                                 {start + Affine::var(var, step), top - 1}};
  std::vector<StmtPtr> body;
  loop_body(offsets, body);
  emit_loop(For::make_dynamic(var, start, stop, step, "", Block::make(std::move(body))));
}

// for i in while_nonzero(r): r counts down from a value read from data (0..nc-1) by 1 or 2,
// clamped at 0, through a register_store / tensor_scalar / register_load round trip.
inline void KernelGen::while_loop() {
  const int64_t nc = pick(1, 4), dec = chance(0.7) ? 1 : 2;
  std::string r = reg_in(nc);
  if (chance(0.5)) {
    std::string w = register_var(regs_++);
    emit(Opcode::register_move, {{"reg", w}, {"src", r}});
    r = w;
  }
  const std::string var = fmt::format("i{}", loop_vars_++);
  const int64_t trips = (nc - 1 + dec - 1) / dec;
  std::vector<StmtPtr> body;
  loop_body({{Affine::var(var), trips - 1}}, body);
  std::vector<StmtPtr>* saved = body_;
  body_ = &body;
  static const std::vector<DType> counters = {DType::int32, DType::int16, DType::float32,
                                              DType::uint8};
  auto now = new_tile(Memory::sbuf, {1, 1}, one_of(counters));
  emit(Opcode::register_store, {{"dst", whole(now)}, {"reg", r}});
  auto next = new_tile(Memory::sbuf, {1, 1}, one_of(counters));
  emit(Opcode::tensor_scalar, {{"dst", whole(next)},
                               {"data", whole(now)},
                               {"op0", std::string("subtract")},
                               {"operand0", static_cast<double>(dec)},
                               {"reverse0", int64_t{0}},
                               {"op1", std::string("maximum")},
                               {"operand1", 0.0},
                               {"reverse1", int64_t{0}}});
  emit(Opcode::register_load, {{"reg", r}, {"src", whole(next)}});
  body_ = saved;
  emit_loop(For::make_dynamic(var, Affine(0), Affine(0), 1, r, Block::make(std::move(body))));
}

// Rows of a or b gathered by an index tile: into a new tile, or (oob_mode=1, where some rows
// may be skipped and keep what they held) into a window of an initialised one.
inline void KernelGen::indirect_load() {
  const int64_t rows = G_ * L_ * P_;
  const bool skip = chance(0.4);
  int64_t shift = 0;
  if (skip && chance(0.5))
    shift = chance(0.5) ? pick(1, rows) : -pick(1, 5);
  else if (!skip && fault_site())
    shift = chance(0.5) ? rows + pick(0, 2) : -pick(1, 5);
  const int64_t cols = pick(1, std::min<int64_t>(F_, 3));
  auto idx = index_tile(cols, rows, shift < 0 ? DType::int32 : index_dtype(), shift);
  const int64_t fn = skip || chance(0.3) ? pick(1, F_) : F_;
  Access dst;
  if (fn == F_ && !skip) {
    auto t = new_tile(Memory::sbuf, {P_, F_}, rand_dtype());
    tiles_.push_back({t});
    dst = whole(t);
  } else {
    dst = window(any_tile().buf, P_, pick(0, F_ - fn), fn);
  }
  Access src;
  src.buffer = one_of(std::vector<BufferPtr>{a_, b_, ix_});
  src.dims = {DimSlice{Affine(0), P_, 1, true}, DimSlice{Affine(pick(0, F_ - fn)), fn, 1, true}};
  std::vector<Arg> args = {{"dst", dst},
                           {"src", src},
                           {"src_rows", window(idx, P_, pick(0, cols - 1), 1)}};
  if (skip || chance(0.5)) args.push_back({"oob_mode", int64_t{skip ? 1 : 0}});
  emit(chance(0.5) ? Opcode::dma_copy : Opcode::nl_load, std::move(args));
}

// Rows of a tile scattered into this program's part of sc at distinct rows (iota p*k + o mod R
// with k prime to R: a permutation's prefix); or a block stored at a register offset.
inline void KernelGen::indirect_store() {
  if (!sc_ || P_ > R_) return indirect_load();
  sc_in_loop_ = true;
  const int64_t fn = pick(1, F_);
  Access src = window(any_tile().buf, P_, pick(0, F_ - fn), fn);
  Access dst;
  dst.buffer = sc_;
  if (chance(0.25)) {  // a register offset into HBM
    int64_t shift = 0;
    if (fault_site()) shift = chance(0.5) ? R_ - P_ + 1 : -1;
    dst.dims = {DimSlice{pid_, 1, 1, false},
                DimSlice{Affine::var(reg_in(R_ - P_ + 1, shift)), P_, 1, true},
                DimSlice{Affine(pick(0, F_ - fn)), fn, 1, true}};
    emit(chance(0.5) ? Opcode::dma_copy : Opcode::nl_store, {{"dst", dst}, {"src", src}});
    return;
  }
  const bool skip = chance(0.4);
  int64_t shift = 0;
  if (skip && chance(0.5))
    shift = chance(0.5) ? pick(1, R_) : -pick(1, 5);
  else if (!skip && fault_site())
    shift = chance(0.5) ? pick(1, R_) : -pick(1, 5);
  int64_t k = 1;
  for (int tries = 0; tries < 4; ++tries) {
    const int64_t c = one_of(std::vector<int64_t>{1, -1, 3, 5, 7, 11, 13, -3});
    if (std::gcd(c, R_) == 1) k = c;
  }
  auto ramp = new_tile(Memory::sbuf, {P_, 1}, DType::int32);
  emit(Opcode::iota, {{"dst", whole(ramp)},
                      {"pattern", std::vector<int64_t>{0, 1}},
                      {"offset", pick(0, 2 * R_)},
                      {"channel_multiplier", k}});
  // Narrow unsigned types would saturate shifted values onto one row: signed ones then.
  const DType dt = shift != 0 ? (chance(0.5) ? DType::int32 : DType::int16) : index_dtype();
  auto idx = new_tile(Memory::sbuf, {P_, 1}, dt);
  std::vector<Arg> args = {{"dst", whole(idx)},
                           {"data", whole(ramp)},
                           {"op0", std::string("mod")},
                           {"operand0", static_cast<double>(R_)},
                           {"reverse0", int64_t{0}}};
  if (shift != 0) {
    args.push_back({"op1", std::string("add")});
    args.push_back({"operand1", static_cast<double>(shift)});
    args.push_back({"reverse1", int64_t{0}});
  }
  emit(Opcode::tensor_scalar, std::move(args));
  dst.dims = {DimSlice{pid_, 1, 1, false}, DimSlice{Affine(0), P_, 1, true},
              DimSlice{Affine(pick(0, F_ - fn)), fn, 1, true}};
  std::vector<Arg> sargs = {{"dst", dst}, {"src", src}, {"dst_rows", whole(idx)}};
  if (skip || chance(0.5)) sargs.push_back({"oob_mode", int64_t{skip ? 1 : 0}});
  emit(chance(0.5) ? Opcode::dma_copy : Opcode::nl_store, std::move(sargs));
}

// dst[p, j] = data[p, indices[p, j]] over windows of tiles.
inline void KernelGen::gather() {
  const int64_t m = pick(1, F_), fn = pick(1, F_);
  int64_t shift = 0;
  if (fault_site()) shift = chance(0.5) ? m : -pick(1, 3);
  auto idx = index_tile(fn, m, shift < 0 ? DType::int32 : index_dtype(), shift);
  emit(Opcode::nc_n_gather, {{"dst", window(any_tile().buf, P_, pick(0, F_ - fn), fn)},
                             {"data", window(any_tile().buf, P_, pick(0, F_ - m), m)},
                             {"indices", whole(idx)}});
}

// local_gather over groups of 16 partitions (nc_n_gather when P is not a multiple of 16).
inline void KernelGen::local_gather() {
  if (P_ % 16 != 0) return gather();
  std::vector<int64_t> pers;
  for (int64_t per : {1, 2, 4, 8, 16, 32})
    if (per <= F_) pers.push_back(per);
  const int64_t per = one_of(pers);
  const int64_t m = pick(per, F_);  // src window width
  const int64_t cols = pick(1, std::min<int64_t>(F_, 3));
  const int64_t valid = pick(1, std::min<int64_t>(16 * cols, F_ / per));
  int64_t shift = 0;
  if (fault_site()) shift = chance(0.5) ? m - per + 1 : -pick(1, 3);
  auto idx = index_tile(cols, m - per + 1, shift < 0 ? DType::int32 : index_dtype(), shift);
  std::vector<Arg> args = {{"dst", window(any_tile().buf, P_, pick(0, F_ - valid * per), valid * per)},
                           {"src", window(any_tile().buf, P_, pick(0, F_ - m), m)},
                           {"index", whole(idx)},
                           {"num_elem_per_idx", per}};
  if (valid != 16 * cols || chance(0.5)) args.push_back({"num_valid_indices", valid});
  emit(Opcode::local_gather, std::move(args));
}

}  // namespace neuron::fuzz
