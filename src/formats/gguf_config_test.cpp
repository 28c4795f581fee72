// HfConfigFromGguf / HfTensorName on SmolLM2's GGUF against transformers' GGUF config mapping and
// the converter's tensor-name table (tests/fixtures/gguf/smollm2_config.json, written by
// tools/reference/gguf/config_goldens.py). The model file is installed by scripts/setup.sh.
#include "formats/gguf_config.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace lucid {
namespace {

std::string SmolLm2Path() {
  const char* env = std::getenv("LUCID_MODEL_CACHE");
  const std::string dir = env ? env : std::string(LUCID_SOURCE_DIR) + "/.cache/models";
  return dir + "/SmolLM2-135M-Instruct.Q4_1.gguf";
}

nlohmann::json Golden() {
  std::ifstream in(std::string(LUCID_SOURCE_DIR) + "/tests/fixtures/gguf/smollm2_config.json");
  return nlohmann::json::parse(in);
}

TEST(GgufConfig, SmolLm2ConfigHasEveryKeyTransformersMapsWithItsValue) {
  if (!std::filesystem::exists(SmolLm2Path())) {
    GTEST_SKIP() << SmolLm2Path() << " is not installed (scripts/setup.sh installs it)";
  }
  auto f = GgufFile::Open(SmolLm2Path());
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  auto c = HfConfigFromGguf(**f);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const auto golden = Golden();
  for (const auto& [key, want] : golden["config"].items()) {
    ASSERT_TRUE(c->contains(key)) << key;
    if (want.is_number_float()) {
      EXPECT_EQ((*c)[key].get<double>(), want.get<double>()) << key;
    } else {
      EXPECT_EQ((*c)[key], want) << key;
    }
  }
  EXPECT_EQ((*c)["model_type"], "llama");
  EXPECT_EQ((*c)["architectures"][0], "LlamaForCausalLM");
  EXPECT_EQ((*c)["tie_word_embeddings"], true);  // the file has no output.weight
  EXPECT_EQ((*c)["bos_token_id"], 1);
  EXPECT_EQ((*c)["eos_token_id"], 2);
  EXPECT_EQ(QkRopeLayout("llama"), RopeLayout::kInterleaved);
}

TEST(GgufConfig, TensorNamesAreTheConvertersTable) {
  const auto golden = Golden();
  ASSERT_EQ(golden["hf_names"].size(), 272u);
  for (const auto& [gguf_name, hf] : golden["hf_names"].items()) {
    auto got = HfTensorName(gguf_name);
    ASSERT_TRUE(got.has_value()) << gguf_name;
    EXPECT_EQ(*got, hf.get<std::string>()) << gguf_name;
  }
  EXPECT_EQ(*HfTensorName("output.weight"), "lm_head.weight");
  EXPECT_EQ(*HfTensorName("blk.3.attn_q.bias"), "model.layers.3.self_attn.q_proj.bias");
  EXPECT_EQ(*HfTensorName("blk.0.attn_k_norm.weight"), "model.layers.0.self_attn.k_norm.weight");
  EXPECT_FALSE(HfTensorName("blk.0.ffn_gate_exps.weight").has_value());
  EXPECT_FALSE(HfTensorName("rope_freqs.weight").has_value());
}

TEST(GgufConfig, RefusesOtherArchitecturesAndMissingKeysByName) {
  auto fixture = GgufFile::Open(std::string(LUCID_SOURCE_DIR) + "/tests/fixtures/gguf/types.gguf");
  ASSERT_TRUE(fixture.ok());
  auto c = HfConfigFromGguf(**fixture);  // "llama" without any llama.* key
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kNotFound);
  EXPECT_NE(c.status().message().find("llama.block_count"), std::string::npos);
  auto rows =
      GgufFile::Open(std::string(LUCID_SOURCE_DIR) + "/tests/fixtures/gguf/smollm2_rows.gguf");
  ASSERT_TRUE(rows.ok());
  auto r = HfConfigFromGguf(**rows);  // architecture "rows"
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(r.status().message().find("\"rows\""), std::string::npos);
}

}  // namespace
}  // namespace lucid
