#include "server/model_assets.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "server/byte_tokenizer_for_test.h"

namespace lucid::server {
namespace {

namespace fs = std::filesystem;

class ModelAssetsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           ("lucid_assets_" +
            std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void Write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
  }
  fs::path dir_;
};

TEST_F(ModelAssetsTest, NothingButWeights) {
  auto a = LoadModelAssets(dir_.string());
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->tokenizer, nullptr);
  EXPECT_EQ(a->chat_template, nullptr);
  EXPECT_NE(a->chat_error.find("no chat template"), std::string::npos);
}

TEST_F(ModelAssetsTest, TokenizerConfigTemplateAndSpecialTokens) {
  Write("tokenizer.json", ByteLevelTokenizerJson());
  Write("tokenizer_config.json",
        R"({"bos_token": {"content": "<s>"}, "eos_token": "</s>",
            "chat_template": "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}"})");
  auto a = LoadModelAssets(dir_.string());
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_NE(a->tokenizer, nullptr);
  EXPECT_EQ(a->tokenizer->vocab_size(), 256u);
  EXPECT_EQ(a->bos_token, "<s>");
  EXPECT_EQ(a->eos_token, "</s>");
  ASSERT_NE(a->chat_template, nullptr);
  tok::ChatRequest r;
  r.messages = nlohmann::ordered_json::parse(R"([{"role": "user", "content": "hi"}])");
  r.bos_token = a->bos_token;
  auto text = a->chat_template->Apply(r);
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  EXPECT_EQ(*text, "<s>hi");
}

TEST_F(ModelAssetsTest, JinjaFileWinsAndNamedListForm) {
  Write("tokenizer.json", ByteLevelTokenizerJson());
  Write(
      "tokenizer_config.json",
      R"({"chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]})");
  auto a = LoadModelAssets(dir_.string());
  ASSERT_TRUE(a.ok());
  ASSERT_NE(a->chat_template, nullptr);
  EXPECT_EQ(*a->chat_template->Apply({}), "D");
  Write("chat_template.jinja", "J");
  a = LoadModelAssets(dir_.string());
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(*a->chat_template->Apply({}), "J");
}

TEST_F(ModelAssetsTest, BrokenTemplateIsReportedNotFatal) {
  Write("tokenizer.json", ByteLevelTokenizerJson());
  Write("chat_template.jinja", "{% for m in messages %}");
  auto a = LoadModelAssets(dir_.string());
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->chat_template, nullptr);
  EXPECT_NE(a->chat_error.find("does not parse"), std::string::npos) << a->chat_error;
}

TEST_F(ModelAssetsTest, BadFilesAreErrorsNamingThem) {
  Write("tokenizer.json", "{");
  auto a = LoadModelAssets(dir_.string());
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("tokenizer"), std::string::npos) << a.status().message();
  fs::remove(dir_ / "tokenizer.json");
  Write("tokenizer_config.json", "[1]");
  a = LoadModelAssets(dir_.string());
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("tokenizer_config.json"), std::string::npos);
}

}  // namespace
}  // namespace lucid::server
