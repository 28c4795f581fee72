// Unit tests: refusal of unsupported components, merges forms, UTF-8 helpers, streaming details.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/regex.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_test_util.h"
#include "tokenizer/utf8.h"

namespace lucid::tok {
namespace {

using nlohmann::json;
using testing::FixturePath;
using testing::ReadFile;

json Base(const std::string& name) {
  return json::parse(ReadFile(FixturePath("tokenizers/" + name + "/tokenizer.json")));
}

TEST(Tokenizer, RefusesUnsupportedComponentsByName) {
  const json base = Base("llama-spm");
  const std::vector<std::pair<std::string, json>> cases = {
      {"model", {{"type", "WordPiece"}, {"vocab", json::object()}}},
      {"normalizer", {{"type", "Precompiled"}, {"precompiled_charsmap", ""}}},
      {"normalizer", {{"type", "BertNormalizer"}}},
      {"pre_tokenizer", {{"type", "BertPreTokenizer"}}},
      {"pre_tokenizer", {{"type", "UnicodeScripts"}}},
      {"decoder", {{"type", "WordPiece"}}},
      {"post_processor", {{"type", "RobertaProcessing"}}},
  };
  for (const auto& [key, value] : cases) {
    json j = base;
    j[key] = value;
    auto t = Tokenizer::FromJsonString(j.dump());
    ASSERT_FALSE(t.ok()) << key;
    EXPECT_EQ(t.status().code(), StatusCode::kUnimplemented) << t.status().ToString();
    EXPECT_NE(t.status().message().find(value["type"].get<std::string>()), std::string::npos)
        << t.status().message();
  }
  json j = base;
  j["model"]["dropout"] = 0.1;
  auto t = Tokenizer::FromJsonString(j.dump());
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("dropout"), std::string::npos);
}

TEST(Tokenizer, MalformedFilesAreErrorsNotCrashes) {
  for (const char* text : {"", "{", "[]", "{\"model\": 3}", "{\"model\": {\"vocab\": []}}",
                           "{\"model\": {\"vocab\": {\"a\": 0}, \"merges\": [\"a b\"]}}"}) {
    EXPECT_FALSE(Tokenizer::FromJsonString(text).ok()) << text;
  }
  EXPECT_EQ(Tokenizer::FromFile("/nonexistent/tokenizer.json").status().code(),
            StatusCode::kNotFound);
}

TEST(Tokenizer, StringAndPairMergesAreEquivalent) {
  json pairs = Base("deepseek-coder");
  json strings = pairs;
  for (auto& m : strings["model"]["merges"]) {
    m = m[0].get<std::string>() + " " + m[1].get<std::string>();
  }
  auto a = Tokenizer::FromJsonString(pairs.dump());
  auto b = Tokenizer::FromJsonString(strings.dump());
  ASSERT_TRUE(a.ok() && b.ok());
  for (const char* text : {"Hello world, 12345!", "def foo(bar):\n  return bar * 2", "你好"}) {
    EXPECT_EQ(*(*a)->Encode(text, true), *(*b)->Encode(text, true)) << text;
  }
}

TEST(Tokenizer, ByteLevelAddPrefixSpaceAppliesToEachSplit) {
  json j = Base("gpt-2");
  j["pre_tokenizer"]["add_prefix_space"] = true;
  auto t = Tokenizer::FromJsonString(j.dump());
  ASSERT_TRUE(t.ok());
  // Expected ids from HF tokenizers 0.23.3 with the same edit.
  EXPECT_EQ(*(*t)->Encode("hello world", false), (std::vector<int32_t>{23748, 995}));
  EXPECT_EQ(*(*t)->Encode("<|endoftext|>hello", false), (std::vector<int32_t>{50256, 23748}));
  EXPECT_EQ(*(*t)->Encode(" hi", false), (std::vector<int32_t>{23105}));
  EXPECT_EQ(*(*t)->Encode("a<|endoftext|> b", false), (std::vector<int32_t>{257, 50256, 275}));
}

TEST(Tokenizer, ByteAlphabetAddedTokensDecodeLikeHf) {
  // deepseek-coder's non-special added token "ü" (id 32009) is also a byte-alphabet character,
  // so the ByteLevel decoder maps it to the lone byte 0xFC: HF decodes "\x14ül\x14" to
  // "\x14\ufffdl\x14", and so must we (encode/decode do not round-trip here).
  auto t = Tokenizer::FromFile(FixturePath("tokenizers/deepseek-coder/tokenizer.json"));
  ASSERT_TRUE(t.ok());
  auto ids = (*t)->Encode("\x14\xC3\xBCl\x14", false);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<int32_t>{195, 32009, 75, 195}));
  EXPECT_EQ((*t)->Decode(*ids, false), "\x14\xEF\xBF\xBDl\x14");
}

TEST(Tokenizer, RejectsInvalidUtf8AndAnswersLookups) {
  auto t = Tokenizer::FromFile(FixturePath("tokenizers/qwen2/tokenizer.json"));
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_FALSE((*t)->Encode("bad \xFF byte", false).ok());
  EXPECT_EQ((*t)->TokenToId("<|im_start|>"), 151644);
  EXPECT_EQ((*t)->IdToToken(151644), "<|im_start|>");
  EXPECT_TRUE((*t)->IsSpecial(151644));
  EXPECT_FALSE((*t)->IdToToken(-1).has_value());
  EXPECT_EQ((*t)->vocab_size(), 151936u);
  EXPECT_EQ((*t)->Decode(std::vector<int32_t>{-5, 1 << 30}, false), "");
}

TEST(IncrementalDetokenizer, HoldsIncompleteCharactersAndUsesContext) {
  auto t = Tokenizer::FromFile(FixturePath("tokenizers/llama-spm/tokenizer.json"));
  ASSERT_TRUE(t.ok());
  // "🤖" has no vocab entry: byte_fallback gives four <0x..> tokens.
  auto ids = (*t)->Encode("Hi 🤖!", false);
  ASSERT_TRUE(ids.ok());
  IncrementalDetokenizer d(t->get(), false);
  std::vector<std::string> chunks;
  for (int32_t id : *ids) chunks.push_back(d.Add(id));
  chunks.push_back(d.Finish());
  std::string all;
  for (const auto& c : chunks) {
    EXPECT_TRUE(IsValidUtf8(c));
    EXPECT_EQ(c.find("\xEF\xBF\xBD"), std::string::npos) << "no replacement char mid-stream";
    all += c;
  }
  EXPECT_EQ(all, "Hi 🤖!");
  // With the prompt as context, the first generated word keeps its leading space.
  auto prompt = (*t)->Encode("Say", false);
  auto gen = (*t)->Encode(" hello", false);
  IncrementalDetokenizer d2(t->get(), false, *prompt);
  std::string out;
  for (int32_t id : *gen) out += d2.Add(id);
  out += d2.Finish();
  EXPECT_EQ(out, " hello");
}

TEST(Utf8, LossyMatchesRustSemantics) {
  EXPECT_EQ(Utf8Lossy("a\xF0\x9F\x98"), "a\xEF\xBF\xBD");        // truncated: one U+FFFD
  EXPECT_EQ(Utf8Lossy("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");  // overlong: two
  EXPECT_EQ(Utf8Lossy("\xED\xA0\x80"),
            std::string(3, 'x').replace(0, 3, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"));
  EXPECT_EQ(CompleteUtf8Prefix("ab\xE2\x82"), 2u);
  EXPECT_EQ(CompleteUtf8Prefix("ab\xE2\x82\xAC"), 5u);
  EXPECT_EQ(CompleteUtf8Prefix("ab\xFF"), 3u);
}

TEST(Regex, WhitespaceIsUnicodeWhiteSpaceLikeOniguruma) {
  auto re = Regex::Compile("\\s+");
  ASSERT_TRUE(re.ok());
  EXPECT_TRUE((*re)
                  ->FindAll("a\xE1\xA0\x8E"
                            "b")
                  .empty());  // U+180E is not White_Space
  EXPECT_EQ((*re)->FindAll("a\xC2\x85\xE3\x80\x80 b").size(), 1u);
  EXPECT_FALSE(Regex::Compile("(unclosed").ok());
}

}  // namespace
}  // namespace lucid::tok
