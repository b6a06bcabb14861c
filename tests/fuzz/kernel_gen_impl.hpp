// KernelGen's member definitions (header-only so the fuzz CLI and the doctest tiers share them).
#pragma once
#include <fmt/format.h>

#include <algorithm>
#include <memory>

#include "kernel_gen.hpp"

namespace neuron::fuzz {

namespace detail {

inline const std::vector<std::string>& arith_ops() {
  static const std::vector<std::string> v = {
      "add",       "subtract",    "multiply",  "divide",      "maximum",     "minimum",
      "power",     "mod",         "equal",     "not_equal",   "greater",     "greater_equal",
      "less",      "less_equal",  "logical_and", "logical_or", "logical_xor", "abs",
      "rsqrt",     "reciprocal",  "logical_not", "bypass"};
  return v;
}
// tensor_tensor takes binary operators only (the verifier rejects unary ones there).
inline const std::vector<std::string>& binary_ops() {
  static const std::vector<std::string> v = [] {
    std::vector<std::string> r;
    for (auto& s : arith_ops())
      if (s != "abs" && s != "rsqrt" && s != "reciprocal" && s != "logical_not" && s != "bypass")
        r.push_back(s);
    return r;
  }();
  return v;
}
inline const std::vector<std::string>& bit_ops() {
  static const std::vector<std::string> v = {"bitwise_and", "bitwise_or", "bitwise_xor"};
  return v;
}
inline const std::vector<std::string>& act_funcs() {
  static const std::vector<std::string> v = {
      "copy", "exp",  "log",     "tanh",  "sqrt", "rsqrt",      "sigmoid",
      "silu", "gelu", "gelu_apprx_tanh", "relu", "abs", "reciprocal", "square",
      "sign", "softplus", "sin", "cos",  "erf",  "negative"};
  return v;
}
inline const std::vector<std::string>& cmp_ops() {
  static const std::vector<std::string> v = {"equal",   "not_equal", "greater",
                                             "greater_equal", "less", "less_equal"};
  return v;
}

}  // namespace detail

inline double KernelGen::rand_imm() {
  static const std::vector<double> special = {0.0, 1.0, -1.0, 0.5, 2.0, 3.25, -7.5, 100.0, 1e-3};
  if (chance(0.4)) return one_of(special);
  // Quarter steps: exact in every float type with >= 2 mantissa bits near the small range.
  return static_cast<double>(pick(-32, 32)) / 4.0;
}

inline DType KernelGen::rand_dtype(bool allow_int) {
  static const std::vector<DType> floats = {
      DType::float32,     DType::float32,     DType::bfloat16,     DType::float16,
      DType::float8_e4m3, DType::float8_e5m2, DType::float8_e4m3fn};
  static const std::vector<DType> ints = {DType::int8,  DType::int16,  DType::int32,
                                          DType::uint8, DType::uint16, DType::uint32};
  if (allow_int && chance(0.25)) return one_of(ints);
  return one_of(floats);
}

inline BufferPtr KernelGen::new_tile(Memory m, std::vector<int64_t> shape, DType dt) {
  auto b = std::make_shared<Buffer>();
  b->name = fmt::format("{}{}", m == Memory::psum ? "ps" : "t", names_++);
  b->memory = m;
  b->shape = std::move(shape);
  b->dtype = dt;
  body_->push_back(Alloc::make(b));
  return b;
}

inline Access KernelGen::whole(const BufferPtr& b) const { return Access::whole(b); }

inline Access KernelGen::window(const BufferPtr& b, int64_t p, int64_t f0, int64_t fn) const {
  Access a;
  a.buffer = b;
  a.dims = {DimSlice{Affine(0), p, 1, true}, DimSlice{Affine(f0), fn, 1, true}};
  return a;
}

inline void KernelGen::emit(Opcode c, std::vector<Arg> args) {
  body_->push_back(Op::make(c, std::move(args)));
  ++instrs_;
}

// Same-size windows of [P, F] tiles for an element-wise instruction (sometimes the whole tile).
inline void KernelGen::elementwise_windows(Access& dst, std::vector<Access*> srcs) {
  if (!chance(0.35)) return;
  const int64_t fn = pick(1, F_);
  dst = window(dst.buffer, P_, pick(0, F_ - fn), fn);
  for (Access* s : srcs) *s = window(s->buffer, P_, pick(0, F_ - fn), fn);
}

// Creates a tile and initialises all of it with one instruction.
inline void KernelGen::add_tile_by_full_write() {
  const int kind = tiles_.empty() ? 0 : static_cast<int>(pick(0, 6));
  const DType dt = rand_dtype();
  if (kind == 0) {
    auto t = new_tile(Memory::sbuf, {P_, F_}, dt);
    Access src;
    src.buffer = chance(0.5) ? a_ : b_;
    src.dims = {DimSlice{row_, P_, 1, true}, DimSlice{Affine(0), F_, 1, true}};
    emit(chance(0.5) ? Opcode::dma_copy : Opcode::nl_load, {{"dst", whole(t)}, {"src", src}});
    tiles_.push_back({t});
    return;
  }
  if (kind == 1) {
    auto t = new_tile(Memory::sbuf, {P_, F_}, dt);
    emit(Opcode::memset, {{"dst", whole(t)}, {"value", rand_imm()}});
    tiles_.push_back({t});
    return;
  }
  if (kind == 2) {
    auto t = new_tile(Memory::sbuf, {P_, F_}, dt);
    std::vector<int64_t> pattern = {pick(-3, 3), F_};
    emit(Opcode::iota, {{"dst", whole(t)},
                        {"pattern", pattern},
                        {"offset", pick(-20, 20)},
                        {"channel_multiplier", pick(-2, 2)}});
    tiles_.push_back({t});
    return;
  }
  // Computed from existing tiles.
  auto t = new_tile(Memory::sbuf, {P_, F_}, dt);
  const BufferPtr x = any_tile().buf, y = any_tile().buf;
  if (kind == 3) {
    emit(Opcode::tensor_copy, {{"dst", whole(t)}, {"src", whole(x)}});
  } else if (kind == 4) {
    emit(Opcode::tensor_tensor, {{"dst", whole(t)},
                                 {"data1", whole(x)},
                                 {"data2", whole(y)},
                                 {"op", one_of(detail::binary_ops())}});
  } else if (kind == 5) {
    emit(Opcode::tensor_scalar, {{"dst", whole(t)},
                                 {"data", whole(x)},
                                 {"op0", one_of(detail::arith_ops())},
                                 {"operand0", rand_imm()},
                                 {"reverse0", pick(0, 1)}});
  } else {
    emit(Opcode::activation, {{"dst", whole(t)},
                              {"data", whole(x)},
                              {"func", one_of(detail::act_funcs())},
                              {"scale", rand_imm()}});
  }
  tiles_.push_back({t});
}

// Mostly, an element-wise instruction reads the last one's destination through its
// view (x, or now and then y of a binary one), with the other operands windows of its shape.
// The tile must still be live (tiles made inside a loop end with it).
inline bool KernelGen::chained(Access& dst, Access& x, Access& y, bool binary) {
  if (!last_elementwise_.buffer || !chance(0.7)) return false;
  bool live = false;
  for (const Tile& t : tiles_) live = live || t.buf == last_elementwise_.buffer;
  if (!live) return false;
  const int64_t fn = last_elementwise_.shape()[1];
  if (fn < F_) {
    dst = window(dst.buffer, P_, pick(0, F_ - fn), fn);
    x = window(x.buffer, P_, pick(0, F_ - fn), fn);
    y = window(y.buffer, P_, pick(0, F_ - fn), fn);
  }
  (binary && chance(0.3) ? y : x) = last_elementwise_;
  return true;
}

// One instruction that reads initialised tiles and overwrites (part of) an existing one.
inline void KernelGen::random_instr() {
  // After an element-wise instruction, often another (the chains kernels are made of).
  const int kind = last_elementwise_.buffer && chance(0.5)
                       ? static_cast<int>(one_of(std::vector<int64_t>{0, 1, 1, 2, 3, 4}))
                       : static_cast<int>(pick(0, 13));
  Access dst = whole(any_tile().buf);
  Access x = whole(any_tile().buf), y = whole(any_tile().buf);
  auto is_int = [](const Access& a) { return !dtype_is_float(a.buffer->dtype); };
  const bool elementwise = kind <= 2 || kind == 4;
  if (elementwise) {
    if (!chained(dst, x, y, kind == 0)) {
      if (kind == 0) elementwise_windows(dst, {&x, &y});
      else elementwise_windows(dst, {&x});
    }
    last_elementwise_ = dst;
  }
  switch (kind) {
    case 0: {  // tensor_tensor (bitwise ops only when every tile is an integer tile)
      const bool all_int = is_int(dst) && is_int(x) && is_int(y);
      const std::string op =
          all_int && chance(0.4) ? one_of(detail::bit_ops()) : one_of(detail::binary_ops());
      emit(Opcode::tensor_tensor, {{"dst", dst}, {"data1", x}, {"data2", y}, {"op", op}});
      return;
    }
    case 1: {  // tensor_scalar: immediates or [P, 1] operands, one or two ops
      std::vector<Arg> args = {{"dst", dst}, {"data", x}, {"op0", one_of(detail::arith_ops())}};
      if (chance(0.3))
        args.push_back({"operand0", window(any_tile().buf, P_, pick(0, F_ - 1), 1)});
      else
        args.push_back({"operand0", rand_imm()});
      args.push_back({"reverse0", pick(0, 1)});
      if (chance(0.5)) {
        args.push_back({"op1", one_of(detail::arith_ops())});
        args.push_back({"operand1", rand_imm()});
        args.push_back({"reverse1", pick(0, 1)});
      }
      emit(Opcode::tensor_scalar, std::move(args));
      return;
    }
    case 2: {  // activation with scale, bias and the optional row reduction
      std::vector<Arg> args = {{"dst", dst}, {"data", x}, {"func", one_of(detail::act_funcs())}};
      if (chance(0.4)) args.push_back({"bias", window(any_tile().buf, P_, pick(0, F_ - 1), 1)});
      if (chance(0.3))
        args.push_back({"scale", window(any_tile().buf, P_, pick(0, F_ - 1), 1)});
      else
        args.push_back({"scale", rand_imm()});
      if (chance(0.3)) {
        args.push_back({"reduce_op", std::string("add")});
        args.push_back({"reduce_res", window(any_tile().buf, P_, pick(0, F_ - 1), 1)});
      }
      emit(Opcode::activation, std::move(args));
      return;
    }
    case 3: {  // tensor_reduce over the free axis into a [P, 1] column, often of the last
               // element-wise result (a chain ending in its reduction natively)
      bool live = false;
      for (const Tile& t : tiles_) live = live || t.buf == last_elementwise_.buffer;
      if (live && chance(0.6))
        x = last_elementwise_;
      else
        elementwise_windows(x, {});
      std::vector<std::string> ops = {"add", "maximum", "minimum", "multiply"};
      emit(Opcode::tensor_reduce, {{"dst", window(dst.buffer, P_, pick(0, F_ - 1), 1)},
                                   {"data", x},
                                   {"op", one_of(ops)},
                                   {"axes", std::vector<int64_t>{1}},
                                   {"negate", pick(0, 1)}});
      return;
    }
    case 4:
      emit(Opcode::tensor_copy, {{"dst", dst}, {"src", x}});
      return;
    case 5: {  // predicate = (x > c) as a uint8 tile, then a predicated copy
      auto pred = new_tile(Memory::sbuf, {P_, F_}, DType::uint8);
      emit(Opcode::tensor_scalar, {{"dst", whole(pred)},
                                   {"data", whole(x.buffer)},
                                   {"op0", std::string("greater")},
                                   {"operand0", rand_imm()},
                                   {"reverse0", int64_t{0}}});
      Access p = whole(pred);
      elementwise_windows(dst, {&y, &p});
      emit(Opcode::tensor_copy_predicated, {{"dst", dst}, {"src", y}, {"predicate", p}});
      return;
    }
    case 6: {
      elementwise_windows(dst, {});
      emit(Opcode::memset, {{"dst", dst}, {"value", rand_imm()}});
      return;
    }
    case 7: {
      elementwise_windows(dst, {});
      const int64_t fn = dst.shape()[1];
      emit(Opcode::iota, {{"dst", dst},
                          {"pattern", std::vector<int64_t>{pick(-3, 3), fn}},
                          {"offset", pick(-20, 20)},
                          {"channel_multiplier", pick(-2, 2)}});
      return;
    }
    case 8: {
      elementwise_windows(dst, {&x});
      const int64_t fn = dst.shape()[1];
      emit(Opcode::affine_select, {{"dst", dst},
                                   {"on_true", x},
                                   {"pattern", std::vector<int64_t>{pick(-2, 2), fn}},
                                   {"offset", pick(-10, 10)},
                                   {"channel_multiplier", pick(-2, 2)},
                                   {"cmp_op", one_of(detail::cmp_ops())},
                                   {"on_false", rand_imm()}});
      return;
    }
    case 9:
    case 10: {  // nc_matmul (one or two accumulation steps), evacuated from PSUM
      if (is_int(x) || is_int(y)) return;
      const int64_t M = pick(1, std::min<int64_t>(P_, F_)), N = pick(1, F_);
      auto ps = new_tile(Memory::psum, {M, N}, DType::float32);
      const int steps = static_cast<int>(pick(1, 2));
      for (int s = 0; s < steps; ++s) {
        const BufferPtr st = s == 0 ? x.buffer : any_tile().buf;
        const BufferPtr mv = s == 0 ? y.buffer : any_tile().buf;
        if (is_int(whole(st)) || is_int(whole(mv))) break;
        // Auto (-1) on a tile re-allocated every iteration once found a bug
        // (tests/fuzz/regressions/auto_accumulate_fresh_psum.ir).
        const int64_t acc = s == 0 ? (chance(0.5) ? 0 : -1) : (chance(0.5) ? 1 : -1);
        emit(Opcode::nc_matmul, {{"dst", whole(ps)},
                                 {"stationary", window(st, P_, pick(0, F_ - M), M)},
                                 {"moving", window(mv, P_, pick(0, F_ - N), N)},
                                 {"accumulate", acc}});
      }
      Access out = window(dst.buffer, M, pick(0, F_ - N), N);
      if (chance(0.5))
        emit(Opcode::tensor_copy, {{"dst", out}, {"src", whole(ps)}});
      else
        emit(Opcode::activation,
             {{"dst", out}, {"data", whole(ps)}, {"func", one_of(detail::act_funcs())},
              {"scale", rand_imm()}});
      return;
    }
    case 12:
    case 13:
      nl_helper(dst, x, y);
      return;
    default: {  // nc_transpose [Q, R] -> PSUM [R, Q], copied back into a tile window
      if (is_int(x)) return;
      const int64_t lim = std::min<int64_t>(P_, F_);
      const int64_t Q = pick(1, lim), R = pick(1, lim);
      auto ps = new_tile(Memory::psum, {R, Q}, x.buffer->dtype);
      emit(Opcode::nc_transpose,
           {{"dst", whole(ps)}, {"data", window(x.buffer, Q, pick(0, F_ - R), R)}});
      emit(Opcode::tensor_copy,
           {{"dst", window(dst.buffer, R, pick(0, F_ - Q), Q)}, {"src", whole(ps)}});
      return;
    }
  }
}

// One nl helper (expanded by legalize, so the reference checks the expansion).
inline void KernelGen::nl_helper(Access dst, Access x, Access y) {
  auto is_int = [](const Access& a) { return !dtype_is_float(a.buffer->dtype); };
  auto operand = [&](const Access& a) -> Value {
    if (chance(0.25)) return rand_imm();
    return a;
  };
  switch (pick(0, 5)) {
    case 0: {
      elementwise_windows(dst, {&x, &y});
      const bool all_int = is_int(dst) && is_int(x) && is_int(y);
      const std::string op =
          all_int && chance(0.4) ? one_of(detail::bit_ops()) : one_of(detail::binary_ops());
      emit(Opcode::nl_binary, {{"dst", dst}, {"x", x}, {"y", operand(y)}, {"op", op}});
      return;
    }
    case 1:
      if (is_int(x)) return;
      elementwise_windows(dst, {&x});
      emit(Opcode::nl_unary, {{"dst", dst}, {"x", x}, {"func", one_of(detail::act_funcs())}});
      return;
    case 2: {
      std::vector<std::string> ops = {"add", "maximum", "minimum", "mean"};
      elementwise_windows(x, {});
      emit(Opcode::nl_reduce, {{"dst", window(dst.buffer, P_, pick(0, F_ - 1), 1)},
                               {"x", x},
                               {"op", one_of(ops)},
                               {"axes", std::vector<int64_t>{1}}});
      return;
    }
    case 3: {
      Access c = whole(any_tile().buf);
      elementwise_windows(dst, {&c, &x, &y});
      emit(Opcode::nl_where, {{"dst", dst}, {"cond", c}, {"x", operand(x)}, {"y", operand(y)}});
      return;
    }
    case 4:
      elementwise_windows(dst, {&x});
      emit(Opcode::nl_copy, {{"dst", dst}, {"src", x}});
      return;
    default: {  // nl.matmul with x given as [M, K] (legalize transposes it through PSUM)
      if (is_int(x) || is_int(y)) return;
      const int64_t M = pick(1, P_), K = pick(1, std::min<int64_t>(P_, F_)), N = pick(1, F_);
      auto ps = new_tile(Memory::psum, {M, N}, DType::float32);
      emit(Opcode::nl_matmul, {{"dst", whole(ps)},
                               {"x", window(x.buffer, M, pick(0, F_ - K), K)},
                               {"y", window(y.buffer, K, pick(0, F_ - N), N)},
                               {"transpose_x", int64_t{0}}});
      emit(Opcode::nl_copy, {{"dst", window(dst.buffer, M, pick(0, F_ - N), N)}, {"src", whole(ps)}});
      return;
    }
  }
}

inline Generated KernelGen::generate() {
  static const std::vector<int64_t> parts = {1, 2, 5, 16, 32, 64, 100, 128};
  P_ = chance(0.3) ? pick(1, 128) : one_of(parts);
  F_ = chance(0.5) ? pick(1, 8) : pick(1, 48);
  const int64_t G = chance(0.3) ? pick(2, 3) : 1;
  const int64_t L = pick(1, 3);
  G_ = G;
  L_ = L;
  const int64_t rows = G * L * P_;
  auto hbm = [&](const char* name, std::vector<int64_t> shape, DType dt) {
    auto b = std::make_shared<Buffer>();
    b->name = name;
    b->memory = Memory::shared_hbm;
    b->shape = std::move(shape);
    b->dtype = dt;
    return BufferPtr(b);
  };
  a_ = hbm("a", {rows, F_}, rand_dtype());
  b_ = hbm("b", {rows, F_}, rand_dtype());
  auto out = hbm("out", {rows, F_}, rand_dtype());
  auto acc_out = hbm("acc", {G * P_, F_}, DType::float32);
  const Affine pid_rows = G > 1 ? Affine::var("pid0", P_) : Affine(0);
  row_ = (G > 1 ? Affine::var("pid0", L * P_) : Affine(0)) + Affine::var("i0", P_);
  pid_ = G > 1 ? Affine::var("pid0") : Affine(0);
  dynamic_ = chance(opts_.dynamic);
  fault_left_ = dynamic_ && chance(opts_.fault);
  if (dynamic_) {
    ix_ = hbm("ix", {rows, F_}, DType::int32);
    if (chance(0.5)) {
      R_ = pick(P_, 128);
      sc_ = hbm("sc", {G, R_, F_}, rand_dtype());
    }
  }

  std::vector<StmtPtr> top;
  body_ = &top;
  auto acc = new_tile(Memory::sbuf, {P_, F_}, DType::float32);
  emit(Opcode::memset, {{"dst", whole(acc)}, {"value", 0.0}});
  if (sc_) {  // every element of sc is written before the loop scatters rows into it
    auto init = new_tile(Memory::sbuf, {R_, F_}, sc_->dtype);
    emit(Opcode::iota, {{"dst", whole(init)},
                        {"pattern", std::vector<int64_t>{1, F_}},
                        {"offset", pick(-20, 20)},
                        {"channel_multiplier", pick(-2, 2)}});
    Access all;
    all.buffer = sc_;
    all.dims = {DimSlice{pid_, 1, 1, false}, DimSlice{Affine(0), R_, 1, true},
                DimSlice{Affine(0), F_, 1, true}};
    emit(Opcode::dma_copy, {{"dst", all}, {"src", whole(init)}});
  }

  std::vector<StmtPtr> loop;
  body_ = &loop;
  tiles_.clear();
  last_elementwise_ = Access();
  if (dynamic_) {
    xi_ = new_tile(Memory::sbuf, {P_, F_}, DType::int32);
    Access src;
    src.buffer = ix_;
    src.dims = {DimSlice{row_, P_, 1, true}, DimSlice{Affine(0), F_, 1, true}};
    emit(Opcode::dma_copy, {{"dst", whole(xi_)}, {"src", src}});
  }
  const int n_init = static_cast<int>(pick(1, 3));
  for (int i = 0; i < n_init; ++i) add_tile_by_full_write();
  const int n = static_cast<int>(pick(1, opts_.max_instrs));
  for (int i = 0; i < n; ++i) {
    if (dynamic_ && chance(0.35))
      dynamic_instr();
    else if (chance(0.3))
      add_tile_by_full_write();
    else
      random_instr();
  }
  // A tile carried across iterations makes the loop sequential (so do rows of sc written at
  // indices read from data: iterations may write the same rows).
  const bool carry = chance(0.5);
  if (carry)
    emit(Opcode::tensor_tensor, {{"dst", whole(acc)},
                                 {"data1", whole(acc)},
                                 {"data2", whole(any_tile().buf)},
                                 {"op", std::string(chance(0.5) ? "add" : "maximum")}});
  Access store;
  store.buffer = out;
  store.dims = {DimSlice{row_, P_, 1, true}, DimSlice{Affine(0), F_, 1, true}};
  emit(chance(0.5) ? Opcode::dma_copy : Opcode::nl_store,
       {{"dst", store}, {"src", whole(tiles_.back().buf)}});

  body_ = &top;
  top.push_back(For::make("i0", L,
                          carry || sc_in_loop_ ? LoopKind::sequential : LoopKind::affine,
                          Block::make(std::move(loop))));
  Access acc_store;
  acc_store.buffer = acc_out;
  acc_store.dims = {DimSlice{pid_rows, P_, 1, true}, DimSlice{Affine(0), F_, 1, true}};
  emit(Opcode::dma_copy, {{"dst", acc_store}, {"src", whole(acc)}});

  Generated g;
  g.kernel.name = "fuzz";
  g.kernel.inputs = {a_, b_};
  if (ix_) g.kernel.inputs.push_back(ix_);
  g.kernel.outputs = {out, acc_out};
  if (sc_) g.kernel.outputs.push_back(sc_);
  g.kernel.body = Block::make(std::move(top));
  g.grid = {G};
  g.instructions = instrs_;
  g.may_fault = may_fault_;
  return g;
}

}  // namespace neuron::fuzz
