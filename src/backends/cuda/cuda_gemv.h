// Linear for a few tokens on a packed weight (FP8 block or NVFP4): y[T, N] = x[T, K] . W^T with
// the weight decoded in registers as it is read (cuda_packed_dot.cuh), never written out
// dequantized: one warp per output row, its lanes splitting K (16-column chunks in vector loads
// where the rows are aligned for them), T f32 accumulators, a warp sum. Decode reads the packed
// bytes once (1 byte per FP8 weight, 0.56 per NVFP4 weight) where a dequantize-then-GEMM call
// writes and reads 2 or 4 more. CUDA-core arithmetic, not tensor cores: for T <= kGemvMaxTokens,
// where a step is bound by reading the weight. Arithmetic: each product x * w in f32 (fused
// multiply-add into the row's sum), x rounded to bf16 first when `round_bf16` (cuda-bf16act);
// `group_scaled` (NVFP4 under cuda-bf16act) sums with the e2m1 x group-scale values and multiplies
// the sum by the global scale, as the tensor-core path does; otherwise the values are WeightAt's.
// NaN and Inf propagate as in a GEMM. All pointers are device memory; asynchronous on `stream`.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/cuda_packed_dot.cuh"

namespace lucid::cuda {

inline constexpr int64_t kGemvMaxTokens = 8;

// x [T, w.cols] f32, y [T, w.rows] f32, 1 <= T <= kGemvMaxTokens; w FP8 block or NVFP4.
void LaunchPackedGemv(const DeviceWeight& w, const float* x, int64_t T, bool round_bf16,
                      bool group_scaled, float* y, cudaStream_t stream);

}  // namespace lucid::cuda
