#include <algorithm>
#include <cmath>

#include "backends/cuda/cuda_attention.h"
#include "backends/cuda/cuda_attention_blocks.cuh"
#include "backends/cuda/cuda_kernel_util.cuh"
#include "backends/cuda/cuda_kv_rows.cuh"
#include "backends/cuda/cuda_mla_heads.cuh"
#include "backends/cuda/cuda_mla_split.cuh"

namespace lucid::cuda {
namespace {

// A (row, head) pair per block (cuda_attention_blocks.cuh); its scores at scratch + blockIdx.x *
// per_row.
__global__ void MlaKernel(MlaAttentionArgs a, DeviceRows kv, int64_t th0, float* scratch,
                          int64_t per_row) {
  __shared__ AttentionRowState st;
  MlaRowPhases(st, a, kv, th0 + blockIdx.x, scratch + blockIdx.x * per_row, BlockRun{});
}

// A (row, query head) pair per block (cuda_attention_blocks.cuh); its scores at scratch +
// blockIdx.x * per_row.
__global__ void GqaKernel(GqaAttentionArgs a, DeviceRows kv, int64_t th0, float* scratch,
                          int64_t per_row) {
  __shared__ AttentionRowState st;
  GqaRowPhases(st, a, kv, th0 + blockIdx.x, scratch + blockIdx.x * per_row, BlockRun{});
}

__global__ void IndexerKernel(IndexerArgs a, DeviceRows keys) {
  const int64_t t = blockIdx.x;
  for (int64_t u = threadIdx.x; u < a.causal_len[t]; u += blockDim.x)
    a.scores[t * a.score_stride + u] =
        IndexerTokenScore(a, keys, a.q + t * a.heads * a.head_dim, t, u);
}

// The indexer for up to kIndexerMaxHeads heads of at most kIndexerQFloats query floats per row:
// a thread per (row t, token u) over every block of the grid (blocks_per_row blocks per row), the
// row's queries in shared memory, each key value decoded once for all heads.
constexpr int64_t kIndexerQFloats = 8192;

__global__ void IndexerTokensKernel(IndexerArgs a, DeviceRows keys, int64_t blocks_per_row) {
  __shared__ float qs[kIndexerQFloats];
  const int64_t t = blockIdx.x / blocks_per_row, D = a.head_dim, H = a.heads;
  const int64_t u0 = (blockIdx.x % blocks_per_row) * int64_t{blockDim.x}, u = u0 + threadIdx.x;
  if (u0 >= a.causal_len[t]) return;  // the whole block is past the row's causal tokens
  for (int64_t i = threadIdx.x; i < H * D; i += blockDim.x) qs[i] = a.q[t * H * D + i];
  __syncthreads();
  if (u >= a.causal_len[t]) return;
  a.scores[t * a.score_stride + u] = IndexerTokenScore(a, keys, qs, t, u);
}

// Split-K MLA (cuda_mla_split.cuh): block = (pair, split), then a block per pair.
__global__ void MlaSplitKernel(MlaAttentionArgs a, DeviceRows kv, int64_t splits, float* parts) {
  __shared__ MlaSplitState st;
  const int64_t th = blockIdx.x / splits, s = blockIdx.x % splits;
  MlaSplitPhases(st, a, kv, th, s, kMlaSplitThreads,
                 parts + (th * splits + s) * MlaPartFloats(a.latent_dim), BlockRun{});
}

__global__ void MlaCombineKernel(MlaAttentionArgs a, int64_t splits, const float* parts) {
  __shared__ MlaCombineState st;
  const int64_t th = blockIdx.x;
  MlaCombinePhases(st, a, th, splits, parts + th * splits * MlaPartFloats(a.latent_dim),
                   BlockRun{});
}

// Splits per pair for the split-K path, or 0 for MlaKernel: fewer pairs than a GPU's blocks in
// flight, more than one split, within the merge's and the columns' limits and 64 MB of partials.
int64_t MlaSplits(const MlaAttentionArgs& a, int64_t per_row) {
  const int64_t pairs = a.tokens * a.heads;
  const int64_t splits = (per_row + kMlaSplitThreads - 1) / kMlaSplitThreads;
  if (pairs <= 0 || pairs >= 256 || splits < 2 || splits > kMlaMaxSplits ||
      a.latent_dim > int64_t{kMlaSplitCols} * kMlaSplitThreads)
    return 0;
  return pairs * splits * MlaPartFloats(a.latent_dim) <= (int64_t{16} << 20) ? splits : 0;
}

// The grouped-heads kernel (cuda_mla_heads.cuh): block b0 + blockIdx.x is row b / groups, group
// b % groups; its scores at scratch + blockIdx.x * kMlaHeadGroup * per_row.
__global__ void __launch_bounds__(kMlaHeadThreads)
    MlaHeadsKernel(MlaAttentionArgs a, DeviceRows kv, int64_t b0, float* scratch, int64_t per_row) {
  __shared__ MlaHeadsState st;
  MlaHeadsLocals locals;
  const int64_t b = b0 + blockIdx.x, groups = MlaHeadGroups(a.heads);
  MlaHeadsPhases(st, a, kv, b / groups, b % groups,
                 scratch + int64_t{blockIdx.x} * kMlaHeadGroup * per_row, per_row, [&](auto phase) {
                   phase(static_cast<int>(threadIdx.x), locals);
                   __syncthreads();
                 });
}

// Blocks of the grouped kernel below which MlaKernel's block per (row, head) runs instead: fewer
// would leave an H100's 132 SMs idle for the traffic they save (a guess until a GPU measures it).
constexpr int64_t kMlaHeadsMinBlocks = 256;

bool MlaHeadsTakes(const MlaAttentionArgs& a) {
  return MlaHeadsFits(a) && a.tokens * MlaHeadGroups(a.heads) >= kMlaHeadsMinBlocks;
}

// Blocks of the grouped kernel per launch so the scratch stays under 64M floats.
int64_t MlaHeadsChunk(int64_t blocks, int64_t per_row) {
  const int64_t c = (int64_t{64} << 20) / (kMlaHeadGroup * per_row);
  return c < 1 ? 1 : (c < blocks ? c : blocks);
}

// Rows of (row, head) pairs per launch so the scratch stays under 64M floats.
int64_t Chunk(int64_t pairs, int64_t per_row) {
  const int64_t c = per_row > 0 ? (int64_t{64} << 20) / per_row : pairs;
  return c < 1 ? 1 : (c < pairs ? c : pairs);
}

}  // namespace

int64_t AttentionScratchPerRow(const PagedRows& kv, const int32_t* selected,
                               int64_t selected_stride) {
  const int64_t rows = static_cast<int64_t>(kv.page_table.size()) * kv.page_size;
  const int64_t n = selected ? selected_stride : rows;
  return n > 0 ? n : 1;
}

int64_t MlaAttentionScratchFloats(const MlaAttentionArgs& a, int64_t per_row) {
  const int64_t pairs = a.tokens * a.heads;
  if (const int64_t splits = MlaSplits(a, per_row); splits > 0)
    return pairs * splits * MlaPartFloats(a.latent_dim);
  if (MlaHeadsTakes(a)) {
    const int64_t blocks = a.tokens * MlaHeadGroups(a.heads);
    return std::max<int64_t>(1, MlaHeadsChunk(blocks, per_row) * kMlaHeadGroup * per_row);
  }
  return std::max<int64_t>(1, Chunk(pairs, per_row) * per_row);
}

int64_t GqaAttentionScratchFloats(const GqaAttentionArgs& a, int64_t per_row) {
  return std::max<int64_t>(1, Chunk(a.tokens * a.heads, per_row) * per_row);
}

void LaunchMlaAttention(const MlaAttentionArgs& a, float* scratch, int64_t per_row,
                        cudaStream_t stream) {
  if (const int64_t splits = MlaSplits(a, per_row); splits > 0) {
    const int64_t pairs = a.tokens * a.heads;
    MlaSplitKernel<<<static_cast<unsigned>(pairs * splits), kMlaSplitThreads, 0, stream>>>(
        a, ToDevice(a.kv), splits, scratch);
    MlaCombineKernel<<<static_cast<unsigned>(pairs), kMlaSplitThreads, 0, stream>>>(a, splits,
                                                                                    scratch);
    return;
  }
  if (MlaHeadsTakes(a)) {
    const int64_t blocks = a.tokens * MlaHeadGroups(a.heads),
                  chunk = MlaHeadsChunk(blocks, per_row);
    for (int64_t b0 = 0; b0 < blocks; b0 += chunk) {
      const int64_t n = blocks - b0 < chunk ? blocks - b0 : chunk;
      MlaHeadsKernel<<<static_cast<unsigned>(n), kMlaHeadThreads, 0, stream>>>(
          a, ToDevice(a.kv), b0, scratch, per_row);
    }
    return;
  }
  const int64_t pairs = a.tokens * a.heads, chunk = Chunk(pairs, per_row);
  for (int64_t th0 = 0; th0 < pairs; th0 += chunk) {
    const int64_t n = pairs - th0 < chunk ? pairs - th0 : chunk;
    MlaKernel<<<n, kAttentionRowThreads, 0, stream>>>(a, ToDevice(a.kv), th0, scratch, per_row);
  }
}

void LaunchGqaAttention(const GqaAttentionArgs& a, float* scratch, int64_t per_row,
                        cudaStream_t stream) {
  const int64_t pairs = a.tokens * a.heads, chunk = Chunk(pairs, per_row);
  for (int64_t th0 = 0; th0 < pairs; th0 += chunk) {
    const int64_t n = pairs - th0 < chunk ? pairs - th0 : chunk;
    GqaKernel<<<n, kAttentionRowThreads, 0, stream>>>(a, ToDevice(a.kv), th0, scratch, per_row);
  }
}

void LaunchIndexerScores(const IndexerArgs& a, cudaStream_t stream) {
  if (a.tokens <= 0) return;
  if (a.heads <= kIndexerMaxHeads && a.heads * a.head_dim <= kIndexerQFloats) {
    const int64_t per_row = std::max<int64_t>(1, (a.score_stride + kThreads - 1) / kThreads);
    IndexerTokensKernel<<<static_cast<unsigned>(a.tokens * per_row), kThreads, 0, stream>>>(
        a, ToDevice(a.keys), per_row);
    return;
  }
  IndexerKernel<<<a.tokens, kThreads, 0, stream>>>(a, ToDevice(a.keys));
}

}  // namespace lucid::cuda
