// ProfilingOps' per-weight matmul tallies: every layer's copy of a weight under one name, the
// W_uk / W_uv shares of kv_b_proj apart, sums equal to the matmul category's, cleared by Reset.
// The oracle is the weights' own sizes (rows x cols x 2 bytes for bf16) and the calls made.
#include "bench/profiling_ops.h"

#include <gtest/gtest.h>

#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/quant_test_util.h"

namespace lucid {
namespace {

using testing_util::Random;
using testing_util::RandomDense;

TEST(LayerlessNameTest, ReplacesTheLayerIndexOnly) {
  EXPECT_EQ(LayerlessName("model.layers.12.mlp.up_proj.weight"),
            "model.layers.*.mlp.up_proj.weight");
  EXPECT_EQ(LayerlessName("model.layers.0.self_attn.q_a_proj.weight"),
            "model.layers.*.self_attn.q_a_proj.weight");
  EXPECT_EQ(LayerlessName("lm_head.weight"), "lm_head.weight");
  EXPECT_EQ(LayerlessName("model.layers.x.weight"), "model.layers.x.weight");  // no index
  EXPECT_EQ(LayerlessName("model.layers."), "model.layers.");
}

TEST(ProfilingOpsTest, TalliesMatmulsPerWeightAcrossLayers) {
  const CpuOps inner;
  const ProfilingOps prof(inner);
  const Weight l0 = RandomDense(true, 24, 40, 1, "model.layers.0.mlp.up_proj.weight");
  const Weight l1 = RandomDense(true, 24, 40, 2, "model.layers.1.mlp.up_proj.weight");
  const Weight head = RandomDense(true, 16, 40, 3, "lm_head.weight");
  const Tensor x = Random({3, 40}, 4);
  Tensor y = Tensor::Empty(DType::kF32, {3, 24}), z = Tensor::Empty(DType::kF32, {3, 16});
  prof.Linear(x, l0, y);
  prof.Linear(x, l1, y);
  prof.Linear(x, head, z);
  const auto& by = prof.ByWeight();
  ASSERT_EQ(by.size(), 2u);
  const OpTally& up = by.at("model.layers.*.mlp.up_proj.weight");
  EXPECT_EQ(up.calls, 2);
  EXPECT_DOUBLE_EQ(up.bytes, 2.0 * 24 * 40 * 2);
  EXPECT_DOUBLE_EQ(up.flops, 2 * 2.0 * 3 * 24 * 40);
  EXPECT_EQ(by.at("lm_head.weight").calls, 1);
  EXPECT_DOUBLE_EQ(by.at("lm_head.weight").bytes, 16.0 * 40 * 2);
  const OpTally& mm = prof.Get(OpCategory::kMatmul);
  EXPECT_EQ(mm.calls, 3);
  EXPECT_DOUBLE_EQ(mm.bytes, up.bytes + by.at("lm_head.weight").bytes);
  EXPECT_DOUBLE_EQ(mm.seconds, up.seconds + by.at("lm_head.weight").seconds);
  prof.Reset();
  EXPECT_TRUE(prof.ByWeight().empty());
  EXPECT_EQ(prof.Get(OpCategory::kMatmul).calls, 0);
}

// kv_b_proj [heads x (nope + v), latent]: the absorption reads the nope rows, the output
// projection the v rows, each tallied apart with its share of the bytes.
TEST(ProfilingOpsTest, SplitsKvBIntoItsTwoShares) {
  const CpuOps inner;
  const ProfilingOps prof(inner);
  const int64_t H = 2, nope = 8, v = 4, R = 16;
  const Weight kv_b =
      RandomDense(true, H * (nope + v), R, 5, "model.layers.3.self_attn.kv_b_proj.weight");
  const Tensor q = Random({1, H * nope}, 6), lat = Random({1, H * R}, 7);
  Tensor ql = Tensor::Empty(DType::kF32, {1, H * R}), o = Tensor::Empty(DType::kF32, {1, H * v});
  prof.MlaAbsorbQuery(q, H, nope, nope, v, kv_b, ql);
  prof.MlaProjectOutput(lat, H, nope, v, kv_b, o);
  const auto& by = prof.ByWeight();
  ASSERT_EQ(by.size(), 2u);
  const double all = double(H * (nope + v) * R * 2);
  EXPECT_DOUBLE_EQ(by.at("model.layers.*.self_attn.kv_b_proj.weight (W_uk)").bytes,
                   all * nope / (nope + v));
  EXPECT_DOUBLE_EQ(by.at("model.layers.*.self_attn.kv_b_proj.weight (W_uv)").bytes,
                   all * v / (nope + v));
  EXPECT_DOUBLE_EQ(prof.Get(OpCategory::kMatmul).bytes, all);
}

}  // namespace
}  // namespace lucid
