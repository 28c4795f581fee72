// Small device helpers shared by the cuda-reference kernels (*.cu in this folder): launch sizes,
// grid-stride loops and the run of a block's phases (BlockRun).
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

// A block's `run` for kernels written as phases (cuda_block_phases.cuh): the phase on this
// thread, then the block's barrier.
struct BlockRun {
  template <typename Phase>
  __device__ void operator()(Phase phase) const {
    phase(static_cast<int>(threadIdx.x));
    __syncthreads();
  }
};

}  // namespace lucid::cuda
