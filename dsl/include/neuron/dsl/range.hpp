// Kernel loops: rolled affine_range / sequential_range (traced once) and unrolled static_range.
#pragma once
#include <cstdint>
#include <string>

#include "neuron/dsl/tensor.hpp"

namespace neuron::nl {

// The number of iterations of range(start, stop, step) (Python's rule); step 0 is a UserError
// "range".
int64_t trip_count(int64_t start, int64_t stop, int64_t step, const Span& span);

// A rolled loop. `for (nl::index i : nl::affine_range(8))` runs its body exactly once, with
// `i` the symbolic index start + step * iN, and records the body as For(iN, extent). The loop
// is closed when the iteration ends, or by the destructor when the body `break`s or throws.
class loop_range {
 public:
  struct sentinel {};
  class iterator {
   public:
    explicit iterator(loop_range* r) : range_(r) {}
    index operator*() const { return range_->value_; }
    iterator& operator++() {
      range_->close();
      return *this;
    }
    bool operator!=(sentinel) const { return range_->open_; }
    bool operator==(sentinel) const { return !range_->open_; }

   private:
    loop_range* range_;
  };

  loop_range(int64_t start, int64_t stop, int64_t step, LoopKind kind, Span span);
  // A runtime loop (nl::dynamic_range): start/stop may use registers; step > 0.
  loop_range(index start, index stop, int64_t step, Span span);
  ~loop_range() { close(); }
  loop_range(const loop_range&) = delete;
  loop_range& operator=(const loop_range&) = delete;

  iterator begin();  // opens the loop (no loop at all when the range is empty)
  sentinel end() const { return {}; }
  int64_t extent() const { return extent_; }

 private:
  void close() noexcept;
  index start_, stop_;
  int64_t step_, extent_;
  LoopKind kind_;
  Span span_;
  bool open_ = false, used_ = false;
  int id_ = -1;
  index value_;
};

// Iterations are independent (the compiler may overlap them and rotate buffers).
loop_range affine_range(int64_t stop, Span span = Span::current());
loop_range affine_range(int64_t start, int64_t stop, int64_t step = 1, Span span = Span::current());
// Iterations may depend on earlier ones (accumulators, running maxima).
loop_range sequential_range(int64_t stop, Span span = Span::current());
loop_range sequential_range(int64_t start, int64_t stop, int64_t step = 1,
                            Span span = Span::current());

// A runtime loop: its trip count max(0, ceil((stop - start) / step)) is read when it starts, so
// start and stop may be registers (nl::register_alloc) or use them. The body is traced once;
// `i` is start + step * (iteration), with start's registers read when the loop starts.
loop_range dynamic_range(index stop, Span span = Span::current());
loop_range dynamic_range(index start, index stop, int64_t step = 1, Span span = Span::current());

// An unrolled loop: plain integers, C++ runs the body once per value.
class static_range {
 public:
  class iterator {
   public:
    iterator(int64_t v, int64_t step) : v_(v), step_(step) {}
    int64_t operator*() const { return v_; }
    iterator& operator++() {
      v_ += step_;
      return *this;
    }
    bool operator!=(const iterator& o) const { return step_ > 0 ? v_ < o.v_ : v_ > o.v_; }

   private:
    int64_t v_, step_;
  };
  explicit static_range(int64_t stop, Span span = Span::current())
      : static_range(0, stop, 1, std::move(span)) {}
  static_range(int64_t start, int64_t stop, int64_t step = 1, Span span = Span::current());
  iterator begin() const { return {start_, step_}; }
  iterator end() const { return {stop_, step_}; }

 private:
  int64_t start_, stop_, step_;
};

}  // namespace neuron::nl
