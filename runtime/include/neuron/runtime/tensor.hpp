// Host tensors for C++ callers: shape, dtype, and owning or borrowed memory.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "neuron/base/dtype.hpp"

namespace neuron {

class Tensor {
 public:
  Tensor() = default;
  static Tensor empty(std::vector<int64_t> shape, DType dtype);  // owning, zero-filled
  // Owning, contents undefined: for outputs a kernel is known to overwrite entirely.
  static Tensor uninitialized(std::vector<int64_t> shape, DType dtype);
  static Tensor borrow(void* data, std::vector<int64_t> shape, DType dtype);  // caller owns
  // Owning tensor whose elements are the given values converted with the builtins' rounding.
  static Tensor from_floats(const std::vector<float>& values, std::vector<int64_t> shape,
                            DType dtype);

  const std::vector<int64_t>& shape() const { return shape_; }
  DType dtype() const { return dtype_; }
  int64_t elements() const;
  size_t bytes() const { return static_cast<size_t>(elements()) * dtype_bytes(dtype_); }
  void* data() const { return data_; }
  template <typename T>
  T* data_as() const { return static_cast<T*>(data_); }

  // Element i (row-major flat index) read as fp32 / written from fp32 with the dtype's rounding.
  float get(int64_t i) const;
  void set(int64_t i, float v);
  std::vector<float> to_floats() const;

 private:
  std::vector<int64_t> shape_;
  DType dtype_ = DType::float32;
  std::shared_ptr<std::byte[]> owner_;
  void* data_ = nullptr;
};

}  // namespace neuron
