// CpuFastOps::GqaAttention: the reference's math (ops/gqa_attention.cpp) reorganized for memory
// traffic. A task is one query row and one KV head: the group of query heads that share that KV
// head run together, so each attended KV row is read, and for bf16 / fp8 storage decoded, once per
// task instead of twice per query head. The softmax is computed online: a running maximum per
// head, with the running sum and the value accumulator rescaled by exp(old max - new max) when the
// maximum grows (the same quantity as the reference's, rounded differently: the conformance
// suite's tolerance is 1e-5 relative). Dot products use 8 partial sums.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backends/cpu/cpu_fast_ops.h"
#include "core/parallel.h"

namespace lucid {
namespace {

float Dot(const float* a, const float* b, int64_t n) {
  float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t j = 0;
  for (; j + 8 <= n; j += 8)
    for (int k = 0; k < 8; ++k) s[k] += a[j + k] * b[j + k];
  float tail = 0.0f;
  for (; j < n; ++j) tail += a[j] * b[j];
  return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7])) + tail;
}

}  // namespace

void CpuFastOps::GqaAttention(const GqaAttentionArgs& a) const {
  const int64_t T = a.tokens, H = a.heads, KH = a.kv_heads, D = a.head_dim;
  LUCID_CHECK(H > 0 && KH > 0 && H % KH == 0 && D > 0,
              "GqaAttention: heads must be a multiple of kv_heads");
  LUCID_CHECK(a.kv.row_floats == 2 * KH * D, "GqaAttention: KV rows must hold k and v");
  const int64_t G = H / KH, width = KH * D;
  ParallelFor(T * KH, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> row(a.kv.row_floats), acc(G * D), mx(G), sum(G);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t t = task / KH, kh = task % KH;
      const int64_t n = a.count[t], u0 = a.begin != nullptr ? a.begin[t] : 0;
      std::fill(acc.begin(), acc.end(), 0.0f);
      std::fill(mx.begin(), mx.end(), -std::numeric_limits<float>::infinity());
      std::fill(sum.begin(), sum.end(), 0.0f);
      for (int64_t i = 0; i < n; ++i) {
        const float* r = a.kv.RowF32(u0 + i, row.data());
        const float* k = r + kh * D;
        const float* v = r + width + kh * D;
        for (int64_t g = 0; g < G; ++g) {
          const float* q = a.q + (t * H + kh * G + g) * D;
          const float s = Dot(q, k, D) * a.scale;
          float* o = acc.data() + g * D;
          float p;
          if (s > mx[g]) {  // a new maximum: rescale what was accumulated under the old one
            const float c = std::exp(mx[g] - s);
            for (int64_t j = 0; j < D; ++j) o[j] *= c;
            sum[g] *= c;
            mx[g] = s;
            p = std::exp(s - s);  // 1, or NaN for +inf (as the reference's exp(inf - inf))
          } else {
            p = std::exp(s - mx[g]);  // NaN scores stay NaN here and poison the row
          }
          sum[g] += p;
          for (int64_t j = 0; j < D; ++j) o[j] += p * v[j];
        }
      }
      for (int64_t g = 0; g < G; ++g) {
        float* out = a.out + (t * H + kh * G + g) * D;
        const float inv = n > 0 ? 1.0f / sum[g] : 0.0f;
        for (int64_t j = 0; j < D; ++j) out[j] = n > 0 ? acc[g * D + j] * inv : 0.0f;
      }
    }
  });
}

}  // namespace lucid
