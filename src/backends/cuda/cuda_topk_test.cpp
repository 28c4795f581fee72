// The device top-k's block algorithm (cuda_topk_block.cuh), run on the CPU thread by thread,
// phase by phase, as the kernel's barriers order them: through the ops conformance suite's TopK
// and TopKRows cases (ties, -0 and +0, NaN and infinities, rows shorter than k, k up to 5000
// words of sort) against the CPU reference; and the rank key's order against TopK's comparison.
// Runs without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/ops_conformance.h"
#include "backends/cuda/cuda_conformance_test_util.h"
#include "backends/cuda/cuda_phase_test_util.h"
#include "backends/cuda/cuda_topk_block.cuh"
#include "ops/forwarding_ops.h"

namespace lucid::cuda {
namespace {

// What TopKBlockKernel computes for one row, each phase run on every thread in turn. The select
// must end with exactly k words to sort (the scores above the k-th best and the ties taken), and
// nothing may be written past the P words of the sort (the kernel's shared memory).
void TopKRowOnHost(const float* s, int64_t n, int64_t k, int32_t offset, int32_t* out,
                   ThreadOrder order) {
  TopKBlockState st{};
  const int64_t P = TopKSortLength(k), guard = 4096;
  constexpr uint64_t kUnwritten = 0xdeadbeefULL;
  std::vector<uint64_t> buf(static_cast<size_t>(P + guard), kUnwritten);
  TopKBlockPhases(st, s, n, k, offset, out, buf.data(), P, EveryThread<kTopKThreads>(order));
  EXPECT_EQ(int64_t{st.n_above} + st.take, k) << "n " << n;
  for (int64_t i = P; i < P + guard; ++i)
    if (buf[i] != kUnwritten) {
      ADD_FAILURE() << "a sort word written past the buffer (n " << n << ", k " << k << ")";
      break;
    }
}

class TopKEmulation final : public ForwardingOps {
 public:
  explicit TopKEmulation(ThreadOrder order) : ForwardingOps(ref_), order_(order) {}
  void TopK(const float* scores, int64_t n, int64_t k, int32_t* out) const override {
    if (k > 0) TopKRowOnHost(scores, n, k, 0, out, order_);
  }
  void TopKRows(const Tensor& scores, std::span<const int64_t> lengths, int64_t k, int32_t offset,
                Tensor& out) const override {
    const int64_t S = scores.size(1), W = out.size(1);
    for (size_t t = 0; t < lengths.size(); ++t) {
      const int64_t n = lengths[t];
      int32_t* row = out.data<int32_t>() + t * W;
      if (n <= k) {
        for (int64_t u = 0; u < n; ++u) row[u] = offset + static_cast<int32_t>(u);
      } else if (k > 0) {
        TopKRowOnHost(scores.data<const float>() + t * S, n, k, offset, row, order_);
      }
    }
  }

 private:
  const CpuOps ref_;
  ThreadOrder order_;
};

TEST(CudaTopKTest, TheBlockAlgorithmPassesTheTopKCases) {
  for (ThreadOrder order : kThreadOrders) {
    SCOPED_TRACE(OrderName(order));
    const TopKEmulation ops(order);
    const std::vector<ConformanceCase> cases =
        ExpectConformance(ops, ConformancePrecision::kF32, {"TopK", "TopKRows"});
    bool big_sort = false;
    for (const ConformanceCase& c : cases) big_sort |= c.shape.find("k=5000") != std::string::npos;
    EXPECT_GT(cases.size(), 100u);
    EXPECT_TRUE(big_sort) << "a sort longer than shared memory takes (kTopKSharedWords)";
  }
}

// A larger key ranks first exactly where TopK's comparison puts a score first (indices equal).
TEST(CudaTopKTest, TheRankKeyOrdersAsTopKCompares) {
  const float inf = std::numeric_limits<float>::infinity(),
              nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> v = {nan,     -nan, inf,   -inf,  0.0f,   -0.0f, 1e-45f,
                                -1e-45f, 1.0f, -1.0f, 3e38f, -3e38f, 0.5f,  1.0000001f};
  for (float a : v)
    for (float b : v) {
      const bool a_nan = std::isnan(a), b_nan = std::isnan(b);
      const bool before = a_nan ? !b_nan : (!b_nan && a > b);  // strictly before, index aside
      const bool tied = (a_nan && b_nan) || (!a_nan && !b_nan && a == b);
      EXPECT_EQ(TopKKey(a) > TopKKey(b), before) << a << " " << b;
      EXPECT_EQ(TopKKey(a) == TopKKey(b), tied) << a << " " << b;
    }
}

}  // namespace
}  // namespace lucid::cuda
