// MLA attention (ops/ops.h MlaAttentionArgs) with a query row's heads in groups: a block per (row
// t, group of up to kMlaHeadGroup heads) reads each attended token's row once for the whole group
// (MLA's heads share one latent row per token), where a block per (row, head) read it once per
// head. For steps whose (row, head) pairs fill the GPU (decode batches, prefill; fewer pairs take
// split-K, cuda_mla_split.cuh).
// - scores: a thread per attended token decodes its row value by value (q_latent . ckv, then
//   q_rope . kpe, in column order, times the scale: each head's sum in the reference's order) for
//   every head of the group at once, into the block's scratch p[head][token]; an index outside the
//   page table scores NaN (cuda_kv_rows.h);
// - per head: the maximum by std::max's rule (a NaN never taken), p = exp(score - max), the sum;
// - the output: the weights p / sum, each divided once; then tiles of kMlaHeadThreads tokens
//   (their rows looked up once into shared memory), each thread owning latent columns i and
//   adding weight * ckv[i] in token order for every head of the group (the reference's terms in
//   its order); a row attending nothing gets zeros.
// The maxima and sums are folded over the threads' partials in thread order, not the reference's
// token order: the same terms (the conformance tolerance 1e-5 holds). The phases are host
// functions too: `run` runs a phase on every thread with that thread's locals (the kernel: its
// registers; cuda_mla_heads_test.cpp: one set per thread), then a barrier.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "backends/cuda/cuda_kv_rows.cuh"
#include "ops/ops.h"

namespace lucid::cuda {

inline constexpr int kMlaHeadThreads = 256;
inline constexpr int kMlaHeadGroup = 8;
inline constexpr int kMlaHeadCols = 4;            // latent columns per thread: R <= 1024
inline constexpr int64_t kMlaHeadQFloats = 4608;  // a group's queries: 8 x (512 + 64)

struct MlaHeadsState {
  float q[kMlaHeadQFloats];                     // head g's latent then rope query at g (R + P)
  float part[kMlaHeadGroup][kMlaHeadThreads];   // per thread: its maximum, then its sum
  float mx[kMlaHeadGroup], sum[kMlaHeadGroup];  // per head
  const uint8_t* tile[kMlaHeadThreads];         // the rows of the output phase's tile
};

// One thread's values across phases (the kernel's registers).
struct MlaHeadsLocals {
  float acc[kMlaHeadGroup][kMlaHeadCols];
};

// Whether the grouped kernel takes `a` (its queries fit the shared buffer, its columns the
// threads).
__host__ __device__ inline bool MlaHeadsFits(const MlaAttentionArgs& a) {
  const int64_t g = a.heads < kMlaHeadGroup ? a.heads : kMlaHeadGroup;
  return a.latent_dim <= int64_t{kMlaHeadCols} * kMlaHeadThreads &&
         g * (a.latent_dim + a.rope_dim) <= kMlaHeadQFloats;
}

__host__ __device__ inline int64_t MlaHeadGroups(int64_t heads) {
  return (heads + kMlaHeadGroup - 1) / kMlaHeadGroup;
}

// std::max(a, b)'s rule: b only when a < b (a NaN b is never taken).
__host__ __device__ inline float MaxRule(float a, float b) { return a < b ? b : a; }

// Row t's head group gi (heads [gi * kMlaHeadGroup, + G)); p holds kMlaHeadGroup x per_row floats.
template <typename Run>
__host__ __device__ void MlaHeadsPhases(MlaHeadsState& st, const MlaAttentionArgs& a,
                                        const DeviceRows& kv, int64_t t, int64_t gi, float* p,
                                        int64_t per_row, Run run) {
  const int64_t R = a.latent_dim, P = a.rope_dim, h0 = gi * kMlaHeadGroup;
  const int G = static_cast<int>(a.heads - h0 < kMlaHeadGroup ? a.heads - h0 : kMlaHeadGroup);
  const int64_t n = a.selected_count[t];
  const int32_t* sel = a.selected ? a.selected + t * a.selected_stride : nullptr;
  const int64_t first = a.dense_begin ? a.dense_begin[t] : 0;
  const float inf = FloatFromBits(0x7f800000u), nan = FloatFromBits(0x7fc00000u);
  run([&](int tid, MlaHeadsLocals&) {
    for (int64_t k = tid; k < G * (R + P); k += kMlaHeadThreads) {
      const int64_t g = k / (R + P), i = k % (R + P);
      st.q[k] = i < R ? a.q_latent[(t * a.heads + h0 + g) * R + i]
                      : a.q_rope[(t * a.heads + h0 + g) * P + (i - R)];
    }
  });
  run([&](int tid, MlaHeadsLocals&) {
    float mx[kMlaHeadGroup], s[kMlaHeadGroup];
    LUCID_UNROLL
    for (int g = 0; g < kMlaHeadGroup; ++g) mx[g] = -inf;
    for (int64_t j = tid; j < n; j += kMlaHeadThreads) {
      const int64_t u = sel ? sel[j] : first + j;
      const uint8_t* row = RowAt(kv, u);
      LUCID_UNROLL
      for (int g = 0; g < kMlaHeadGroup; ++g) s[g] = 0.0f;
      for (int64_t i = 0; i < R + P; ++i) {
        const float v = ValueAt(kv, row, i);
        LUCID_UNROLL
        for (int g = 0; g < kMlaHeadGroup; ++g)
          if (g < G) s[g] += st.q[g * (R + P) + i] * v;
      }
      const bool in_range = TokenInRange(kv, u);
      LUCID_UNROLL
      for (int g = 0; g < kMlaHeadGroup; ++g) {
        if (g >= G) continue;
        p[g * per_row + j] = in_range ? s[g] * a.scale : nan;
        mx[g] = MaxRule(mx[g], p[g * per_row + j]);
      }
    }
    LUCID_UNROLL
    for (int g = 0; g < kMlaHeadGroup; ++g) st.part[g][tid] = mx[g];
  });
  run([&](int tid, MlaHeadsLocals&) {
    if (tid >= G) return;
    float m = -inf;
    for (int k = 0; k < kMlaHeadThreads; ++k) m = MaxRule(m, st.part[tid][k]);
    st.mx[tid] = m;
  });
  run([&](int tid, MlaHeadsLocals&) {
    float s[kMlaHeadGroup];
    LUCID_UNROLL
    for (int g = 0; g < kMlaHeadGroup; ++g) s[g] = 0.0f;
    for (int64_t j = tid; j < n; j += kMlaHeadThreads) {
      LUCID_UNROLL
      for (int g = 0; g < kMlaHeadGroup; ++g) {
        if (g >= G) continue;
        const float e = expf(p[g * per_row + j] - st.mx[g]);
        p[g * per_row + j] = e;
        s[g] += e;
      }
    }
    LUCID_UNROLL
    for (int g = 0; g < kMlaHeadGroup; ++g) st.part[g][tid] = s[g];
  });
  run([&](int tid, MlaHeadsLocals& l) {
    if (tid < G) {
      float s = 0.0f;
      for (int k = 0; k < kMlaHeadThreads; ++k) s += st.part[tid][k];
      st.sum[tid] = s;
    }
    LUCID_UNROLL
    for (int g = 0; g < kMlaHeadGroup; ++g) {
      LUCID_UNROLL
      for (int c = 0; c < kMlaHeadCols; ++c) l.acc[g][c] = 0.0f;
    }
  });
  run([&](int tid, MlaHeadsLocals&) {  // each weight p / sum once (the reference's division)
    for (int64_t j = tid; j < n; j += kMlaHeadThreads) {
      LUCID_UNROLL
      for (int g = 0; g < kMlaHeadGroup; ++g)
        if (g < G) p[g * per_row + j] = p[g * per_row + j] / st.sum[g];
    }
  });
  for (int64_t j0 = 0; j0 < n; j0 += kMlaHeadThreads) {
    run([&](int tid, MlaHeadsLocals&) {
      if (j0 + tid < n) st.tile[tid] = RowAt(kv, sel ? sel[j0 + tid] : first + j0 + tid);
    });
    const int64_t m = n - j0 < kMlaHeadThreads ? n - j0 : kMlaHeadThreads;
    run([&](int tid, MlaHeadsLocals& l) {
      LUCID_UNROLL
      for (int c = 0; c < kMlaHeadCols; ++c) {
        const int64_t i = tid + c * int64_t{kMlaHeadThreads};
        if (i >= R) break;
        for (int64_t jj = 0; jj < m; ++jj) {
          const float v = ValueAt(kv, st.tile[jj], i);
          LUCID_UNROLL
          for (int g = 0; g < kMlaHeadGroup; ++g)
            if (g < G) l.acc[g][c] += p[g * per_row + j0 + jj] * v;
        }
      }
    });
  }
  run([&](int tid, MlaHeadsLocals& l) {
    LUCID_UNROLL
    for (int c = 0; c < kMlaHeadCols; ++c) {
      const int64_t i = tid + c * int64_t{kMlaHeadThreads};
      if (i >= R) break;
      LUCID_UNROLL
      for (int g = 0; g < kMlaHeadGroup; ++g)
        if (g < G) a.out_latent[(t * a.heads + h0 + g) * R + i] = l.acc[g][c];
    }
  });
}

}  // namespace lucid::cuda
