// The decode GEMV's inner loop (cuda_packed_dot.cuh, compiled here for the host): the vector
// path's chunk decoding equals WeightAt for every weight format, its alignment test refuses
// what 16-byte loads cannot read, and a warp's lanes run on the CPU through the ops conformance
// suite's Linear cases as CudaOps's decode GEMV computes them (both paths, each set's
// precision), against the suite's reference. Runs without a GPU.
#include "backends/cuda/cuda_packed_dot.cuh"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/ops_conformance.h"
#include "backends/cpu/ops_conformance_internal.h"
#include "backends/cuda/cuda_conformance_test_util.h"
#include "backends/cuda/cuda_gemv.h"
#include "ops/forwarding_ops.h"

namespace lucid::cuda {
namespace {

using conformance::RandomWeight;
using conformance::WeightKindName;

void ExpectSameValue(float got, float want, const std::string& where) {
  if (std::isnan(want))
    EXPECT_TRUE(std::isnan(got)) << where;
  else
    EXPECT_EQ(got, want) << where;
}

TEST(CudaPackedDotTest, ChunksDecodeAsWeightAtForEveryFormat) {
  for (int kind = 0; kind < conformance::kWeightKinds; ++kind) {
    // 272 columns (17 chunks); the view starts at row 130, inside the FP8 scale block of 128.
    const Weight w = RandomWeight(kind, 300, 272, 7 + kind).RowRange(130, 150);
    const DeviceWeight d = DeviceWeightOf(w);
    const std::vector<float> x(272, 1.0f);
    ASSERT_TRUE(DotVectorizable(d, x.data(), 272)) << WeightKindName(kind);
    const bool nvfp4 = w.format == WeightFormat::kNvfp4;
    for (int64_t r = 0; r < d.rows; ++r)
      for (int64_t c0 = 0; c0 < d.cols; c0 += kDotChunk)
        for (bool group_scaled : {false, true}) {
          if (group_scaled && !nvfp4) continue;
          float v[kDotChunk];
          DecodeChunk16(d, r, c0, group_scaled, v);
          for (int j = 0; j < kDotChunk; ++j) {
            const float want = group_scaled ? Nvfp4GroupScaled(d, d.row_begin + r, c0 + j)
                                            : WeightAt(d, r, c0 + j);
            ExpectSameValue(v[j], want,
                            std::string(WeightKindName(kind)) + " row " + std::to_string(r) +
                                " col " + std::to_string(c0 + j));
          }
        }
  }
}

TEST(CudaPackedDotTest, TheVectorPathIsRefusedWhereItsLoadsWouldBeMisaligned) {
  alignas(16) float x[64] = {};
  const Weight fp8 = RandomWeight(2, 8, 256, 1);
  const DeviceWeight d = DeviceWeightOf(fp8);
  EXPECT_TRUE(DotVectorizable(d, x, 256));
  EXPECT_FALSE(DotVectorizable(d, x + 1, 256));  // activations off a 16-byte boundary
  EXPECT_FALSE(DotVectorizable(d, x, 258));      // activation rows 258 floats apart
  DeviceWeight odd = d;
  odd.cols = 264;  // FP8 rows of 264 bytes: every other row off a 16-byte boundary
  EXPECT_FALSE(DotVectorizable(odd, x, 256));
  DeviceWeight shifted = d;
  shifted.data = static_cast<const uint8_t*>(d.data) + 8;
  EXPECT_FALSE(DotVectorizable(shifted, x, 256));
  DeviceWeight blocks = d;
  blocks.block_cols = 24;  // a 16-column chunk would straddle two scale blocks
  EXPECT_FALSE(DotVectorizable(blocks, x, 256));
  const DeviceWeight nvfp4 = DeviceWeightOf(RandomWeight(4, 4, 77, 2));  // 5 groups: 40 bytes
  EXPECT_TRUE(DotVectorizable(nvfp4, x, 80));
  DeviceWeight nvfp4_odd = nvfp4;
  nvfp4_odd.data_ld = 36;
  EXPECT_FALSE(DotVectorizable(nvfp4_odd, x, 80));
  const DeviceWeight bf16 = DeviceWeightOf(RandomWeight(1, 4, 44, 3));  // rows of 88 bytes
  EXPECT_FALSE(DotVectorizable(bf16, x, 44));
}

// CudaOps::Linear's decode GEMV (T <= kGemvMaxTokens) at `precision`, for every weight format
// (CudaOps takes it for FP8 block and NVFP4; bf16 and f32 rows decode as the MoE path reads
// them), each warp's 32 lanes summed on the host; other token counts run the reference.
class GemvEmulation final : public ForwardingOps {
 public:
  explicit GemvEmulation(ConformancePrecision precision)
      : ForwardingOps(ref_), bf16_(precision != ConformancePrecision::kF32) {}
  void Linear(const Tensor& x, const Weight& w, Tensor& y) const override {
    const int64_t K = w.cols, N = w.rows, T = x.numel() / K;
    if (T < 1 || T > kGemvMaxTokens) {
      ref_.Linear(bf16_ ? conformance::RoundedToBf16(x) : x, w, y);
      return;
    }
    const DeviceWeight d = DeviceWeightOf(w);
    const bool group_scaled = bf16_ && w.format == WeightFormat::kNvfp4;
    const bool vec = DotVectorizable(d, x.data<const float>(), K);
    (vec ? vec_seen_ : scalar_seen_) = true;
    for (int64_t n = 0; n < N; ++n) {
      std::vector<float> sum(static_cast<size_t>(T), 0.0f);
      for (int lane = 0; lane < 32; ++lane)
        for (int64_t t = 0; t < T; ++t) {  // a token's sums do not depend on the others'
          float acc = 0.0f;
          PackedDotLane<1>(d, n, x.data<const float>() + t * K, K, lane, vec, bf16_, group_scaled,
                           &acc);
          sum[t] += acc;
        }
      for (int64_t t = 0; t < T; ++t)
        y.data<float>()[t * N + n] = group_scaled ? sum[t] * *w.scale2.data<float>() : sum[t];
    }
  }
  void LinearMany(const Tensor& x, std::span<const Weight* const> ws,
                  std::span<Tensor* const> ys) const override {
    for (size_t i = 0; i < ws.size(); ++i) Linear(x, *ws[i], *ys[i]);
  }
  mutable bool vec_seen_ = false, scalar_seen_ = false;

 private:
  const CpuOps ref_;
  bool bf16_;
};

TEST(CudaPackedDotTest, TheGemvArithmeticPassesTheLinearCases) {
  for (ConformancePrecision p : {ConformancePrecision::kF32, ConformancePrecision::kBf16Act}) {
    const GemvEmulation ops(p);
    SCOPED_TRACE("precision " + std::to_string(static_cast<int>(p)));
    EXPECT_FALSE(ExpectConformance(ops, p, {"Linear", "LinearMany"}).empty());
    EXPECT_TRUE(ops.vec_seen_);     // K 1024, 512, 384
    EXPECT_TRUE(ops.scalar_seen_);  // K 300, 77
  }
}

}  // namespace
}  // namespace lucid::cuda
