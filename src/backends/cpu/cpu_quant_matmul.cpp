// Reference matmul with packed weights (NVFP4, FP8 block): dequantize on the fly, one chunk of a
// weight row at a time, accumulate in f32 in column order. The oracle for the fast kernels.
#include <algorithm>
#include <vector>

#include "backends/cpu/cpu_ops.h"
#include "core/parallel.h"

namespace lucid {

void LinearQuantReference(const Tensor& x, const Weight& w, Tensor& y) {
  const int64_t T = x.size(0);
  LUCID_CHECK(
      x.size(-1) == w.cols && y.size(-1) == w.rows && y.size(0) == T,
      "Linear shape mismatch for " + w.name + ": x " + x.DebugString() + " y " + y.DebugString());
  // Chunk: a whole number of scale blocks, about 128 columns.
  const int64_t bc = w.block_cols > 0 ? w.block_cols : 128;
  const int64_t chunk = bc * std::max<int64_t>(1, 128 / bc);
  const float* xs = x.data<const float>();
  float* ys = y.data<float>();
  ParallelFor(w.rows, 4, [&](int64_t begin, int64_t end) {
    std::vector<float> blk(chunk), acc(T);
    for (int64_t o = begin; o < end; ++o) {
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t c0 = 0; c0 < w.cols; c0 += chunk) {
        const int64_t n = std::min(chunk, w.cols - c0);
        DequantizeRowSpan(w, o, c0, n, blk.data());
        for (int64_t t = 0; t < T; ++t) {
          const float* xt = xs + t * w.cols + c0;
          float a = acc[t];
          for (int64_t i = 0; i < n; ++i) a += xt[i] * blk[i];
          acc[t] = a;
        }
      }
      for (int64_t t = 0; t < T; ++t) ys[t * w.rows + o] = acc[t];
    }
  });
}

}  // namespace lucid
