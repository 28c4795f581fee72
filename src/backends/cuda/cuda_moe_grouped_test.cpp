// MoeExperts grouped by expert on the device (cuda_moe_grouped.cuh) run on the CPU: the grouping
// block's phases, the weight-only GEMM's MoE form block by block (cuda_weight_mma_emulation.h),
// SwiGLU and the combine lane by lane, through the ops conformance suite's MoeExperts cases at
// kBf16Act for the packed experts it takes (f32-scale and UE8M0 FP8, NVFP4; 1 to 129 tokens), and
// the grouping's invariants: every valid pair one slot of its own expert, the tiles covering the
// slots in expert order, an expert id out of range poisoning its token only. Runs without a GPU.
#include "backends/cuda/cuda_moe_grouped.cuh"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/ops_conformance.h"
#include "backends/cpu/ops_conformance_internal.h"
#include "backends/cuda/cuda_conformance_test_util.h"
#include "backends/cuda/cuda_moe_gemv.h"
#include "backends/cuda/cuda_moe_grouped.h"
#include "backends/cuda/cuda_phase_test_util.h"
#include "backends/cuda/cuda_weight_mma_emulation.h"
#include "ops/forwarding_ops.h"

namespace lucid::cuda {
namespace {

struct Grouping {
  std::vector<MoeRowTile> tiles;
  std::vector<int32_t> x_rows, pair_slot;
};

Grouping GroupOnHost(const int32_t* idx, int64_t P, int64_t k, int64_t E, ThreadOrder order) {
  Grouping g;
  g.tiles.resize(static_cast<size_t>(MoeMaxTiles(P, E)));
  g.x_rows.assign(static_cast<size_t>(P), -7);
  g.pair_slot.assign(static_cast<size_t>(P), -7);
  auto st = std::make_unique<MoeGroupState>();
  MoeGroupPhases(*st, idx, P, k, E, g.tiles.data(), g.x_rows.data(), g.pair_slot.data(),
                 EveryThread<kMoeGroupThreads>(order));
  return g;
}

// What LaunchMoeGrouped computes, with the experts' views on the host.
void MoeGroupedOnHost(const std::vector<DeviceWeight>& views, int64_t E, const float* x,
                      const int32_t* idx, const float* w, int64_t T, int64_t k, float* out,
                      ThreadOrder order) {
  const int64_t P = T * k, D = views[2].rows, I = views[0].rows;
  const Grouping g = GroupOnHost(idx, P, k, E, order);
  std::vector<float> gate(static_cast<size_t>(P * I)), up(gate.size()),
      d(static_cast<size_t>(P * D));
  WeightMmaArgs m;
  m.tiles = g.tiles.data();
  m.experts = views.data();
  m.block_scaled = WeightMmaBlockScaled(views[0]);
  m.T = P;
  m.w = views[0];
  m.x = x;
  m.x_rows = g.x_rows.data();
  m.y = gate.data();
  RunWeightMmaOnHost(m, static_cast<int64_t>(g.tiles.size()), order);
  m.which = 1;
  m.y = up.data();
  RunWeightMmaOnHost(m, static_cast<int64_t>(g.tiles.size()), order);
  for (size_t i = 0; i < gate.size(); ++i) gate[i] = SwiGluValue(gate[i], up[i]);
  m.which = 2;
  m.w = views[2];
  m.x = gate.data();
  m.x_rows = nullptr;
  m.y = d.data();
  RunWeightMmaOnHost(m, static_cast<int64_t>(g.tiles.size()), order);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t c = 0; c < D; ++c)
      out[t * D + c] = MoeCombineValue(out[t * D + c], d.data(), g.pair_slot.data(), w, t, k, D, c);
}

class MoeGroupedEmulation final : public ForwardingOps {
 public:
  explicit MoeGroupedEmulation(ThreadOrder order) : ForwardingOps(ref_), order_(order) {}
  void MoeExperts(const Tensor& x, std::span<const ExpertWeights> experts, const Tensor& idx,
                  const Tensor& weights, Tensor& out) const override {
    const int64_t T = x.size(0), D = x.size(1), k = idx.size(1);
    const std::vector<DeviceWeight> views = MoeExpertViews(experts, D);
    if (!MoeGroupedFits(views)) {  // not a path of this kernel: the expected values
      RoundedReference(x, experts, idx, weights, out);
      return;
    }
    ++grouped_calls_;
    MoeGroupedOnHost(views, static_cast<int64_t>(experts.size()), x.data<const float>(),
                     idx.data<const int32_t>(), weights.data<const float>(), T, k,
                     out.data<float>(), order_);
  }
  mutable int grouped_calls_ = 0;

 private:
  // Each token's experts from the reference's Linear on bf16-rounded inputs (as the suite's
  // rounded reference does).
  void RoundedReference(const Tensor& x, std::span<const ExpertWeights> ex, const Tensor& idx,
                        const Tensor& weights, Tensor& out) const {
    const int64_t T = x.size(0), D = x.size(1), k = idx.size(1);
    for (int64_t t = 0; t < T; ++t) {
      Tensor xt = conformance::RoundedToBf16(x.Rows(t, t + 1));
      for (int64_t j = 0; j < k; ++j) {
        const ExpertWeights& e = ex[idx.data<const int32_t>()[t * k + j]];
        Tensor g = Tensor::Empty(DType::kF32, {1, e.gate.rows}), u = g.Clone(), h = g.Clone();
        Tensor o = Tensor::Empty(DType::kF32, {1, D});
        ref_.Linear(xt, e.gate, g);
        ref_.Linear(xt, e.up, u);
        ref_.SwiGlu(g, u, h);
        ref_.Linear(conformance::RoundedToBf16(h), e.down, o);
        for (int64_t c = 0; c < D; ++c)
          out.data<float>()[t * D + c] +=
              weights.data<const float>()[t * k + j] * o.data<const float>()[c];
      }
    }
  }
  const CpuOps ref_;
  const ThreadOrder order_;
};

TEST(CudaMoeGroupedTest, TheGroupedPathPassesTheMoeExpertsCasesAtBf16Act) {
  for (ThreadOrder order : kThreadOrders) {
    SCOPED_TRACE(OrderName(order));
    const MoeGroupedEmulation ops(order);
    EXPECT_FALSE(ExpectConformance(ops, ConformancePrecision::kBf16Act, {"MoeExperts"}).empty());
    EXPECT_GT(ops.grouped_calls_, 0);
  }
}

// 40 tokens x 3 choices over 5 experts, expert 1 taken by every token (more than a tile of 64),
// one pair's id out of range.
TEST(CudaMoeGroupedTest, TheGroupingGivesEachPairASlotOfItsExpertInTiles) {
  const int64_t T = 40, k = 3, E = 5, P = T * k;
  std::vector<int32_t> idx(P);
  for (int64_t t = 0; t < T; ++t) {
    idx[t * k] = 1;
    idx[t * k + 1] = static_cast<int32_t>((t % 4) == 1 ? 0 : t % 4);
    idx[t * k + 2] = static_cast<int32_t>(t % 2 == 0 ? 3 : 4);
  }
  idx[7] = 9;  // token 2's second choice: no such expert
  for (ThreadOrder order : kThreadOrders) {
    SCOPED_TRACE(OrderName(order));
    const Grouping g = GroupOnHost(idx.data(), P, k, E, order);
    std::vector<int> seen(P, 0);
    for (int64_t p = 0; p < P; ++p) {
      const int32_t slot = g.pair_slot[p];
      if (idx[p] >= E) {
        EXPECT_EQ(slot, -1);
        continue;
      }
      ASSERT_GE(slot, 0);
      ASSERT_LT(slot, P);
      ++seen[slot];
      EXPECT_EQ(g.x_rows[slot], p / k) << "pair " << p;
      // The slot lies in a tile of the pair's expert.
      bool in_tile = false;
      for (const MoeRowTile& t : g.tiles)
        if (t.expert == idx[p] && slot >= t.start && slot < t.start + t.len) in_tile = true;
      EXPECT_TRUE(in_tile) << "pair " << p;
    }
    EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), P - 1);  // P - 1 distinct slots
    // Tiles: expert order, consecutive slots, at most kWmmaBM rows, the rest empty.
    int64_t next = 0;
    int32_t last = -1;
    for (const MoeRowTile& t : g.tiles) {
      if (t.expert < 0) continue;
      EXPECT_GE(t.expert, last);
      EXPECT_EQ(t.start, next);
      EXPECT_GT(t.len, 0);
      EXPECT_LE(t.len, kWmmaBM);
      next += t.len;
      last = t.expert;
    }
    EXPECT_EQ(next, P - 1);
  }
}

TEST(CudaMoeGroupedTest, AnExpertIdOutOfRangePoisonsItsTokenOnly) {
  const int64_t T = 3, k = 2, D = 4;
  const std::vector<int32_t> pair_slot = {0, 1, -1, 2, 3, 4};
  std::vector<float> d(5 * D, 0.5f), w(T * k, 0.25f);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t c = 0; c < D; ++c) {
      const float v = MoeCombineValue(1.0f, d.data(), pair_slot.data(), w.data(), t, k, D, c);
      if (t == 1)
        EXPECT_TRUE(std::isnan(v));
      else
        EXPECT_EQ(v, 1.25f);
    }
}

}  // namespace
}  // namespace lucid::cuda
