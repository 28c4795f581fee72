#include "backends/cuda/cuda_allocator.h"

#include <algorithm>
#include <cstdio>
#include <string>

#include "backends/cuda/cuda_status.h"

namespace lucid::cuda {

CudaAllocator::CudaAllocator(int device_index, cudaStream_t stream)
    : device_(device_index), stream_(stream) {}

StatusOr<std::shared_ptr<void>> CudaAllocator::Allocate(size_t bytes) {
  // Usable up to the next multiple of 64 (the allocator contract); cudaMalloc aligns to 256.
  const size_t rounded = std::max<size_t>(64, (bytes + 63) / 64 * 64);
  LUCID_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, rounded);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    (void)cudaMemGetInfo(&free_b, &total_b);
    return ResourceExhausted("cuda:" + std::to_string(device_) + ": cannot allocate " +
                             std::to_string(rounded) + " bytes (" + std::to_string(free_b) +
                             " free of " + std::to_string(total_b) + "): " + cudaGetErrorString(e));
  }
  const int64_t live = live_->fetch_add(static_cast<int64_t>(rounded)) + rounded;
  int64_t peak = peak_->load();
  while (live > peak && !peak_->compare_exchange_weak(peak, live)) {
  }
  auto counter = live_;
  return std::shared_ptr<void>(p, [counter, rounded](void* q) {
    (void)cudaFree(q);  // synchronizes with work still using q
    counter->fetch_sub(static_cast<int64_t>(rounded));
  });
}

void CudaAllocator::Zero(void* p, size_t bytes) {
  const cudaError_t e = cudaMemsetAsync(p, 0, bytes, stream_);
  // A failed memset leaves the stream in error; the next Synchronize reports it as a Status.
  if (e != cudaSuccess)
    std::fprintf(stderr, "lucid: cuda memset failed: %s\n", cudaGetErrorString(e));
}

}  // namespace lucid::cuda
