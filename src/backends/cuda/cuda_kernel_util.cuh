// Small device helpers shared by the cuda-reference kernels (*.cu in this folder): launch sizes,
// grid-stride loops, block reductions over kThreads threads, and bf16 to and from float.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

namespace lucid::cuda {

inline constexpr int kThreads = 256;

// Blocks of kThreads for n items (at least 1, at most 65535; kernels loop over the rest).
inline int Blocks(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<int>(b < 65535 ? (b > 0 ? b : 1) : 65535);
}

#define LUCID_GRID_LOOP(i, n)                                               \
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < (n); \
       i += int64_t{gridDim.x} * blockDim.x)

__device__ inline float Bf16Bits(uint16_t b) {
  return __uint_as_float(static_cast<uint32_t>(b) << 16);
}

// core/dtype.h's F32ToBf16: round to nearest even, a NaN kept quiet with its sign, overflow to Inf.
__device__ inline uint16_t F32ToBf16Bits(float v) {
  const uint32_t b = __float_as_uint(v);
  if ((b & 0x7fffffffu) > 0x7f800000u)
    return static_cast<uint16_t>(((b >> 16) & 0x8000u) | 0x7fc0u);
  return static_cast<uint16_t>((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
}

// The reduction of one value per thread of a kThreads block with `op` (whose identity is
// `identity`), returned to every thread.
template <typename Op>
__device__ float BlockReduce(float v, Op op, float identity) {
  __shared__ float part[kThreads / 32];
  __shared__ float total;
  for (int o = 16; o > 0; o /= 2) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = v;
  __syncthreads();
  if (threadIdx.x < 32) {
    float s = threadIdx.x < kThreads / 32 ? part[threadIdx.x] : identity;
    for (int o = 16; o > 0; o /= 2) s = op(s, __shfl_xor_sync(0xffffffffu, s, o));
    if (threadIdx.x == 0) total = s;
  }
  __syncthreads();
  const float r = total;
  __syncthreads();
  return r;
}

struct SumOp {
  __device__ float operator()(float a, float b) const { return a + b; }
};
// std::max's rule (a < b ? b : a): a NaN in b never wins, as the reference's running maximum.
struct MaxOp {
  __device__ float operator()(float a, float b) const { return a < b ? b : a; }
};

__device__ inline float BlockSum(float v) { return BlockReduce(v, SumOp{}, 0.0f); }
__device__ inline float BlockMax(float v) { return BlockReduce(v, MaxOp{}, -INFINITY); }

}  // namespace lucid::cuda
