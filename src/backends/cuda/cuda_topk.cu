#include <algorithm>

#include "backends/cuda/cuda_kernel_util.cuh"
#include "backends/cuda/cuda_topk.h"
#include "backends/cuda/cuda_topk_block.cuh"

namespace lucid::cuda {
namespace {

constexpr int64_t kScratchWordsPerLaunch = int64_t{8} << 20;  // 64 MB of sort words

// Row row0 + blockIdx.x. `all_when_short`: a row of n <= k candidates lists them all in order
// (TopKRows); otherwise k <= n (TopK).
__global__ void TopKBlockKernel(const float* scores, int64_t S, const int64_t* lengths,
                                int64_t row0, int64_t k, bool all_when_short, int32_t offset,
                                int32_t* out, int64_t W, uint64_t* scratch, int64_t P) {
  __shared__ TopKBlockState st;
  extern __shared__ uint64_t shared_words[];
  const int64_t t = row0 + blockIdx.x;
  const int64_t n = lengths != nullptr ? lengths[t] : S;
  int32_t* row = out + t * W;
  if (all_when_short && n <= k) {  // the whole block leaves before any barrier
    for (int64_t u = threadIdx.x; u < n; u += blockDim.x) row[u] = offset + static_cast<int32_t>(u);
    return;
  }
  if (k <= 0) return;
  uint64_t* buf = scratch != nullptr ? scratch + blockIdx.x * P : shared_words;
  TopKBlockPhases(st, scores + t * S, n, k, offset, row, buf, P, BlockRun{});
}

int64_t RowsPerLaunch(int64_t P) { return std::max<int64_t>(1, kScratchWordsPerLaunch / P); }

void Launch(const float* scores, int64_t S, const int64_t* lengths, int64_t T, int64_t k,
            bool all_when_short, int32_t offset, int32_t* out, int64_t W, uint64_t* scratch,
            cudaStream_t stream) {
  const int64_t P = TopKSortLength(std::max<int64_t>(k, 1));
  if (P <= kTopKSharedWords) {
    TopKBlockKernel<<<static_cast<unsigned>(T), kTopKThreads, P * sizeof(uint64_t), stream>>>(
        scores, S, lengths, 0, k, all_when_short, offset, out, W, nullptr, P);
    return;
  }
  const int64_t chunk = RowsPerLaunch(P);
  for (int64_t r0 = 0; r0 < T; r0 += chunk)
    TopKBlockKernel<<<static_cast<unsigned>(std::min(chunk, T - r0)), kTopKThreads, 0, stream>>>(
        scores, S, lengths, r0, k, all_when_short, offset, out, W, scratch, P);
}

}  // namespace

int64_t TopKScratchWords(int64_t T, int64_t k) {
  const int64_t P = TopKSortLength(std::max<int64_t>(k, 1));
  return P <= kTopKSharedWords ? 0 : std::min(T, RowsPerLaunch(P)) * P;
}

void LaunchTopKRows(const float* scores, int64_t S, const int64_t* lengths, int64_t T, int64_t k,
                    int32_t offset, int32_t* out, int64_t W, uint64_t* scratch,
                    cudaStream_t stream) {
  if (T > 0) Launch(scores, S, lengths, T, k, true, offset, out, W, scratch, stream);
}

void LaunchTopK(const float* scores, int64_t n, int64_t k, int32_t* out, uint64_t* scratch,
                cudaStream_t stream) {
  if (k > 0) Launch(scores, n, nullptr, 1, k, false, 0, out, k, scratch, stream);
}

}  // namespace lucid::cuda
