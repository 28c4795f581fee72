#include "backends/cuda/cuda_status.h"

namespace lucid::cuda {

Status CudaStatus(cudaError_t e, const std::string& what) {
  if (e == cudaSuccess) return OkStatus();
  return Internal(what + ": " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e));
}

}  // namespace lucid::cuda
