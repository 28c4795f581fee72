// Error codes that docs/SERVING.md promises and the parser left null (issue 26, item 6): a body
// nested deeper than 64 is `invalid_json`; an empty prompt ("" or []) is `empty_array`.
#include <gtest/gtest.h>

#include "server/request_parsing.h"

namespace lucid::server {
namespace {

TEST(RequestErrorCodes, NestingDeeperThan64IsInvalidJson) {
  ordered_json j;
  const std::string deep = "{\"prompt\": " + std::string(65, '[') + std::string(65, ']') + "}";
  auto e = ParseJsonBody(deep, &j);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->status, 400);
  EXPECT_EQ(e->code, "invalid_json");
  const std::string ok = "{\"prompt\": " + std::string(63, '[') + std::string(63, ']') + "}";
  EXPECT_FALSE(ParseJsonBody(ok, &j));  // 64 levels with the object itself
}

TEST(RequestErrorCodes, EmptyPromptIsEmptyArray) {
  for (const char* body :
       {R"({"prompt": []})", R"({"prompt": [[]]})", R"({"prompt": [[5], []]})"}) {
    ParsedRequest r;
    auto e = ParseCompletionRequest(ordered_json::parse(body), &r);
    ASSERT_TRUE(e) << body;
    EXPECT_EQ(e->code, "empty_array") << body;
    EXPECT_EQ(e->param, "prompt") << body;
  }
  // "" parses (a text prompt) and is refused once tokenized to 0 tokens.
  ParsedRequest r;
  ASSERT_FALSE(ParseCompletionRequest(ordered_json::parse(R"({"prompt": ""})"), &r));
  SamplingParams sp;
  auto e = ApplyLengthLimits(r, /*prompt_len=*/0, /*context_length=*/64, &sp);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->code, "empty_array");
  EXPECT_EQ(e->param, "prompt");
}

}  // namespace
}  // namespace lucid::server
