#include "backends/cuda/cuda_elementwise_items.cuh"
#include "backends/cuda/cuda_kernel_util.cuh"
#include "backends/cuda/cuda_sampling.cuh"
#include "backends/cuda/cuda_sampling.h"

namespace lucid::cuda {
namespace {

__global__ void SampleRowsKernel(const float* logits, int64_t V, const RowSampling* rows,
                                 const LogitEdit* edits, float* scratch, int32_t* tokens,
                                 float* logprobs, int32_t* top_ids, int64_t K) {
  __shared__ SampleRowState st;
  const int64_t r = blockIdx.x;
  const RowSampling p = rows[r];
  SampleRowPhases(st, logits + r * V, scratch + r * V, V, p, edits, K, tokens + r,
                  logprobs + r * (1 + K), top_ids != nullptr ? top_ids + r * K : nullptr,
                  BlockRun{});
}

__global__ void ApplyTokenBitmaskKernel(float* logits, const int32_t* bitmask, int64_t R,
                                        int64_t V) {
  LUCID_GRID_LOOP(i, R * V) {
    if (!TokenAllowedItem(bitmask, V, i)) logits[i] = -INFINITY;
  }
}

}  // namespace

void LaunchApplyTokenBitmask(float* logits, const int32_t* bitmask, int64_t R, int64_t V,
                             cudaStream_t stream) {
  if (R > 0 && V > 0)
    ApplyTokenBitmaskKernel<<<Blocks(R * V), kThreads, 0, stream>>>(logits, bitmask, R, V);
}

void LaunchSampleRows(const float* logits, int64_t R, int64_t V, const RowSampling* rows,
                      const LogitEdit* edits, float* scratch, int32_t* tokens, float* logprobs,
                      int32_t* top_ids, int64_t K, cudaStream_t stream) {
  if (R > 0)
    SampleRowsKernel<<<static_cast<unsigned>(R), kSampleThreads, 0, stream>>>(
        logits, V, rows, edits, scratch, tokens, logprobs, top_ids, K);
}

}  // namespace lucid::cuda
