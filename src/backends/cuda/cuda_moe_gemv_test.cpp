// The device-routed MoE kernels' arithmetic (cuda_moe_gemv.h), run warp by warp on the CPU: each
// warp's lanes through the same per-lane functions the kernels call (both of PackedDotLane's
// paths), their sums added, on host views of the weights. Through the ops conformance suite's
// MoeExperts cases (every weight format, NaN and Inf inputs) at each CUDA set's precision, against
// the suite's reference; and an expert id out of range poisons its token's row only. Runs without a
// GPU; the kernels themselves are checked on a device by CudaBackendDeviceTest's conformance run.
#include "backends/cuda/cuda_moe_gemv.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/ops_conformance.h"
#include "backends/cuda/cuda_conformance_test_util.h"
#include "ops/forwarding_ops.h"
#include "ops/fp8_activations.h"

namespace lucid::cuda {
namespace {

Tensor F32(Shape shape) { return Tensor::Empty(DType::kF32, std::move(shape)); }

// What the two kernels compute, with host pointers: MoeGateUpKernel then MoeDownCombineKernel,
// each warp's 32 lanes summed in lane order (the device adds them in a butterfly; f32 either way).
void RunMoeGateUpOnHost(const MoeGemvArgs& a, const float* x, float* h) {
  for (int64_t p = 0; p < a.tokens * a.k; ++p)
    for (int64_t n = 0; n < a.inter; ++n) {
      float g = 0.0f, u = 0.0f;
      for (int lane = 0; lane < 32; ++lane) {
        float gl = 0.0f, ul = 0.0f;
        MoeGateUpLane(a, x, p, n, lane, &gl, &ul);
        g += gl;
        u += ul;
      }
      h[p * a.inter + n] = MoeSwiGlu(a, p, g, u);
    }
}

void RunMoeDownOnHost(const MoeGemvArgs& a, const float* h, float* out) {
  for (int64_t t = 0; t < a.tokens; ++t)
    for (int64_t r = 0; r < a.hidden; ++r) {
      float o = out[t * a.hidden + r];
      for (int64_t j = 0; j < a.k; ++j) {
        float d = 0.0f;
        for (int lane = 0; lane < 32; ++lane) d += MoeDownLane(a, h, t * a.k + j, r, lane);
        o = MoeCombine(a, t * a.k + j, o, d);
      }
      out[t * a.hidden + r] = o;
    }
}

// CudaOps::MoeExpertsOnDevice's arithmetic at `precision` over the CPU reference's other ops.
class MoeGemvEmulation final : public ForwardingOps {
 public:
  explicit MoeGemvEmulation(ConformancePrecision precision)
      : ForwardingOps(ref_), precision_(precision) {}
  void MoeExperts(const Tensor& x, std::span<const ExpertWeights> experts, const Tensor& idx,
                  const Tensor& weights, Tensor& out) const override {
    const int64_t T = x.size(0), D = x.size(1), k = idx.size(1), I = experts[0].gate.rows;
    const WeightFormat format = experts[0].gate.format;
    const std::vector<DeviceWeight> views = MoeExpertViews(experts, D);
    EXPECT_EQ(views.size(), 3 * experts.size()) << "the suite's experts share format and shape";
    const bool fp8_act = precision_ == ConformancePrecision::kFp8Act;
    const bool fp8 = fp8_act && format == WeightFormat::kFp8Block;
    MoeGemvArgs a = MoeArgsFor(views.data(), static_cast<int64_t>(experts.size()), D, I, idx,
                               weights, format, precision_ != ConformancePrecision::kF32, fp8_act);
    const Tensor x_in = fp8 ? Fp8ActDequantized(x) : x;
    Tensor h = F32({T * k, I});
    a.vec_gate_up = MoeVectorizable(views, 0, x_in.data<const float>(), D) &&
                    MoeVectorizable(views, 1, x_in.data<const float>(), D);
    RunMoeGateUpOnHost(a, x_in.data<const float>(), h.data<float>());
    Tensor h_in = fp8 ? Fp8ActDequantized(h) : h;
    a.vec_down = MoeVectorizable(views, 2, h_in.data<const float>(), I);
    vec_seen_ |= a.vec_gate_up;
    scalar_seen_ |= !a.vec_down;
    RunMoeDownOnHost(a, h_in.data<const float>(), out.data<float>());
  }

 private:
  const CpuOps ref_;
  ConformancePrecision precision_;

 public:
  mutable bool vec_seen_ = false, scalar_seen_ = false;  // which PackedDotLane paths ran
};

TEST(CudaMoeGemvTest, TheKernelsArithmeticPassesTheMoeCasesAtEachSetsPrecision) {
  for (ConformancePrecision p : {ConformancePrecision::kF32, ConformancePrecision::kBf16Act,
                                 ConformancePrecision::kFp8Act}) {
    const MoeGemvEmulation ops(p);
    SCOPED_TRACE("precision " + std::to_string(static_cast<int>(p)));
    std::set<std::string> formats;
    for (const ConformanceCase& c : ExpectConformance(ops, p, {"MoeExperts"}))
      formats.insert(c.format);
    EXPECT_EQ(formats.size(), 5u) << "every weight format has MoeExperts cases";
    // D = 48 gives the gate and up rows whole 16-column chunks; the FP8 down rows of I = 40
    // bytes are not 16-byte aligned and take the column-at-a-time path.
    EXPECT_TRUE(ops.vec_seen_);
    EXPECT_TRUE(ops.scalar_seen_);
  }
}

// The same arithmetic with the activations left unrounded fails the bf16 precision's cases where
// the rounding matters: the suite sees where the kernels round.
TEST(CudaMoeGemvTest, UnroundedActivationsFailTheBf16Cases) {
  const MoeGemvEmulation ops(ConformancePrecision::kF32);
  int failed = 0;
  for (const ConformanceCase& c :
       RunOpsConformance(ops, ConformancePrecision::kBf16Act, {"MoeExperts"}))
    failed += !c.pass;
  EXPECT_GT(failed, 0);
}

TEST(CudaMoeGemvTest, AnExpertIdOutOfRangePoisonsItsTokenOnly) {
  const int64_t E = 3, D = 40, I = 24, T = 3, k = 2;
  std::vector<Weight> ws;
  std::vector<DeviceWeight> views;
  for (int64_t i = 0; i < 3 * E; ++i) {
    const bool down = i % 3 == 2;
    Weight w;
    w.format = WeightFormat::kF32;
    w.name = "w";
    w.rows = down ? D : I;
    w.cols = down ? I : D;
    w.data = F32({w.rows, w.cols});
    for (int64_t j = 0; j < w.data.numel(); ++j)
      w.data.data<float>()[j] = std::sin(static_cast<float>(i * 1000 + j)) * 0.1f;
    ws.push_back(std::move(w));
  }
  for (const Weight& w : ws) views.push_back(DeviceWeightOf(w));
  std::vector<float> x(T * D), h(T * k * I), out(T * D, 0.5f), wts(T * k, 0.5f);
  for (int64_t i = 0; i < T * D; ++i) x[i] = std::cos(static_cast<float>(i));
  const std::vector<int32_t> idx = {0, 2, 1, static_cast<int32_t>(E), -1, 1};
  MoeGemvArgs a;
  a.experts = views.data();
  a.num_experts = E;
  a.hidden = D;
  a.inter = I;
  a.idx = idx.data();
  a.weights = wts.data();
  a.tokens = T;
  a.k = k;
  RunMoeGateUpOnHost(a, x.data(), h.data());
  RunMoeDownOnHost(a, h.data(), out.data());
  for (int64_t r = 0; r < D; ++r) {
    EXPECT_TRUE(std::isfinite(out[r])) << r;
    EXPECT_TRUE(std::isnan(out[D + r])) << r;      // id E
    EXPECT_TRUE(std::isnan(out[2 * D + r])) << r;  // id -1
  }
  for (int64_t n = 0; n < I; ++n) {
    EXPECT_TRUE(std::isfinite(h[2 * I + n])) << n;  // token 1's valid pair
    EXPECT_TRUE(std::isnan(h[3 * I + n])) << n;
  }
}

}  // namespace
}  // namespace lucid::cuda
