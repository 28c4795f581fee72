// cuda_ops.cu's row kernels (cuda_ops_blocks.cuh), run on the CPU thread by thread, phase by
// phase, as the kernels' barriers order them: through the ops conformance suite's RmsNorm and
// LayerNorm cases (f32 and bf16 weights, NaN and infinities planted) and NonFiniteRows cases
// against the CPU reference. Runs without a GPU.
#include "backends/cuda/cuda_ops_blocks.cuh"

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/ops_conformance.h"
#include "backends/cuda/cuda_conformance_test_util.h"
#include "backends/cuda/cuda_phase_test_util.h"
#include "ops/forwarding_ops.h"

namespace lucid::cuda {
namespace {

class OpsBlocksEmulation final : public ForwardingOps {
 public:
  explicit OpsBlocksEmulation(ThreadOrder order) : ForwardingOps(ref_), order_(order) {}
  void RmsNorm(const Tensor& x, const Tensor& weight, float eps, Tensor& y) const override {
    const int64_t D = x.size(-1), T = x.numel() / D;
    for (int64_t t = 0; t < T; ++t)
      RmsNormRowPhases(*st_, x.data<const float>() + t * D, weight.raw(),
                       weight.dtype() == DType::kBF16, eps, D, y.data<float>() + t * D,
                       EveryThread<kOpsRowThreads>(order_));
  }
  void LayerNorm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps,
                 Tensor& y) const override {
    const int64_t D = x.size(-1), T = x.numel() / D;
    for (int64_t t = 0; t < T; ++t)
      LayerNormRowPhases(*st_, x.data<const float>() + t * D, weight.raw(),
                         weight.dtype() == DType::kBF16, bias.raw(), bias.dtype() == DType::kBF16,
                         eps, D, y.data<float>() + t * D, EveryThread<kOpsRowThreads>(order_));
  }
  void NonFiniteRows(const Tensor& x, Tensor& flags) const override {
    const int64_t T = x.rank() == 0 ? 1 : x.size(0), row = x.numel() / T;
    for (int64_t t = 0; t < T; ++t)
      NonFiniteRowPhases(*st_, x.data<const float>() + t * row, row, flags.data<int32_t>() + t,
                         EveryThread<kOpsRowThreads>(order_));
  }

 private:
  const CpuOps ref_;
  ThreadOrder order_;
  std::unique_ptr<OpsRowState> st_ = std::make_unique<OpsRowState>();
};

TEST(CudaOpsBlocksTest, TheRowKernelsPassTheNormAndNonFiniteCases) {
  for (ThreadOrder order : kThreadOrders) {
    SCOPED_TRACE(OrderName(order));
    const OpsBlocksEmulation ops(order);
    const std::vector<ConformanceCase> cases = ExpectConformance(
        ops, ConformancePrecision::kF32, {"RmsNorm", "LayerNorm", "NonFiniteRows"});
    for (const char* op : {"RmsNorm", "LayerNorm", "NonFiniteRows"})
      EXPECT_GT(CasesOf(cases, op), 0) << op;
    EXPECT_GT(cases.size(), 10u);
  }
}

}  // namespace
}  // namespace lucid::cuda
