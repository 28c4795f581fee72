// MLA attention with a row's heads in groups (cuda_mla_heads.cuh) run on the CPU phase by phase
// as the kernel's barriers order them, each thread with its own locals: through the ops
// conformance suite's MlaAttention cases (sparse and dense, every KV kind, head counts that are
// not multiples of the group, NaN and infinities in q and in the cache, a row attending nothing)
// against the CPU reference; and a selected index outside the page table. Runs without a GPU.
#include "backends/cuda/cuda_mla_heads.cuh"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/ops_conformance.h"
#include "backends/cuda/cuda_conformance_test_util.h"
#include "backends/cuda/cuda_mla_test_util.h"
#include "backends/cuda/cuda_phase_test_util.h"
#include "ops/forwarding_ops.h"

namespace lucid::cuda {
namespace {

// What MlaHeadsKernel computes, every (row, head group) block in turn.
void MlaHeadsOnHost(const MlaAttentionArgs& a, ThreadOrder order = ThreadOrder::kForward) {
  const DeviceRows kv = ToDevice(a.kv);
  const int64_t per_row = std::max<int64_t>(
      1, a.selected ? a.selected_stride
                    : static_cast<int64_t>(a.kv.page_table.size()) * a.kv.page_size);
  std::vector<float> p(static_cast<size_t>(kMlaHeadGroup * per_row));
  auto st = std::make_unique<MlaHeadsState>();
  std::vector<MlaHeadsLocals> locals(kMlaHeadThreads);
  for (int64_t t = 0; t < a.tokens; ++t)
    for (int64_t g = 0; g < MlaHeadGroups(a.heads); ++g)
      MlaHeadsPhases(*st, a, kv, t, g, p.data(), per_row, [&](auto phase) {
        for (int i = 0; i < kMlaHeadThreads; ++i) {
          const int tid = NthThread<kMlaHeadThreads>(order, i);
          phase(tid, locals[tid]);
        }
      });
}

class MlaHeadsEmulation final : public ForwardingOps {
 public:
  explicit MlaHeadsEmulation(ThreadOrder order) : ForwardingOps(ref_), order_(order) {}
  void MlaAttention(const MlaAttentionArgs& a) const override {
    ASSERT_TRUE(MlaHeadsFits(a));
    heads_seen_ = std::max(heads_seen_, a.heads);
    MlaHeadsOnHost(a, order_);
  }
  mutable int64_t heads_seen_ = 0;

 private:
  const CpuOps ref_;
  ThreadOrder order_;
};

TEST(CudaMlaHeadsTest, GroupedHeadsPassTheAttentionCases) {
  for (ThreadOrder order : kThreadOrders) {
    SCOPED_TRACE(OrderName(order));
    const MlaHeadsEmulation ops(order);
    EXPECT_GT(ExpectConformance(ops, ConformancePrecision::kF32, {"MlaAttention"}).size(), 50u);
    EXPECT_GT(ops.heads_seen_, 1);  // a group of several heads, not one head per block
  }
}

// Two rows of three heads; row 1 selects indices outside the page table both ways: its heads
// come out NaN, row 0's equal the reference's.
TEST(CudaMlaHeadsTest, ASelectedIndexOutsideThePageTablePoisonsItsRowOnly) {
  const int64_t R = 8, H = 3, k = 3;
  SmallMlaCase c(2, H, R, 2, 4, 2, 31);
  for (size_t i = 0; i < c.ql.size(); ++i) c.ql[i] = 0.1f * static_cast<float>(i % 7) - 0.3f;
  for (size_t i = 0; i < c.qr.size(); ++i) c.qr[i] = 0.05f * static_cast<float>(i % 5);
  c.table = {1, 0};
  c.count = {k, k};
  c.selected = {0, 5, 7, 2, 1 << 30, -7};
  MlaAttentionArgs a = c.Args(k);
  MlaHeadsOnHost(a);
  std::vector<float> want(H * R);
  a.tokens = 1;
  a.out_latent = want.data();
  CpuOps().MlaAttention(a);
  for (int64_t i = 0; i < H * R; ++i) {
    EXPECT_NEAR(c.out[i], want[i], 1e-6f * std::fabs(want[i]) + 1e-7f) << i;
    EXPECT_TRUE(std::isnan(c.out[H * R + i])) << i;
  }
}

}  // namespace
}  // namespace lucid::cuda
