#include "server/request_parsing.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "tokenizer/chat_template.h"

namespace lucid::server {
namespace {

ordered_json J(const char* s) { return ordered_json::parse(s); }

ApiError CompletionError(const char* body) {
  ParsedRequest r;
  auto e = ParseCompletionRequest(J(body), &r);
  EXPECT_TRUE(e.has_value()) << body;
  return e.value_or(ApiError{});
}

ApiError ChatError(const char* body) {
  ParsedRequest r;
  auto e = ParseChatRequest(J(body), &r);
  EXPECT_TRUE(e.has_value()) << body;
  return e.value_or(ApiError{});
}

TEST(ParseJsonBody, RejectsMalformedNonObjectAndDeepNesting) {
  ordered_json j;
  auto e = ParseJsonBody("{\"prompt\": ", &j);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->status, 400);
  EXPECT_EQ(e->code, "invalid_json");
  EXPECT_TRUE(ParseJsonBody("[1, 2]", &j));
  EXPECT_TRUE(ParseJsonBody(std::string(100000, '['), &j));
  EXPECT_FALSE(ParseJsonBody(
      "{\"a\": \"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\"}", &j));
  EXPECT_FALSE(ParseJsonBody("{\"prompt\": \"hi\"}", &j));
}

TEST(ParseCompletion, ReadsEveryField) {
  ParsedRequest r;
  auto e = ParseCompletionRequest(
      J(R"({"model": "m", "prompt": "hello", "max_tokens": 5, "temperature": 0.5, "top_p": 0.9,
            "n": 2, "stop": ["a", "b"], "seed": 7, "logprobs": 3, "stream": true,
            "stream_options": {"include_usage": true}, "top_k": 4, "ignore_eos": true,
            "stop_token_ids": [3], "presence_penalty": 0.1, "frequency_penalty": -0.1, "user": "u"})"),
      &r);
  ASSERT_FALSE(e) << e->message;
  EXPECT_EQ(r.model, "m");
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_TRUE(r.prompts[0].is_text);
  EXPECT_EQ(r.prompts[0].text, "hello");
  EXPECT_EQ(*r.max_tokens, 5);
  EXPECT_FLOAT_EQ(r.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.sampling.top_p, 0.9f);
  EXPECT_EQ(r.n, 2);
  EXPECT_EQ(r.sampling.stop, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(*r.sampling.seed, 7u);
  EXPECT_EQ(r.sampling.logprobs, 3);
  EXPECT_TRUE(r.want_logprobs);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_EQ(r.sampling.top_k, 4);
  EXPECT_TRUE(r.sampling.ignore_eos);
  EXPECT_EQ(r.sampling.stop_token_ids, std::vector<int32_t>{3});
}

TEST(ParseCompletion, PromptForms) {
  ParsedRequest r;
  ASSERT_FALSE(ParseCompletionRequest(J(R"({"prompt": [1, 2, 3]})"), &r));
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_FALSE(r.prompts[0].is_text);
  EXPECT_EQ(r.prompts[0].ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_FALSE(r.batch);
  ASSERT_FALSE(ParseCompletionRequest(J(R"({"prompt": ["a", "b"]})"), &r));
  EXPECT_EQ(r.prompts.size(), 2u);
  EXPECT_TRUE(r.batch);
  ASSERT_FALSE(ParseCompletionRequest(J(R"({"prompt": [[1], [2, 3]]})"), &r));
  EXPECT_EQ(r.prompts[1].ids, (std::vector<int32_t>{2, 3}));
  EXPECT_EQ(CompletionError(R"({"prompt": []})").param, "prompt");
  EXPECT_EQ(CompletionError(R"({"prompt": [[]]})").param, "prompt");
  EXPECT_EQ(CompletionError(R"({"prompt": [-1]})").code, "invalid_token_id");
  EXPECT_EQ(CompletionError(R"({"prompt": 5})").code, "invalid_type");
  EXPECT_EQ(CompletionError(R"({"prompt": [{"a": 1}]})").code, "invalid_type");
  EXPECT_EQ(CompletionError(R"({"max_tokens": 5})").code, "missing_required_parameter");
}

TEST(ParseCompletion, RejectsBadValuesNamingTheParameter) {
  struct Case {
    const char* body;
    const char* param;
    const char* code;
  } cases[] = {
      {R"({"prompt": "x", "temperature": -0.1})", "temperature", "decimal_below_min_value"},
      {R"({"prompt": "x", "temperature": 2.5})", "temperature", "decimal_above_max_value"},
      {R"({"prompt": "x", "temperature": "hot"})", "temperature", "invalid_type"},
      {R"({"prompt": "x", "top_p": 0})", "top_p", "decimal_below_min_value"},
      {R"({"prompt": "x", "top_p": 1.5})", "top_p", "decimal_above_max_value"},
      {R"({"prompt": "x", "max_tokens": 0})", "max_tokens", "integer_below_min_value"},
      {R"({"prompt": "x", "max_tokens": "5"})", "max_tokens", "invalid_type"},
      {R"({"prompt": "x", "max_tokens": 1.5})", "max_tokens", "invalid_type"},
      {R"({"prompt": "x", "n": 0})", "n", "integer_below_min_value"},
      {R"({"prompt": "x", "n": 1000})", "n", "integer_above_max_value"},
      {R"({"prompt": "x", "logprobs": 21})", "logprobs", "integer_above_max_value"},
      {R"({"prompt": "x", "stream": "yes"})", "stream", "invalid_type"},
      {R"({"prompt": "x", "stop": 3})", "stop", "invalid_type"},
      {R"({"prompt": "x", "stop": [""]})", "stop", ""},
      {R"({"prompt": "x", "foo": 1})", "foo", "unknown_parameter"},
      {R"({"prompt": "x", "logit_bias": {"a": 2}})", "logit_bias", "invalid_value"},
      {R"({"prompt": "x", "logit_bias": {"1": 101}})", "logit_bias", "invalid_value"},
      {R"({"prompt": "x", "priority": 1})", "priority", "unsupported_parameter"},
      {R"({"prompt": "x", "min_tokens": -1})", "min_tokens", "integer_below_min_value"},
      {R"({"prompt": "x", "truncate_prompt_tokens": 0})", "truncate_prompt_tokens",
       "invalid_value"},
      {R"({"prompt": "x", "suffix": "s"})", "suffix", "unsupported_parameter"},
      {R"({"prompt": "x", "best_of": 3})", "best_of", "unsupported_parameter"},
      {R"({"prompt": "x", "stream_options": {"include_usage": true}})", "stream_options", ""},
      {R"({"prompt": "x", "model": 3})", "model", "invalid_type"},
      {R"({"prompt": "x", "presence_penalty": 3})", "presence_penalty", "decimal_above_max_value"},
      {R"({"prompt": ["a", "b"], "n": 100})", "n", ""},
  };
  for (const Case& c : cases) {
    ApiError e = CompletionError(c.body);
    EXPECT_EQ(e.status, 400) << c.body;
    EXPECT_EQ(e.type, "invalid_request_error") << c.body;
    EXPECT_EQ(e.param, c.param) << c.body;
    EXPECT_EQ(e.code, c.code) << c.body;
    EXPECT_FALSE(e.message.empty());
  }
}

TEST(ParseCompletion, IntegralDecimalsAreIntegers) {
  ParsedRequest r;
  ASSERT_FALSE(ParseCompletionRequest(J(R"({"prompt": "x", "max_tokens": 4.0})"), &r));
  EXPECT_EQ(*r.max_tokens, 4);
}

TEST(ParseChat, MessagesAreValidatedAndFlattened) {
  ParsedRequest r;
  auto e = ParseChatRequest(J(R"({"messages": [{"role": "system", "content": "s"},
                         {"role": "user", "content": [{"type": "text", "text": "a"},
                                                      {"type": "text", "text": "b"}]}],
            "logprobs": true, "top_logprobs": 2, "max_completion_tokens": 9})"),
                            &r);
  ASSERT_FALSE(e) << e->message;
  EXPECT_EQ(r.messages[1]["content"], "ab");
  EXPECT_EQ(r.sampling.logprobs, 2);
  EXPECT_EQ(*r.max_tokens, 9);
  EXPECT_EQ(ChatError(R"({"messages": []})").code, "empty_array");
  EXPECT_EQ(ChatError(R"({})").param, "messages");
  EXPECT_EQ(ChatError(R"({"messages": "hi"})").code, "invalid_type");
  EXPECT_EQ(ChatError(R"({"messages": [{"role": "wizard", "content": "x"}]})").param,
            "messages[0].role");
  EXPECT_EQ(ChatError(R"({"messages": [{"content": "x"}]})").param, "messages[0].role");
  EXPECT_EQ(ChatError(R"({"messages": [{"role": "user"}]})").param, "messages[0].content");
  EXPECT_EQ(
      ChatError(R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})").code,
      "unsupported_parameter");
  EXPECT_EQ(
      ChatError(R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})").param,
      "top_logprobs");
  EXPECT_EQ(
      ChatError(R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "required"})")
          .param,
      "tool_choice");  // "required" needs tools
  EXPECT_EQ(ChatError(R"({"messages": [{"role": "user", "content": "x"}], "prompt": "x"})").code,
            "unknown_parameter");
  // Assistant messages may omit content (tool calls).
  EXPECT_FALSE(
      ParseChatRequest(J(R"({"messages": [{"role": "assistant", "tool_calls": []}]})"), &r));
}

std::string ReadFixture(const std::string& rel) {
  std::ifstream f(std::string(LUCID_SOURCE_DIR) + "/tests/fixtures/" + rel, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST(ParseChat, ToolCallArgumentsReachTheTemplateAsObjects) {
  // The chat-template goldens render a past tool call whose arguments are an object (as jinja2
  // sees them through transformers). A client sends them as JSON text: the template must see the
  // same thing, so the prompt is the golden's, byte for byte.
  const ordered_json goldens = ordered_json::parse(ReadFixture("chat_templates/goldens.json"));
  int checked = 0;
  for (const std::string name :
       {"GLM-4.7-Flash.jinja", "deepseek-ai-DeepSeek-V3.2.jinja", "GLM-4.6.jinja"}) {
    for (const ordered_json& g : goldens) {
      if (g["template"] != name || g.value("conversation", "") != "tool_call" ||
          !g.contains("output"))
        continue;
      ordered_json body = {{"messages", g["context"]["messages"]}};
      for (ordered_json& m : body["messages"]) {
        if (!m.contains("tool_calls")) continue;
        for (ordered_json& c : m["tool_calls"])
          c["function"]["arguments"] = c["function"]["arguments"].dump();
      }
      ParsedRequest r;
      ASSERT_FALSE(ParseChatRequest(body, &r));
      ordered_json ctx = g["context"];
      ctx["messages"] = r.messages;
      auto tpl = tok::ChatTemplate::Parse(ReadFixture("chat_templates/" + name));
      ASSERT_TRUE(tpl.ok()) << tpl.status().ToString();
      auto out = tpl->Render(ctx);
      ASSERT_TRUE(out.ok()) << name << ": " << out.status().ToString();
      EXPECT_EQ(*out, g["output"].get<std::string>()) << name;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 6);  // three templates, with and without the generation prompt
  // Arguments that are not a JSON object stay as sent.
  ParsedRequest r;
  ASSERT_FALSE(ParseChatRequest(J(R"({"messages": [{"role": "assistant", "tool_calls": [
      {"id": "1", "type": "function", "function": {"name": "f", "arguments": "not json"}},
      {"id": "2", "type": "function", "function": {"name": "f", "arguments": "[1]"}}]}]})"),
                                &r));
  EXPECT_EQ(r.messages[0]["tool_calls"][0]["function"]["arguments"], "not json");
  EXPECT_EQ(r.messages[0]["tool_calls"][1]["function"]["arguments"], "[1]");
}

TEST(ParseGenerate, NativeSchema) {
  ParsedRequest r;
  auto e = ParseGenerateRequest(
      J(R"({"input_ids": [1, 2], "sampling_params": {"max_new_tokens": 3, "temperature": 0,
             "top_k": -1}, "stream": true, "return_logprob": true, "top_logprobs_num": 2})"),
      &r);
  ASSERT_FALSE(e) << e->message;
  EXPECT_EQ(r.prompts[0].ids, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(*r.max_tokens, 3);
  EXPECT_EQ(r.sampling.top_k, 0);
  EXPECT_EQ(r.sampling.logprobs, 2);
  ASSERT_FALSE(ParseGenerateRequest(J(R"({"text": ["a", "b"]})"), &r));
  EXPECT_TRUE(r.batch);
  ParsedRequest bad;
  auto e2 = ParseGenerateRequest(J(R"({"text": "a", "sampling_params": {"bogus": 1}})"), &bad);
  ASSERT_TRUE(e2);
  EXPECT_EQ(e2->param, "sampling_params.bogus");
  e2 = ParseGenerateRequest(J(R"({"text": "a", "input_ids": [1]})"), &bad);
  ASSERT_TRUE(e2);
  e2 = ParseGenerateRequest(J(R"({"sampling_params": {}})"), &bad);
  ASSERT_TRUE(e2);
  e2 = ParseGenerateRequest(J(R"({"text": "a", "sampling_params": {"temperature": -1}})"), &bad);
  ASSERT_TRUE(e2);
  EXPECT_EQ(e2->param, "sampling_params.temperature");
  // /generate has no OpenAI upper bound on temperature.
  EXPECT_FALSE(
      ParseGenerateRequest(J(R"({"text": "a", "sampling_params": {"temperature": 5}})"), &bad));
}

TEST(ApplyLengthLimits, DefaultsAndContext) {
  ParsedRequest r;
  r.kind = ApiKind::kCompletions;
  SamplingParams sp;
  ASSERT_FALSE(ApplyLengthLimits(r, 10, 100, &sp));
  EXPECT_EQ(sp.max_tokens, 16);
  ASSERT_FALSE(ApplyLengthLimits(r, 95, 100, &sp));
  EXPECT_EQ(sp.max_tokens, 5);  // the default is capped to what fits
  r.kind = ApiKind::kChat;
  ASSERT_FALSE(ApplyLengthLimits(r, 10, 100, &sp));
  EXPECT_EQ(sp.max_tokens, 90);
  r.max_tokens = 91;
  auto e = ApplyLengthLimits(r, 10, 100, &sp);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->code, "context_length_exceeded");
  EXPECT_EQ(e->param, "max_tokens");
  r.max_tokens = 90;
  EXPECT_FALSE(ApplyLengthLimits(r, 10, 100, &sp));
  e = ApplyLengthLimits(r, 100, 100, &sp);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->code, "context_length_exceeded");
  EXPECT_EQ(e->param, "messages");
  EXPECT_TRUE(ApplyLengthLimits(r, 0, 100, &sp));
}

TEST(VllmExtras, ReadIntoSamplingAndRequest) {
  ParsedRequest r;
  auto e = ParseCompletionRequest(
      J(R"({"prompt": "x", "logit_bias": {"5": 2.5, "7": -100}, "min_tokens": 3,
             "include_stop_str_in_output": true, "return_token_ids": true,
             "truncate_prompt_tokens": 4, "priority": 0, "stream": true,
             "stream_options": {"include_usage": true, "continuous_usage_stats": true}})"),
      &r);
  ASSERT_FALSE(e) << e->message;
  EXPECT_EQ(r.sampling.logit_bias,
            (std::vector<std::pair<int32_t, float>>{{5, 2.5f}, {7, -100.0f}}));
  EXPECT_EQ(r.sampling.min_tokens, 3);
  EXPECT_TRUE(r.sampling.include_stop_str_in_output);
  EXPECT_TRUE(r.return_token_ids);
  EXPECT_EQ(r.truncate_prompt_tokens, 4);
  EXPECT_TRUE(r.continuous_usage_stats);
  e = ParseChatRequest(J(R"({"messages": [{"role": "user", "content": "x"}],
                             "logit_bias": {"9": 1}, "min_tokens": 2})"),
                       &r);
  ASSERT_FALSE(e) << e->message;
  EXPECT_EQ(r.sampling.logit_bias.size(), 1u);
  EXPECT_EQ(r.sampling.min_tokens, 2);
  // priority names why it does not apply.
  EXPECT_NE(CompletionError(R"({"prompt": "x", "priority": -5})").message.find("first come"),
            std::string::npos);
}

TEST(UnknownFields, IgnoredAndNamedUnlessStrict) {
  ParsedRequest r;
  auto e = ParseCompletionRequest(
      J(R"({"prompt": "x", "foo": 1, "stream": true, "stream_options": {"bar": 2}})"), &r,
      /*strict_fields=*/false);
  ASSERT_FALSE(e) << e->message;
  EXPECT_EQ(r.ignored_fields, (std::vector<std::string>{"foo", "stream_options.bar"}));
  e = ParseChatRequest(J(R"({"messages": [{"role": "user", "content": "x"}], "langchain": {}})"),
                       &r, false);
  ASSERT_FALSE(e) << e->message;
  EXPECT_EQ(r.ignored_fields, (std::vector<std::string>{"langchain"}));
  e = ParseGenerateRequest(J(R"({"text": "a", "sampling_params": {"bogus": 1}})"), &r, false);
  ASSERT_FALSE(e) << e->message;
  EXPECT_EQ(r.ignored_fields, (std::vector<std::string>{"sampling_params.bogus"}));
  // Strict: the first unknown field is the 400; known fields keep their checks when lenient.
  e = ParseCompletionRequest(J(R"({"prompt": "x", "foo": 1})"), &r, /*strict_fields=*/true);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->code, "unknown_parameter");
  e = ParseCompletionRequest(J(R"({"prompt": "x", "foo": 1, "max_tokens": "3"})"), &r, false);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "max_tokens");
}

TEST(CheckTokenIds, Vocabulary) {
  EXPECT_FALSE(CheckTokenIds({0, 255}, 256, "prompt"));
  auto e = CheckTokenIds({256}, 256, "prompt");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->code, "invalid_token_id");
}

TEST(ApiError, BodyShape) {
  nlohmann::json j = BadRequest("m", "p", "c").ToJson();
  EXPECT_EQ(j, nlohmann::json::parse(R"({"error": {"message": "m", "type": "invalid_request_error",
                                           "param": "p", "code": "c"}})"));
  j = InternalError("x").ToJson();
  EXPECT_TRUE(j["error"]["param"].is_null());
  EXPECT_EQ(FromStatus(InvalidArgument("bad")).status, 400);
  EXPECT_EQ(FromStatus(Internal("bad")).status, 500);
  EXPECT_EQ(FromStatus(Status(StatusCode::kUnavailable, "x")).status, 503);
  EXPECT_EQ(Unauthorized().status, 401);
  EXPECT_EQ(PayloadTooLarge(10).status, 413);
  EXPECT_EQ(TooManyRequests("x").status, 429);
}

}  // namespace
}  // namespace lucid::server
