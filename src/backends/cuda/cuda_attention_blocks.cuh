// The blocks of cuda_attention.cu's MlaKernel, GqaKernel and indexer kernels, host functions too,
// so that cuda_attention_blocks_test.cpp runs them on the CPU through the conformance suite's
// MlaAttention, GqaAttention and IndexerScores cases against the CPU reference.
// - MlaRowPhases: one (query row, head) pair by one block of kAttentionRowThreads threads, as
// phases
//   (cuda_block_phases.cuh): each thread scores the tokens j = tid, tid + kAttentionRowThreads, ...
//   into p[j] (q_latent . ckv + q_rope . kpe in column order, times the scale; NaN for a token past
//   the table) and the maximum by std::max's rule (a NaN never taken); p = exp(p - max) and their
//   sum; then each thread owns latent columns tid + c * kAttentionRowThreads (c < kMlaRowCols) and
//   adds (p[j] / sum) * ckv_j in token order, over tiles of kAttentionRowThreads tokens whose rows
//   are looked up once. A latent width past kAttentionRowThreads * kMlaRowCols looks each value's
//   row up instead.
// - GqaRowPhases: one (query row, query head) pair of GqaAttention by one block, as the MLA row:
//   scores q . k_u over the count[t] tokens from begin[t], the maximum, exp and sum, then each
//   thread owns head columns j and adds (p[i] / sum) * v_u[j] in token order (zeros when the row
//   attends nothing).
// - IndexerTokenScore: one (query row t, token u) score, sum_j w[t, j] * max(q[t, j] . k_u, 0)
//   (d_j summed over i, then s over j, as the reference); q_row is row t's queries (shared
//   memory in IndexerTokensKernel, global memory in IndexerKernel).
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "backends/cuda/cuda_block_phases.cuh"
#include "backends/cuda/cuda_kv_rows.cuh"
#include "ops/ops.h"

namespace lucid::cuda {

inline constexpr int kAttentionRowThreads = 256;
inline constexpr int kMlaRowCols = 4;        // latent columns per thread in the tiled form
inline constexpr int kIndexerMaxHeads = 64;  // IndexerTokenScore's per-head sums in registers

struct AttentionRowState {
  float red[kAttentionRowThreads];
  float mx, sum;
  const uint8_t* tile[kAttentionRowThreads];
  float acc[kMlaRowCols][kAttentionRowThreads];
};

// p[j] = score(j) for j < n, each thread its j = tid, tid + kAttentionRowThreads, ...; then
// p[j] = exp(p[j] - max) with the maximum by std::max's rule; returns the sum of the p[j].
template <typename Run, typename Score>
__host__ __device__ float SoftmaxNumerators(AttentionRowState& st, float* p, int64_t n, Run run,
                                            Score score) {
  constexpr int kT = kAttentionRowThreads;
  const float mx = TreeReduce<kT>(
      st.red, &st.mx,
      [&](int tid) {
        float m = -INFINITY;
        for (int64_t j = tid; j < n; j += kT) {
          p[j] = score(j);
          m = MaxRuleOp{}(m, p[j]);
        }
        return m;
      },
      MaxRuleOp{}, run);
  return TreeReduce<kT>(
      st.red, &st.sum,
      [&](int tid) {
        float part = 0.0f;
        for (int64_t j = tid; j < n; j += kT) {
          p[j] = expf(p[j] - mx);
          part += p[j];
        }
        return part;
      },
      FloatSumOp{}, run);
}

// Pair th = (t, head) of `a` into a.out_latent; p holds the pair's selected_count[t] scores.
template <typename Run>
__host__ __device__ void MlaRowPhases(AttentionRowState& st, const MlaAttentionArgs& a,
                                      const DeviceRows& kv, int64_t th, float* p, Run run) {
  constexpr int kT = kAttentionRowThreads;
  const int64_t t = th / a.heads, R = a.latent_dim, P = a.rope_dim;
  const float* ql = a.q_latent + th * R;
  const float* qr = a.q_rope + th * P;
  const int32_t* sel = a.selected ? a.selected + t * a.selected_stride : nullptr;
  const int64_t first = a.dense_begin ? a.dense_begin[t] : 0;
  const int64_t n = a.selected_count[t];
  auto token = [&](int64_t j) -> int64_t { return sel ? sel[j] : first + j; };
  const float sum = SoftmaxNumerators(st, p, n, run, [&](int64_t j) {
    const int64_t u = token(j);
    const uint8_t* row = RowAt(kv, u);
    float s = 0.0f;
    for (int64_t i = 0; i < R; ++i) s += ql[i] * ValueAt(kv, row, i);
    for (int64_t i = 0; i < P; ++i) s += qr[i] * ValueAt(kv, row, R + i);
    return TokenInRange(kv, u) ? s * a.scale : FloatFromBits(0x7fc00000u);
  });
  float* out = a.out_latent + th * R;
  if (R > int64_t{kMlaRowCols} * kT) {  // wider than the tiles: each value's row looked up
    run([&](int tid) {
      for (int64_t i = tid; i < R; i += kT) {
        float acc = 0.0f;
        for (int64_t j = 0; j < n; ++j) acc += (p[j] / sum) * RowValue(kv, token(j), i);
        out[i] = acc;
      }
    });
    return;
  }
  run([&](int tid) {
    for (int c = 0; c < kMlaRowCols; ++c) st.acc[c][tid] = 0.0f;
  });
  for (int64_t j0 = 0; j0 < n; j0 += kT) {
    run([&](int tid) {
      if (j0 + tid < n) st.tile[tid] = RowAt(kv, token(j0 + tid));
    });
    run([&](int tid) {
      const int64_t m = n - j0 < kT ? n - j0 : kT;
      for (int c = 0; c < kMlaRowCols; ++c) {
        const int64_t i = tid + int64_t{c} * kT;
        if (i >= R) break;
        float acc = st.acc[c][tid];
        for (int64_t jj = 0; jj < m; ++jj) acc += (p[j0 + jj] / sum) * ValueAt(kv, st.tile[jj], i);
        st.acc[c][tid] = acc;
      }
    });
  }
  run([&](int tid) {
    for (int c = 0; c < kMlaRowCols; ++c) {
      const int64_t i = tid + int64_t{c} * kT;
      if (i < R) out[i] = st.acc[c][tid];
    }
  });
}

// Pair th = (t, h) of `a` into a.out; p holds the pair's count[t] scores.
template <typename Run>
__host__ __device__ void GqaRowPhases(AttentionRowState& st, const GqaAttentionArgs& a,
                                      const DeviceRows& kv, int64_t th, float* p, Run run) {
  constexpr int kT = kAttentionRowThreads;
  const int64_t H = a.heads, D = a.head_dim, group = H / a.kv_heads, width = a.kv_heads * D;
  const int64_t t = th / H, h = th % H, kh = h / group;
  const int64_t n = a.count[t], u0 = a.begin ? a.begin[t] : 0;
  const float* q = a.q + (t * H + h) * D;
  float* out = a.out + (t * H + h) * D;
  const float sum = SoftmaxNumerators(st, p, n, run, [&](int64_t i) {
    float dot = 0.0f;
    for (int64_t j = 0; j < D; ++j) dot += q[j] * RowValue(kv, u0 + i, kh * D + j);
    return dot * a.scale;
  });
  run([&](int tid) {
    for (int64_t j = tid; j < D; j += kT) {
      float acc = 0.0f;
      for (int64_t i = 0; i < n; ++i)
        acc += (p[i] / sum) * RowValue(kv, u0 + i, width + kh * D + j);
      out[j] = n > 0 ? acc : 0.0f;
    }
  });
}

// Row t's score of token u (u < causal_len[t]); q_row = row t's heads * head_dim queries.
__host__ __device__ inline float IndexerTokenScore(const IndexerArgs& a, const DeviceRows& keys,
                                                   const float* q_row, int64_t t, int64_t u) {
  const int64_t D = a.head_dim, H = a.heads;
  const uint8_t* row = RowAt(keys, u);
  float s = 0.0f;
  for (int64_t j0 = 0; j0 < H; j0 += kIndexerMaxHeads) {  // one pass when H <= kIndexerMaxHeads
    float d[kIndexerMaxHeads];
    LUCID_UNROLL
    for (int j = 0; j < kIndexerMaxHeads; ++j) d[j] = 0.0f;
    for (int64_t i = 0; i < D; ++i) {
      const float k = ValueAt(keys, row, i);
      LUCID_UNROLL
      for (int j = 0; j < kIndexerMaxHeads; ++j)
        if (j0 + j < H) d[j] += q_row[(j0 + j) * D + i] * k;
    }
    LUCID_UNROLL
    for (int j = 0; j < kIndexerMaxHeads; ++j)
      if (j0 + j < H) s += a.w[t * H + j0 + j] * (d[j] < 0.0f ? 0.0f : d[j]);  // std::max(d, 0)
  }
  return s;
}

}  // namespace lucid::cuda
