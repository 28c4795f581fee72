// Host-side tests of the FP8 block scale conversions and cuBLASLt scale layouts (no GPU needed).
// Expected values are worked out here from the formats' definitions: ue8m0 code e = 2^(e-127),
// e4m3 codes in [1, 2) step by 1/8, a rounded-up scale s' = 2^ceil(log2 s).
#include "backends/cuda/cuda_fp8_scales.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <limits>
#include <vector>

#include "core/dtype.h"

namespace lucid::cuda {
namespace {

using ::testing::HasSubstr;

TEST(Fp8ScalesTest, Ue8m0ToF32IsExactAndCode255IsNaN) {
  const std::vector<uint8_t> codes = {0, 1, 100, 126, 127, 128, 200, 254, 255};
  std::vector<float> out(codes.size());
  Ue8m0ScalesToF32(codes.data(), static_cast<int64_t>(codes.size()), out.data());
  for (size_t i = 0; i + 1 < codes.size(); ++i)
    EXPECT_EQ(out[i], std::ldexp(1.0f, static_cast<int>(codes[i]) - 127)) << int(codes[i]);
  EXPECT_EQ(out[0], 1.0f / 8.507059173023462e37f / 2.0f);  // 2^-127 = 2^-126 / 2, a subnormal
  EXPECT_EQ(out[4], 1.0f);
  EXPECT_EQ(out[7], 1.7014118346046923e38f);  // 2^127
  EXPECT_TRUE(std::isnan(out[8]));
}

TEST(Fp8ScalesTest, CeilCodeIsTheNextPowerOfTwo) {
  EXPECT_EQ(Ue8m0CeilCode(1.0f), 127);
  EXPECT_EQ(Ue8m0CeilCode(0.5f), 126);
  EXPECT_EQ(Ue8m0CeilCode(0.75f), 127);  // -> 1
  EXPECT_EQ(Ue8m0CeilCode(1.5f), 128);   // -> 2 (up, never to nearest)
  EXPECT_EQ(Ue8m0CeilCode(1.0000001f), 128);
  EXPECT_EQ(Ue8m0CeilCode(3.0f), 129);
  EXPECT_EQ(Ue8m0CeilCode(std::ldexp(1.0f, 127)), 254);
  EXPECT_EQ(Ue8m0CeilCode(std::ldexp(1.0f, -127)), 0);   // subnormal power of two
  EXPECT_EQ(Ue8m0CeilCode(std::ldexp(1.0f, -140)), 0);   // below 2^-127: up to 2^-127
  EXPECT_EQ(Ue8m0CeilCode(std::ldexp(1.5f, -127)), 1);   // 1.5 * 2^-127 -> 2^-126
  EXPECT_EQ(Ue8m0CeilCode(std::ldexp(1.5f, 126)), 254);  // -> 2^127
  EXPECT_EQ(Ue8m0CeilCode(std::ldexp(1.5f, 127)), -1);   // -> 2^128: none
  EXPECT_EQ(Ue8m0CeilCode(FLT_MAX), -1);
  EXPECT_EQ(Ue8m0CeilCode(0.0f), -1);
  EXPECT_EQ(Ue8m0CeilCode(-1.0f), -1);
  EXPECT_EQ(Ue8m0CeilCode(std::numeric_limits<float>::infinity()), -1);
  EXPECT_EQ(Ue8m0CeilCode(std::numeric_limits<float>::quiet_NaN()), -1);
}

TEST(Fp8ScalesTest, NearestE4m3RoundsTiesToEvenAndIsExactPastFloatRounding) {
  // Representable values come back as their code.
  for (float v : {0.0f, 1.0f, 1.125f, -448.0f, 0.001953125f /* 2^-9, smallest subnormal */})
    EXPECT_EQ(F8E4M3ToF32(NearestE4m3(v)), v);
  EXPECT_EQ(F8E4M3ToF32(NearestE4m3(1.0625)), 1.0f);   // tie 1 | 1.125 -> even mantissa 0
  EXPECT_EQ(F8E4M3ToF32(NearestE4m3(1.1875)), 1.25f);  // tie 1.125 | 1.25 -> 1.25
  EXPECT_EQ(F8E4M3ToF32(NearestE4m3(1.40625)), 1.375f);
  // Just above the 1 | 1.125 midpoint, by less than a float's half ulp: float(x) is the tie,
  // the exact answer is 1.125.
  EXPECT_EQ(F8E4M3ToF32(NearestE4m3(1.0625 + std::ldexp(1.0, -30))), 1.125f);
  EXPECT_EQ(F8E4M3ToF32(NearestE4m3(-(1.0625 + std::ldexp(1.0, -30)))), -1.125f);
}

// A 3x3 weight in 2x2 blocks (odd shape: the last block row and column are partial).
// Scales, row-major [2, 2]: 0.5 (power of two), 3 (rounded up to 4), 0 (all-zero block), NaN.
struct OddWeight {
  std::vector<float> scales = {0.5f, 3.0f, 0.0f, std::numeric_limits<float>::quiet_NaN()};
  std::vector<uint8_t> q;
  OddWeight() {
    const float v[9] = {1.0f, -2.0f,  1.5f,    // row 0: block (0,0) | block (0,1)
                        0.5f, 448.0f, 1.875f,  // row 1
                        0.0f, -0.0f,  3.0f};   // row 2: block (1,0) | block (1,1)
    for (float x : v) q.push_back(F32ToF8E4M3(x));
  }
};

TEST(Fp8ScalesTest, PackCountsExactRoundedZeroAndNaNScales) {
  OddWeight w;
  w.q[6] = F32ToF8E4M3(1.0f);  // in the zero-scale block: worth 0, becomes code 0
  std::vector<uint8_t> codes(4), q(9);
  Ue8m0Packing p = PackScalesUe8m0(w.scales.data(), w.q.data(), 3, 3, 2, 2, codes.data(), q.data());
  ASSERT_TRUE(p.refusal.empty()) << p.refusal;
  EXPECT_EQ(p.scales, 4);
  EXPECT_EQ(p.exact, 1);
  EXPECT_EQ(p.rounded_up, 1);
  EXPECT_EQ(p.zero, 1);
  EXPECT_EQ(p.nan, 1);
  EXPECT_EQ(codes[0], 127 - 1);  // 0.5
  EXPECT_EQ(codes[1], 127 + 2);  // 3 -> 4
  EXPECT_EQ(codes[2], 0);        // zero block -> 2^-127
  EXPECT_EQ(codes[3], 255);      // NaN kept
  // Block (0,1), scale 3 -> 4: 1.5 * 3 / 4 = 1.125 (exact), 1.875 * 3 / 4 = 1.40625 -> 1.375.
  EXPECT_EQ(F8E4M3ToF32(q[2]), 1.125f);
  EXPECT_EQ(F8E4M3ToF32(q[5]), 1.375f);
  EXPECT_EQ(p.changed_weights, 1);  // 1.875 * 3 = 5.625 became 1.375 * 4 = 5.5
  EXPECT_TRUE(p.lossy());
  EXPECT_EQ(q[6], 0x00);
  EXPECT_EQ(q[7], 0x80);  // -0 stays -0
  // A NaN code in a zero-scale block is NaN (NaN * 0) and stays NaN; in a rounded-up block too,
  // and neither counts as a changed weight.
  OddWeight n;
  n.q[7] = 0x7F;
  n.q[2] = 0xFF;
  Ue8m0Packing pn =
      PackScalesUe8m0(n.scales.data(), n.q.data(), 3, 3, 2, 2, codes.data(), q.data());
  EXPECT_EQ(q[7], 0x7F);
  EXPECT_EQ(q[2], 0xFF);
  EXPECT_EQ(pn.changed_weights, 1);  // still only 1.875 -> 1.375
  for (int i : {0, 1, 3, 4, 8}) EXPECT_EQ(q[i], w.q[i]) << i;
}

TEST(Fp8ScalesTest, RoundedUpBlocksNeverOverflowE4m3) {
  // Scale 1.5 rounds up to 2: codes shrink by 0.75, so 448 (the e4m3 maximum) becomes 336, which
  // e4m3 rounds to 320 (the tie 320 | 352 goes to the even mantissa): smaller, never NaN.
  const float scale = 1.5f;
  std::vector<uint8_t> q = {F32ToF8E4M3(448.0f), F32ToF8E4M3(-448.0f)}, out(2);
  uint8_t code = 0;
  Ue8m0Packing p = PackScalesUe8m0(&scale, q.data(), 1, 2, 128, 128, &code, out.data());
  EXPECT_EQ(code, 128);
  EXPECT_EQ(F8E4M3ToF32(out[0]), 320.0f);
  EXPECT_EQ(F8E4M3ToF32(out[1]), -320.0f);
  EXPECT_EQ(p.changed_weights, 2);  // 640 instead of 672
}

TEST(Fp8ScalesTest, ScalesWithNoUe8m0FormAreRefusedNamingTheBlock) {
  const struct {
    float s;
    const char* why;
  } cases[] = {{std::numeric_limits<float>::infinity(), "infinite"},
               {-0.5f, "negative"},
               {std::ldexp(1.5f, 127), "above 2^127"}};
  for (const auto& c : cases) {
    std::vector<float> scales = {1.0f, 1.0f, 1.0f, c.s};
    std::vector<uint8_t> q(300 * 300, F32ToF8E4M3(1.0f)), out(q.size()), codes(4);
    Ue8m0Packing p =
        PackScalesUe8m0(scales.data(), q.data(), 300, 300, 256, 256, codes.data(), out.data());
    EXPECT_THAT(p.refusal, HasSubstr("block scale (1, 1)")) << c.why;
    EXPECT_THAT(p.refusal, HasSubstr(c.why));
  }
}

Tensor F8(const std::vector<uint8_t>& codes, int64_t rows, int64_t cols) {
  Tensor t = Tensor::Empty(DType::kF8E4M3, {rows, cols});
  std::copy(codes.begin(), codes.end(), t.data<uint8_t>());
  return t;
}

TEST(Fp8ScalesTest, KernelReadingF32GetsUe8m0ScalesExpandedExactly) {
  Tensor q = F8(std::vector<uint8_t>(300 * 200, F32ToF8E4M3(1.0f)), 300, 200);
  Tensor s = Tensor::Empty(DType::kUE8M0, {3, 2});
  const uint8_t codes[6] = {0, 100, 127, 128, 254, 255};
  std::copy(codes, codes + 6, s.data<uint8_t>());
  StatusOr<Fp8ScalesForKernelResult> r = Fp8ScalesForKernel(q, s, 128, 128, Fp8ScaleRead::kF32);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->scale.dtype(), DType::kF32);
  ASSERT_EQ(r->scale.shape(), (Shape{3, 2}));
  for (int i = 0; i < 5; ++i)
    EXPECT_EQ(r->scale.data<float>()[i], std::ldexp(1.0f, codes[i] - 127));
  EXPECT_TRUE(std::isnan(r->scale.data<float>()[5]));
  EXPECT_EQ(r->q.raw(), q.raw());  // payload untouched
  EXPECT_EQ(r->action, "ue8m0 -> f32 (exact)");
}

TEST(Fp8ScalesTest, KernelReadingUe8m0GetsPowerOfTwoF32ScalesPackedExactly) {
  Tensor q = F8(std::vector<uint8_t>(129 * 129, F32ToF8E4M3(-1.5f)), 129, 129);
  Tensor s = Tensor::Empty(DType::kF32, {2, 2});
  const float v[4] = {std::ldexp(1.0f, -20), 1.0f, 0.125f, std::ldexp(1.0f, 10)};
  std::copy(v, v + 4, s.data<float>());
  StatusOr<Fp8ScalesForKernelResult> r = Fp8ScalesForKernel(q, s, 128, 128, Fp8ScaleRead::kUe8m0);
  ASSERT_TRUE(r.ok()) << r.status().message();
  const int expect[4] = {127 - 20, 127, 127 - 3, 127 + 10};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(r->scale.data<uint8_t>()[i], expect[i]) << i;
  EXPECT_EQ(r->q.raw(), q.raw());
  EXPECT_EQ(r->packing.exact, 4);
  EXPECT_EQ(r->action, "f32 -> ue8m0 (exact: 4 powers of two)");
}

TEST(Fp8ScalesTest, RoundingUpThatKeepsEveryValueIsAccepted) {
  // Scale 3 -> 4 with codes 1.5 and -0.75: 1.125 and -0.5625 are e4m3 values, so every weight
  // keeps its value (1.5 * 3 = 1.125 * 4, 0.75 * 3 = 0.5625 * 4).
  Tensor q = F8({F32ToF8E4M3(1.5f), F32ToF8E4M3(-0.75f)}, 1, 2);
  Tensor s = Tensor::Empty(DType::kF32, {1, 1});
  s.data<float>()[0] = 3.0f;
  StatusOr<Fp8ScalesForKernelResult> r = Fp8ScalesForKernel(q, s, 128, 128, Fp8ScaleRead::kUe8m0);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->scale.data<uint8_t>()[0], 129);
  EXPECT_EQ(F8E4M3ToF32(r->q.data<uint8_t>()[0]) * 4.0f, 1.5f * 3.0f);
  EXPECT_EQ(F8E4M3ToF32(r->q.data<uint8_t>()[1]) * 4.0f, -0.75f * 3.0f);
  EXPECT_EQ(r->action, "f32 -> ue8m0 (exact: 0 powers of two, 1 rounded up with every value kept)");
}

TEST(Fp8ScalesTest, LossyF32ToUe8m0IsRefusedWithItsCounts) {
  OddWeight w;
  Tensor q = F8(w.q, 3, 3);
  Tensor s = Tensor::Empty(DType::kF32, {2, 2});
  std::copy(w.scales.begin(), w.scales.end(), s.data<float>());
  StatusOr<Fp8ScalesForKernelResult> r = Fp8ScalesForKernel(q, s, 2, 2, Fp8ScaleRead::kUe8m0);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(r.status().message(), HasSubstr("1 of 4 scales are not powers of two"));
  EXPECT_THAT(r.status().message(), HasSubstr("changes 1 of 9 weights"));
  // The same scales read as f32, or as stored, are untouched.
  for (Fp8ScaleRead read : {Fp8ScaleRead::kF32, Fp8ScaleRead::kAsStored}) {
    StatusOr<Fp8ScalesForKernelResult> ok = Fp8ScalesForKernel(q, s, 2, 2, read);
    ASSERT_TRUE(ok.ok());
    EXPECT_EQ(ok->scale.raw(), s.raw());
    EXPECT_EQ(ok->action, "as stored (f32, exact)");
  }
}

TEST(Fp8ScalesTest, WrongScaleShapesAreInvalidArguments) {
  Tensor q = F8(std::vector<uint8_t>(300 * 200, 0), 300, 200);
  Tensor s = Tensor::Empty(DType::kF32, {2, 2});  // needs [3, 2]
  EXPECT_EQ(Fp8ScalesForKernel(q, s, 128, 128, Fp8ScaleRead::kF32).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(CublasLtScaleLayoutTest, WeightScaleRowsArePaddedToFourBlocks) {
  // ceil(cols / 128) rounded up to a multiple of 4.
  const std::pair<int64_t, int64_t> ld[] = {{1, 4},   {128, 4},   {129, 4},   {512, 4},
                                            {513, 8}, {7168, 56}, {7169, 60}, {1536, 12}};
  for (auto [cols, want] : ld) EXPECT_EQ(Blk128x128ScaleLd(cols), want) << cols;
}

TEST(CublasLtScaleLayoutTest, WeightScalesOfAnOddShapeKeepRowMajorOrderWithPadding) {
  // 300 x 200: 3 x 2 blocks, rows padded to 4.
  const float natural[6] = {1, 2, 3, 4, 5, 6};
  std::vector<float> out = LayoutBlk128x128Scales(natural, 300, 200);
  const std::vector<float> want = {1, 2, 0, 0, 3, 4, 0, 0, 5, 6, 0, 0};
  EXPECT_EQ(out, want);
  // 100 x 700: 1 x 6 blocks -> one row of 8.
  const float one_row[6] = {1, 2, 3, 4, 5, 6};
  EXPECT_EQ(LayoutBlk128x128Scales(one_row, 100, 700),
            (std::vector<float>{1, 2, 3, 4, 5, 6, 0, 0}));
}

TEST(CublasLtScaleLayoutTest, ActivationScalesAreOuterDimMajor) {
  // 3 tokens x 300 columns: 3 blocks per token. natural[m][k] = 10 m + k.
  std::vector<float> natural;
  for (int m = 0; m < 3; ++m)
    for (int k = 0; k < 3; ++k) natural.push_back(10.0f * m + k);
  std::vector<float> out = LayoutVec128Scales(natural.data(), 3, 300);
  // Block 0 of tokens 0, 1, 2, then block 1, then block 2.
  EXPECT_EQ(out, (std::vector<float>{0, 10, 20, 1, 11, 21, 2, 12, 22}));
  EXPECT_EQ(Vec128ScaleOffset(2, 1, 3), 5);
  EXPECT_EQ(Vec128ScaleOffset(0, 0, 1), 0);
  // One token (decode): the layout is the natural one.
  EXPECT_EQ(LayoutVec128Scales(natural.data(), 1, 257), (std::vector<float>{0, 1, 2}));
}

}  // namespace
}  // namespace lucid::cuda
