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
  Tensor y = Tensor::Zeros(DType::kF32, {3, 24}), z = Tensor::Zeros(DType::kF32, {3, 16});
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

// LinearMany: one call for the group, each weight tallied with its own bytes and FLOPs and a share
// of the call's time in proportion to its bytes; the outputs are the inner ops' (here Linear's).
TEST(ProfilingOpsTest, LinearManySharesTheCallsTimeByBytes) {
  const CpuOps inner;
  const ProfilingOps prof(inner);
  const Weight a = RandomDense(true, 24, 40, 1, "model.layers.0.self_attn.q_a_proj.weight");
  const Weight b = RandomDense(false, 8, 40, 2, "model.layers.0.self_attn.kv_a_proj.weight");
  const Tensor x = Random({2, 40}, 4);
  Tensor ya = Tensor::Zeros(DType::kF32, {2, 24}), yb = Tensor::Zeros(DType::kF32, {2, 8});
  Tensor ra = ya.Clone(), rb = yb.Clone();
  const Weight* ws[] = {&a, &b};
  Tensor* ys[] = {&ya, &yb};
  prof.LinearMany(x, ws, ys);
  inner.Linear(x, a, ra);
  inner.Linear(x, b, rb);
  for (int64_t i = 0; i < ra.numel(); ++i) EXPECT_EQ(ya.data<float>()[i], ra.data<float>()[i]);
  for (int64_t i = 0; i < rb.numel(); ++i) EXPECT_EQ(yb.data<float>()[i], rb.data<float>()[i]);
  const auto& by = prof.ByWeight();
  ASSERT_EQ(by.size(), 2u);
  const OpTally& ta = by.at("model.layers.*.self_attn.q_a_proj.weight");
  const OpTally& tb = by.at("model.layers.*.self_attn.kv_a_proj.weight");
  EXPECT_EQ(ta.calls, 1);
  EXPECT_EQ(tb.calls, 1);
  EXPECT_DOUBLE_EQ(ta.bytes, 24.0 * 40 * 2);  // bf16
  EXPECT_DOUBLE_EQ(tb.bytes, 8.0 * 40 * 4);   // f32
  EXPECT_DOUBLE_EQ(ta.flops, 2.0 * 2 * 24 * 40);
  EXPECT_GT(ta.seconds, 0.0);
  EXPECT_NEAR(ta.seconds / tb.seconds, ta.bytes / tb.bytes, 1e-9 * ta.bytes / tb.bytes);
  const OpTally& mm = prof.Get(OpCategory::kMatmul);
  EXPECT_EQ(mm.calls, 2);
  EXPECT_NEAR(mm.seconds, ta.seconds + tb.seconds, 1e-12);
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
  Tensor ql = Tensor::Zeros(DType::kF32, {1, H * R}), o = Tensor::Zeros(DType::kF32, {1, H * v});
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
