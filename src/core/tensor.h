// Tensor: a typed, shaped view of memory that either owns its storage or borrows it.
//
// Invariants:
// - shape and strides have the same rank; strides are in elements (not bytes) and non-negative.
// - storage_ keeps the bytes alive: an allocation from an Allocator (core/allocator.h; the host
//   one is 64-byte aligned, not zero-filled) or whatever the borrower passed as keep-alive (e.g.
//   the memory-mapped file). A default Tensor is empty (rank 0, no data) and valid() is false.
// - device() says where the bytes are (the allocator's device; Borrow says it for borrowed
//   memory). Only kCpu tensors may be read or written through data() by host code.
// - kF4E2M1 tensors are packed: element i of a contiguous row lives in byte i/2, low nibble first;
//   only contiguous views of them are allowed and the last dimension must be even.
// Copying a Tensor copies the view and shares the storage (like a shared_ptr).
// Thread-safety: distinct Tensors are independent; concurrent writes to shared storage are the
// caller's business.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/dtype.h"
#include "core/status.h"

namespace lucid {

// What Tensor::Empty and Zeros throw when their allocator has no memory: the allocator's
// ResourceExhausted. Tensors are made in code with no Status to return (a model's layers, an op's
// scratch); a forward, a step or a tool catches it where it returns a Status
// (StatusOfAllocations), so that device memory that runs out mid-step fails that step, not the
// process. Not caught, it ends the process, as an allocation failure always did.
class AllocationError final : public std::exception {
 public:
  explicit AllocationError(Status status) : status_(std::move(status)), what_(status_.ToString()) {}
  const Status& status() const { return status_; }
  const char* what() const noexcept override { return what_.c_str(); }

 private:
  Status status_;
  std::string what_;
};

// f(), or the status of the AllocationError it threw. The tensors f made are released as it
// unwinds; a backend's free waits for the work queued on them (Backend::allocator).
Status StatusOfAllocations(const std::function<Status()>& f);

using Shape = std::vector<int64_t>;

std::string ShapeToString(const Shape& s);
int64_t NumElements(const Shape& s);

class Tensor {
 public:
  Tensor() = default;

  // A new contiguous tensor in memory from `alloc`, uninitialised (write every element before
  // reading it, or use Zeros). Throws AllocationError (above) when the allocator has no memory.
  static Tensor Empty(DType dtype, Shape shape, Allocator& alloc = HostAllocator());
  // The same, or the allocator's ResourceExhausted (for code that returns a Status).
  static StatusOr<Tensor> Allocate(DType dtype, Shape shape, Allocator& alloc = HostAllocator());
  // The same, every byte zero (the allocator's Zero: a memset on the host).
  static Tensor Zeros(DType dtype, Shape shape, Allocator& alloc = HostAllocator());
  // A contiguous view over memory owned elsewhere (on `device`); `keepalive` (may be null) is
  // held by the view.
  static Tensor Borrow(DType dtype, Shape shape, void* data,
                       std::shared_ptr<const void> keepalive = nullptr,
                       Device device = Device::kCpu);

  bool valid() const { return data_ != nullptr || NumElements(shape_) == 0; }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t size(int dim) const { return shape_[dim < 0 ? dim + rank() : dim]; }
  int64_t numel() const { return NumElements(shape_); }
  // Bytes spanned by a contiguous tensor of this shape and dtype; 0 for a default Tensor.
  size_t nbytes() const;
  bool is_contiguous() const;

  void* raw() const { return data_; }
  template <typename T>
  T* data() const {
    return static_cast<T*>(data_);
  }

  // Same storage, new shape with the same element count. Requires is_contiguous().
  Tensor Reshape(Shape shape) const;
  // Rows [begin, end) along dimension 0 (a view; contiguous if this is).
  Tensor Rows(int64_t begin, int64_t end) const;
  // A deep copy into new owned, contiguous host memory (host tensors only).
  Tensor Clone() const;

  std::string DebugString() const;  // "f32[3, 4]"

 private:
  DType dtype_ = DType::kF32;
  Device device_ = Device::kCpu;
  Shape shape_;
  Shape strides_;
  void* data_ = nullptr;
  std::shared_ptr<const void> storage_;
};

// Contiguous row-major strides for `shape`.
Shape ContiguousStrides(const Shape& shape);

}  // namespace lucid
