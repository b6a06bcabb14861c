// neuron::nl element-wise functions (nl.unary, nl.binary, nl.where, nl.copy), dtype promotion,
// and the tensor operators built on them.
#include <algorithm>

#include "neuron/dsl/emit.hpp"
#include "neuron/language.hpp"

namespace neuron::nl {

using dsl::view_of;

DType promote(DType a, DType b) {
  if (a == b) return a;
  bool fa = dtype_is_float(a), fb = dtype_is_float(b);
  if (fa != fb) return fa ? a : b;
  int wa = dtype_bytes(a), wb = dtype_bytes(b);
  if (fa) {
    if (wa != wb) return wa > wb ? a : b;
    if (wa == 4) return DType::float32;                 // fp32 and tf32
    return wa == 2 ? DType::float32 : DType::bfloat16;  // fp16/bf16, or the two fp8 formats
  }
  // Integers (bool counts as uint8).
  if (a == DType::bool_) return b;
  if (b == DType::bool_) return a;
  bool sa = dtype_is_signed(a), sb = dtype_is_signed(b);
  if (sa == sb) return wa > wb ? a : b;
  int ws = sa ? wa : wb, wu = sa ? wb : wa;
  if (ws > wu) return sa ? a : b;
  // A signed type that holds the unsigned one needs twice its width; no 64-bit ints exist.
  switch (wu) {
    case 1:
      return DType::int16;
    case 2:
      return DType::int32;
    default:
      return DType::float32;
  }
}

tensor copy_fn::operator()(const tensor& x, std::optional<DType> dtype, Span span) const {
  dsl::require_trace(span);
  const Access& v = view_of(x, span);
  tensor dst = dsl::new_tile(v.shape(), dtype.value_or(x.dtype()), Memory::sbuf, span);
  dsl::emit(Opcode::nl_copy, {{"dst", dst.access()}, {"src", v}}, span);
  return dst;
}

tensor unary_fn::operator()(const tensor& x, std::optional<DType> dtype, Span span) const {
  dsl::require_trace(span);
  // An integer tile goes through the engine's fp32 arithmetic (NKI_API.md 3.3) and back to its
  // own dtype unless dtype says otherwise (nki-samples' resize takes nl.floor of an int32
  // quotient); both front ends come here.
  const DType xt = x.dtype();
  if (!dtype_is_float(xt) && xt != DType::bool_)
    return (*this)(copy(x, DType::float32, span), dtype.value_or(xt), span);
  const Access& v = view_of(x, span);
  tensor dst = dsl::new_tile(v.shape(), dtype.value_or(x.dtype()), Memory::sbuf, span);
  dsl::emit(Opcode::nl_unary,
            {{"dst", dst.access()}, {"x", v}, {"func", std::string(act_func_name(act))}}, span);
  return dst;
}

namespace {

bool commutes(AluOp op) {
  switch (op) {
    case AluOp::add:
    case AluOp::multiply:
    case AluOp::maximum:
    case AluOp::minimum:
    case AluOp::equal:
    case AluOp::not_equal:
    case AluOp::logical_and:
    case AluOp::logical_or:
    case AluOp::logical_xor:
    case AluOp::bitwise_and:
    case AluOp::bitwise_or:
    case AluOp::bitwise_xor:
      return true;
    default:
      return false;
  }
}

// The comparison that gives the same answer with its operands swapped, if op is one.
std::optional<AluOp> mirrored(AluOp op) {
  switch (op) {
    case AluOp::greater:
      return AluOp::less;
    case AluOp::less:
      return AluOp::greater;
    case AluOp::greater_equal:
      return AluOp::less_equal;
    case AluOp::less_equal:
      return AluOp::greater_equal;
    default:
      return std::nullopt;
  }
}

// dst = op(x, y) over `shape`; y may be a scalar. x must be a tile.
void emit_binary(const Access& dst, const operand& x, const operand& y, AluOp op,
                 const std::vector<int64_t>& shape, const Span& span) {
  dsl::emit(Opcode::nl_binary,
            {{"dst", dst},
             {"x", dsl::operand_value(x, shape, span)},
             {"y", dsl::operand_value(y, shape, span)},
             {"op", std::string(alu_op_name(op))}},
            span);
}

}  // namespace

tensor binary_fn::operator()(operand x, operand y, std::optional<DType> dtype, Span span) const {
  dsl::require_trace(span);
  if (!x.is_tile() && !y.is_tile())
    user_error(span, "operand", "{}{} needs at least one tile operand, got two scalars",
               dsl::spell("nl::", "nl."), alu_op_name(alu));
  std::vector<int64_t> shape;
  DType out;
  if (x.is_tile() && y.is_tile()) {
    shape = dsl::broadcast_shape({view_of(x.tile(), span).shape(), view_of(y.tile(), span).shape()},
                                 span);
    out = dtype.value_or(promote(x.tile().dtype(), y.tile().dtype()));
  } else {
    const tensor& t = x.is_tile() ? x.tile() : y.tile();
    shape = view_of(t, span).shape();
    out = dtype.value_or(t.dtype());
  }
  AluOp op = alu;
  if (!x.is_tile()) {
    // nl.binary takes a tile as x: swap when the operator allows it, else materialise the scalar.
    if (commutes(op)) {
      std::swap(x, y);
    } else if (auto m = mirrored(op)) {
      std::swap(x, y);
      op = *m;
    } else {
      tensor s = dsl::new_tile(shape, DType::float32, Memory::sbuf, span);
      dsl::emit(Opcode::memset, {{"dst", s.access()}, {"value", x.scalar()}}, span);
      x = operand(s, span);
    }
  }
  tensor dst = dsl::new_tile(shape, out, Memory::sbuf, span);
  emit_binary(dst.access(), x, y, op, shape, span);
  return dst;
}

tensor where(const tensor& cond, operand x, operand y, std::optional<DType> dtype, Span span) {
  dsl::require_trace(span);
  std::vector<std::vector<int64_t>> shapes{view_of(cond, span).shape()};
  if (x.is_tile()) shapes.push_back(view_of(x.tile(), span).shape());
  if (y.is_tile()) shapes.push_back(view_of(y.tile(), span).shape());
  std::vector<int64_t> shape = dsl::broadcast_shape(shapes, span);
  DType out = cond.dtype();
  if (x.is_tile() && y.is_tile())
    out = promote(x.tile().dtype(), y.tile().dtype());
  else if (x.is_tile() || y.is_tile())
    out = (x.is_tile() ? x : y).tile().dtype();
  tensor dst = dsl::new_tile(shape, dtype.value_or(out), Memory::sbuf, span);
  dsl::emit(Opcode::nl_where,
            {{"dst", dst.access()},
             {"cond", dsl::broadcast_view(cond.access(), shape, span)},
             {"x", dsl::operand_value(x, shape, span)},
             {"y", dsl::operand_value(y, shape, span)}},
            span);
  return dst;
}

// ---- operators: the span is the one captured when the left operand converted to nl::operand.

tensor operator+(operand a, operand b) {
  return add(a, b, std::nullopt, a.span());
}
tensor operator-(operand a, operand b) {
  return subtract(a, b, std::nullopt, a.span());
}
tensor operator*(operand a, operand b) {
  return multiply(a, b, std::nullopt, a.span());
}
tensor operator/(operand a, operand b) {
  return divide(a, b, std::nullopt, a.span());
}
tensor operator<(operand a, operand b) {
  return less(a, b, std::nullopt, a.span());
}
tensor operator<=(operand a, operand b) {
  return less_equal(a, b, std::nullopt, a.span());
}
tensor operator>(operand a, operand b) {
  return greater(a, b, std::nullopt, a.span());
}
tensor operator>=(operand a, operand b) {
  return greater_equal(a, b, std::nullopt, a.span());
}

tensor operator-(operand a) {
  if (!a.is_tile()) internal_error("unary minus on a scalar operand reached the DSL");
  return negative(a.tile(), std::nullopt, a.span());
}

namespace {

tensor& update(tensor& self, const operand& x, AluOp op) {
  const Span& span = x.span();
  dsl::require_trace(span);
  const Access& dst = view_of(self, span);
  emit_binary(dst, operand(self, span), x, op, dst.shape(), span);
  return self;
}

}  // namespace

tensor& tensor::operator+=(operand x) {
  return update(*this, x, AluOp::add);
}
tensor& tensor::operator-=(operand x) {
  return update(*this, x, AluOp::subtract);
}
tensor& tensor::operator*=(operand x) {
  return update(*this, x, AluOp::multiply);
}
tensor& tensor::operator/=(operand x) {
  return update(*this, x, AluOp::divide);
}

}  // namespace neuron::nl
