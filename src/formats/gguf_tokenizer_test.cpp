// TokenizerJsonFromGguf on small hand-built files: refusals by name, token types, BOS. (The
// id-for-id check against transformers on a real file is src/server/model_assets_gguf_test.cpp.)
#include "formats/gguf_tokenizer.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace lucid {
namespace {

class Kv {
 public:
  Kv& Str(const std::string& key, const std::string& v) {
    Key(key, 8);
    S(v);
    return *this;
  }
  Kv& Bool(const std::string& key, bool v) {
    Key(key, 7);
    b_.push_back(v);
    return *this;
  }
  Kv& U32(const std::string& key, uint32_t v) {
    Key(key, 4);
    Put(v);
    return *this;
  }
  Kv& Strs(const std::string& key, const std::vector<std::string>& v) {
    Key(key, 9);
    Put<uint32_t>(8);
    Put<uint64_t>(v.size());
    for (const auto& s : v) S(s);
    return *this;
  }
  Kv& I32s(const std::string& key, const std::vector<int32_t>& v) {
    Key(key, 9);
    Put<uint32_t>(5);
    Put<uint64_t>(v.size());
    for (int32_t x : v) Put(x);
    return *this;
  }
  std::vector<uint8_t> File() const {
    Kv h;
    h.Put<uint32_t>(0x46554747);
    h.Put<uint32_t>(3);
    h.Put<uint64_t>(0);
    h.Put<uint64_t>(n_);
    h.b_.insert(h.b_.end(), b_.begin(), b_.end());
    return h.b_;
  }

 private:
  template <typename T>
  void Put(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    b_.insert(b_.end(), p, p + sizeof(T));
  }
  void S(const std::string& s) {
    Put<uint64_t>(s.size());
    b_.insert(b_.end(), s.begin(), s.end());
  }
  void Key(const std::string& k, uint32_t type) {
    S(k);
    Put(type);
    ++n_;
  }
  std::vector<uint8_t> b_;
  uint64_t n_ = 0;
};

// A byte-level vocabulary: "a", "b", "ab", a control token, a control token spelled with a raw
// space (outside the byte alphabet, which llama.cpp mislabels and transformers skips), and a
// user-defined token.
Kv Base() {
  Kv kv;
  kv.Str("tokenizer.ggml.model", "gpt2")
      .Strs("tokenizer.ggml.tokens", {"a", "b", "ab", "<|eot|>", "<bad tok>", "<think>"})
      .Strs("tokenizer.ggml.merges", {"a b"})
      .I32s("tokenizer.ggml.token_type", {1, 1, 1, 3, 3, 4})
      .U32("tokenizer.ggml.bos_token_id", 3)
      .U32("tokenizer.ggml.eos_token_id", 3);
  return kv;
}

StatusOr<nlohmann::json> Convert(const Kv& kv) {
  const auto bytes = kv.File();
  auto f = GgufFile::Parse("t.gguf", bytes.data(), bytes.size(), nullptr);
  if (!f.ok()) return f.status();
  LUCID_ASSIGN_OR_RETURN(std::string text, TokenizerJsonFromGguf(**f));
  return nlohmann::json::parse(text);
}

TEST(GgufTokenizer, TokenTypesBecomeAddedTokens) {
  auto j = Convert(Base());
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  const auto& added = (*j)["added_tokens"];
  ASSERT_EQ(added.size(), 2u);
  EXPECT_EQ(added[0]["content"], "<|eot|>");
  EXPECT_EQ(added[0]["id"], 3);
  EXPECT_EQ(added[0]["special"], true);
  EXPECT_EQ(added[1]["content"], "<think>");
  EXPECT_EQ(added[1]["special"], false);
  // The token with a raw space is respelled into the byte alphabet (space is U+0120).
  EXPECT_EQ((*j)["model"]["vocab"]["<bad\xC4\xA0tok>"], 4);
  EXPECT_EQ((*j)["model"]["merges"][0], "a b");
  EXPECT_EQ((*j)["pre_tokenizer"]["type"], "ByteLevel");
  EXPECT_EQ((*j)["post_processor"]["single"].size(), 1u);  // no add_bos_token: nothing added
}

TEST(GgufTokenizer, AddBosPrependsTheBosToken) {
  auto j = Convert(Base().Bool("tokenizer.ggml.add_bos_token", true));
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  const auto& single = (*j)["post_processor"]["single"];
  ASSERT_EQ(single.size(), 2u);
  EXPECT_EQ(single[0]["SpecialToken"]["id"], "<|eot|>");
  EXPECT_EQ((*j)["post_processor"]["special_tokens"]["<|eot|>"]["ids"][0], 3);
}

TEST(GgufTokenizer, PreTokenizerNamesChooseTheSplitAndUnknownOnesAreRefused) {
  auto llama3 = Convert(Base().Str("tokenizer.ggml.pre", "llama-bpe"));
  ASSERT_TRUE(llama3.ok()) << llama3.status().ToString();
  EXPECT_EQ((*llama3)["pre_tokenizer"]["type"], "Sequence");
  EXPECT_NE(
      (*llama3)["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"].get<std::string>().find(
          "\\p{N}{1,3}"),
      std::string::npos);
  auto unknown = Convert(Base().Str("tokenizer.ggml.pre", "my-new-pre"));
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(unknown.status().message().find("\"my-new-pre\""), std::string::npos);
}

TEST(GgufTokenizer, OtherModelsAndBadMetadataAreRefusedByName) {
  Kv spm;
  spm.Str("tokenizer.ggml.model", "llama");
  auto s = Convert(spm);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(s.status().message().find("\"llama\""), std::string::npos);
  Kv short_types;
  short_types.Str("tokenizer.ggml.model", "gpt2")
      .Strs("tokenizer.ggml.tokens", {"a", "b"})
      .Strs("tokenizer.ggml.merges", {})
      .I32s("tokenizer.ggml.token_type", {1});
  auto t = Convert(short_types);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("token_type has 1 entries for 2 tokens"), std::string::npos);
  Kv no_merges;
  no_merges.Str("tokenizer.ggml.model", "gpt2").Strs("tokenizer.ggml.tokens", {"a"});
  auto m = Convert(no_merges);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("tokenizer.ggml.merges"), std::string::npos);
}

}  // namespace
}  // namespace lucid
