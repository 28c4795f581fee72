// Response formatting: completions logprobs as vLLM returns them (top_logprobs with the chosen
// token, text_offset in characters).
#include "server/openai_format.h"

#include <gtest/gtest.h>

#include "server/byte_tokenizer_for_test.h"

namespace lucid::server {
namespace {

std::unique_ptr<tok::Tokenizer> ByteTokenizer() {
  auto tk = tok::Tokenizer::FromJsonString(ByteLevelTokenizerJson());
  EXPECT_TRUE(tk.ok()) << tk.status().ToString();
  return std::move(*tk);
}

TEST(CompletionLogprobsTest, LogprobsZeroGivesTheChosenTokenAsTheOnlyEntry) {
  auto tk = ByteTokenizer();
  std::vector<TokenLogprob> lps = {{'a', -0.25f, {}}, {'b', -1.5f, {}}};
  size_t offset = 0;
  const json j = CompletionLogprobs(lps, tk.get(), 0, &offset);
  ASSERT_EQ(j["top_logprobs"].size(), 2u);
  EXPECT_EQ(j["top_logprobs"][0], json({{"a", -0.25}}));
  EXPECT_EQ(j["top_logprobs"][1], json({{"b", -1.5}}));
}

TEST(CompletionLogprobsTest, TopEntriesAreTheChosenTokenPlusTheAlternatives) {
  auto tk = ByteTokenizer();
  // Sampled 'c', not among the two best: three entries, as vLLM's top-k + sampled.
  std::vector<TokenLogprob> lps = {{'c', -3.0f, {{'a', -0.5f}, {'b', -1.0f}, {'d', -4.0f}}}};
  size_t offset = 0;
  const json j = CompletionLogprobs(lps, tk.get(), 2, &offset);
  EXPECT_EQ(j["top_logprobs"][0], json({{"a", -0.5}, {"b", -1.0}, {"c", -3.0}}));
  // The chosen token among the best: no duplicate.
  lps = {{'a', -0.5f, {{'a', -0.5f}, {'b', -1.0f}}}};
  EXPECT_EQ(CompletionLogprobs(lps, tk.get(), 2, &offset)["top_logprobs"][0].size(), 2u);
}

TEST(CompletionLogprobsTest, TextOffsetCountsCharactersAndAdvancesTheSameInPieces) {
  auto tk = ByteTokenizer();
  // "é" is two byte tokens (0xC3 0xA9), each alone decoding to U+FFFD (three bytes, one
  // character); then 'x'. Offsets in characters from an echoed prefix "ü" (one character).
  std::vector<TokenLogprob> lps = {{0xC3, -1.0f, {}}, {0xA9, -1.0f, {}}, {'x', -1.0f, {}}};
  size_t offset = Utf8Chars("\xC3\xBC");
  EXPECT_EQ(offset, 1u);
  const json whole = CompletionLogprobs(lps, tk.get(), 0, &offset);
  EXPECT_EQ(whole["text_offset"], json::array({1, 2, 3}));
  EXPECT_EQ(offset, 4u);
  // Streaming: the same tokens in two events continue from where the first stopped.
  size_t streamed = 1;
  const json a = CompletionLogprobs({lps[0]}, tk.get(), 0, &streamed);
  const json b = CompletionLogprobs({lps[1], lps[2]}, tk.get(), 0, &streamed);
  EXPECT_EQ(a["text_offset"], json::array({1}));
  EXPECT_EQ(b["text_offset"], json::array({2, 3}));
  EXPECT_EQ(streamed, offset);
}

}  // namespace
}  // namespace lucid::server
