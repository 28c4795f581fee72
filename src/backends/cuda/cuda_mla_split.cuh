// Split-K MLA attention (ops/ops.h MlaAttentionArgs) for few query rows over a long context:
// when a step has too few (row, head) pairs to fill the GPU, each pair's attended tokens are cut
// into splits of at most kMlaSplitThreads, one block each, and a second kernel merges them.
// - A split (MlaSplitPhases): a thread per token scores it (q_latent . ckv + q_rope . kpe, in
//   column order, times the scale); one thread takes the split's maximum m (std::max's rule, -inf
//   when none), p = exp(score - m) and l = the sum of p in token order; then every thread owns
//   latent columns i and sums p * ckv[i] in token order. Its partial is {m, l, acc[0..R)}.
// - The merge (MlaCombinePhases): M = the largest m; a split with m = -inf (no tokens, or every
//   score -inf) is left out; w = exp(m - M); out[i] = sum w * acc[i] / sum w * l, in split order
//   (zeros for a row that attends nothing, as the reference).
// The reference divides each p by the sum before weighting; here the division comes last: the
// same terms, rounded differently (the conformance tolerance 1e-5 holds either). A NaN or +inf
// score makes the row NaN as in the reference (a split that has one stores m = NaN, so that even a
// split of NaN scores alone is not taken for an empty one). The phases are host functions too
// (cuda_topk_block .cuh's pattern: `run` runs a phase on every thread, then a barrier), so
// cuda_mla_split_test.cpp runs them on the CPU through the conformance suite's MlaAttention cases.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "backends/cuda/cuda_kv_rows.cuh"
#include "ops/ops.h"

namespace lucid::cuda {

inline constexpr int kMlaSplitThreads = 256;  // threads per block; tokens per split at most
inline constexpr int kMlaSplitCols = 4;       // latent columns per thread: R <= 1024
inline constexpr int64_t kMlaMaxSplits = 1024;

struct MlaSplitState {
  const uint8_t* row[kMlaSplitThreads];
  float p[kMlaSplitThreads];
  float m, l;
};

struct MlaCombineState {
  float w[kMlaMaxSplits];
  float total;
};

// Floats of one split's partial: m, l, then R accumulators.
__host__ __device__ inline int64_t MlaPartFloats(int64_t R) { return 2 + R; }

// Split s (tokens [s * len, + len) of those pair th attends, len <= kMlaSplitThreads) into
// part[MlaPartFloats(R)].
template <typename Run>
__host__ __device__ void MlaSplitPhases(MlaSplitState& st, const MlaAttentionArgs& a,
                                        const DeviceRows& kv, int64_t th, int64_t s, int64_t len,
                                        float* part, Run run) {
  const int64_t t = th / a.heads, R = a.latent_dim, P = a.rope_dim;
  const int64_t n = a.selected_count[t], j0 = s * len;
  const int64_t count = n - j0 < 0 ? 0 : (n - j0 < len ? n - j0 : len);
  const int32_t* sel = a.selected ? a.selected + t * a.selected_stride : nullptr;
  const int64_t first = a.dense_begin ? a.dense_begin[t] : 0;
  const float* ql = a.q_latent + th * R;
  const float* qr = a.q_rope + th * P;
  run([&](int tid) {
    if (tid >= count) return;
    const int64_t j = j0 + tid;
    const int64_t u = sel ? sel[j] : first + j;
    const uint8_t* row = RowAt(kv, u);
    st.row[tid] = row;
    float sc = 0.0f;
    for (int64_t i = 0; i < R; ++i) sc += ql[i] * ValueAt(kv, row, i);
    for (int64_t i = 0; i < P; ++i) sc += qr[i] * ValueAt(kv, row, R + i);
    st.p[tid] = TokenInRange(kv, u) ? sc * a.scale : FloatFromBits(0x7fc00000u);
  });
  run([&](int tid) {
    if (tid != 0) return;
    float mx = -INFINITY;
    bool nan = false;  // std::max's rule never takes a NaN: a split of NaN scores says so in m
    for (int64_t j = 0; j < count; ++j) {
      mx = mx < st.p[j] ? st.p[j] : mx;
      nan |= st.p[j] != st.p[j];
    }
    float l = 0.0f;
    for (int64_t j = 0; j < count; ++j) {
      st.p[j] = expf(st.p[j] - mx);
      l += st.p[j];
    }
    st.m = nan ? NAN : mx;
    st.l = l;
  });
  run([&](int tid) {
    for (int c = 0; c < kMlaSplitCols; ++c) {
      const int64_t i = tid + int64_t{c} * kMlaSplitThreads;
      if (i >= R) break;
      float acc = 0.0f;
      for (int64_t j = 0; j < count; ++j) acc += st.p[j] * ValueAt(kv, st.row[j], i);
      part[2 + i] = acc;
    }
    if (tid == 0) {
      part[0] = st.m;
      part[1] = st.l;
    }
  });
}

// out_latent of pair th from its `splits` partials (parts: splits x MlaPartFloats(R)).
template <typename Run>
__host__ __device__ void MlaCombinePhases(MlaCombineState& st, const MlaAttentionArgs& a,
                                          int64_t th, int64_t splits, const float* parts, Run run) {
  const int64_t t = th / a.heads, R = a.latent_dim, stride = MlaPartFloats(R);
  const bool empty = a.selected_count[t] == 0;
  run([&](int tid) {
    if (tid != 0) return;
    float big = -INFINITY;
    for (int64_t s = 0; s < splits; ++s) {
      const float m = parts[s * stride];
      big = big < m ? m : big;
    }
    float total = 0.0f;
    for (int64_t s = 0; s < splits; ++s) {
      const float m = parts[s * stride];
      st.w[s] = m == -INFINITY ? 0.0f : expf(m - big);
      if (m != -INFINITY) total += st.w[s] * parts[s * stride + 1];
    }
    st.total = total;
  });
  run([&](int tid) {
    float* out = a.out_latent + th * R;
    for (int64_t i = tid; i < R; i += kMlaSplitThreads) {
      float acc = 0.0f;
      for (int64_t s = 0; s < splits; ++s)
        if (parts[s * stride] != -INFINITY) acc += st.w[s] * parts[s * stride + 2 + i];
      out[i] = empty ? 0.0f : acc / st.total;
    }
  });
}

}  // namespace lucid::cuda
