// Response bodies of the generation routes: OpenAI completions and chat completions (whole
// responses and streaming chunks), and SGLang's native /generate.
//
// Shapes follow the OpenAI API reference: `text_completion` / `chat.completion` objects with
// `choices[]` and `usage` ({prompt_tokens, completion_tokens, total_tokens,
// prompt_tokens_details.cached_tokens}); stream chunks are `text_completion` /
// `chat.completion.chunk` objects. Logprobs: completions use the legacy {tokens, token_logprobs,
// top_logprobs, text_offset} form, chat uses {content: [{token, logprob, bytes, top_logprobs}]}.
// A token's text is the tokenizer's decode of that one id (special tokens kept), or
// "token_id:<id>" when the model has no tokenizer.
// /generate: {text, output_ids, meta_info: {id, finish_reason: {type}, prompt_tokens,
// completion_tokens, cached_tokens, e2e_latency[, output_token_logprobs, output_top_logprobs]}}.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/engine.h"
#include "server/generation_job.h"
#include "tokenizer/tokenizer.h"

namespace lucid::server {

using json = nlohmann::json;

struct ResponseMeta {
  std::string id;  // "cmpl-..." / "chatcmpl-..."
  int64_t created = 0;
  std::string model;
};

// A fresh random id with `prefix`.
std::string NewResponseId(const std::string& prefix);

std::string TokenText(const tok::Tokenizer* tokenizer, int32_t id);

// Characters (code points) of UTF-8 text, as clients count them (Python's len).
size_t Utf8Chars(const std::string& s);

// Legacy completions logprobs. `top_logprobs` entries hold the chosen token plus up to `top`
// alternatives (so logprobs 0 gives one entry), as vLLM. `text_offset` is in characters: each
// token starts at *text_offset, which advances by the characters of the token's text (the same
// sum streaming and not).
json CompletionLogprobs(const std::vector<TokenLogprob>& lps, const tok::Tokenizer* tokenizer,
                        int top, size_t* text_offset);
json ChatLogprobs(const std::vector<TokenLogprob>& lps, const tok::Tokenizer* tokenizer, int top);

// Usage over a job: prompt tokens counted once per prompt, completion tokens over every choice.
json Usage(const std::vector<ChoiceState>& choices);

// OpenAI's finish_reason for an engine finish_reason ("abort" stays "abort").
std::string FinishReason(const std::string& engine_reason);

// Whole (non-streaming) responses. `echo_prefix[p]` is prepended to every choice of prompt p.
json CompletionResponse(const ResponseMeta& meta, const std::vector<ChoiceState>& choices,
                        const std::vector<std::string>& echo_prefix, bool logprobs, int top,
                        const tok::Tokenizer* tokenizer);
json ChatResponse(const ResponseMeta& meta, const std::vector<ChoiceState>& choices, bool logprobs,
                  int top, const tok::Tokenizer* tokenizer);
// One /generate result for a choice (`id` names it), as in SGLang.
json GenerateResult(const ChoiceState& c, const std::string& id, double e2e_seconds, bool logprobs,
                    const tok::Tokenizer* tokenizer);

// Streaming chunks. `finish` empty -> finish_reason null.
json CompletionChunk(const ResponseMeta& meta, size_t index, const std::string& text,
                     const json& logprobs, const std::string& finish);
json ChatChunk(const ResponseMeta& meta, size_t index, const json& delta, const json& logprobs,
               const std::string& finish);
// The final usage-only chunk (`choices: []`) of stream_options.include_usage.
json UsageChunk(const ResponseMeta& meta, const std::string& object, const json& usage);

// One SSE event: "data: <json>\n\n".
std::string SseData(const json& j);

}  // namespace lucid::server
