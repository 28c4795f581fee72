// Block-wide steps for kernels written as phases (the cuda_topk_block.cuh pattern: a phase is a
// function of the thread index that `run` runs on every thread of the block, then a barrier; on
// the CPU, on every thread in turn): a tree reduction (with FloatSumOp, MaxRuleOp, ...) and an
// exclusive prefix over one value per thread. Host functions too. Used by cuda_sampling.cuh,
// cuda_attention_blocks.cuh and cuda_ops_blocks.cuh.
#pragma once

#include <cuda_runtime.h>

namespace lucid::cuda {

// The reduction with `op` of part(tid) over the kThreads threads (a power of two), by a tree in
// sh[kThreads]; the result is written to *out by one thread and returned (to every thread, after
// the last barrier). *out is not written again before the next reduction into it ends, so every
// thread has read it by then.
template <int kThreads, typename T, typename Part, typename Op, typename Run>
__host__ __device__ T TreeReduce(T* sh, T* out, Part part, Op op, Run run) {
  static_assert((kThreads & (kThreads - 1)) == 0, "a power of two threads");
  run([&](int tid) { sh[tid] = part(tid); });
  for (int s = kThreads / 2; s > 0; s /= 2)
    run([&](int tid) {
      if (tid < s) sh[tid] = op(sh[tid], sh[tid + s]);
      if (s == 1 && tid == 0) *out = sh[0];
    });
  return *out;
}

struct FloatSumOp {
  __host__ __device__ float operator()(float a, float b) const { return a + b; }
};
// std::max(a, b)'s rule: b only when a < b (a NaN b is never taken).
struct MaxRuleOp {
  __host__ __device__ float operator()(float a, float b) const { return a < b ? b : a; }
};

// sh[tid] = the sum of sh[0..tid) over the kThreads threads' values, by one thread.
template <int kThreads, typename T, typename Run>
__host__ __device__ void ExclusivePrefix(T* sh, Run run) {
  run([&](int tid) {
    if (tid != 0) return;
    T sum = 0;
    for (int i = 0; i < kThreads; ++i) {
      const T c = sh[i];
      sh[i] = sum;
      sum += c;
    }
  });
}

}  // namespace lucid::cuda
