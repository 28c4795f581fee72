#include "formats/model_config.h"

#include <gtest/gtest.h>

#include <cmath>

namespace lucid {
namespace {

// Published GLM-5 and DeepSeek-V3.2 config.json values (docs/MODEL-GLM-DSA.md section 1).
nlohmann::json Glm5() {
  return nlohmann::json::parse(R"({
    "architectures": ["GlmMoeDsaForCausalLM"], "model_type": "glm_moe_dsa",
    "hidden_size": 6144, "num_hidden_layers": 78, "num_attention_heads": 64,
    "num_key_value_heads": 64, "q_lora_rank": 2048, "kv_lora_rank": 512,
    "qk_nope_head_dim": 192, "qk_rope_head_dim": 64, "v_head_dim": 256,
    "intermediate_size": 12288, "moe_intermediate_size": 2048, "n_routed_experts": 256,
    "n_shared_experts": 1, "num_experts_per_tok": 8, "n_group": 1, "topk_group": 1,
    "routed_scaling_factor": 2.5, "norm_topk_prob": true, "first_k_dense_replace": 3,
    "vocab_size": 154880, "rms_norm_eps": 1e-5, "max_position_embeddings": 202752,
    "rope_theta": 1000000, "index_n_heads": 32, "index_head_dim": 128, "index_topk": 2048,
    "eos_token_id": [154820, 154827], "torch_dtype": "bfloat16"})");
}

nlohmann::json DeepseekV32() {
  return nlohmann::json::parse(R"({
    "architectures": ["DeepseekV32ForCausalLM"], "model_type": "deepseek_v32",
    "hidden_size": 7168, "num_hidden_layers": 61, "num_attention_heads": 128,
    "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
    "v_head_dim": 128, "n_routed_experts": 256, "n_group": 8, "topk_group": 4,
    "rms_norm_eps": 1e-6, "rope_theta": 10000, "index_n_heads": 64,
    "rope_scaling": {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096,
                     "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0}})");
}

TEST(ModelConfigTest, ParsesGlm5) {
  auto c = ParseModelConfig(Glm5());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->architecture, "GlmMoeDsaForCausalLM");
  EXPECT_EQ(c->qk_head_dim(), 256);
  EXPECT_TRUE(c->has_indexer);
  EXPECT_EQ(c->indexer_rope_layout, RopeLayout::kInterleaved);
  EXPECT_EQ(c->rope.type, "default");
  EXPECT_EQ(c->rope.theta, 1e6);
  EXPECT_DOUBLE_EQ(c->AttentionScale(), 1.0 / 16.0);  // documented: GLM-5 scale 1/16
  ASSERT_EQ(c->layer_is_moe.size(), 78u);
  EXPECT_FALSE(c->layer_is_moe[2]);
  EXPECT_TRUE(c->layer_is_moe[3]);
  for (bool full : c->layer_runs_indexer) EXPECT_TRUE(full);  // GLM-5: freq 1
  EXPECT_EQ(c->eos_token_ids, (std::vector<int64_t>{154820, 154827}));
}

TEST(ModelConfigTest, ParsesDeepseekV32WithOldRopeScalingSpelling) {
  auto c = ParseModelConfig(DeepseekV32());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->rope.type, "yarn");
  EXPECT_EQ(c->rope.factor, 40.0);
  EXPECT_EQ(c->indexer_rope_layout, RopeLayout::kHalfSplit);
  EXPECT_EQ(c->index_n_heads, 64);
  EXPECT_EQ(c->index_topk, 2048);                     // class default
  EXPECT_NEAR(c->AttentionScale(), 0.1352338, 1e-7);  // documented DeepSeek-V3.2 scale
}

TEST(ModelConfigTest, SharedIndexerLayersFromFreqAndOffset) {
  auto j = Glm5();
  j["num_hidden_layers"] = 8;
  j["index_topk_freq"] = 3;
  j["index_skip_topk_offset"] = 1;
  auto c = ParseModelConfig(j);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  // Layer i is full iff max(i - offset + 1, 0) % freq == 0.
  std::vector<bool> want = {true, false, false, true, false, false, true, false};
  EXPECT_EQ(c->layer_runs_indexer, want);
  j["indexer_types"] = {"full", "shared", "full", "shared", "full", "full", "full", "full"};
  c = ParseModelConfig(j);
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(c->layer_runs_indexer[1]);
  EXPECT_TRUE(c->layer_runs_indexer[2]);
}

TEST(ModelConfigTest, ErrorsNameTheField) {
  auto j = Glm5();
  j["hidden_size"] = "big";
  auto c = ParseModelConfig(j);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("hidden_size"), std::string::npos);
  j = Glm5();
  j["n_group"] = 3;  // 256 experts not divisible by 3
  c = ParseModelConfig(j);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("n_group"), std::string::npos);
  j = Glm5();
  j["rope_parameters"] = {{"rope_type", "longrope"}};
  c = ParseModelConfig(j);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("longrope"), std::string::npos);
  EXPECT_FALSE(ParseModelConfig(nlohmann::json::array()).ok());
}

// Issue 26 item 4: every field the engine reads is type- and range-checked, and a refusal is one
// line naming the field, the value found and what is allowed. Each case here was accepted silently
// before (rope_parameters [1,2] fell back to theta 10000 and changed the output).
TEST(ModelConfigTest, WrongTypeOrRangeIsRefusedNamingFieldAndValue) {
  struct Case {
    const char* field;
    nlohmann::json value;
    const char* shown;  // how the refusal spells the value
  };
  const std::vector<Case> cases = {
      {"rope_parameters", {1, 2}, "[1,2]"},
      {"rope_scaling", "yarn", "\"yarn\""},
      {"eos_token_id", "one", "\"one\""},
      {"eos_token_id", {1, "two"}, "[1,\"two\"]"},
      {"eos_token_id", 154880, "154880"},  // == vocab_size: out of range
      {"eos_token_id", -1, "-1"},
      {"bos_token_id", "zero", "\"zero\""},
      {"dtype", "float7", "\"float7\""},
      {"torch_dtype", 16, "16"},
      {"layer_types", {"full_attention"}, "[\"full_attention\"]"},
      {"mlp_layer_types", "sparse", "\"sparse\""},
      {"rope_theta", 0, "0"},
      {"rope_theta", -5.0, "-5.0"},
      {"rope_theta", "1e6", "\"1e6\""},
      {"max_position_embeddings", 0, "0"},
      {"rms_norm_eps", 0.0, "0.0"},
      {"routed_scaling_factor", -2.5, "-2.5"},
      {"hidden_size", 0, "0"},
      {"num_hidden_layers", -1, "-1"},
      {"n_group", 0, "0"},
      {"index_topk", 0, "0"},
      {"index_topk_freq", 0, "0"},
      {"q_lora_rank", 1.5, "1.5"},
      {"norm_topk_prob", 1, "1"},
  };
  for (const auto& k : cases) {
    auto j = Glm5();
    j[k.field] = k.value;
    auto c = ParseModelConfig(j);
    ASSERT_FALSE(c.ok()) << k.field << " = " << k.value.dump() << " was accepted";
    const std::string& m = c.status().message();
    EXPECT_NE(m.find(std::string("\"") + k.field), std::string::npos) << m;
    EXPECT_NE(m.find(k.shown), std::string::npos) << m;
    EXPECT_NE(m.find("allowed"), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
}

TEST(ModelConfigTest, NestedRopeAndLayerListEntriesAreChecked) {
  auto j = Glm5();
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", -1}};
  auto c = ParseModelConfig(j);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("rope_parameters.rope_theta"), std::string::npos);
  j = DeepseekV32();
  j["rope_scaling"]["factor"] = 0;
  c = ParseModelConfig(j);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("rope_scaling.factor"), std::string::npos);
  j = DeepseekV32();
  j["rope_scaling"]["truncate"] = "no";
  c = ParseModelConfig(j);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("rope_scaling.truncate"), std::string::npos);
  j = Glm5();
  j["num_hidden_layers"] = 2;
  j["mlp_layer_types"] = {"dense", "sprase"};
  c = ParseModelConfig(j);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("mlp_layer_types[1]"), std::string::npos);
  EXPECT_NE(c.status().message().find("sprase"), std::string::npos);
}

TEST(ModelConfigTest, ValidSpecialTokensAndNullsAreKept) {
  auto j = Glm5();
  j["eos_token_id"] = 7;
  j["bos_token_id"] = nullptr;
  j["q_lora_rank"] = nullptr;
  j["rope_scaling"] = nullptr;
  j["dtype"] = "float32";
  auto c = ParseModelConfig(j);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->eos_token_ids, std::vector<int64_t>{7});
  EXPECT_FALSE(c->bos_token_id.has_value());
  EXPECT_EQ(c->q_lora_rank, 0);
  EXPECT_EQ(c->torch_dtype, "float32");
  EXPECT_EQ(c->rope.theta, 1e6);
}

TEST(ModelConfigTest, MissingAndMalformedFiles) {
  auto c = LoadModelConfig("/nonexistent-lucid-dir");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kNotFound);
  EXPECT_NE(c.status().message().find("config.json"), std::string::npos);
}

}  // namespace
}  // namespace lucid
