// Kernels of the CUDA sets that carry more logic than an elementwise loop: RoPE from a
// host-computed cos/sin table (RopeCosSin), DeepSeek-V3 routing (its top-k by SelectTopK), the KV
// row encoders (EncodeKvRow's bytes), and the MoE combine. Each mirrors the CPU reference's
// arithmetic (backends/cpu/cpu_ops.cpp, cpu_moe.cpp, cpu_step_ops.cpp, ops/kv_rows.cpp) so the
// conformance suite can hold it to the reference's tolerances, and equality where the reference is
// exact; their per-item bodies are in cuda_step_items.cuh, host functions too, which
// cuda_step_items_test.cpp runs on the CPU. These are reference kernels: one thread per row for
// the routing and encoders, correct at any size, not fast (row-wise top-k: cuda_topk.h). Every
// launcher is asynchronous on `stream`; all pointers are device memory.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <span>
#include <vector>

#include "ops/ops.h"

namespace lucid::cuda {

// LaunchRope's table for `positions`: cs[t, 0, i] = cos(pos_t * inv_freq_i) * attention_factor and
// cs[t, 1, i] the sine, computed on the host as the CPU reference computes them ([T, 2, dim / 2]).
std::vector<float> RopeCosSin(const RopeTable& table, std::span<const int64_t> positions);

// x viewed [T, heads, head_stride]: rotates `half` pairs from column `offset` of each head by
// cs[t, 0, i] (cos) and cs[t, 1, i] (sin), interleaved pairs (2i, 2i+1) or half-split (i, i+half).
void LaunchRope(float* x, int64_t T, int64_t heads, int64_t head_stride, int64_t offset,
                int64_t half, const float* cs, bool interleaved, cudaStream_t stream);

// MoeRoute for T rows of logits [T, E]; scratch holds T * (2E + n_group) floats.
void LaunchMoeRoute(const float* logits, int64_t T, int64_t E, const float* bias, int64_t n_group,
                    int64_t topk_group, int64_t k, bool norm_topk_prob, float scaling,
                    float* scratch, int32_t* idx, float* weights, cudaStream_t stream);

// WriteKvRows: the columns of up to kMaxKvParts parts concatenated per row, encoded in the row
// format (kind 0 f32, 1 bf16, 2 fp8 as ops/ops.h's KvRowKind), stored at bytes + pool_rows[t] *
// row_bytes.
inline constexpr int kMaxKvParts = 8;
struct KvParts {
  const float* data[kMaxKvParts] = {};
  int64_t width[kMaxKvParts] = {};
  int count = 0;
};
void LaunchWriteKvRows(const KvParts& parts, int64_t T, int kind, int64_t row_floats,
                       int64_t fp8_values, int64_t fp8_block, int64_t row_bytes,
                       const int64_t* pool_rows, uint8_t* bytes, cudaStream_t stream);

// out[rows[i], :] += w[i] * y[i, :] for i < n (rows distinct), D columns.
void LaunchScatterAddRows(float* out, int64_t D, const float* y, const int64_t* rows,
                          const float* w, int64_t n, cudaStream_t stream);

}  // namespace lucid::cuda
