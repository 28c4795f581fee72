// Reference MLA attention (sparse or dense) over the paged latent cache, the DSA indexer scores,
// and top-k. KV rows are read in whatever dtype the pool stores (PagedRows::RowF32 decodes on the
// fly).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "backends/cpu/cpu_ops.h"
#include "core/parallel.h"

namespace lucid {

void CpuOps::MlaAttention(const MlaAttentionArgs& a) const {
  const int64_t R = a.latent_dim, P = a.rope_dim;
  ParallelFor(a.tokens * a.heads, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> p, scratch(a.kv.row_floats);
    for (int64_t th = begin; th < end; ++th) {
      const int64_t t = th / a.heads;
      const float* ql = a.q_latent + th * R;
      const float* qr = a.q_rope + th * P;
      // Token j of the row: listed (sparse) or consecutive from `first` (dense).
      const int32_t* sel = a.selected ? a.selected + t * a.selected_stride : nullptr;
      const int64_t first = a.dense_begin ? a.dense_begin[t] : 0;
      auto token = [&](int64_t j) { return sel ? sel[j] : first + j; };
      const int64_t n = a.selected_count[t];
      p.resize(n);
      float mx = -INFINITY;
      for (int64_t j = 0; j < n; ++j) {
        const float* row = a.kv.RowF32(token(j), scratch.data());
        float s = 0.0f;
        for (int64_t i = 0; i < R; ++i) s += ql[i] * row[i];
        for (int64_t i = 0; i < P; ++i) s += qr[i] * row[R + i];
        p[j] = s * a.scale;
        mx = std::max(mx, p[j]);
      }
      float sum = 0.0f;
      for (int64_t j = 0; j < n; ++j) {
        p[j] = std::exp(p[j] - mx);
        sum += p[j];
      }
      float* out = a.out_latent + th * R;
      std::fill(out, out + R, 0.0f);
      for (int64_t j = 0; j < n; ++j) {
        const float* row = a.kv.RowF32(token(j), scratch.data());
        const float wj = p[j] / sum;
        for (int64_t i = 0; i < R; ++i) out[i] += wj * row[i];
      }
    }
  });
}

void CpuOps::IndexerScores(const IndexerArgs& a) const {
  const int64_t D = a.head_dim;
  ParallelFor(a.tokens, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scratch(a.keys.row_floats);
    for (int64_t t = begin; t < end; ++t) {
      float* out = a.scores + t * a.score_stride;
      for (int64_t u = 0; u < a.causal_len[t]; ++u) {
        const float* k = a.keys.RowF32(u, scratch.data());
        float s = 0.0f;
        for (int64_t j = 0; j < a.heads; ++j) {
          const float* q = a.q + (t * a.heads + j) * D;
          float d = 0.0f;
          for (int64_t i = 0; i < D; ++i) d += q[i] * k[i];
          s += a.w[t * a.heads + j] * std::max(d, 0.0f);
        }
        out[u] = s;
      }
    }
  });
}

void CpuOps::TopK(const float* scores, int64_t n, int64_t k, int32_t* out) const {
  LUCID_CHECK(k <= n, "TopK k > n");
  std::vector<int32_t> idx(n);
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t x, int32_t y) {
    const float a = scores[x], b = scores[y];
    if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && (!std::isnan(b) || x < y);
    return a > b || (a == b && x < y);
  });
  std::copy(idx.begin(), idx.begin() + k, out);
}

}  // namespace lucid
