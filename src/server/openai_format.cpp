#include "server/openai_format.h"

#include <map>
#include <random>

namespace lucid::server {

std::string NewResponseId(const std::string& prefix) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char* kHex = "0123456789abcdef";
  std::string id = prefix;
  uint64_t a = rng(), b = rng();
  for (int i = 0; i < 16; ++i) id += kHex[(a >> (4 * i)) & 15];
  for (int i = 0; i < 8; ++i) id += kHex[(b >> (4 * i)) & 15];
  return id;
}

std::string TokenText(const tok::Tokenizer* tokenizer, int32_t id) {
  if (!tokenizer) return "token_id:" + std::to_string(id);
  const int32_t one[1] = {id};
  return tokenizer->Decode(one, /*skip_special_tokens=*/false);
}

namespace {

json Bytes(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(int(c));
  return b;
}

}  // namespace

size_t Utf8Chars(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

json CompletionLogprobs(const std::vector<TokenLogprob>& lps, const tok::Tokenizer* tokenizer,
                        int top, size_t* text_offset) {
  json tokens = json::array(), token_lps = json::array(), tops = json::array(),
       offsets = json::array();
  for (const TokenLogprob& lp : lps) {
    const std::string t = TokenText(tokenizer, lp.token);
    tokens.push_back(t);
    token_lps.push_back(lp.logprob);
    offsets.push_back(*text_offset);
    *text_offset += Utf8Chars(t);
    // As vLLM: the chosen token first, then the `top` alternatives (keys are texts, so equal
    // texts share one entry).
    json alts = json::object();
    alts[t] = lp.logprob;
    for (size_t k = 0; k < lp.top.size() && int(k) < top; ++k) {
      const std::string a = TokenText(tokenizer, lp.top[k].first);
      if (!alts.contains(a)) alts[a] = lp.top[k].second;
    }
    tops.push_back(alts);
  }
  return {{"tokens", tokens},
          {"token_logprobs", token_lps},
          {"top_logprobs", tops},
          {"text_offset", offsets}};
}

json ChatLogprobs(const std::vector<TokenLogprob>& lps, const tok::Tokenizer* tokenizer, int top) {
  json content = json::array();
  for (const TokenLogprob& lp : lps) {
    const std::string t = TokenText(tokenizer, lp.token);
    json alts = json::array();
    for (size_t k = 0; k < lp.top.size() && int(k) < top; ++k) {
      const std::string a = TokenText(tokenizer, lp.top[k].first);
      alts.push_back({{"token", a}, {"logprob", lp.top[k].second}, {"bytes", Bytes(a)}});
    }
    content.push_back(
        {{"token", t}, {"logprob", lp.logprob}, {"bytes", Bytes(t)}, {"top_logprobs", alts}});
  }
  return {{"content", content}, {"refusal", nullptr}};
}

json Usage(const std::vector<ChoiceState>& choices) {
  std::map<size_t, std::pair<int64_t, int64_t>> prompts;  // prompt -> (tokens, cached)
  int64_t completion = 0;
  for (const ChoiceState& c : choices) {
    auto& p = prompts[c.prompt_index];
    p.first = std::max(p.first, c.prompt_tokens);
    p.second = std::max(p.second, c.cached_tokens);
    completion += c.completion_tokens;
  }
  int64_t prompt = 0, cached = 0;
  for (const auto& [i, p] : prompts) {
    prompt += p.first;
    cached += p.second;
  }
  return {{"prompt_tokens", prompt},
          {"completion_tokens", completion},
          {"total_tokens", prompt + completion},
          {"prompt_tokens_details", {{"cached_tokens", cached}}}};
}

std::string FinishReason(const std::string& engine_reason) {
  return engine_reason.empty() ? "stop" : engine_reason;
}

json CompletionResponse(const ResponseMeta& meta, const std::vector<ChoiceState>& choices,
                        const std::vector<std::string>& echo_prefix, bool logprobs, int top,
                        const tok::Tokenizer* tokenizer) {
  json out = json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    const ChoiceState& c = choices[i];
    const std::string prefix =
        c.prompt_index < echo_prefix.size() ? echo_prefix[c.prompt_index] : std::string();
    size_t text_offset = Utf8Chars(prefix);
    out.push_back(
        {{"index", i},
         {"text", prefix + c.text},
         {"logprobs",
          logprobs ? CompletionLogprobs(c.logprobs, tokenizer, top, &text_offset) : json(nullptr)},
         {"finish_reason", FinishReason(c.finish_reason)}});
  }
  return {{"id", meta.id},           {"object", "text_completion"},
          {"created", meta.created}, {"model", meta.model},
          {"choices", out},          {"usage", Usage(choices)}};
}

json ChatResponse(const ResponseMeta& meta, const std::vector<ChoiceState>& choices, bool logprobs,
                  int top, const tok::Tokenizer* tokenizer) {
  json out = json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    const ChoiceState& c = choices[i];
    out.push_back(
        {{"index", i},
         {"message", {{"role", "assistant"}, {"content", c.text}, {"refusal", nullptr}}},
         {"logprobs", logprobs ? ChatLogprobs(c.logprobs, tokenizer, top) : json(nullptr)},
         {"finish_reason", FinishReason(c.finish_reason)}});
  }
  return {{"id", meta.id},           {"object", "chat.completion"},
          {"created", meta.created}, {"model", meta.model},
          {"choices", out},          {"usage", Usage(choices)}};
}

json GenerateResult(const ChoiceState& c, const std::string& id, double e2e_seconds, bool logprobs,
                    const tok::Tokenizer* tokenizer) {
  json meta = {{"id", id},
               {"finish_reason", {{"type", FinishReason(c.finish_reason)}}},
               {"prompt_tokens", c.prompt_tokens},
               {"completion_tokens", c.completion_tokens},
               {"cached_tokens", c.cached_tokens},
               {"e2e_latency", e2e_seconds}};
  if (c.finish_reason == "error") meta["finish_reason"]["message"] = c.error.message();
  if (logprobs) {
    json lps = json::array(), tops = json::array();
    for (const TokenLogprob& lp : c.logprobs) {
      lps.push_back(
          {lp.logprob, lp.token, tokenizer ? json(TokenText(tokenizer, lp.token)) : json(nullptr)});
      json alts = json::array();
      for (const auto& [tok_id, v] : lp.top)
        alts.push_back({v, tok_id, tokenizer ? json(TokenText(tokenizer, tok_id)) : json(nullptr)});
      tops.push_back(alts);
    }
    meta["output_token_logprobs"] = lps;
    meta["output_top_logprobs"] = tops;
  }
  return {{"text", c.text}, {"output_ids", c.tokens}, {"meta_info", meta}};
}

json CompletionChunk(const ResponseMeta& meta, size_t index, const std::string& text,
                     const json& logprobs, const std::string& finish) {
  json choice = {{"index", index},
                 {"text", text},
                 {"logprobs", logprobs},
                 {"finish_reason", finish.empty() ? json(nullptr) : json(finish)}};
  return {{"id", meta.id},
          {"object", "text_completion"},
          {"created", meta.created},
          {"model", meta.model},
          {"choices", json::array({choice})}};
}

json ChatChunk(const ResponseMeta& meta, size_t index, const json& delta, const json& logprobs,
               const std::string& finish) {
  json choice = {{"index", index},
                 {"delta", delta},
                 {"logprobs", logprobs},
                 {"finish_reason", finish.empty() ? json(nullptr) : json(finish)}};
  return {{"id", meta.id},
          {"object", "chat.completion.chunk"},
          {"created", meta.created},
          {"model", meta.model},
          {"choices", json::array({choice})}};
}

json UsageChunk(const ResponseMeta& meta, const std::string& object, const json& usage) {
  return {{"id", meta.id},       {"object", object},         {"created", meta.created},
          {"model", meta.model}, {"choices", json::array()}, {"usage", usage}};
}

std::string SseData(const json& j) {
  // Invalid UTF-8 (a byte token cut mid-character) is replaced, never thrown on.
  return "data: " + j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

}  // namespace lucid::server
