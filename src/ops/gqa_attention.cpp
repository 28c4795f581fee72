// The reference (default) Ops::GqaAttention: for each query row and head, every attended token's
// score, the softmax and the weighted sum of values, in that order, all in float32. Parallel over
// (row, head) pairs, each computed by one thread alone, so the result does not depend on the
// thread count.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/parallel.h"
#include "ops/ops.h"

namespace lucid {

void Ops::GqaAttention(const GqaAttentionArgs& a) const {
  const int64_t T = a.tokens, H = a.heads, KH = a.kv_heads, D = a.head_dim;
  LUCID_CHECK(H > 0 && KH > 0 && H % KH == 0 && D > 0,
              "GqaAttention: heads must be a multiple "
              "of kv_heads");
  LUCID_CHECK(a.kv.row_floats == 2 * KH * D, "GqaAttention: KV rows must hold k and v");
  const int64_t group = H / KH, width = KH * D;
  ParallelFor(T * H, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> row(a.kv.row_floats), scores;
    for (int64_t th = begin; th < end; ++th) {
      const int64_t t = th / H, h = th % H, kh = h / group;
      const int64_t n = a.count[t], u0 = a.begin != nullptr ? a.begin[t] : 0;
      const float* q = a.q + (t * H + h) * D;
      float* out = a.out + (t * H + h) * D;
      std::fill(out, out + D, 0.0f);
      if (n <= 0) continue;
      scores.assign(n, 0.0f);
      float mx = -std::numeric_limits<float>::infinity();
      for (int64_t i = 0; i < n; ++i) {
        const float* k = a.kv.RowF32(u0 + i, row.data()) + kh * D;
        float dot = 0.0f;
        for (int64_t j = 0; j < D; ++j) dot += q[j] * k[j];
        scores[i] = dot * a.scale;
        mx = std::max(mx, scores[i]);
      }
      float sum = 0.0f;
      for (int64_t i = 0; i < n; ++i) {
        scores[i] = std::exp(scores[i] - mx);
        sum += scores[i];
      }
      for (int64_t i = 0; i < n; ++i) {
        const float* v = a.kv.RowF32(u0 + i, row.data()) + width + kh * D;
        const float p = scores[i] / sum;
        for (int64_t j = 0; j < D; ++j) out[j] += p * v[j];
      }
    }
  });
}

}  // namespace lucid
