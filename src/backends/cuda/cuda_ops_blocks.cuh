// The row kernels of cuda_ops.cu as phases (cuda_block_phases.cuh), host functions too, so that
// cuda_ops_blocks_test.cpp runs them on the CPU through the conformance suite's RmsNorm,
// LayerNorm and NonFiniteRows cases against the CPU reference. One block of kOpsRowThreads
// threads per row: each thread sums the columns tid, tid + kOpsRowThreads, ... and a tree adds
// the threads' sums; then each thread writes its columns.
// - RmsNorm: y = w * (x * 1 / sqrt(mean(x^2) + eps));
// - LayerNorm: mean, then the variance around it, y = (x - mean) * 1 / sqrt(var + eps) * w + b;
// - NonFiniteRows: 1 where the row holds a NaN or an infinity.
// The weights and bias are f32 or bf16 (LoadVec).
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "backends/cuda/cuda_block_phases.cuh"
#include "backends/cuda/cuda_weight_view.cuh"

namespace lucid::cuda {

inline constexpr int kOpsRowThreads = 256;

struct OpsRowState {
  float red[kOpsRowThreads];
  float a, b;  // the row's reductions
};

// Element i of an f32 or bf16 vector.
__host__ __device__ inline float LoadVec(const void* p, bool bf16, int64_t i) {
  return bf16 ? FloatFromBits(static_cast<uint32_t>(static_cast<const uint16_t*>(p)[i]) << 16)
              : static_cast<const float*>(p)[i];
}

// The sum over the row of f(i), i < D, each thread its columns in order, then the tree.
template <typename F, typename Run>
__host__ __device__ float RowSum(OpsRowState& st, float* out, int64_t D, F f, Run run) {
  return TreeReduce<kOpsRowThreads>(
      st.red, out,
      [&](int tid) {
        float s = 0.0f;
        for (int64_t i = tid; i < D; i += kOpsRowThreads) s += f(i);
        return s;
      },
      FloatSumOp{}, run);
}

template <typename Run>
__host__ __device__ void RmsNormRowPhases(OpsRowState& st, const float* xr, const void* w,
                                          bool w_bf16, float eps, int64_t D, float* yr, Run run) {
  const float ss = RowSum(
      st, &st.a, D, [&](int64_t i) { return xr[i] * xr[i]; }, run);
  const float inv = 1.0f / sqrtf(ss / static_cast<float>(D) + eps);
  run([&](int tid) {
    for (int64_t i = tid; i < D; i += kOpsRowThreads) yr[i] = LoadVec(w, w_bf16, i) * (xr[i] * inv);
  });
}

template <typename Run>
__host__ __device__ void LayerNormRowPhases(OpsRowState& st, const float* xr, const void* w,
                                            bool w_bf16, const void* b, bool b_bf16, float eps,
                                            int64_t D, float* yr, Run run) {
  const float mean = RowSum(
                         st, &st.a, D, [&](int64_t i) { return xr[i]; }, run) /
                     static_cast<float>(D);
  const float var =
      RowSum(
          st, &st.b, D, [&](int64_t i) { return (xr[i] - mean) * (xr[i] - mean); }, run) /
      static_cast<float>(D);
  const float inv = 1.0f / sqrtf(var + eps);
  run([&](int tid) {
    for (int64_t i = tid; i < D; i += kOpsRowThreads)
      yr[i] = (xr[i] - mean) * inv * LoadVec(w, w_bf16, i) + LoadVec(b, b_bf16, i);
  });
}

template <typename Run>
__host__ __device__ void NonFiniteRowPhases(OpsRowState& st, const float* p, int64_t row,
                                            int32_t* flag, Run run) {
  const float bad = RowSum(
      st, &st.a, row, [&](int64_t j) { return p[j] - p[j] == 0.0f ? 0.0f : 1.0f; }, run);
  run([&](int tid) {
    if (tid == 0) *flag = bad > 0.0f ? 1 : 0;
  });
}

}  // namespace lucid::cuda
