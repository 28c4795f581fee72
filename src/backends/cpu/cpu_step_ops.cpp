// CpuOps' reference for the ops that replaced the model's host loops over op outputs: KV row
// writes into the paged pool, row-wise top-k into an index tensor, and the numerics check's scan.
#include <cmath>
#include <string>
#include <vector>

#include "backends/cpu/cpu_ops.h"
#include "core/parallel.h"

namespace lucid {

void CpuOps::WriteKvRows(std::span<const Tensor* const> parts, const KvRowsOut& out,
                         std::span<const int64_t> pool_rows) const {
  const int64_t T = static_cast<int64_t>(pool_rows.size());
  int64_t width = 0;
  for (const Tensor* p : parts) {
    CheckDevices(*this, "WriteKvRows", {p});
    LUCID_CHECK(p->dtype() == DType::kF32 && p->rank() == 2 && p->size(0) == T,
                "WriteKvRows: every part must be f32 [T, w] with T = " + std::to_string(T));
    width += p->size(1);
  }
  LUCID_CHECK(width == out.fmt.row_floats, "WriteKvRows: the parts' widths sum to " +
                                               std::to_string(width) + ", the rows hold " +
                                               std::to_string(out.fmt.row_floats));
  LUCID_CHECK(out.fmt.row_bytes == KvRowBytes(out.fmt), "WriteKvRows: row_bytes of the format");
  for (int64_t r : pool_rows)
    LUCID_CHECK(r >= 0 && r < out.rows, "WriteKvRows: pool row " + std::to_string(r) +
                                            " outside [0, " + std::to_string(out.rows) + ")");
  ParallelFor(T, 8, [&](int64_t begin, int64_t end) {
    std::vector<float> row(width);
    for (int64_t t = begin; t < end; ++t) {
      int64_t at = 0;
      for (const Tensor* p : parts) {
        const int64_t w = p->size(1);
        std::copy_n(p->data<const float>() + t * w, w, row.data() + at);
        at += w;
      }
      EncodeKvRow(out.fmt, row.data(), out.bytes + pool_rows[t] * out.fmt.row_bytes);
    }
  });
}

void CpuOps::TopKRows(const Tensor& scores, std::span<const int64_t> lengths, int64_t k,
                      int32_t offset, Tensor& out) const {
  CheckDevices(*this, "TopKRows", {&scores, &out});
  const int64_t T = static_cast<int64_t>(lengths.size());
  LUCID_CHECK(scores.dtype() == DType::kF32 && scores.rank() == 2 && scores.size(0) == T,
              "TopKRows: scores must be f32 [T, S]");
  LUCID_CHECK(out.dtype() == DType::kI32 && out.rank() == 2 && out.size(0) == T &&
                  out.size(1) >= k && k >= 0,
              "TopKRows: out must be i32 [T, >= k]");
  const int64_t S = scores.size(1), W = out.size(1);
  for (int64_t n : lengths) LUCID_CHECK(n >= 0 && n <= S, "TopKRows: a length past the scores");
  ParallelFor(T, 1, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t n = lengths[t];
      int32_t* row = out.data<int32_t>() + t * W;
      if (n > k) {
        TopK(scores.data<const float>() + t * S, n, k, row);
        for (int64_t i = 0; i < k; ++i) row[i] += offset;
      } else {
        for (int64_t u = 0; u < n; ++u) row[u] = static_cast<int32_t>(u) + offset;
      }
    }
  });
}

void CpuOps::NonFiniteRows(const Tensor& x, Tensor& flags) const {
  CheckDevices(*this, "NonFiniteRows", {&x, &flags});
  const int64_t T = x.rank() == 0 ? 1 : x.size(0);
  LUCID_CHECK(x.dtype() == DType::kF32 && x.is_contiguous(), "NonFiniteRows: x must be f32");
  LUCID_CHECK(flags.dtype() == DType::kI32 && flags.numel() == T,
              "NonFiniteRows: flags must be i32 [T]");
  const int64_t row = T > 0 ? x.numel() / T : 0;
  ParallelFor(T, 16, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const float* p = x.data<const float>() + t * row;
      int32_t bad = 0;
      for (int64_t j = 0; j < row && !bad; ++j) bad = std::isfinite(p[j]) ? 0 : 1;
      flags.data<int32_t>()[t] = bad;
    }
  });
}

}  // namespace lucid
