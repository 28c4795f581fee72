// GGUF tensors as Weights: DequantizeRow equals the gguf package's dequantization bit for bit, and
// CpuOps / CpuFastOps Linear and LinearTransposed equal a plain f32 loop over those rows (in
// column order, so exactly for the reference; the fast set takes the reference path for kGgml).
// The oracle rows are `<TYPE>.expected` in tests/fixtures/gguf/types.gguf
// (tools/reference/gguf/make_fixtures.py).
#include "models/gguf_weights.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "backends/cpu/cpu_fast_ops.h"
#include "backends/cpu/cpu_ops.h"

namespace lucid {
namespace {

std::shared_ptr<GgufFile> Fixture() {
  auto f = GgufFile::Open(std::string(LUCID_SOURCE_DIR) + "/tests/fixtures/gguf/types.gguf");
  EXPECT_TRUE(f.ok()) << f.status().ToString();
  return f.ok() ? *f : nullptr;
}

class GgufWeight : public ::testing::TestWithParam<const char*> {};

TEST_P(GgufWeight, RowsAndLinearEqualTheGgufPackage) {
  auto f = Fixture();
  ASSERT_NE(f, nullptr);
  const std::string name = GetParam();
  auto w = WeightFromGguf(*f, name);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  auto want = f->Get(name + ".expected");
  ASSERT_TRUE(want.ok());
  const int64_t R = w->rows, C = w->cols;
  ASSERT_EQ(R, 3);
  const float* ref = want->data<float>();
  std::vector<float> row(C);
  for (int64_t r = 0; r < R; ++r) {
    DequantizeRow(*w, r, row.data());
    ASSERT_EQ(std::memcmp(row.data(), ref + r * C, C * 4), 0) << name << " row " << r;
  }
  // A view of the last two rows finds its own rows.
  Weight tail = w->RowRange(1, 2);
  DequantizeRow(tail, 1, row.data());
  EXPECT_EQ(std::memcmp(row.data(), ref + 2 * C, C * 4), 0);

  const int64_t T = 5;
  std::mt19937 rng(7);
  std::normal_distribution<float> nd;
  Tensor x = Tensor::Zeros(DType::kF32, {T, C});
  for (int64_t i = 0; i < T * C; ++i) x.data<float>()[i] = nd(rng);
  std::vector<float> expect(T * R);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t r = 0; r < R; ++r) {
      float a = 0;
      for (int64_t c = 0; c < C; ++c) a += x.data<float>()[t * C + c] * ref[r * C + c];
      expect[t * R + r] = a;
    }
  CpuOps reference;
  CpuFastOps fast;
  for (const Ops* ops : {static_cast<const Ops*>(&reference), static_cast<const Ops*>(&fast)}) {
    Tensor y = Tensor::Zeros(DType::kF32, {T, R});
    ops->Linear(x, *w, y);
    if (ops == &reference) {  // the fast set's GGUF kernels sum in another order
      EXPECT_EQ(std::memcmp(y.data<float>(), expect.data(), T * R * 4), 0) << ops->name();
    } else {
      for (int64_t i = 0; i < T * R; ++i)
        EXPECT_NEAR(y.data<float>()[i], expect[i], 1e-3 * (1 + std::abs(expect[i]))) << ops->name();
    }
    // x [T, R] times W [R, C].
    Tensor xt = Tensor::Zeros(DType::kF32, {T, R});
    for (int64_t i = 0; i < T * R; ++i) xt.data<float>()[i] = nd(rng);
    Tensor yt = Tensor::Zeros(DType::kF32, {T, C});
    ops->LinearTransposed(xt, *w, yt);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < C; ++c) {
        float a = 0;
        for (int64_t r = 0; r < R; ++r) a += xt.data<float>()[t * R + r] * ref[r * C + c];
        EXPECT_NEAR(yt.data<float>()[t * C + c], a, 1e-4 * (1 + std::abs(a))) << ops->name();
      }
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, GgufWeight,
                         ::testing::Values("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q4_K",
                                           "Q5_K", "Q6_K"),
                         [](const auto& info) { return std::string(info.param); });

TEST(GgufWeight, FormatsAndErrors) {
  auto f = Fixture();
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(WeightFromGguf(*f, "F32")->format, WeightFormat::kF32);
  EXPECT_EQ(WeightFromGguf(*f, "BF16")->format, WeightFormat::kBF16);
  auto q = WeightFromGguf(*f, "Q6_K");
  EXPECT_EQ(q->format, WeightFormat::kGgml);
  EXPECT_EQ(q->ggml_type, GgmlType::kQ6_K);
  EXPECT_EQ(q->StoredBytes(), 3u * 2 * 210);
  EXPECT_EQ(WeightFromGguf(*f, "missing").status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace lucid
