#include "backends/cuda/cuda_kernel_util.cuh"
#include "backends/cuda/cuda_step_items.cuh"
#include "backends/cuda/cuda_step_kernels.h"

namespace lucid::cuda {
namespace {

__global__ void RopeKernel(float* x, int64_t T, int64_t heads, int64_t head_stride, int64_t offset,
                           int64_t half, const float* cs, bool interleaved) {
  LUCID_GRID_LOOP(j, T * heads * half) {
    RopeItem(x, heads, head_stride, offset, half, cs, interleaved, j);
  }
}

__global__ void MoeRouteKernel(const float* lg, int64_t T, int64_t E, const float* bias, int64_t G,
                               int64_t topk_group, int64_t k, bool norm, float scaling,
                               float* scratch, int32_t* idx, float* weights) {
  LUCID_GRID_LOOP(t, T) {
    MoeRouteRow(lg, E, bias, G, topk_group, k, norm, scaling, scratch, idx, weights, t);
  }
}

__global__ void WriteKvRowsKernel(KvParts parts, int64_t T, int kind, int64_t row_floats,
                                  int64_t fp8_values, int64_t fp8_block, int64_t row_bytes,
                                  const int64_t* pool_rows, uint8_t* bytes) {
  LUCID_GRID_LOOP(t, T) {
    WriteKvRow(parts, t, kind, row_floats, fp8_values, fp8_block, bytes + pool_rows[t] * row_bytes);
  }
}

__global__ void ScatterAddRowsKernel(float* out, int64_t D, const float* y, const int64_t* rows,
                                     const float* w, int64_t n) {
  LUCID_GRID_LOOP(j, n * D) {
    const int64_t i = j / D, c = j % D;
    out[rows[i] * D + c] += w[i] * y[j];
  }
}

}  // namespace

void LaunchRope(float* x, int64_t T, int64_t heads, int64_t head_stride, int64_t offset,
                int64_t half, const float* cs, bool interleaved, cudaStream_t stream) {
  RopeKernel<<<Blocks(T * heads * half), kThreads, 0, stream>>>(x, T, heads, head_stride, offset,
                                                                half, cs, interleaved);
}

void LaunchMoeRoute(const float* logits, int64_t T, int64_t E, const float* bias, int64_t n_group,
                    int64_t topk_group, int64_t k, bool norm_topk_prob, float scaling,
                    float* scratch, int32_t* idx, float* weights, cudaStream_t stream) {
  MoeRouteKernel<<<Blocks(T), kThreads, 0, stream>>>(
      logits, T, E, bias, n_group, topk_group, k, norm_topk_prob, scaling, scratch, idx, weights);
}

void LaunchWriteKvRows(const KvParts& parts, int64_t T, int kind, int64_t row_floats,
                       int64_t fp8_values, int64_t fp8_block, int64_t row_bytes,
                       const int64_t* pool_rows, uint8_t* bytes, cudaStream_t stream) {
  WriteKvRowsKernel<<<Blocks(T), kThreads, 0, stream>>>(parts, T, kind, row_floats, fp8_values,
                                                        fp8_block, row_bytes, pool_rows, bytes);
}

void LaunchScatterAddRows(float* out, int64_t D, const float* y, const int64_t* rows,
                          const float* w, int64_t n, cudaStream_t stream) {
  ScatterAddRowsKernel<<<Blocks(n * D), kThreads, 0, stream>>>(out, D, y, rows, w, n);
}

}  // namespace lucid::cuda
