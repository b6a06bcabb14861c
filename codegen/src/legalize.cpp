// legalize: expands every nl helper into ISA instructions (docs/ir.md lists both levels).
// Temporaries become Allocs placed right before the op, in the same block, with the op's span.
#include <set>

#include "neuron/codegen/pipeline.hpp"
#include "neuron/dsl/syntax.hpp"
#include "neuron/ir/visitor.hpp"
#include "view_util.hpp"

namespace neuron {

namespace {

using namespace passes;

class BufferNames : public IRVisitor {
 public:
  std::set<std::string> names;
  void visit_Alloc(const Alloc& a) override { names.insert(a.buffer->name); }
};

class Legalizer : public IRMutator {
 public:
  explicit Legalizer(std::set<std::string> names) : names_(std::move(names)) {}

  StmtPtr mutate_Block(const Block& n, const StmtPtr& self) override {
    std::vector<StmtPtr> out;
    bool changed = false;
    for (auto& s : n.stmts) {
      if (auto op = s->as<Op>(); op && opcode_level(op->code) == OpLevel::Nl) {
        expand(*op, out);
        changed = true;
        continue;
      }
      StmtPtr m = mutate(s);
      changed |= m != s;
      if (m) out.push_back(std::move(m));
    }
    return changed ? Block::make(std::move(out), n.span) : self;
  }

  // An nl op that is not directly inside a block (a loop body that is a bare op).
  StmtPtr mutate_Op(const Op& op, const StmtPtr& self) override {
    if (opcode_level(op.code) != OpLevel::Nl) return self;
    std::vector<StmtPtr> out;
    expand(op, out);
    return Block::make(std::move(out), op.span);
  }

 private:
  std::set<std::string> names_;
  std::vector<StmtPtr>* out_ = nullptr;
  Span span_;

  void emit(Opcode code, std::vector<Arg> args) {
    out_->push_back(Op::make(code, std::move(args), span_));
  }

  // A new on-chip buffer named "<base>_t<k>", unique in the kernel, declared before the op.
  Access temp(const std::string& base, Memory mem, std::vector<int64_t> shape, DType dtype) {
    std::string name;
    for (int k = 0;; ++k) {
      name = fmt::format("{}_t{}", base, k);
      if (names_.insert(name).second) break;
    }
    if (shape.size() < 2) shape.push_back(1);
    auto b = std::make_shared<Buffer>();
    b->name = name;
    b->memory = mem;
    b->shape = std::move(shape);
    b->dtype = dtype;
    b->span = span_;
    out_->push_back(Alloc::make(b, span_));
    return Access::whole(b);
  }

  // A partition broadcast is only possible through DMA: materialise it in an SBUF tile shaped
  // like dst, in the operand's own dtype (in dst's, a comparison into bool compared the
  // operand's values cast to bool, and a bf16 result rounded an fp32 operand before the op).
  Access materialise(const Access& a, const Access& dst, const std::string& base) {
    Access t = temp(base, Memory::sbuf, pattern_shape(dst), a.dtype());
    emit(Opcode::dma_copy, {{"dst", t}, {"src", a}});
    return t;
  }

  // A column view (all free dims step 0) as the [P, 1] operand tensor_scalar reads.
  static Access as_column(Access a) {
    for (size_t d = 1; d < a.dims.size(); ++d)
      if (a.dims[d].step == 0) {
        a.dims[d].size = 1;
        a.dims[d].step = 1;
      }
    return a;
  }

  static bool same_buffer(const Access& a, const Access& b) { return a.buffer == b.buffer; }

  // nl.load/nl.store keep their indirect rows (src_rows, dst_rows, oob_mode) on the DMA.
  static std::vector<Arg> with_rows(const Op& op, std::vector<Arg> args) {
    for (const char* name : {"src_rows", "dst_rows", "oob_mode"})
      if (const Value* v = op.find(name)) args.push_back({name, *v});
    return args;
  }

  void expand(const Op& op, std::vector<StmtPtr>& out) {
    out_ = &out;
    span_ = op.span;
    const Access* dst = op.access("dst");
    NEURON_ASSERT(dst, "{} without dst reached legalize", opcode_name(op.code));
    const std::string base = dst->buffer->name;
    switch (op.code) {
      case Opcode::nl_load:
        emit(Opcode::dma_copy, with_rows(op, {{"dst", *dst}, {"src", *op.access("src")}}));
        break;
      case Opcode::nl_store: {
        Access src = *op.access("src");
        // DMA cannot read PSUM: stage the tile through SBUF.
        if (src.buffer->memory == Memory::psum) {
          Access t = temp(src.buffer->name, Memory::sbuf, pattern_shape(src), src.dtype());
          emit(Opcode::tensor_copy, {{"dst", t}, {"src", src}});
          src = t;
        }
        emit(Opcode::dma_copy, with_rows(op, {{"dst", *dst}, {"src", src}}));
        break;
      }
      case Opcode::nl_copy: {
        const Access& src = *op.access("src");
        bool dma = is_hbm(dst->buffer->memory) || is_hbm(src.buffer->memory) ||
                   (!src.dims.empty() && src.dims[0].step == 0 && src.dims[0].size > 1);
        emit(dma ? Opcode::dma_copy : Opcode::tensor_copy, {{"dst", *dst}, {"src", src}});
        break;
      }
      case Opcode::nl_matmul: {
        Access x = *op.access("x");
        const Access& y = *op.access("y");
        if (op.get_int("transpose_x", 0) == 0) {
          // x is [M, K]; the Tensor engine wants K on partitions: transpose through PSUM.
          int64_t m = partitions(x), k = free_elements(x);
          Access xt_psum = temp(base, Memory::psum, {k, m}, DType::float32);
          emit(Opcode::nc_transpose, {{"dst", xt_psum}, {"data", x}});
          Access xt = temp(base, Memory::sbuf, {k, m}, x.dtype());
          emit(Opcode::tensor_copy, {{"dst", xt}, {"src", xt_psum}});
          x = xt;
        }
        emit(Opcode::nc_matmul,
             {{"dst", *dst}, {"stationary", x}, {"moving", y}, {"accumulate", int64_t{0}}});
        break;
      }
      case Opcode::nl_transpose:
        emit(Opcode::nc_transpose, {{"dst", *dst}, {"data", *op.access("src")}});
        break;
      case Opcode::nl_unary: {
        const Access& x = *op.access("x");
        std::string func = op.get_string("func");
        if (!act_func_from_name(func))
          user_error(op.span, "unknown-arg", "{}: func=\"{}\" is not an activation function",
                     dsl::spell("nl::unary", "nl.unary"), func);
        if (!dtype_is_float(x.dtype()))
          user_error(op.span, "dtype", "{}: '{}' is {}; activation functions take float tiles",
                     dsl::spell("nl::unary", "nl.unary"), x.buffer->name, dtype_name(x.dtype()));
        emit(Opcode::activation, {{"dst", *dst}, {"data", x}, {"func", func}, {"scale", 1.0}});
        break;
      }
      case Opcode::nl_binary:
        expand_binary(op, *dst, base);
        break;
      case Opcode::nl_reduce: {
        const Access& x = *op.access("x");
        std::string r = op.get_string("op");
        auto axes = op.get_ints("axes");
        emit(Opcode::tensor_reduce, {{"dst", *dst},
                                     {"data", x},
                                     {"op", r == "mean" ? std::string("add") : r},
                                     {"axes", axes},
                                     {"negate", int64_t{0}}});
        if (r == "mean") {
          auto shape = pattern_shape(x);
          int64_t n = 1;
          for (auto ax : axes) n *= shape.at(static_cast<size_t>(ax));
          emit(Opcode::tensor_scalar, {{"dst", *dst},
                                       {"data", *dst},
                                       {"op0", std::string("multiply")},
                                       {"operand0", 1.0 / static_cast<double>(n)},
                                       {"reverse0", int64_t{0}}});
        }
        break;
      }
      case Opcode::nl_where:
        expand_where(op, *dst, base);
        break;
      default:
        internal_error("legalize: {} is not an nl helper", opcode_name(op.code));
    }
  }

  void expand_binary(const Op& op, const Access& dst, const std::string& base) {
    const Value& xv = *op.find("x");
    const Value& yv = *op.find("y");
    std::string alu = op.get_string("op");
    auto tile = [&](const Value& v) -> std::optional<Access> {
      auto a = std::get_if<Access>(&v);
      if (!a) return std::nullopt;
      return broadcasts_partitions(*a) ? materialise(*a, dst, base) : *a;
    };
    auto number = [](const Value& v) {
      if (auto d = std::get_if<double>(&v)) return *d;
      return static_cast<double>(std::get<int64_t>(v));
    };
    std::optional<Access> x = tile(xv), y = tile(yv);
    auto scalar_op = [&](const Access& data, Value operand, bool reverse) {
      emit(Opcode::tensor_scalar, {{"dst", dst},
                                   {"data", data},
                                   {"op0", alu},
                                   {"operand0", std::move(operand)},
                                   {"reverse0", int64_t{reverse}}});
    };
    if (x && !y) return scalar_op(*x, number(yv), false);
    if (!x && y) return scalar_op(*y, number(xv), true);
    NEURON_ASSERT(x && y, "nl.binary without a tile operand reached legalize");
    // One side is a per-partition column broadcast along the free dims: a [P, 1] operand.
    bool xc = is_column(*x) && broadcasts_free(*x), yc = is_column(*y) && broadcasts_free(*y);
    if (yc && !xc) return scalar_op(*x, as_column(*y), false);
    if (xc && !yc) return scalar_op(*y, as_column(*x), true);
    // The Vector engine reads at most one of its two inputs from PSUM.
    if (x->buffer->memory == Memory::psum && y->buffer->memory == Memory::psum)
      y = to_sbuf(*y, base);
    emit(Opcode::tensor_tensor, {{"dst", dst}, {"data1", *x}, {"data2", *y}, {"op", alu}});
  }

  Access to_sbuf(const Access& a, const std::string& base) {
    Access t = temp(base, Memory::sbuf, pattern_shape(a), a.dtype());
    emit(Opcode::tensor_copy, {{"dst", t}, {"src", a}});
    return t;
  }

  void expand_where(const Op& op, const Access& dst, const std::string& base) {
    const Value& xv = *op.find("x");
    const Value& yv = *op.find("y");
    auto number = [](const Value& v) {
      if (auto d = std::get_if<double>(&v)) return *d;
      return static_cast<double>(std::get<int64_t>(v));
    };
    // Inputs dst overlaps are copied out first: writing y into dst would clobber them.
    auto input = [&](const Access& a) {
      if (broadcasts_partitions(a)) return materialise(a, dst, base);
      if (!same_buffer(a, dst)) return a;
      Access t = temp(base, Memory::sbuf, pattern_shape(dst), a.dtype());
      emit(Opcode::tensor_copy, {{"dst", t}, {"src", a}});
      return t;
    };
    Access cond = input(*op.access("cond"));
    std::optional<Access> x;
    if (auto a = std::get_if<Access>(&xv)) x = input(*a);
    if (auto y = std::get_if<Access>(&yv)) {
      bool dma = broadcasts_partitions(*y);
      emit(dma ? Opcode::dma_copy : Opcode::tensor_copy, {{"dst", dst}, {"src", *y}});
    } else {
      emit(Opcode::memset, {{"dst", dst}, {"value", number(yv)}});
    }
    if (!x) {
      x = temp(base, Memory::sbuf, pattern_shape(dst), dst.dtype());
      emit(Opcode::memset, {{"dst", *x}, {"value", number(xv)}});
    }
    if (x->buffer->memory == Memory::psum && cond.buffer->memory == Memory::psum)
      cond = to_sbuf(cond, base);
    emit(Opcode::tensor_copy_predicated, {{"dst", dst}, {"src", *x}, {"predicate", cond}});
  }
};

}  // namespace

Kernel legalize(const Kernel& k) {
  BufferNames names;
  for (auto& b : k.inputs) names.names.insert(b->name);
  for (auto& b : k.outputs) names.names.insert(b->name);
  names.visit(k.body);
  Legalizer l(std::move(names.names));
  Kernel out = k;
  out.body = l.mutate(k.body);
  return out;
}

}  // namespace neuron
