// Parsing of the structured-output fields through the route parsers, and the tool calls made of a
// forced-tool output.
#include "server/structured_output.h"

#include <gtest/gtest.h>

#include "server/request_parsing.h"

namespace lucid::server {
namespace {

using grammar::GrammarKind;

ordered_json J(const char* s) { return ordered_json::parse(s); }

ordered_json Chat(const char* extra) {
  return J(
      (std::string(R"({"messages": [{"role": "user", "content": "x"}], )") + extra + "}").c_str());
}

const char* kTools = R"("tools": [
  {"type": "function", "function": {"name": "get_weather",
     "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                    "required": ["city"]}}},
  {"type": "function", "function": {"name": "now"}}])";

TEST(StructuredOutput, ResponseFormatKinds) {
  ParsedRequest r;
  ASSERT_FALSE(ParseChatRequest(Chat(R"("response_format": {"type": "text"})"), &r));
  EXPECT_FALSE(r.structured.grammar);
  ASSERT_FALSE(ParseChatRequest(Chat(R"("response_format": {"type": "json_object"})"), &r));
  ASSERT_TRUE(r.structured.grammar);
  EXPECT_EQ(r.structured.grammar->kind, GrammarKind::kJsonObject);
  ASSERT_FALSE(ParseChatRequest(Chat(R"("response_format": {"type": "json_schema", "json_schema":
      {"name": "p", "strict": true, "schema": {"type": "object", "properties": {"b": {}, "a": {}}}}})"),
                                &r));
  ASSERT_TRUE(r.structured.grammar);
  EXPECT_EQ(r.structured.grammar->kind, GrammarKind::kJsonSchema);
  // The schema's own key order is kept (it is the order of the output's properties).
  EXPECT_EQ(r.structured.grammar->source, R"({"type":"object","properties":{"b":{},"a":{}}})");
  EXPECT_EQ(r.structured.param, "response_format");
  ParsedRequest c;
  ASSERT_FALSE(ParseCompletionRequest(J(R"({"prompt": "x", "regex": "[a-z]+"})"), &c));
  ASSERT_TRUE(c.structured.grammar);
  EXPECT_EQ(c.structured.grammar->kind, GrammarKind::kRegex);
  EXPECT_EQ(c.structured.grammar->source, "[a-z]+");
  ASSERT_FALSE(ParseCompletionRequest(J(R"({"prompt": "x", "ebnf": "root ::= \"a\""})"), &c));
  EXPECT_EQ(c.structured.grammar->kind, GrammarKind::kEbnf);
}

TEST(StructuredOutput, GenerateTakesSglangSamplingParams) {
  ParsedRequest r;
  ASSERT_FALSE(ParseGenerateRequest(
      J(R"({"text": "x", "sampling_params": {"json_schema": "{\"type\": \"integer\"}"}})"), &r));
  ASSERT_TRUE(r.structured.grammar);
  EXPECT_EQ(r.structured.grammar->kind, GrammarKind::kJsonSchema);
  EXPECT_EQ(r.structured.grammar->source, R"({"type":"integer"})");
  ASSERT_FALSE(
      ParseGenerateRequest(J(R"({"text": "x", "sampling_params": {"regex": "a|b"}})"), &r));
  EXPECT_EQ(r.structured.grammar->kind, GrammarKind::kRegex);
  auto e =
      ParseGenerateRequest(J(R"({"text": "x", "sampling_params": {"json_schema": "{oops"}})"), &r);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "sampling_params.json_schema");
}

TEST(StructuredOutput, MalformedFieldsAre400sNamingThem) {
  ParsedRequest r;
  auto param = [&](const char* extra) {
    auto e = ParseChatRequest(Chat(extra), &r);
    return e ? e->param : std::string("(accepted)");
  };
  EXPECT_EQ(param(R"("response_format": {"type": "yaml"})"), "response_format.type");
  EXPECT_EQ(param(R"("response_format": "json")"), "response_format");
  EXPECT_EQ(param(R"("response_format": {"type": "json_schema"})"), "response_format.json_schema");
  EXPECT_EQ(param(R"("response_format": {"type": "json_schema", "json_schema": {"schema": 3}})"),
            "response_format.json_schema.schema");
  EXPECT_EQ(param(R"("regex": 5)"), "regex");
  EXPECT_EQ(param(R"("regex": "")"), "regex");
  EXPECT_EQ(param(R"("response_format": {"type": "json_object"}, "regex": "a")"), "regex");
  EXPECT_EQ(param(R"("tool_choice": "sometimes")"), "tool_choice");
  EXPECT_EQ(param((std::string(kTools) + R"(, "tool_choice": {"type": "function",
      "function": {"name": "missing"}})")
                      .c_str()),
            "tool_choice");
  EXPECT_EQ(param((std::string(kTools) + R"(, "tool_choice": "required",
      "response_format": {"type": "json_object"})")
                      .c_str()),
            "tool_choice");
  EXPECT_EQ(param(R"("tools": [{"type": "function"}], "tool_choice": "required")"), "tools[0]");
  EXPECT_EQ(param((std::string(kTools) + R"(, "tool_choice": "auto")").c_str()), "(accepted)");
  EXPECT_FALSE(r.structured.grammar);
}

TEST(StructuredOutput, RequiredToolChoiceIsAnArrayOfCallsToTheTools) {
  ParsedRequest r;
  ASSERT_FALSE(
      ParseChatRequest(Chat((std::string(kTools) + R"(, "tool_choice": "required")").c_str()), &r));
  ASSERT_TRUE(r.structured.grammar);
  EXPECT_EQ(r.structured.tools, ForcedTools::kRequired);
  const ordered_json schema = ordered_json::parse(r.structured.grammar->source);
  EXPECT_EQ(schema["type"], "array");
  EXPECT_EQ(schema["minItems"], 1);
  const ordered_json& any = schema["items"]["anyOf"];
  ASSERT_EQ(any.size(), 2u);
  EXPECT_EQ(any[0]["properties"]["name"]["enum"], ordered_json::array({"get_weather"}));
  EXPECT_EQ(any[0]["properties"]["parameters"]["required"], ordered_json::array({"city"}));
  EXPECT_EQ(any[1]["properties"]["name"]["enum"], ordered_json::array({"now"}));
  EXPECT_EQ(any[1]["properties"]["parameters"]["type"], "object");  // default: no parameters
  EXPECT_EQ(any[1]["required"], ordered_json::array({"name", "parameters"}));
}

TEST(StructuredOutput, NamedToolChoiceIsThatToolsParameters) {
  ParsedRequest r;
  ASSERT_FALSE(ParseChatRequest(Chat((std::string(kTools) + R"(, "tool_choice":
      {"type": "function", "function": {"name": "get_weather"}})")
                                         .c_str()),
                                &r));
  EXPECT_EQ(r.structured.tools, ForcedTools::kNamed);
  EXPECT_EQ(r.structured.tool_name, "get_weather");
  EXPECT_EQ(ordered_json::parse(r.structured.grammar->source)["required"],
            ordered_json::array({"city"}));
}

TEST(StructuredOutput, ForcedToolCallsFromTheOutputText) {
  StructuredOutput named;
  named.tools = ForcedTools::kNamed;
  named.tool_name = "get_weather";
  auto calls = ForcedToolCalls(named, R"({"city":"Paris","b":1,"a":2})");
  ASSERT_TRUE(calls);
  ASSERT_EQ(calls->size(), 1u);
  EXPECT_EQ((*calls)[0]["type"], "function");
  EXPECT_EQ((*calls)[0]["function"]["name"], "get_weather");
  EXPECT_EQ((*calls)[0]["function"]["arguments"], R"({"city":"Paris","b":1,"a":2})");
  EXPECT_EQ((*calls)[0]["id"].get<std::string>().rfind("call_", 0), 0u);

  StructuredOutput req;
  req.tools = ForcedTools::kRequired;
  calls = ForcedToolCalls(
      req, R"([{"name":"now","parameters":{}},{"name":"get_weather","parameters":{"city":"x"}}])");
  ASSERT_TRUE(calls);
  ASSERT_EQ(calls->size(), 2u);
  EXPECT_EQ((*calls)[0]["function"]["name"], "now");
  EXPECT_EQ((*calls)[0]["function"]["arguments"], "{}");
  EXPECT_EQ((*calls)[1]["function"]["arguments"], R"({"city":"x"})");
  EXPECT_NE((*calls)[0]["id"], (*calls)[1]["id"]);
  EXPECT_FALSE(ForcedToolCalls(req, R"([{"name":"now","param)"));  // cut by max_tokens
  EXPECT_FALSE(ForcedToolCalls(req, R"({"name":"now"})"));
}

}  // namespace
}  // namespace lucid::server
