// CudaAllocator: device memory of one CUDA device (core/allocator.h's contract), from cudaMalloc,
// freed by cudaFree when the last holder drops it. Zero is cudaMemsetAsync on the allocator's
// stream, ordered before the ops the backend issues on that stream. It counts the bytes it holds
// (live and peak), so the memory planner and `serve`'s start-up log can report what the backend
// really allocated rather than an estimate.
// Thread-safety: Allocate, Zero and the counters are thread-safe (the counters are atomics; the
// CUDA runtime is thread-safe). The device and stream must outlive every allocation.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <memory>

#include "core/allocator.h"

namespace lucid::cuda {

class CudaAllocator final : public Allocator {
 public:
  CudaAllocator(int device_index, cudaStream_t stream);
  Device device() const override { return Device::kCuda; }
  StatusOr<std::shared_ptr<void>> Allocate(size_t bytes) override;
  void Zero(void* p, size_t bytes) override;
  std::optional<int64_t> held_bytes() const override { return live_bytes(); }

  int device_index() const { return device_; }
  int64_t live_bytes() const { return live_->load(); }
  int64_t peak_bytes() const { return peak_->load(); }

 private:
  int device_;
  cudaStream_t stream_;
  // Shared with the deleters of allocations, which may outlive the allocator object.
  std::shared_ptr<std::atomic<int64_t>> live_ = std::make_shared<std::atomic<int64_t>>(0);
  std::shared_ptr<std::atomic<int64_t>> peak_ = std::make_shared<std::atomic<int64_t>>(0);
};

}  // namespace lucid::cuda
