// The weight-only tensor-core GEMM (cuda_weight_mma.cuh) as cuda_matmul.cu calls it.
// Thread-safety: launches on `stream`.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/cuda_weight_view.cuh"

namespace lucid::cuda {

// Token counts up to which UE8M0 FP8 and NVFP4 weights take the weight-only kernel; above it they
// are dequantized to bf16 once per call and multiplied by cuBLAS, whose GEMM is faster once the
// copy's traffic is small beside the arithmetic. f32-scale FP8 takes the kernel at any count
// (its alternative is an f32 SGEMM, off the tensor cores). Both choices are unmeasured until
// `lucid bench --device cuda` runs on a GPU.
inline constexpr int64_t kWeightMmaMaxTokens = 64;

// Whether Linear on w for T > kGemvMaxTokens tokens takes LaunchWeightMma (the format and shape
// rules of WeightMmaEligible, and the token rule above).
bool WeightMmaTakes(const DeviceWeight& w, int64_t T);

// y [T, w.rows] = bf16(x [T, w.cols]) . W^T with f32 sums (NVFP4: times the global scale).
// x, y and w's storage in device memory; asynchronous on `stream`.
void LaunchWeightMma(const DeviceWeight& w, const float* x, int64_t T, float* y,
                     cudaStream_t stream);

struct WeightMmaArgs;
// The MoE form (cuda_weight_mma.cuh's WeightMmaArgs with tiles): `tiles` row tiles by a.w.rows
// output columns; asynchronous on `stream`.
void LaunchWeightMmaTiles(const WeightMmaArgs& a, int64_t tiles, cudaStream_t stream);

}  // namespace lucid::cuda
