// Request parsing and validation for the generation routes: OpenAI `/v1/completions`,
// `/v1/chat/completions` and SGLang's native `/generate`. Pure functions over JSON (no HTTP, no
// model): the routes call them, and they are unit-tested on their own.
//
// What is rejected, each with a 400 OpenAI-style error naming the parameter:
// - a body that is not JSON, is nested deeper than kMaxJsonDepth, or is not an object;
// - with strict_fields, unknown fields (as OpenAI: "Unrecognized request argument supplied: x");
//   without, they are ignored and named in ParsedRequest::ignored_fields (as vLLM, SGLang); fields
//   OpenAI knows but lucid does not implement (suffix, priority != 0, ...) when set to anything
//   but their neutral value;
// - structured output fields (response_format, regex, ebnf, tool_choice) that are malformed
//   (server/structured_output.h; their grammars are compiled by the route);
// - wrong JSON types (code "invalid_type"); values out of range: temperature outside [0, 2]
//   (OpenAI routes) or < 0 (/generate), top_p outside (0, 1], max_tokens < 1, n outside
//   [1, kMaxChoices], logprobs / top_logprobs outside [0, 20], penalties outside [-2, 2];
// - empty prompts or messages, messages with unknown roles or non-text content parts.
// Length limits (prompt or prompt + max_tokens beyond the context) need the tokenized prompt and
// are checked by ApplyLengthLimits.
// Thread-safety: reentrant.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "runtime/engine.h"
#include "server/api_error.h"
#include "server/structured_output.h"

namespace lucid::server {

using ordered_json = nlohmann::ordered_json;

inline constexpr int kMaxJsonDepth = 64;
inline constexpr int kMaxChoices = 128;  // prompts x n per request
inline constexpr int kMaxStop = 16;
inline constexpr int kMaxTopLogprobs = 20;

enum class ApiKind { kCompletions, kChat, kGenerate };

// One prompt as the client gave it: text (tokenized by the route) or token ids.
struct PromptSpec {
  bool is_text = false;
  std::string text;
  std::vector<int32_t> ids;
};

struct ParsedRequest {
  ApiKind kind = ApiKind::kCompletions;
  std::string model;                // "" when absent
  std::vector<PromptSpec> prompts;  // completions/generate: one per prompt; chat: empty
  bool batch = false;               // the prompt was given as a list (response lists per prompt)
  ordered_json messages;            // chat: validated, content flattened to strings
  ordered_json tools;               // chat: null or the tool list (reaches the template)
  ordered_json chat_template_kwargs = ordered_json::object();
  bool add_generation_prompt = true;
  SamplingParams sampling;            // max_tokens set by ApplyLengthLimits
  std::optional<int64_t> max_tokens;  // as given
  int n = 1;
  bool stream = false;
  bool include_usage = false;
  bool echo = false;  // completions: prepend the prompt text to each choice
  bool want_logprobs =
      false;  // completions: logprobs given; chat: logprobs; generate: return_logprob
  int top_logprobs = 0;
  // vLLM extras (issue 24): logit_bias, min_tokens, include_stop_str_in_output live in sampling.
  bool return_token_ids = false;                  // choices carry token_ids, prompt_token_ids
  bool tool_choice_none = false;                  // chat: tool_choice "none" (calls not parsed)
  std::optional<int64_t> truncate_prompt_tokens;  // keep the last k prompt tokens; -1: context
  bool continuous_usage_stats = false;            // stream: usage on every chunk (with
                                                  // include_usage)
  // Prompt logprobs (completions echo + logprobs; /generate return_logprob with
  // logprob_start_len >= 0): -1 off, else the first prompt position wanted (0 is reported
  // without a logprob: it has no context).
  int64_t prompt_logprobs_from = -1;
  bool strict_fields = true;                // unknown fields are a 400
  std::vector<std::string> ignored_fields;  // unknown fields ignored (when not strict_fields)
  StructuredOutput structured;  // response_format / regex / ebnf / forced tool_choice
};

// Parses `body` into `out` (object, depth-checked). The error is a 400.
std::optional<ApiError> ParseJsonBody(const std::string& body, ordered_json* out);

// `strict_fields`: an unknown field is a 400 (OpenAI's behaviour, --strict-request-fields);
// otherwise unknown fields are ignored and named in `out->ignored_fields`.
std::optional<ApiError> ParseCompletionRequest(const ordered_json& body, ParsedRequest* out,
                                               bool strict_fields = true);
std::optional<ApiError> ParseChatRequest(const ordered_json& body, ParsedRequest* out,
                                         bool strict_fields = true);
std::optional<ApiError> ParseGenerateRequest(const ordered_json& body, ParsedRequest* out,
                                             bool strict_fields = true);

// Checks a tokenized prompt of `prompt_len` tokens against `context_length` and sets
// `sampling->max_tokens`: the given max_tokens, else the route's default (completions 16,
// /generate 128, chat: the rest of the context), capped to what fits when not given.
// 400 "context_length_exceeded" when the prompt alone fills the context or an explicit
// max_tokens does not fit.
std::optional<ApiError> ApplyLengthLimits(const ParsedRequest& req, int64_t prompt_len,
                                          int64_t context_length, SamplingParams* sampling);

// Checks token ids (prompt or stop_token_ids) against the vocabulary: 400 naming `param`.
std::optional<ApiError> CheckTokenIds(const std::vector<int32_t>& ids, int64_t vocab_size,
                                      const std::string& param);

}  // namespace lucid::server
