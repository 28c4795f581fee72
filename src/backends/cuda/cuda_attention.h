// The CUDA sets' attention kernels: absorbed MLA (sparse over listed tokens or dense over a
// consecutive range), grouped-query attention and the DSA indexer scores, over the paged KV rows
// of any KvRowKind (f32, bf16, FP8 with block scales and a bf16 tail, decoded as
// PagedRows::ReadRow does). Each follows its CPU reference's order: scores, the running maximum
// by std::max's rule, exp, the sum, then the weighted values, all f32 (one block per query row
// and head; MLA with few pairs over a long context: split-K, cuda_mla_split.cuh; MLA with enough
// rows to fill the GPU in blocks of 8 heads: a block per (row, head group) reading each attended
// row once for the group, cuda_mla_heads.cuh). The KV rows are read through cuda_kv_rows.cuh.
// On cuda every pointer of MlaAttentionArgs / GqaAttentionArgs / IndexerArgs, the PagedRows'
// storage and its page table included, is device memory (the HostBridgeOps copies them there).
// Thread-safety: launches on `stream`; `scratch` belongs to the caller until the stream is idle.
#pragma once

#include <cuda_runtime.h>

#include "ops/ops.h"

namespace lucid::cuda {

// Floats of scratch MlaAttention / GqaAttention need per (row, head): the most tokens one row can
// attend (sparse: selected_stride; dense: every row of the pages).
int64_t AttentionScratchPerRow(const PagedRows& kv, const int32_t* selected,
                               int64_t selected_stride);

// Floats of scratch LaunchMlaAttention / LaunchGqaAttention need for `a` (per_row:
// AttentionScratchPerRow).
int64_t MlaAttentionScratchFloats(const MlaAttentionArgs& a, int64_t per_row);
int64_t GqaAttentionScratchFloats(const GqaAttentionArgs& a, int64_t per_row);
// Fewer than 256 (row, head) pairs over more than 256 attendable tokens: split-K
// (cuda_mla_split.cuh); otherwise a block per pair as described above.
void LaunchMlaAttention(const MlaAttentionArgs& a, float* scratch, int64_t per_row,
                        cudaStream_t stream);
void LaunchGqaAttention(const GqaAttentionArgs& a, float* scratch, int64_t per_row,
                        cudaStream_t stream);
void LaunchIndexerScores(const IndexerArgs& a, cudaStream_t stream);

}  // namespace lucid::cuda
