// Host tensors: owning (zero-filled) or borrowed memory, elements read and written via the
// builtins.
#include "neuron/runtime/tensor.hpp"

#include <fmt/format.h>

#include <cstring>
#include <new>

#include "neuron/base/error.hpp"
#include "neuron/base/builtins.hpp"

namespace neuron {

static int64_t product(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0)
      user_error(Span{}, "tensor-shape", "negative dimension {} in shape [{}]", d,
                 fmt::join(shape, ", "));
    n *= d;
  }
  return n;
}

// Cache-line aligned (64 bytes), as PyTorch's CPU allocator aligns: whole rows of a tensor
// can then take aligned vector and streaming stores (instr_kernels.cpp each_streamed).
static std::shared_ptr<std::byte[]> allocate(size_t bytes) {
  constexpr std::align_val_t kAlign{64};
  return std::shared_ptr<std::byte[]>(new (kAlign) std::byte[bytes == 0 ? 1 : bytes],
                                      [](std::byte* p) { operator delete[](p, kAlign); });
}

Tensor Tensor::empty(std::vector<int64_t> shape, DType dtype) {
  Tensor t;
  size_t bytes = static_cast<size_t>(product(shape)) * dtype_bytes(dtype);
  t.owner_ = allocate(bytes);
  std::memset(t.owner_.get(), 0, bytes);
  t.data_ = t.owner_.get();
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  return t;
}

Tensor Tensor::uninitialized(std::vector<int64_t> shape, DType dtype) {
  Tensor t;
  size_t bytes = static_cast<size_t>(product(shape)) * dtype_bytes(dtype);
  t.owner_ = allocate(bytes);  // the bytes as they are (no memset pass)
  t.data_ = t.owner_.get();
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  return t;
}

Tensor Tensor::borrow(void* data, std::vector<int64_t> shape, DType dtype) {
  Tensor t;
  product(shape);
  t.data_ = data;
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  return t;
}

Tensor Tensor::from_floats(const std::vector<float>& values, std::vector<int64_t> shape,
                           DType dtype) {
  int64_t n = product(shape);
  if (static_cast<int64_t>(values.size()) != n)
    user_error(Span{}, "tensor-shape", "{} values given for a tensor of shape [{}] ({} elements)",
               values.size(), fmt::join(shape, ", "), n);
  Tensor t = empty(std::move(shape), dtype);
  for (int64_t i = 0; i < n; ++i) t.set(i, values[static_cast<size_t>(i)]);
  return t;
}

int64_t Tensor::elements() const {
  int64_t n = 1;
  for (int64_t d : shape_) n *= d;
  return n;
}

float Tensor::get(int64_t i) const {
  if (i < 0 || i >= elements())
    user_error(Span{}, "out-of-bounds", "tensor element {} outside its {} elements", i, elements());
  return builtins::load_f32(static_cast<const std::byte*>(data_) + i * dtype_bytes(dtype_), dtype_);
}

void Tensor::set(int64_t i, float v) {
  if (i < 0 || i >= elements())
    user_error(Span{}, "out-of-bounds", "tensor element {} outside its {} elements", i, elements());
  builtins::store_f32(static_cast<std::byte*>(data_) + i * dtype_bytes(dtype_), dtype_, v);
}

std::vector<float> Tensor::to_floats() const {
  std::vector<float> out(static_cast<size_t>(elements()));
  for (int64_t i = 0; i < elements(); ++i) out[static_cast<size_t>(i)] = get(i);
  return out;
}

}  // namespace neuron
