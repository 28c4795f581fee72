// Row-wise top-k on the device in TopK's order (ops/ops.h): one block of kTopKThreads threads per
// row, a radix select of the k-th best then a sort of the k chosen (cuda_topk_block.cuh), so a row
// of any length costs a few passes over it, not a sort of it (the DSA indexer's index_topk 2048
// over a long context). The sort runs in shared memory for k up to kTopKSharedWords, else in
// device scratch. Asynchronous on `stream`; all pointers are device memory.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace lucid::cuda {

inline constexpr int64_t kTopKSharedWords = 4096;

// Words of device scratch LaunchTopKRows (and LaunchTopK, T = 1) needs for k: 0 when the sort
// fits in shared memory, else one launch's rows (a bounded number, the rows launched in turn).
int64_t TopKScratchWords(int64_t T, int64_t k);

// out[t, 0..k) (rows W apart) = offset + TopK(scores[t, 0..n)), n = lengths[t] > k; else offset +
// 0..n-1 (ops/ops.h TopKRows).
void LaunchTopKRows(const float* scores, int64_t S, const int64_t* lengths, int64_t T, int64_t k,
                    int32_t offset, int32_t* out, int64_t W, uint64_t* scratch,
                    cudaStream_t stream);

// out[0..k) = the k best of scores[0..n) in TopK's order, 0 < k <= n.
void LaunchTopK(const float* scores, int64_t n, int64_t k, int32_t* out, uint64_t* scratch,
                cudaStream_t stream);

}  // namespace lucid::cuda
