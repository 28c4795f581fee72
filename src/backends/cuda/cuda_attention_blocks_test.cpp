// MlaKernel's, GqaKernel's and the indexer kernels' blocks (cuda_attention_blocks.cuh), run on
// the CPU: the MLA and GQA rows thread by thread, phase by phase, as the kernel's barriers order
// them; the indexer a (row, token) score at a time. Through the ops conformance suite's
// MlaAttention cases (sparse and dense, every KV kind, selections past one tile of 256 tokens, NaN
// and infinities in q and in the cache), GqaAttention cases and IndexerScores cases against the CPU
// reference; and the forms the suite does not reach: a latent width past the tiles (each value's
// row looked up) and more heads than the indexer keeps in registers (sums in chunks of 64 heads).
// Runs without a GPU.
#include "backends/cuda/cuda_attention_blocks.cuh"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/ops_conformance.h"
#include "backends/cuda/cuda_conformance_test_util.h"
#include "backends/cuda/cuda_mla_test_util.h"
#include "backends/cuda/cuda_phase_test_util.h"
#include "ops/forwarding_ops.h"

namespace lucid::cuda {
namespace {

class AttentionBlocksEmulation final : public ForwardingOps {
 public:
  explicit AttentionBlocksEmulation(ThreadOrder order = ThreadOrder::kForward)
      : ForwardingOps(ref_), order_(order) {}
  void MlaAttention(const MlaAttentionArgs& a) const override {
    const DeviceRows kv = ToDevice(a.kv);
    const int64_t per_row = a.selected
                                ? a.selected_stride
                                : static_cast<int64_t>(a.kv.page_table.size()) * a.kv.page_size;
    std::vector<float> p(static_cast<size_t>(per_row > 0 ? per_row : 1));
    auto st = std::make_unique<AttentionRowState>();
    for (int64_t th = 0; th < a.tokens * a.heads; ++th)
      MlaRowPhases(*st, a, kv, th, p.data(), EveryThread<kAttentionRowThreads>(order_));
  }
  void GqaAttention(const GqaAttentionArgs& a) const override {
    const DeviceRows kv = ToDevice(a.kv);
    const int64_t per_row = static_cast<int64_t>(a.kv.page_table.size()) * a.kv.page_size;
    std::vector<float> p(static_cast<size_t>(per_row > 0 ? per_row : 1));
    auto st = std::make_unique<AttentionRowState>();
    for (int64_t th = 0; th < a.tokens * a.heads; ++th)
      GqaRowPhases(*st, a, kv, th, p.data(), EveryThread<kAttentionRowThreads>(order_));
  }
  void IndexerScores(const IndexerArgs& a) const override {
    const DeviceRows keys = ToDevice(a.keys);
    for (int64_t t = 0; t < a.tokens; ++t)
      for (int64_t u = 0; u < a.causal_len[t]; ++u)
        a.scores[t * a.score_stride + u] =
            IndexerTokenScore(a, keys, a.q + t * a.heads * a.head_dim, t, u);
  }

 private:
  const CpuOps ref_;
  ThreadOrder order_;
};

TEST(CudaAttentionBlocksTest, TheBlocksPassTheAttentionAndIndexerCases) {
  for (ThreadOrder order : kThreadOrders) {
    SCOPED_TRACE(OrderName(order));
    const AttentionBlocksEmulation ops(order);
    const std::vector<ConformanceCase> cases = ExpectConformance(
        ops, ConformancePrecision::kF32, {"MlaAttention", "GqaAttention", "IndexerScores"});
    EXPECT_GT(CasesOf(cases, "MlaAttention"), 50);
    EXPECT_GT(CasesOf(cases, "GqaAttention"), 10);
    EXPECT_GT(CasesOf(cases, "IndexerScores"), 20);
  }
}

// R = 1100 > kMlaRowCols * kAttentionRowThreads: every output column reads each selected token's
// row itself (row 0 selects 300 tokens in a scrambled order, row 1 the 17 newest).
TEST(CudaAttentionBlocksTest, ALatentWiderThanTheTilesEqualsTheReference) {
  const int64_t R = 1100, P = 4, n = 300;
  SmallMlaCase c(2, 2, R, P, 64, 5, 89);
  c.count = {static_cast<int32_t>(n), 17};
  for (int64_t j = 0; j < n; ++j) c.selected.push_back(static_cast<int32_t>((j * 11) % 301));
  for (int64_t j = 0; j < n; ++j) c.selected.push_back(static_cast<int32_t>(j < 17 ? 300 - j : 0));
  MlaAttentionArgs a = c.Args(n);
  AttentionBlocksEmulation().MlaAttention(a);
  std::vector<float> want(c.out.size());
  a.out_latent = want.data();
  CpuOps().MlaAttention(a);
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_NEAR(c.out[i], want[i], 1e-5f * std::fabs(want[i]) + 1e-6f) << i;
}

// 70 heads: two chunks of the per-head sums (64, then 6); the head weights and queries random.
TEST(CudaAttentionBlocksTest, MoreIndexerHeadsThanTheRegistersHoldEqualTheReference) {
  const int64_t T = 3, H = 70, D = 16, ctx = 40;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> keys(static_cast<size_t>(ctx * D)), q(static_cast<size_t>(T * H * D)),
      w(static_cast<size_t>(T * H));
  for (std::vector<float>* v : {&keys, &q, &w})
    for (float& x : *v) x = u(rng);
  std::vector<int32_t> table = {0, 1, 2, 3};
  std::vector<int64_t> causal = {38, 39, 40};
  IndexerArgs a;
  a.q = q.data();
  a.w = w.data();
  a.tokens = T;
  a.heads = H;
  a.head_dim = D;
  a.keys.base = keys.data();
  a.keys.page_table = table;
  a.keys.page_size = 10;
  a.keys.page_stride = 10 * D;
  a.keys.row_floats = D;
  a.causal_len = causal.data();
  a.score_stride = ctx;
  std::vector<float> got(static_cast<size_t>(T * ctx)), want(got.size());
  a.scores = got.data();
  AttentionBlocksEmulation().IndexerScores(a);
  a.scores = want.data();
  CpuOps().IndexerScores(a);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < causal[t]; ++j)
      ASSERT_NEAR(got[t * ctx + j], want[t * ctx + j], 1e-5f * std::fabs(want[t * ctx + j]) + 1e-6f)
          << t << " " << j;
}

}  // namespace
}  // namespace lucid::cuda
