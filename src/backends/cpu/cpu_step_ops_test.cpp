// CpuOps' WriteKvRows, TopKRows and NonFiniteRows against formulas written here: the stored rows
// read back as the inputs (f32 exactly, bf16 as the input rounded by core/dtype, fp8 within half
// an e4m3 step of each block's scale), a sort-based top-k, a per-row isfinite scan.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <vector>

#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/quant_test_util.h"
#include "core/dtype.h"

namespace lucid {
namespace {

using testing_util::Random;

const CpuOps kOps;

PagedRows Format(KvRowKind kind, int64_t width, int64_t fp8, int64_t block) {
  PagedRows f;
  f.kind = kind;
  f.row_floats = width;
  if (kind == KvRowKind::kFp8) {
    f.fp8_values = fp8;
    f.fp8_block = block;
  }
  f.row_bytes = KvRowBytes(f);
  return f;
}

// A view of pool rows 0..rows-1 as one page, so PagedRows::ReadRow reads pool row r as token r.
PagedRows AsOnePage(PagedRows f, const std::vector<uint8_t>& pool, int64_t rows,
                    const std::vector<int32_t>& page0) {
  f.page_table = page0;
  f.page_size = rows;
  f.page_bytes = rows * f.row_bytes;
  f.page_stride = rows * f.row_floats;
  if (f.kind == KvRowKind::kF32)
    f.base = reinterpret_cast<const float*>(pool.data());
  else
    f.bytes = pool.data();
  return f;
}

TEST(CpuStepOps, WriteKvRowsStoresEachRowAtItsPoolRowAndNothingElse) {
  const int64_t T = 5, A = 40, B = 9, rows = 12;
  const Tensor a = Random({T, A}, 1, -2.0f, 2.0f), b = Random({T, B}, 2);
  const std::vector<int64_t> dest = {7, 0, 11, 3, 4};
  const std::vector<int32_t> page0 = {0};
  for (KvRowKind kind : {KvRowKind::kF32, KvRowKind::kBF16, KvRowKind::kFp8}) {
    const PagedRows fmt = Format(kind, A + B, A, 16);
    std::vector<uint8_t> pool(rows * fmt.row_bytes, 0xCD);
    const Tensor* parts[] = {&a, &b};
    kOps.WriteKvRows(parts, {fmt, pool.data(), rows}, dest);
    const PagedRows view = AsOnePage(fmt, pool, rows, page0);
    std::vector<float> got(A + B);
    for (int64_t t = 0; t < T; ++t) {
      view.ReadRow(dest[t], got.data());
      for (int64_t j = 0; j < A + B; ++j) {
        const float x = j < A ? a.data<float>()[t * A + j] : b.data<float>()[t * B + j - A];
        if (kind == KvRowKind::kF32) {
          ASSERT_EQ(got[j], x) << t << "," << j;
        } else if (kind == KvRowKind::kBF16 || j >= A) {  // fp8 rows keep the tail in bf16
          ASSERT_EQ(got[j], Bf16ToF32(F32ToBf16(x))) << t << "," << j;
        } else {
          float amax = 0;  // the block's scale is amax / 448; e4m3 has 3 mantissa bits
          for (int64_t i = j / 16 * 16; i < std::min<int64_t>(A, j / 16 * 16 + 16); ++i)
            amax = std::max(amax, std::abs(a.data<float>()[t * A + i]));
          ASSERT_LE(std::abs(got[j] - x), std::abs(x) / 16.0f * 1.001f + amax / 448.0f / 512.0f)
              << t << "," << j;
        }
      }
    }
    for (int64_t r = 0; r < rows; ++r) {
      if (std::find(dest.begin(), dest.end(), r) != dest.end()) continue;
      for (int64_t i = 0; i < fmt.row_bytes; ++i)
        ASSERT_EQ(pool[r * fmt.row_bytes + i], 0xCD) << "row " << r << " was written";
    }
  }
}

// Top-k by sorting indices: larger first, NaN above every number, ties by the lower index.
std::vector<int32_t> SortTopK(const float* v, int64_t n, int64_t k) {
  std::vector<int32_t> idx(n);
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int32_t x, int32_t y) {
    const bool nx = std::isnan(v[x]), ny = std::isnan(v[y]);
    if (nx != ny) return nx;
    return !nx && v[x] > v[y];
  });
  idx.resize(k);
  return idx;
}

TEST(CpuStepOps, TopKRowsIsEachRowsTopKOrEveryCandidate) {
  const int64_t T = 6, S = 50, k = 8;
  Tensor scores = Random({T, S}, 3);
  for (int64_t i = 0; i < T * S; i += 7) scores.data<float>()[i] = 0.25f;  // ties
  scores.data<float>()[2 * S + 4] = std::numeric_limits<float>::quiet_NaN();
  const std::vector<int64_t> n = {50, 8, 3, 30, 1, 9};
  Tensor out = Tensor::Zeros(DType::kI32, {T, k + 2});
  for (int64_t i = 0; i < out.numel(); ++i) out.data<int32_t>()[i] = -7;
  kOps.TopKRows(scores, n, k, 100, out);
  for (int64_t t = 0; t < T; ++t) {
    const int32_t* row = out.data<int32_t>() + t * (k + 2);
    std::vector<int32_t> want;
    if (n[t] > k) {
      want = SortTopK(scores.data<float>() + t * S, n[t], k);
    } else {
      want.resize(n[t]);
      std::iota(want.begin(), want.end(), 0);
    }
    for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(row[i], want[i] + 100) << t << "," << i;
    for (int64_t i = static_cast<int64_t>(want.size()); i < k + 2; ++i)
      ASSERT_EQ(row[i], -7) << "entry " << i << " of row " << t << " was written";
  }
}

TEST(CpuStepOps, NonFiniteRowsFlagsExactlyTheRowsWithNaNOrInf) {
  Tensor x = Random({5, 3, 7}, 4);  // rows of 21 values
  x.data<float>()[1 * 21 + 20] = std::numeric_limits<float>::quiet_NaN();
  x.data<float>()[3 * 21 + 0] = -std::numeric_limits<float>::infinity();
  x.data<float>()[4 * 21 + 9] = std::numeric_limits<float>::max();  // finite
  Tensor flags = Tensor::Zeros(DType::kI32, {5});
  kOps.NonFiniteRows(x, flags);
  const std::vector<int32_t> want = {0, 1, 0, 1, 0};
  for (int64_t t = 0; t < 5; ++t) EXPECT_EQ(flags.data<int32_t>()[t], want[t]) << t;
}

}  // namespace
}  // namespace lucid
