// Rolled loops: opening and closing For statements in the tracing state.
#include "neuron/dsl/range.hpp"

#include "neuron/dsl/builder.hpp"
#include "neuron/language.hpp"

namespace neuron::nl {

int64_t trip_count(int64_t start, int64_t stop, int64_t step, const Span& span) {
  if (step == 0) user_error(span, "range", "range step must not be 0");
  if (step > 0) return stop > start ? (stop - start + step - 1) / step : 0;
  return start > stop ? (start - stop - step - 1) / -step : 0;
}

loop_range::loop_range(int64_t start, int64_t stop, int64_t step, LoopKind kind, Span span)
    : start_(start),
      step_(step),
      extent_(trip_count(start, stop, step, span)),
      kind_(kind),
      span_(std::move(span)) {
  dsl::require_trace(span_);
}

loop_range::loop_range(index start, index stop, int64_t step, Span span)
    : start_(std::move(start)),
      stop_(std::move(stop)),
      step_(step),
      extent_(0),
      kind_(LoopKind::dynamic),
      span_(std::move(span)) {
  dsl::require_trace(span_);
  if (step <= 0)
    user_error(span_, "range", "dynamic_range step must be a positive integer, got {}", step);
}

loop_range::iterator loop_range::begin() {
  if (used_) user_error(span_, "range", "a loop range can be iterated only once");
  used_ = true;
  if (kind_ == LoopKind::dynamic) {
    // The index reads start's registers as they were when the loop started: copy them.
    index start = start_;
    for (auto& t : start_.terms)
      if (is_register_var(t.var)) {
        index copy = index::var(dsl::new_register(span_));
        register_move(copy, index::var(t.var), span_);
        start = start.substitute(t.var, copy);
      }
    auto [var, id] = dsl::open_dynamic_loop(start_, stop_, step_, "", span_);
    id_ = id;
    value_ = start + index::var(var, step_);
    open_ = true;
    return iterator(this);
  }
  if (extent_ > 0) {
    auto [var, id] = dsl::open_loop(extent_, kind_, span_);
    id_ = id;
    value_ = index(start_) + index::var(var, step_);
    open_ = true;
  }
  return iterator(this);
}

void loop_range::close() noexcept {
  if (!open_) return;
  open_ = false;
  dsl::close_loop(id_);
}

loop_range affine_range(int64_t stop, Span span) {
  return loop_range(0, stop, 1, LoopKind::affine, std::move(span));
}
loop_range affine_range(int64_t start, int64_t stop, int64_t step, Span span) {
  return loop_range(start, stop, step, LoopKind::affine, std::move(span));
}
loop_range sequential_range(int64_t stop, Span span) {
  return loop_range(0, stop, 1, LoopKind::sequential, std::move(span));
}
loop_range sequential_range(int64_t start, int64_t stop, int64_t step, Span span) {
  return loop_range(start, stop, step, LoopKind::sequential, std::move(span));
}

loop_range dynamic_range(index stop, Span span) {
  return loop_range(index(0), std::move(stop), 1, std::move(span));
}
loop_range dynamic_range(index start, index stop, int64_t step, Span span) {
  return loop_range(std::move(start), std::move(stop), step, std::move(span));
}

static_range::static_range(int64_t start, int64_t stop, int64_t step, Span span)
    : start_(start), stop_(stop), step_(step) {
  if (step == 0) user_error(span, "range", "static_range step must not be 0");
}

}  // namespace neuron::nl
