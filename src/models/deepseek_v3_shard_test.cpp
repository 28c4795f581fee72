// ShardDeepseekV3Weights on the tiny DeepSeek-V3 fixture (4 heads, intermediate 96, 8 routed
// experts of 32, vocabulary 256): the shapes each rank keeps follow from the config's dimensions
// divided by the group, and a group that does not divide them is refused naming the dimension.
#include "models/deepseek_v3_shard.h"

#include <gtest/gtest.h>

#include <string>

namespace lucid {
namespace {

struct Loaded {
  ModelConfig config;
  Checkpoint ckpt;
};

Loaded Load() {
  const std::string dir = std::string(LUCID_SOURCE_DIR) + "/tests/fixtures/models/tiny_deepseek_v3";
  auto c = LoadModelConfig(dir);
  auto ck = Checkpoint::Open(dir);
  EXPECT_TRUE(c.ok() && ck.ok());
  return Loaded{*c, std::move(*ck)};
}

// Data-parallel attention: the attention weights stay whole (each rank runs every head of its own
// sequences), the MLP and the vocabulary are split as under TP, the routed experts as ep_size says.
TEST(ShardDeepseekV3Weights, DataParallelAttentionKeepsAttentionWhole) {
  Loaded m = Load();
  const ModelConfig& c = m.config;
  auto whole = LoadDeepseekV3Weights(c, m.ckpt);
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  DeepseekV3Weights w = *whole;
  ASSERT_TRUE(ShardDeepseekV3Weights(c, 1, 2, 2, /*dp_attention=*/true, &w).ok());
  const LayerWeights& dense = w.layers[0];
  const LayerWeights& was = whole->layers[0];
  EXPECT_EQ(dense.attn.kv_b.rows, was.attn.kv_b.rows);
  EXPECT_EQ(dense.attn.kv_b.row_begin, 0);
  EXPECT_EQ(dense.attn.q_b.rows, was.attn.q_b.rows);
  EXPECT_EQ(dense.attn.o.cols, was.attn.o.cols);
  EXPECT_EQ(dense.attn.o.data.raw(), was.attn.o.data.raw());  // the mapping itself, not a copy
  EXPECT_EQ(dense.dense.gate.rows, c.intermediate_size / 2);
  EXPECT_EQ(w.embed.rows, c.vocab_size / 2);
  const LayerWeights& moe = w.layers[1];
  const int64_t per = c.n_routed_experts / 2;
  EXPECT_FALSE(moe.moe.experts[0].gate.valid());                       // rank 0's expert
  EXPECT_EQ(moe.moe.experts[per].gate.rows, c.moe_intermediate_size);  // rank 1's, whole
}

TEST(ShardDeepseekV3Weights, RankKeepsItsHeadsIntermediateAndVocabularyRows) {
  Loaded m = Load();
  const ModelConfig& c = m.config;
  auto whole = LoadDeepseekV3Weights(c, m.ckpt);
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  DeepseekV3Weights w = *whole;
  ASSERT_TRUE(ShardDeepseekV3Weights(c, 1, 2, 1, false, &w).ok());
  const int64_t H = c.num_attention_heads, dv = c.v_head_dim;
  const LayerWeights& dense = w.layers[0];
  EXPECT_EQ(dense.attn.kv_b.rows, H / 2 * (c.qk_nope_head_dim + dv));
  EXPECT_EQ(dense.attn.kv_b.row_begin, H / 2 * (c.qk_nope_head_dim + dv));  // rank 1's heads
  EXPECT_EQ(dense.attn.q_b.rows, H / 2 * c.qk_head_dim());
  EXPECT_EQ(dense.attn.o.cols, H / 2 * dv);
  EXPECT_EQ(dense.attn.o.rows, c.hidden_size);
  EXPECT_EQ(dense.dense.gate.rows, c.intermediate_size / 2);
  EXPECT_EQ(dense.dense.down.cols, c.intermediate_size / 2);
  EXPECT_EQ(dense.attn.kv_a.rows, whole->layers[0].attn.kv_a.rows);  // replicated
  const LayerWeights& moe = w.layers[1];
  ASSERT_TRUE(moe.is_moe);
  EXPECT_EQ(moe.moe.experts[3].gate.rows, c.moe_intermediate_size / 2);
  EXPECT_EQ(moe.moe.experts[3].down.cols, c.moe_intermediate_size / 2);
  EXPECT_EQ(moe.moe.router.rows, c.n_routed_experts);  // replicated
  EXPECT_EQ(w.embed.rows, c.vocab_size / 2);
  EXPECT_EQ(w.embed.row_begin, c.vocab_size / 2);
  EXPECT_EQ(w.lm_head.rows, c.vocab_size / 2);
  // o_proj's column copy holds exactly rank 1's columns of the whole matrix.
  const Weight& o = whole->layers[0].attn.o;
  const float* full = o.data.data<const float>();
  const float* part = dense.attn.o.data.data<const float>();
  for (int64_t r = 0; r < o.rows; r += 7)
    for (int64_t j = 0; j < H / 2 * dv; ++j)
      ASSERT_EQ(part[r * (H / 2 * dv) + j], full[r * o.cols + H / 2 * dv + j]) << r << " " << j;
  EXPECT_LT(w.bytes, whole->bytes);
}

TEST(ShardDeepseekV3Weights, ExpertParallelKeepsWholeExpertsOfItsRange) {
  Loaded m = Load();
  auto whole = LoadDeepseekV3Weights(m.config, m.ckpt);
  ASSERT_TRUE(whole.ok());
  DeepseekV3Weights w = *whole;
  ASSERT_TRUE(ShardDeepseekV3Weights(m.config, 1, 2, 2, false, &w).ok());
  const auto& experts = w.layers[1].moe.experts;
  for (int64_t e = 0; e < m.config.n_routed_experts; ++e) {
    const bool mine = e >= m.config.n_routed_experts / 2;
    EXPECT_EQ(experts[e].gate.valid(), mine) << e;
    if (mine) {
      EXPECT_EQ(experts[e].gate.rows, m.config.moe_intermediate_size) << e;  // whole
    }
  }
  // The shared expert is still split by intermediate dimension.
  EXPECT_EQ(w.layers[1].moe.shared.gate.rows,
            m.config.moe_intermediate_size * m.config.n_shared_experts / 2);
}

TEST(ShardDeepseekV3Weights, RefusesGroupsThatDoNotDivide) {
  Loaded m = Load();
  auto whole = LoadDeepseekV3Weights(m.config, m.ckpt);
  ASSERT_TRUE(whole.ok());
  DeepseekV3Weights w = *whole;
  Status s = ShardDeepseekV3Weights(m.config, 0, 3, 1, false, &w);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("num_attention_heads 4"), std::string::npos) << s.message();
  w = *whole;
  s = ShardDeepseekV3Weights(m.config, 0, 2, 4, false, &w);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("--ep-size 4"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace lucid
