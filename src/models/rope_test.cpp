// RoPE tables against transformers' own rope init functions (fixtures written by
// tools/reference/gen_rope_golden.py), going through config.json parsing.
#include "models/rope.h"

#include <gtest/gtest.h>

#include <cmath>

namespace lucid {
namespace {

void CheckCase(const std::string& name, const std::string& model_type) {
  auto doc = ReadJsonFile(std::string(LUCID_SOURCE_DIR) + "/tests/fixtures/rope/" + name + ".json");
  ASSERT_TRUE(doc.ok()) << doc.status().ToString();
  nlohmann::json cfg = {{"model_type", model_type},
                        {"architectures", {"X"}},
                        {"qk_rope_head_dim", (*doc)["dim"]},
                        {"rope_parameters", (*doc)["rope_parameters"]}};
  auto c = ParseModelConfig(cfg);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  RopeTable t = MakeRopeTable(c->rope, c->qk_rope_head_dim);
  const auto& want = (*doc)["inv_freq"];
  ASSERT_EQ(t.inv_freq.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(t.inv_freq[i], want[i].get<double>(), 2e-7 * std::abs(want[i].get<double>()))
        << name << " i=" << i;
  EXPECT_NEAR(t.attention_factor, (*doc)["attention_factor"].get<double>(), 1e-6) << name;
}

TEST(RopeTest, YarnMatchesTransformers) {
  CheckCase("yarn_deepseek_v32", "deepseek_v32");
  CheckCase("yarn_no_mscale", "deepseek_v32");  // attention factor 0.1 ln(40) + 1
  CheckCase("yarn_small_dim", "deepseek_v32");
}

TEST(RopeTest, DefaultMatchesTransformers) { CheckCase("default_glm5", "glm_moe_dsa"); }

// Llama 3.1's scaling at head_dim 128 (the three frequency bands).
TEST(RopeTest, Llama3MatchesTransformers) { CheckCase("llama3_8b", "llama"); }

TEST(RopeTest, Llama3NeedsItsFourParameters) {
  nlohmann::json cfg = {{"model_type", "llama"},
                        {"architectures", {"X"}},
                        {"rope_parameters", {{"rope_type", "llama3"}, {"factor", 8.0}}}};
  auto c = ParseModelConfig(cfg);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("low_freq_factor"), std::string::npos)
      << c.status().message();
}

}  // namespace
}  // namespace lucid
