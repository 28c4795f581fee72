#include "backends/cuda/cuda_backend.h"

#include "backends/cuda/cuda_status.h"

namespace lucid::cuda {

StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::Create(int device_index, OpsFactory make_ops,
                                                           std::string set) {
  LUCID_ASSIGN_OR_RETURN(std::vector<CudaDeviceInfo> devices, ProbeCudaDevices());
  if (device_index < 0 || device_index >= static_cast<int>(devices.size()))
    return FailedPrecondition("no CUDA device " + std::to_string(device_index) +
                              " (this machine has " + std::to_string(devices.size()) + ")");
  const CudaDeviceInfo& d = devices[device_index];
  if (!RunsOn(d.sm))
    return FailedPrecondition(DescribeDevice(d) + ": this build has machine code for " +
                              CompiledCudaArchitecturesText() +
                              " only (rebuild with "
                              "CMAKE_CUDA_ARCHITECTURES including " +
                              std::to_string(d.sm) + "a)");
  std::unique_ptr<CudaBackend> b(new CudaBackend());
  b->info_ = d;
  b->set_ = std::move(set);
  LUCID_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_index));
  LUCID_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&b->stream_, cudaStreamNonBlocking));
  b->allocator_ = std::make_unique<CudaAllocator>(device_index, b->stream_);
  b->workspace_ = std::make_unique<Workspace>(*b->allocator_);
  b->ops_ = make_ops(b->stream_);
  if (b->ops_ == nullptr) return Internal("cuda: the ops factory returned no ops");
  return b;
}

CudaBackend::~CudaBackend() {
  ops_.reset();
  workspace_.reset();
  if (stream_ != nullptr) {
    (void)cudaStreamSynchronize(stream_);
    (void)cudaStreamDestroy(stream_);
  }
}

StatusOr<Tensor> CudaBackend::UploadWeight(const Tensor& host) {
  return CopyToDevice(host, *allocator_, stream_);
}

StatusOr<Tensor> CudaBackend::ReadableOnHost(const Tensor& t) { return CopyToHost(t, stream_); }

StatusOr<Tensor> CopyToDevice(const Tensor& host, Allocator& alloc, cudaStream_t stream) {
  if (host.device() != Device::kCpu)
    return InvalidArgument("CopyToDevice: the tensor is already on " +
                           std::string(DeviceName(host.device())));
  if (!host.is_contiguous())
    return InvalidArgument("CopyToDevice: a strided view " + ShapeToString(host.shape()) +
                           " (weights and step inputs are contiguous)");
  const size_t n = host.nbytes();
  LUCID_ASSIGN_OR_RETURN(std::shared_ptr<void> mem, alloc.Allocate(n));
  if (n > 0) {
    LUCID_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(mem.get(), host.raw(), n, cudaMemcpyHostToDevice, stream));
    LUCID_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  }
  void* p = mem.get();
  return Tensor::Borrow(host.dtype(), host.shape(), p, std::move(mem), Device::kCuda);
}

StatusOr<Tensor> CopyToHost(const Tensor& dev, cudaStream_t stream) {
  if (dev.device() != Device::kCuda)
    return InvalidArgument("CopyToHost: the tensor is not on cuda");
  if (!dev.is_contiguous())
    return InvalidArgument("CopyToHost: a strided view " + ShapeToString(dev.shape()));
  Tensor host = Tensor::Empty(dev.dtype(), dev.shape());
  const size_t n = dev.nbytes();
  if (n > 0) {
    LUCID_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(host.raw(), dev.raw(), n, cudaMemcpyDeviceToHost, stream));
    LUCID_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  }
  return host;
}

}  // namespace lucid::cuda
