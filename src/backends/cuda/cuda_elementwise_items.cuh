// The per-element bodies of the elementwise kernels that index (cuda_ops.cu, cuda_sampling.cu,
// the MoE kernels' SwiGLU): element i of a grid loop's output. Each is a host function too, so
// cuda_elementwise_items_test.cpp runs them on the CPU element by element through the ops
// conformance suite's Embedding, SwiGlu, CopyColumns, GatherRows and ApplyTokenBitmask cases
// against the CPU reference (backends/cpu/cpu_ops.cpp, cpu_glue.cpp, ops/ops.cpp), whose
// arithmetic they mirror. Accumulate's and Scale's kernels are one add or multiply per element.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "backends/cuda/cuda_weight_view.cuh"

namespace lucid::cuda {

// Embedding: element i of out [n_ids, w.cols] = row ids[i / cols] of the table.
__host__ __device__ inline float EmbeddingItem(const DeviceWeight& w, const int32_t* ids,
                                               int64_t i) {
  return WeightAt(w, ids[i / w.cols], i % w.cols);
}

// SwiGLU as the CUDA sets compute it (the reference's formula): g / (1 + exp(-g)) * u.
__host__ __device__ inline float SwiGluValue(float g, float u) { return g / (1.0f + expf(-g)) * u; }

// CopyColumns: element i of out [T, groups * width] = x[t, g * group_stride + offset + j] for x
// of rows of x_width floats.
__host__ __device__ inline float CopyColumnsItem(const float* x, int64_t x_width, int64_t groups,
                                                 int64_t group_stride, int64_t offset,
                                                 int64_t width, int64_t i) {
  const int64_t t = i / (groups * width), g = (i / width) % groups, j = i % width;
  return x[t * x_width + g * group_stride + offset + j];
}

// GatherRows: element i of out [n, D] = x[rows[i / D], i % D].
__host__ __device__ inline float GatherRowsItem(const float* x, const int64_t* rows, int64_t D,
                                                int64_t i) {
  return x[rows[i / D] * D + i % D];
}

// ApplyTokenBitmask: whether entry i of logits [R, V] is allowed by bitmask [R, ceil(V / 32)]
// (bit j % 32 of word j / 32 of its row).
__host__ __device__ inline bool TokenAllowedItem(const int32_t* bitmask, int64_t V, int64_t i) {
  const int64_t W = (V + 31) / 32, r = i / V, j = i % V;
  return ((static_cast<uint32_t>(bitmask[r * W + j / 32]) >> (j % 32)) & 1u) != 0;
}

}  // namespace lucid::cuda
