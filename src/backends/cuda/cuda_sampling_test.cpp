// The device sampler's block algorithm (cuda_sampling.cuh), run on the CPU thread by thread,
// phase by phase, as the kernel's barriers order them: through the ops conformance suite's
// SampleRows cases (greedy with and without edits, temperature, top_k, top_p, min_p and all three,
// penalties with the clamp, an overflowing bias, forced tokens; logits with many exact ties and
// continuous ones; rows of 7, 1000 and 50000 ids, with and without top alternatives) against the
// CPU reference: tokens and top ids equal, logprobs within 1e-5. Runs without a GPU.
#include "backends/cuda/cuda_sampling.cuh"

#include <gtest/gtest.h>

#include <memory>
#include <span>
#include <string>

#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/ops_conformance.h"
#include "backends/cuda/cuda_conformance_test_util.h"
#include "backends/cuda/cuda_phase_test_util.h"
#include "ops/forwarding_ops.h"

namespace lucid::cuda {
namespace {

class SamplingEmulation final : public ForwardingOps {
 public:
  explicit SamplingEmulation(ThreadOrder order) : ForwardingOps(ref_), order_(order) {}
  void SampleRows(const Tensor& logits, std::span<const RowSampling> rows,
                  std::span<const LogitEdit> edits, Tensor& scratch, Tensor& tokens,
                  Tensor& logprobs, Tensor& top_ids) const override {
    const int64_t R = logits.size(0), V = logits.size(1), K = top_ids.size(1);
    auto st = std::make_unique<SampleRowState>();
    for (int64_t r = 0; r < R; ++r)
      SampleRowPhases(
          *st, logits.data<const float>() + r * V, scratch.data<float>() + r * V, V, rows[r],
          edits.data(), K, tokens.data<int32_t>() + r, logprobs.data<float>() + r * (1 + K),
          K > 0 ? top_ids.data<int32_t>() + r * K : nullptr, EveryThread<kSampleThreads>(order_));
  }

 private:
  const CpuOps ref_;
  ThreadOrder order_;
};

TEST(CudaSamplingTest, TheBlockAlgorithmPassesTheSampleRowsCases) {
  for (ThreadOrder order : kThreadOrders) {
    SCOPED_TRACE(OrderName(order));
    const SamplingEmulation ops(order);
    int tokens = 0, top_ids = 0, logprobs = 0;
    for (const ConformanceCase& c :
         ExpectConformance(ops, ConformancePrecision::kF32, {"SampleRows"})) {
      tokens += c.shape.find(" tokens") != std::string::npos;
      top_ids += c.shape.find(" top ids") != std::string::npos;
      logprobs += c.shape.find(" logprobs") != std::string::npos;
    }
    EXPECT_EQ(tokens, 12);  // V in {7, 1000, 50000} x ties or not x K in {0, 3}
    EXPECT_EQ(top_ids, 6);
    EXPECT_EQ(logprobs, 12);
  }
}

}  // namespace
}  // namespace lucid::cuda
