// CpuOps' glue ops against element-by-element formulas.
#include <gtest/gtest.h>

#include "backends/cpu/cpu_fast_ops.h"
#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/quant_test_util.h"

namespace lucid {
namespace {

using testing_util::Random;

const CpuOps kOps;

TEST(CpuGlueTest, AccumulateAndScale) {
  Tensor x = Random({7, 33}, 1), y = Random({7, 33}, 2), x0 = x.Clone();
  kOps.Accumulate(x, y);
  for (int64_t i = 0; i < x.numel(); ++i)
    ASSERT_EQ(x.data<float>()[i], x0.data<float>()[i] + y.data<float>()[i]);
  Tensor z = x.Clone();
  kOps.Scale(z, -0.37f);
  for (int64_t i = 0; i < z.numel(); ++i)
    ASSERT_EQ(z.data<float>()[i], x.data<float>()[i] * -0.37f);
}

TEST(CpuGlueTest, CopyColumnsTakesTheSameColumnsOfEveryGroup) {
  // 5 rows of 3 groups of 11 columns plus 2 more; columns [4, 4 + 6) of each group.
  const int64_t T = 5, G = 3, S = 11, off = 4, W = 6;
  Tensor x = Random({T, G * S + 2}, 3), out = Tensor::Zeros(DType::kF32, {T, G * W});
  kOps.CopyColumns(x, G, S, off, W, out);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t g = 0; g < G; ++g)
      for (int64_t j = 0; j < W; ++j)
        ASSERT_EQ(out.data<float>()[(t * G + g) * W + j],
                  x.data<float>()[t * (G * S + 2) + g * S + off + j]);
}

TEST(CpuGlueTest, GatherRowsInTheGivenOrder) {
  Tensor x = Random({6, 9}, 4), out = Tensor::Zeros(DType::kF32, {3, 9});
  const int64_t rows[] = {5, 0, 5};
  kOps.GatherRows(x, rows, out);
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 9; ++j)
      ASSERT_EQ(out.data<float>()[i * 9 + j], x.data<float>()[rows[i] * 9 + j]);
  EXPECT_TRUE(kOps.Synchronize().ok());
}

// An argument on another device is refused by name, by the reference and the fast set alike
// (the bytes below are host memory tagged cuda: only the tag is checked, nothing is read).
TEST(CpuOpsDeathTest, AnArgumentOnAnotherDeviceIsOneClearError) {
  Tensor x = Random({2, 8}, 5);
  Tensor d = Tensor::Borrow(DType::kF32, {2, 8}, x.raw(), nullptr, Device::kCuda);
  EXPECT_EQ(kOps.device(), Device::kCpu);
  EXPECT_DEATH(kOps.Accumulate(x, d),
               "Accumulate: an argument on cuda, but cpu-reference runs on cpu");
  EXPECT_DEATH(kOps.Scale(d, 2.0f), "Scale: an argument on cuda");
  const CpuFastOps fast;
  Tensor w = Random({8}, 6), y = Random({2, 8}, 7);
  EXPECT_DEATH(fast.RmsNorm(d, w, 1e-6f, y), "RmsNorm: an argument on cuda, but cpu-fast");
}

}  // namespace
}  // namespace lucid
