// The DSL's handle types: nl::tensor (a view of an HBM tensor or an SBUF/PSUM tile), its
// subscripts (integers, affine indices, nl::ds, nl::slice, nl::all) and nl::operand.
#pragma once
#include <concepts>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "neuron/base/error.hpp"
#include "neuron/ir/ir.hpp"

namespace neuron::nl {

// An index expression: loop variables (from affine_range), program ids and integers combine
// affinely (`i * 128 + 5`). It is the IR's Affine, so nothing is lost between the two.
using index = Affine;

// nl::ds(start, size) is numpy's start:start+size; start may be affine. With a step, the
// size elements start, start + step, ... (numpy's start:start+(size-1)*step+1:step).
struct ds_t {
  index start;
  int64_t size = 1;
  int64_t step = 1;
};
inline ds_t ds(index start, int64_t size, int64_t step = 1) {
  return ds_t{std::move(start), size, step};
}

// nl::slice(start, stop, step) is numpy's start:stop:step with static bounds.
struct slice_t {
  int64_t start = 0, stop = 0, step = 1;
};
inline slice_t slice(int64_t start, int64_t stop, int64_t step = 1) {
  return slice_t{start, stop, step};
}

// nl::all is numpy's bare `:` (the whole dimension).
struct all_t {};
inline constexpr all_t all{};

// One subscript. Converting to it records the user's source location, which is how indexing
// errors (rule "index") point at the line that wrote `t(i, j)`.
class subscript {
 public:
  enum class Kind { scalar, ds, slice, all };

  template <std::integral I>
  subscript(I v, Span span = Span::current())  // NOLINT: implicit on purpose
      : kind_(Kind::scalar), start_(static_cast<int64_t>(v)), span_(std::move(span)) {}
  subscript(index v, Span span = Span::current())  // NOLINT
      : kind_(Kind::scalar), start_(std::move(v)), span_(std::move(span)) {}
  subscript(ds_t d, Span span = Span::current())  // NOLINT
      : kind_(Kind::ds),
        start_(std::move(d.start)),
        size_(d.size),
        step_(d.step),
        span_(std::move(span)) {}
  subscript(slice_t s, Span span = Span::current())  // NOLINT
      : kind_(Kind::slice), slice_(s), span_(std::move(span)) {}
  subscript(all_t, Span span = Span::current())  // NOLINT
      : kind_(Kind::all), span_(std::move(span)) {}

  Kind kind() const { return kind_; }
  const index& start() const { return start_; }  // scalar and ds
  int64_t size() const { return size_; }         // ds
  int64_t step() const { return step_; }         // ds
  const slice_t& slice() const { return slice_; }
  const Span& span() const { return span_; }

 private:
  Kind kind_;
  index start_;
  int64_t size_ = 1;
  int64_t step_ = 1;
  slice_t slice_;
  Span span_;
};

class operand;

// A view of a buffer: a kernel input/output or HBM scratch (`buffer() == hbm/shared_hbm`) or an
// on-chip tile (`sbuf/psum`, dim 0 is the partition dim). Copying a handle copies the view, never
// the data. C++20 has no multi-argument operator[], so numpy's `t[i, j]` is written `t(i, j)`;
// `t[i]` works for a single subscript.
class tensor {
 public:
  tensor() = default;
  explicit tensor(Access view) : view_(std::move(view)) {}

  std::vector<int64_t> shape() const { return view_.shape(); }
  size_t ndim() const { return shape().size(); }
  DType dtype() const;
  Memory buffer() const;  // where the data lives
  const std::string& name() const;
  const Access& access() const { return view_; }
  bool valid() const { return view_.buffer != nullptr; }

  tensor operator[](subscript s0) const { return index_with({s0}); }
  tensor operator()(subscript s0) const { return index_with({s0}); }
  tensor operator()(subscript s0, subscript s1) const;
  tensor operator()(subscript s0, subscript s1, subscript s2) const;
  tensor operator()(subscript s0, subscript s1, subscript s2, subscript s3) const;
  tensor operator()(subscript s0, subscript s1, subscript s2, subscript s3, subscript s4) const;
  tensor operator()(subscript s0, subscript s1, subscript s2, subscript s3, subscript s4,
                    subscript s5) const;

  // Element-wise arithmetic (nl.binary / nl.unary). Operands convert to nl::operand, which
  // records the user's line; both operands must broadcast to one shape.
  friend tensor operator+(operand a, operand b);
  friend tensor operator-(operand a, operand b);
  friend tensor operator*(operand a, operand b);
  friend tensor operator/(operand a, operand b);
  friend tensor operator-(operand a);
  // Comparisons return a tile of the promoted dtype holding 1.0 / 0.0 (NKI rule). == and != are
  // deliberately not operators: use nl::equal / nl::not_equal.
  friend tensor operator<(operand a, operand b);
  friend tensor operator<=(operand a, operand b);
  friend tensor operator>(operand a, operand b);
  friend tensor operator>=(operand a, operand b);
  // In-place update of this view: `acc += x` is nl.binary(dst=acc, x=acc, y=x, op=add).
  tensor& operator+=(operand x);
  tensor& operator-=(operand x);
  tensor& operator*=(operand x);
  tensor& operator/=(operand x);

 private:
  tensor index_with(const std::vector<subscript>& subs) const;
  Access view_;
};

using tile = tensor;  // an on-chip tensor; the same handle type, named for readability

// An operand of an element-wise operation: a tensor or a float immediate. The implicit
// conversion records the user's source location (the span of `a + b` comes from here).
class operand {
 public:
  operand(const tensor& t, Span span = Span::current())  // NOLINT: implicit on purpose
      : tile_(t), span_(std::move(span)) {}
  template <typename T>
  requires std::is_arithmetic_v<T> operand(T v, Span span = Span::current())  // NOLINT
      : scalar_(static_cast<double>(v)), span_(std::move(span)) {}

  bool is_tile() const { return tile_.has_value(); }
  const tensor& tile() const { return *tile_; }
  double scalar() const { return scalar_; }
  const Span& span() const { return span_; }

 private:
  std::optional<tensor> tile_;
  double scalar_ = 0;
  Span span_;
};

}  // namespace neuron::nl
