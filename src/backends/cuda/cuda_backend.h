// CudaBackend: the Backend (backends/backend.h) of one CUDA device.
//
// - UploadWeight copies a checkpoint tensor's bytes to device memory once, at load, as they are
//   stored: packed formats stay packed (FP8 block weights with their scale tensor, NVFP4 with its
//   group and global scales; Backend::UploadWeights uploads each part), so device memory holds
//   exactly the checkpoint's bytes for the weights.
// - allocator() is a CudaAllocator (device memory; it counts live and peak bytes, which is what
//   the backend really allocated), workspace() a Workspace over it.
// - Every op and copy is issued on the backend's one stream, in order; Synchronize waits for the
//   stream and returns the first asynchronous error as a Status.
// Ownership: owns its stream, its Ops and its workspace; must outlive every model, KV pool and
// tensor allocated from it.
// Thread-safety: as Backend: ops from the engine thread only; allocator() thread-safe.
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <string>

#include "backends/backend.h"
#include "backends/cuda/cuda_allocator.h"
#include "backends/cuda/cuda_device.h"

namespace lucid::cuda {

class CudaBackend final : public Backend {
 public:
  // A backend on device `device_index` (FailedPrecondition with the probe's reason when there is
  // no such device, or when this build has no machine code for its compute capability).
  // `make_ops` builds the ops on the backend's stream.
  using OpsFactory = std::unique_ptr<Ops> (*)(cudaStream_t stream);
  static StatusOr<std::unique_ptr<CudaBackend>> Create(int device_index, OpsFactory make_ops,
                                                       std::string set);
  ~CudaBackend() override;

  Device device() const override { return Device::kCuda; }
  std::string name() const override { return "cuda:" + set_; }
  const Ops& ops() const override { return *ops_; }
  Allocator& allocator() override { return *allocator_; }
  StatusOr<Tensor> UploadWeight(const Tensor& host) override;
  Workspace& workspace() override { return *workspace_; }
  // A host copy after the stream's queued work (device memory is not host-readable).
  StatusOr<Tensor> ReadableOnHost(const Tensor& t) override;

  const CudaDeviceInfo& info() const { return info_; }
  cudaStream_t stream() const { return stream_; }
  const CudaAllocator& device_allocator() const { return *allocator_; }

 private:
  CudaBackend() = default;
  CudaDeviceInfo info_;
  std::string set_;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<CudaAllocator> allocator_;
  std::unique_ptr<Workspace> workspace_;
  std::unique_ptr<Ops> ops_;
};

// A device copy of the contiguous host tensor `host` (same dtype and shape), from `alloc`, copied
// on `stream` (the call returns once the copy is done).
StatusOr<Tensor> CopyToDevice(const Tensor& host, Allocator& alloc, cudaStream_t stream);
// A host copy of the contiguous device tensor `dev`, after the work queued on `stream`.
StatusOr<Tensor> CopyToHost(const Tensor& dev, cudaStream_t stream);

}  // namespace lucid::cuda
