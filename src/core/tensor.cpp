#include "core/tensor.h"

#include <algorithm>
#include <cstring>

namespace lucid {

std::string ShapeToString(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(s[i]);
  }
  return out + "]";
}

int64_t NumElements(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

Shape ContiguousStrides(const Shape& shape) {
  Shape st(shape.size());
  int64_t acc = 1;
  for (int i = static_cast<int>(shape.size()) - 1; i >= 0; --i) {
    st[i] = acc;
    acc *= shape[i];
  }
  return st;
}

Tensor Tensor::Empty(DType dtype, Shape shape, Allocator& alloc) {
  StatusOr<Tensor> t = Allocate(dtype, std::move(shape), alloc);
  if (!t.ok()) throw AllocationError(t.status());
  return *std::move(t);
}

StatusOr<Tensor> Tensor::Allocate(DType dtype, Shape shape, Allocator& alloc) {
  Tensor t;
  t.dtype_ = dtype;
  t.device_ = alloc.device();
  t.shape_ = std::move(shape);
  t.strides_ = ContiguousStrides(t.shape_);
  const size_t bytes = static_cast<size_t>((t.numel() * DTypeBits(dtype) + 7) / 8);
  StatusOr<std::shared_ptr<void>> mem = alloc.Allocate(bytes);
  if (!mem.ok()) return mem.status();
  t.data_ = mem->get();
  t.storage_ = std::move(*mem);
  return t;
}

Status StatusOfAllocations(const std::function<Status()>& f) {
  try {
    return f();
  } catch (const AllocationError& e) {
    return e.status();
  }
}

Tensor Tensor::Zeros(DType dtype, Shape shape, Allocator& alloc) {
  Tensor t = Empty(dtype, std::move(shape), alloc);
  // The whole 64-byte-rounded extent, as the allocators hand it out.
  const size_t bytes = static_cast<size_t>((t.numel() * DTypeBits(dtype) + 7) / 8);
  alloc.Zero(t.data_, std::max<size_t>((bytes + 63) / 64 * 64, 64));
  return t;
}

Tensor Tensor::Borrow(DType dtype, Shape shape, void* data, std::shared_ptr<const void> keepalive,
                      Device device) {
  Tensor t;
  t.dtype_ = dtype;
  t.device_ = device;
  t.shape_ = std::move(shape);
  t.strides_ = ContiguousStrides(t.shape_);
  t.data_ = data;
  t.storage_ = std::move(keepalive);
  return t;
}

size_t Tensor::nbytes() const {
  if (data_ == nullptr) return 0;  // a default (empty) Tensor holds nothing, not one scalar
  return static_cast<size_t>((numel() * DTypeBits(dtype_) + 7) / 8);
}

bool Tensor::is_contiguous() const { return strides_ == ContiguousStrides(shape_); }

Tensor Tensor::Reshape(Shape shape) const {
  LUCID_CHECK(is_contiguous(), "Reshape of a non-contiguous tensor");
  LUCID_CHECK(NumElements(shape) == numel(),
              "Reshape " + ShapeToString(shape_) + " -> " + ShapeToString(shape));
  Tensor t = *this;
  t.shape_ = std::move(shape);
  t.strides_ = ContiguousStrides(t.shape_);
  return t;
}

Tensor Tensor::Rows(int64_t begin, int64_t end) const {
  LUCID_CHECK(rank() >= 1 && 0 <= begin && begin <= end && end <= shape_[0], "Rows out of range");
  Tensor t = *this;
  t.shape_[0] = end - begin;
  const int64_t offset_bits = begin * strides_[0] * DTypeBits(dtype_);
  LUCID_CHECK(offset_bits % 8 == 0, "Rows splits a packed byte");
  t.data_ = static_cast<char*>(data_) + offset_bits / 8;
  return t;
}

Tensor Tensor::Clone() const {
  LUCID_CHECK(is_contiguous(), "Clone of a non-contiguous tensor");
  LUCID_CHECK(device_ == Device::kCpu, "Clone of a tensor on " + std::string(DeviceName(device_)));
  Tensor t = Empty(dtype_, shape_);
  if (nbytes()) std::memcpy(t.data_, data_, nbytes());
  return t;
}

std::string Tensor::DebugString() const {
  return std::string(DTypeName(dtype_)) + ShapeToString(shape_);
}

}  // namespace lucid
