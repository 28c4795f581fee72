// Quantization metadata parsing: ModelOpt (hf_quant_config.json and config.json forms, exclude
// wildcards, MIXED_PRECISION), DeepSeek FP8 block, refusals of unknown methods by name, and the
// real GLM-5-NVFP4 / DeepSeek-V3.2-FP8 / DeepSeek-V3-FP8 configs.
#include "formats/quant_config.h"

#include <gtest/gtest.h>

#include "formats/model_config.h"

namespace lucid {
namespace {

using nlohmann::json;

const std::string kConfigs = std::string(LUCID_SOURCE_DIR) + "/tests/fixtures/configs/";

TEST(QuantConfigTest, WildcardsMatchModulesAndParents) {
  EXPECT_TRUE(WildcardMatch("model.layers.*.mlp.gate", "model.layers.12.mlp.gate"));
  EXPECT_FALSE(WildcardMatch("model.layers.*.mlp.gate", "model.layers.12.mlp.gate_proj"));
  EXPECT_TRUE(WildcardMatch("a?c", "abc"));
  EXPECT_FALSE(WildcardMatch("a?c", "ac"));
  EXPECT_TRUE(ModulePatternMatch("model.layers.*.self_attn*", "model.layers.3.self_attn.q_a_proj"));
  EXPECT_TRUE(ModulePatternMatch("model.layers.3.self_attn", "model.layers.3.self_attn.kv_b_proj"));
  EXPECT_FALSE(ModulePatternMatch("model.layers.3.self_attn", "model.layers.30.self_attn.o_proj"));
  EXPECT_TRUE(ModulePatternMatch("model.layers.78*", "model.layers.78.eh_proj"));
  EXPECT_TRUE(ModulePatternMatch("lm_head", "lm_head"));
}

TEST(QuantConfigTest, RealGlm5Nvfp4) {
  auto hq = ReadJsonFile(kConfigs + "GLM-5-NVFP4/hf_quant_config.json");
  auto cfg = ReadJsonFile(kConfigs + "GLM-5-NVFP4/config.json");
  ASSERT_TRUE(hq.ok() && cfg.ok());
  auto q = ParseQuantConfig(&*hq, *cfg);
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  EXPECT_EQ(q->scheme, QuantScheme::kNvfp4);
  EXPECT_EQ(q->source, "hf_quant_config.json");
  std::string why;
  EXPECT_EQ(q->SchemeFor("model.layers.5.mlp.experts.17.down_proj"), QuantScheme::kNvfp4);
  EXPECT_EQ(q->SchemeFor("model.layers.5.self_attn.indexer.wk", false, &why), QuantScheme::kNone);
  EXPECT_EQ(why, "model.layers.*.self_attn*");
  EXPECT_EQ(q->SchemeFor("model.layers.5.mlp.gate"), QuantScheme::kNone);
  EXPECT_EQ(q->SchemeFor("lm_head"), QuantScheme::kNone);
  EXPECT_EQ(q->SchemeFor("model.embed_tokens", /*embedding=*/true), QuantScheme::kNone);
  // Without hf_quant_config.json, config.json's quantization_config says the same.
  auto q2 = ParseQuantConfig(nullptr, *cfg);
  ASSERT_TRUE(q2.ok()) << q2.status().ToString();
  EXPECT_EQ(q2->exclude, q->exclude);
}

TEST(QuantConfigTest, RealDeepSeekFp8) {
  for (const char* d : {"DeepSeek-V3.2-FP8", "DeepSeek-V3-FP8"}) {
    auto cfg = ReadJsonFile(kConfigs + d + "/config.json");
    ASSERT_TRUE(cfg.ok());
    auto q = ParseQuantConfig(nullptr, *cfg);
    ASSERT_TRUE(q.ok()) << q.status().ToString();
    EXPECT_EQ(q->scheme, QuantScheme::kFp8Block);
    EXPECT_EQ(q->block_rows, 128);
    EXPECT_EQ(q->ue8m0_scales, std::string(d) == "DeepSeek-V3.2-FP8");
    EXPECT_EQ(q->SchemeFor("model.layers.9.self_attn.indexer.wk"), QuantScheme::kFp8Block);
    EXPECT_EQ(q->SchemeFor("model.layers.9.self_attn.indexer.weights_proj"), QuantScheme::kNone);
    EXPECT_EQ(q->SchemeFor("model.layers.9.mlp.gate"), QuantScheme::kNone);
    EXPECT_EQ(q->SchemeFor("lm_head"), QuantScheme::kNone);
  }
}

TEST(QuantConfigTest, MixedPrecisionQuantizesExactlyTheListedLayers) {
  json hq = {{"producer", {{"name", "modelopt"}}},
             {"quantization",
              {{"quant_algo", "MIXED_PRECISION"},
               {"quantized_layers",
                {{"model.layers.1.mlp.experts.0.up_proj",
                  {{"quant_algo", "NVFP4"}, {"group_size", 16}}}}}}}};
  auto q = ParseQuantConfig(&hq, json::object());
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  EXPECT_EQ(q->SchemeFor("model.layers.1.mlp.experts.0.up_proj"), QuantScheme::kNvfp4);
  EXPECT_EQ(q->SchemeFor("model.layers.1.mlp.experts.0.gate_proj"), QuantScheme::kNone);
  hq["quantization"]["quantized_layers"]["x.y"] = {{"quant_algo", "W4A8_AWQ"}};
  auto bad = ParseQuantConfig(&hq, json::object());
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(bad.status().message().find("W4A8_AWQ"), std::string::npos);
}

TEST(QuantConfigTest, UnknownMethodsAndAlgorithmsAreRefusedByName) {
  struct Case {
    json config;
    const char* name;
  } cases[] = {
      {{{"quantization_config", {{"quant_method", "gptq"}, {"bits", 4}}}}, "gptq"},
      {{{"quantization_config", {{"quant_method", "modelopt"}, {"quant_algo", "FP8"}}}}, "FP8"},
      {{{"quantization_config", {{"quant_method", "fp8"}}}}, "weight_block_size"},
      {{{"quantization_config",
         {{"quant_method", "fp8"}, {"weight_block_size", {128, 128}}, {"scale_fmt", "e5m2"}}}},
       "e5m2"},
  };
  for (const auto& c : cases) {
    auto q = ParseQuantConfig(nullptr, c.config);
    ASSERT_FALSE(q.ok()) << c.name;
    EXPECT_EQ(q.status().code(), StatusCode::kUnimplemented) << q.status().ToString();
    EXPECT_NE(q.status().message().find(c.name), std::string::npos) << q.status().ToString();
  }
  json hq = {{"quantization", {{"quant_algo", "NVFP4_AWQ"}}}};
  auto q = ParseQuantConfig(&hq, json::object());
  ASSERT_FALSE(q.ok());
  EXPECT_NE(q.status().message().find("NVFP4_AWQ"), std::string::npos);
}

TEST(QuantConfigTest, UnquantizedAndUnmatchedExcludes) {
  auto none = ParseQuantConfig(nullptr, json::object());
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->scheme, QuantScheme::kNone);
  json hq = {{"quantization",
              {{"quant_algo", "NVFP4"}, {"exclude_modules", {"lm_head", "model.vision*"}}}}};
  auto q = ParseQuantConfig(&hq, json::object());
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->UnmatchedExcludes({"lm_head.weight", "model.layers.0.mlp.down_proj.weight"}),
            std::vector<std::string>{"model.vision*"});
}

}  // namespace
}  // namespace lucid
