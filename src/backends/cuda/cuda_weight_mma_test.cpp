// The weight-only tensor-core GEMM's block algorithm (cuda_weight_mma.cuh), run on the CPU thread
// by thread and warp by warp as the kernel's barriers order it, with the warps' 16 x 16 matrix
// products summed on 16 x 16 arrays where the kernel uses WMMA fragments: through the ops
// conformance suite's Linear and LinearMany cases at kBf16Act (the rounded-activation reference)
// for every weight the kernel takes (f32-scale FP8 over several 128-column scale blocks, UE8M0
// FP8, NVFP4 with its global scale; T, N and K off the tile sizes; NaN and Inf planted). Also
// which weights and token counts CudaMatmul sends to it. Runs without a GPU.
#include "backends/cuda/cuda_weight_mma.cuh"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/ops_conformance.h"
#include "backends/cpu/ops_conformance_internal.h"
#include "backends/cuda/cuda_conformance_test_util.h"
#include "backends/cuda/cuda_gemv.h"
#include "backends/cuda/cuda_weight_mma.h"
#include "backends/cuda/cuda_weight_mma_emulation.h"
#include "ops/forwarding_ops.h"

namespace lucid::cuda {
namespace {

using conformance::RandomWeight;

// What LaunchWeightMma computes, every block of the grid in turn.
void WeightMmaOnHost(const DeviceWeight& w, const float* x, int64_t T, float* y,
                     ThreadOrder order) {
  RunWeightMmaOnHost(WeightMmaArgsFor(w, x, T, y), (T + kWmmaBM - 1) / kWmmaBM, order);
}

// cuda-bf16act's Linear where the weight-only kernel takes the weight (any token count above the
// decode GEMV's, so that the suite's shapes all reach it), the rounded reference elsewhere.
class WeightMmaEmulation final : public ForwardingOps {
 public:
  explicit WeightMmaEmulation(ThreadOrder order) : ForwardingOps(ref_), order_(order) {}
  void Linear(const Tensor& x, const Weight& w, Tensor& y) const override {
    const DeviceWeight d = DeviceWeightOf(w);
    const int64_t T = x.numel() / w.cols;
    if (T <= kGemvMaxTokens || !WeightMmaEligible(d)) {
      ref_.Linear(conformance::RoundedToBf16(x), w, y);
      return;
    }
    seen_[d.format == static_cast<int>(WeightFormat::kNvfp4) ? 2 : d.scale_ue8m0 ? 1 : 0] = true;
    WeightMmaOnHost(d, x.data<const float>(), T, y.data<float>(), order_);
  }
  void LinearMany(const Tensor& x, std::span<const Weight* const> ws,
                  std::span<Tensor* const> ys) const override {
    for (size_t i = 0; i < ws.size(); ++i) Linear(x, *ws[i], *ys[i]);
  }
  mutable bool seen_[3] = {false, false, false};  // f32-scale FP8, UE8M0 FP8, NVFP4

 private:
  const CpuOps ref_;
  const ThreadOrder order_;
};

TEST(CudaWeightMmaTest, TheBlockAlgorithmPassesTheLinearCasesAtBf16Act) {
  for (ThreadOrder order : kThreadOrders) {
    SCOPED_TRACE(OrderName(order));
    const WeightMmaEmulation ops(order);
    EXPECT_FALSE(
        ExpectConformance(ops, ConformancePrecision::kBf16Act, {"Linear", "LinearMany"}).empty());
    EXPECT_TRUE(ops.seen_[0]);  // T 129 at K 300, 384, 512; T 9 in LinearMany
    EXPECT_TRUE(ops.seen_[1]);
    EXPECT_TRUE(ops.seen_[2]);
  }
}

// The values staged for the tensor cores are the weight's, exactly: the UE8M0 and NVFP4 values
// (group-scaled) and the e4m3 codes of f32-scale FP8 (whose block scales come after the sums).
TEST(CudaWeightMmaTest, StagedWeightValuesAreExactInBf16) {
  for (int kind : {2, 3, 4}) {
    const Weight w = RandomWeight(kind, 40, 300, 11 + kind);
    WeightMmaArgs a;
    a.w = DeviceWeightOf(w);
    a.block_scaled = kind == 2;
    for (int64_t n = 0; n < 40; ++n)
      for (int64_t k = 0; k < 300; ++k) {
        const float staged = Bf16(WeightMmaValueBits(a, a.w, n, k));
        const float want = kind == 4 ? Nvfp4GroupScaled(a.w, n, k)
                           : kind == 2
                               ? E4m3Value(static_cast<const uint8_t*>(a.w.data)[n * 300 + k])
                               : WeightAt(a.w, n, k);
        if (std::isnan(want))
          EXPECT_TRUE(std::isnan(staged));
        else
          ASSERT_EQ(staged, want) << "kind " << kind << " row " << n << " col " << k;
      }
  }
}

TEST(CudaWeightMmaTest, CudaMatmulSendsItThePackedWeightsItTakes) {
  const DeviceWeight f32_scales = DeviceWeightOf(RandomWeight(2, 256, 256, 1));
  const DeviceWeight ue8m0 = DeviceWeightOf(RandomWeight(3, 256, 256, 1));
  const DeviceWeight nvfp4 = DeviceWeightOf(RandomWeight(4, 256, 256, 1));
  const DeviceWeight bf16 = DeviceWeightOf(RandomWeight(1, 256, 256, 1));
  EXPECT_TRUE(WeightMmaTakes(f32_scales, 4096));  // any count: the alternative is an SGEMM
  for (const DeviceWeight& d : {ue8m0, nvfp4}) {
    EXPECT_TRUE(WeightMmaTakes(d, kWeightMmaMaxTokens));
    EXPECT_FALSE(WeightMmaTakes(d, kWeightMmaMaxTokens + 1));
  }
  EXPECT_FALSE(WeightMmaTakes(bf16, 16));  // cuBLAS reads bf16 in place
  // An f32-scale view whose 16-row fragments would straddle a scale block.
  const DeviceWeight shifted = DeviceWeightOf(RandomWeight(2, 256, 256, 1).RowRange(8, 200));
  EXPECT_FALSE(WeightMmaTakes(shifted, 100));
  EXPECT_TRUE(WeightMmaTakes(DeviceWeightOf(RandomWeight(2, 256, 256, 1).RowRange(128, 100)), 9));
}

}  // namespace
}  // namespace lucid::cuda
