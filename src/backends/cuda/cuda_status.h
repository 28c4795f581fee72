// CUDA runtime and cuBLAS results as Status (core/status.h), so device errors reach the caller
// as one line naming the call that failed, never an abort.
// Thread-safety: stateless.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "core/status.h"

namespace lucid::cuda {

// OK for cudaSuccess; otherwise Internal "<what>: <cudaGetErrorName>: <cudaGetErrorString>".
Status CudaStatus(cudaError_t e, const std::string& what);

}  // namespace lucid::cuda

// Returns the Status of a failed CUDA runtime call `expr` from the enclosing function.
#define LUCID_CUDA_RETURN_IF_ERROR(expr) \
  LUCID_RETURN_IF_ERROR(::lucid::cuda::CudaStatus((expr), #expr))
