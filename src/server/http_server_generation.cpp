// The generation routes of HttpServer (/v1/completions, /v1/chat/completions, /generate), their
// SSE streaming, the tokenize/detokenize routes and the test generation behind /health and
// /health_generate. See http_server.h for the contract.
#include <httplib.h>

#include <ctime>

#include "server/generation_job.h"
#include "server/http_server.h"
#include "server/openai_format.h"
#include "server/request_parsing.h"
#include "server/server_log.h"
#include "server/structured_output.h"

namespace lucid::server {

// Holds one of the `max_concurrent_requests` generation slots.
class HttpServer::InFlightSlot {
 public:
  static std::unique_ptr<InFlightSlot> TryAcquire(std::atomic<int64_t>* count, int64_t max) {
    int64_t cur = count->load();
    while (cur < max)
      if (count->compare_exchange_weak(cur, cur + 1))
        return std::unique_ptr<InFlightSlot>(new InFlightSlot(count));
    return nullptr;
  }
  ~InFlightSlot() { count_->fetch_sub(1); }

 private:
  explicit InFlightSlot(std::atomic<int64_t>* c) : count_(c) {}
  std::atomic<int64_t>* count_;
};

namespace {

using std::chrono::milliseconds;

struct PreparedPrompt {
  std::vector<int32_t> ids;
  std::string text;  // the text as given (for echo), or decoded ids
};

std::optional<ApiError> NeedTokenizer(const ServingModel& m, const std::string& param) {
  if (m.tokenizer) return std::nullopt;
  return BadRequest("The model '" + m.name + "' has no tokenizer (tokenizer.json), so '" + param +
                        "' must be token ids.",
                    param, "no_tokenizer");
}

std::optional<ApiError> RenderChat(const ParsedRequest& r, const ServingModel& m,
                                   PreparedPrompt* out) {
  if (auto e = NeedTokenizer(m, "messages")) return e;
  if (!m.chat_template)
    return BadRequest("The model '" + m.name + "' cannot serve chat: " +
                          (m.chat_error.empty() ? "it has no chat template" : m.chat_error) +
                          ". Use /v1/completions.",
                      "messages", "no_chat_template");
  tok::ChatRequest cr;
  cr.messages = r.messages;
  cr.tools = r.tools;
  cr.add_generation_prompt = r.add_generation_prompt;
  cr.bos_token = m.bos_token;
  cr.eos_token = m.eos_token;
  cr.extra = r.chat_template_kwargs;
  StatusOr<std::string> text = m.chat_template->Apply(cr);
  if (!text.ok())
    return BadRequest("The chat template failed on these messages: " + text.status().message(),
                      "messages", "chat_template_error");
  StatusOr<std::vector<int32_t>> ids = m.tokenizer->Encode(*text, /*add_special_tokens=*/false);
  if (!ids.ok()) return FromStatus(ids.status(), "messages");
  out->text = *text;
  out->ids = std::move(*ids);
  return std::nullopt;
}

std::optional<ApiError> BuildPrompts(const ParsedRequest& r, const ServingModel& m,
                                     std::vector<PreparedPrompt>* out) {
  out->clear();
  if (r.kind == ApiKind::kChat) {
    out->emplace_back();
    return RenderChat(r, m, &out->back());
  }
  const std::string param = r.kind == ApiKind::kGenerate
                                ? (r.prompts.empty() || r.prompts[0].is_text ? "text" : "input_ids")
                                : "prompt";
  for (const PromptSpec& p : r.prompts) {
    PreparedPrompt pp;
    if (p.is_text) {
      if (auto e = NeedTokenizer(m, param)) return e;
      StatusOr<std::vector<int32_t>> ids = m.tokenizer->Encode(p.text, /*add_special_tokens=*/true);
      if (!ids.ok()) return FromStatus(ids.status(), param);
      pp.ids = std::move(*ids);
      pp.text = p.text;
    } else {
      if (auto e = CheckTokenIds(p.ids, m.vocab_size, param)) return e;
      pp.ids = p.ids;
      if (m.tokenizer) pp.text = m.tokenizer->Decode(pp.ids, /*skip_special_tokens=*/false);
    }
    out->push_back(std::move(pp));
  }
  return std::nullopt;
}

// The request's grammar as the engine's constraint (null when the output is unconstrained),
// compiled here on the HTTP thread (cached by source text in m.grammars).
std::optional<ApiError> CompileConstraint(const StructuredOutput& s, const ServingModel& m,
                                          std::shared_ptr<const TokenConstraint>* out) {
  out->reset();
  if (!s.grammar) return std::nullopt;
  if (!m.grammars)
    return BadRequest("'" + s.param + "' needs structured output, which the model '" + m.name +
                          "' cannot do: " +
                          (m.grammar_error.empty() ? "it has no tokenizer" : m.grammar_error) + ".",
                      s.param, "structured_output_unavailable");
  StatusOr<std::shared_ptr<const TokenConstraint>> c = m.grammars->Compile(*s.grammar);
  if (!c.ok())
    return BadRequest("Invalid '" + s.param + "': " + c.status().message(), s.param,
                      "invalid_grammar");
  *out = std::move(*c);
  return std::nullopt;
}

const char* ParamOf(ApiKind k) {
  return k == ApiKind::kChat ? "messages" : k == ApiKind::kGenerate ? "text" : "prompt";
}

// Everything a streaming response needs between provider calls (one HTTP thread at a time).
struct StreamState {
  std::shared_ptr<GenerationJob> job;
  std::shared_ptr<const void> keep;  // the Attached snapshot (tokenizer lifetime)
  std::unique_ptr<HttpServer::InFlightSlot> slot;
  const tok::Tokenizer* tokenizer = nullptr;
  ParsedRequest req;
  ResponseMeta meta;
  std::vector<std::string> echo_prefix;
  std::vector<size_t> text_offset;  // completions logprobs: characters so far per choice
  bool started = false;
  bool done = false;
};

std::string StartChunks(StreamState& st) {
  std::string out;
  for (size_t i = 0; i < st.job->choices().size(); ++i) {
    const ChoiceState& c = st.job->choices()[i];
    if (st.req.kind == ApiKind::kChat) {
      out += SseData(ChatChunk(st.meta, i, {{"role", "assistant"}, {"content", ""}}, nullptr, ""));
    } else if (st.req.kind == ApiKind::kCompletions && st.req.echo) {
      const std::string& p = st.echo_prefix[c.prompt_index];
      out += SseData(CompletionChunk(st.meta, i, p, nullptr, ""));
      st.text_offset[i] = p.size();
    }
  }
  return out;
}

std::string EventChunks(StreamState& st, const ChoiceEvent& e) {
  const RequestOutput& o = e.output;
  if (o.finished && o.finish_reason == "error") return "";  // reported as an error event
  const size_t i = e.choice;
  const std::string finish = o.finished ? FinishReason(o.finish_reason) : "";
  const bool has_content = !o.text.empty() || !o.new_tokens.empty();
  std::string out;
  if (st.req.kind == ApiKind::kCompletions) {
    if (!has_content && !o.finished) return "";
    json lp = nullptr;
    if (st.req.want_logprobs)
      lp = CompletionLogprobs(o.logprobs, st.tokenizer, st.req.top_logprobs, st.text_offset[i]);
    st.text_offset[i] += o.text.size();
    out += SseData(CompletionChunk(st.meta, i, o.text, lp, finish));
  } else if (st.req.kind == ApiKind::kChat && st.req.structured.tools != ForcedTools::kNone) {
    // A forced tool call is sent whole once the output is complete (it must parse first).
    if (!o.finished) return "";
    const ChoiceState& c = st.job->choices()[i];
    std::optional<json> delta =
        c.finish_reason == "stop" ? ForcedToolCallsDelta(st.req.structured, c.text) : std::nullopt;
    out += SseData(ChatChunk(st.meta, i, delta ? *delta : json{{"content", c.text}}, nullptr, ""));
    out += SseData(ChatChunk(st.meta, i, json::object(), nullptr, delta ? "tool_calls" : finish));
  } else if (st.req.kind == ApiKind::kChat) {
    if (has_content) {
      json lp = st.req.want_logprobs ? ChatLogprobs(o.logprobs, st.tokenizer, st.req.top_logprobs)
                                     : json(nullptr);
      out += SseData(ChatChunk(st.meta, i, {{"content", o.text}}, lp, ""));
    }
    if (o.finished) out += SseData(ChatChunk(st.meta, i, json::object(), nullptr, finish));
  } else {
    if (!has_content && !o.finished) return "";
    const ChoiceState& c = st.job->choices()[i];
    const double e2e = std::chrono::duration<double>(e.at - st.job->arrival()).count();
    json j = GenerateResult(c, st.meta.id + "-" + std::to_string(i), e2e, st.req.want_logprobs,
                            st.tokenizer);
    if (st.job->choices().size() > 1) j["index"] = i;
    out += SseData(j);
  }
  return out;
}

// One call of the chunked content provider: waits up to a second for events and writes them
// (or a keep-alive comment, so that a vanished client is noticed), ending with [DONE].
bool StreamStep(StreamState& st, httplib::DataSink& sink) {
  std::string out;
  if (!st.started) {
    st.started = true;
    out += StartChunks(st);
  }
  const auto events = st.job->Next(out.empty() ? milliseconds(1000) : milliseconds(0));
  for (const ChoiceEvent& e : events) out += EventChunks(st, e);
  if (const ChoiceState* err = st.job->FirstError()) {
    st.job->AbortUnfinished();
    out += SseData(FromStatus(err->error).ToJson());
    out += "data: [DONE]\n\n";
    st.done = true;
  } else if (st.job->AllFinished()) {
    if (st.req.include_usage)
      out += SseData(UsageChunk(
          st.meta, st.req.kind == ApiKind::kChat ? "chat.completion.chunk" : "text_completion",
          Usage(st.job->choices())));
    out += "data: [DONE]\n\n";
    st.done = true;
  }
  if (out.empty()) out = ": keep-alive\n\n";
  if (!sink.write(out.data(), out.size())) return false;
  if (st.done) sink.done();
  return true;
}

}  // namespace

void HttpServer::HandleGeneration(int kind_int, const httplib::Request& http_req,
                                  httplib::Response& res) {
  const auto arrival = Clock::now();
  const ApiKind kind = static_cast<ApiKind>(kind_int);
  auto a = ReadyOrReply(res);
  if (!a) return;
  ordered_json body;
  ParsedRequest r;
  std::optional<ApiError> err = ParseJsonBody(http_req.body, &body);
  if (!err)
    err = kind == ApiKind::kCompletions ? ParseCompletionRequest(body, &r)
          : kind == ApiKind::kChat      ? ParseChatRequest(body, &r)
                                        : ParseGenerateRequest(body, &r);
  if (!err && !r.model.empty() && r.model != a->model.name)
    err = NotFoundError(
        "The model '" + r.model + "' does not exist. This server serves '" + a->model.name + "'.",
        "model_not_found");
  std::vector<PreparedPrompt> prompts;
  if (!err) err = BuildPrompts(r, a->model, &prompts);
  if (!err) err = CheckTokenIds(r.sampling.stop_token_ids, a->model.vocab_size, "stop_token_ids");
  std::shared_ptr<const TokenConstraint> constraint;
  if (!err) err = CompileConstraint(r.structured, a->model, &constraint);
  r.sampling.constraint = constraint;
  std::vector<GenerationRequest> reqs;
  std::vector<size_t> prompt_index;
  for (size_t p = 0; !err && p < prompts.size(); ++p) {
    SamplingParams sp = r.sampling;
    err = ApplyLengthLimits(r, static_cast<int64_t>(prompts[p].ids.size()), a->model.context_length,
                            &sp);
    for (int j = 0; !err && j < r.n; ++j) {
      GenerationRequest g{prompts[p].ids, sp};
      if (sp.seed && j > 0) g.sampling.seed = *sp.seed + uint64_t(j);
      reqs.push_back(std::move(g));
      prompt_index.push_back(p);
    }
  }
  if (err) return ReplyError(res, *err);
  auto slot = InFlightSlot::TryAcquire(&in_flight_, options_.max_concurrent_requests);
  if (!slot)
    return ReplyError(res, TooManyRequests("Too many concurrent requests: the limit is " +
                                           std::to_string(options_.max_concurrent_requests) +
                                           " (--max-concurrent-requests). Retry later."));
  auto job = std::make_shared<GenerationJob>(a->engine, &metrics_, std::move(reqs),
                                             std::move(prompt_index), arrival);
  if (Status s = job->Submit(); !s.ok()) return ReplyError(res, FromStatus(s, ParamOf(kind)));

  ResponseMeta meta{NewResponseId(kind == ApiKind::kChat ? "chatcmpl-" : "cmpl-"),
                    static_cast<int64_t>(std::time(nullptr)), a->model.name};
  std::vector<std::string> echo_prefix;
  for (const PreparedPrompt& p : prompts) echo_prefix.push_back(r.echo ? p.text : "");

  if (r.stream) {
    auto st = std::make_shared<StreamState>();
    st->job = job;
    st->keep = a;
    st->slot = std::move(slot);
    st->tokenizer = a->model.tokenizer.get();
    st->req = std::move(r);
    st->meta = meta;
    st->echo_prefix = std::move(echo_prefix);
    st->text_offset.assign(job->choices().size(), 0);
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    res.set_chunked_content_provider(
        "text/event-stream",
        [st](size_t, httplib::DataSink& sink) { return StreamStep(*st, sink); },
        [st](bool) {
          if (!st->done) {
            LogInfo("stream " + st->meta.id + ": client gone; aborting its requests");
            st->job->AbortUnfinished();
          }
          st->slot.reset();
        });
    return;
  }

  while (!job->AllFinished()) job->Next(milliseconds(1000));
  if (const ChoiceState* e = job->FirstError()) return ReplyError(res, FromStatus(e->error));
  for (const ChoiceState& c : job->choices())
    if (c.finish_reason == "abort" && phase_.load() == Phase::kShuttingDown)
      return ReplyError(res, Unavailable("The server is shutting down; the request was aborted."));
  const tok::Tokenizer* tk = a->model.tokenizer.get();
  if (kind == ApiKind::kCompletions)
    return ReplyJson(res, CompletionResponse(meta, job->choices(), echo_prefix, r.want_logprobs,
                                             r.top_logprobs, tk));
  if (kind == ApiKind::kChat) {
    json body = ChatResponse(meta, job->choices(), r.want_logprobs, r.top_logprobs, tk);
    ApplyForcedToolCalls(r.structured, job->choices(), &body);
    return ReplyJson(res, body);
  }
  json results = json::array();
  const double e2e = std::chrono::duration<double>(Clock::now() - arrival).count();
  for (size_t i = 0; i < job->choices().size(); ++i)
    results.push_back(GenerateResult(job->choices()[i], meta.id + "-" + std::to_string(i), e2e,
                                     r.want_logprobs, tk));
  ReplyJson(res, r.batch || r.n > 1 ? results : results[0]);
}

void HttpServer::HandleTokenize(const httplib::Request& http_req, httplib::Response& res) const {
  auto a = attached();
  if (!a) return ReplyError(res, Unavailable("The model is still loading."));
  const ServingModel& m = a->model;
  ordered_json body;
  if (auto e = ParseJsonBody(http_req.body, &body)) return ReplyError(res, *e);
  for (auto it = body.begin(); it != body.end(); ++it) {
    static const std::set<std::string> kKnown = {"model",
                                                 "prompt",
                                                 "add_special_tokens",
                                                 "messages",
                                                 "tools",
                                                 "chat_template_kwargs",
                                                 "add_generation_prompt"};
    if (!kKnown.count(it.key()))
      return ReplyError(res, BadRequest("Unrecognized request argument supplied: " + it.key(),
                                        it.key(), "unknown_parameter"));
  }
  if (auto e = NeedTokenizer(m, "prompt")) return ReplyError(res, *e);
  const json ctx = m.context_length;
  if (body.contains("messages")) {
    ordered_json chat = ordered_json::object();
    for (const char* k : {"messages", "tools", "chat_template_kwargs", "add_generation_prompt"})
      if (body.contains(k)) chat[k] = body[k];
    ParsedRequest r;
    if (auto e = ParseChatRequest(chat, &r)) return ReplyError(res, *e);
    PreparedPrompt p;
    if (auto e = RenderChat(r, m, &p)) return ReplyError(res, *e);
    return ReplyJson(res, {{"tokens", p.ids}, {"count", p.ids.size()}, {"max_model_len", ctx}});
  }
  bool add_special = true;
  if (body.contains("add_special_tokens")) {
    if (!body["add_special_tokens"].is_boolean())
      return ReplyError(res,
                        WrongType("add_special_tokens", "a boolean", body["add_special_tokens"]));
    add_special = body["add_special_tokens"].get<bool>();
  }
  const auto it = body.find("prompt");
  if (it == body.end())
    return ReplyError(res, BadRequest("Missing required parameter: 'prompt' (or 'messages').",
                                      "prompt", "missing_required_parameter"));
  const bool list = it->is_array();
  if (!it->is_string() && !list)
    return ReplyError(res, WrongType("prompt", "a string or an array of strings", *it));
  json tokens = json::array(), counts = json::array();
  for (const auto& p : list ? *it : ordered_json::array({*it})) {
    if (!p.is_string())
      return ReplyError(res, WrongType("prompt", "a string or an array of strings", *it));
    StatusOr<std::vector<int32_t>> ids = m.tokenizer->Encode(p.get<std::string>(), add_special);
    if (!ids.ok()) return ReplyError(res, FromStatus(ids.status(), "prompt"));
    tokens.push_back(*ids);
    counts.push_back(ids->size());
  }
  if (!list)
    return ReplyJson(res, {{"tokens", tokens[0]}, {"count", counts[0]}, {"max_model_len", ctx}});
  ReplyJson(res, {{"tokens", tokens}, {"count", counts}, {"max_model_len", ctx}});
}

void HttpServer::HandleDetokenize(const httplib::Request& http_req, httplib::Response& res) const {
  auto a = attached();
  if (!a) return ReplyError(res, Unavailable("The model is still loading."));
  const ServingModel& m = a->model;
  ordered_json body;
  if (auto e = ParseJsonBody(http_req.body, &body)) return ReplyError(res, *e);
  for (auto it = body.begin(); it != body.end(); ++it)
    if (it.key() != "model" && it.key() != "tokens" && it.key() != "skip_special_tokens")
      return ReplyError(res, BadRequest("Unrecognized request argument supplied: " + it.key(),
                                        it.key(), "unknown_parameter"));
  if (auto e = NeedTokenizer(m, "tokens")) return ReplyError(res, *e);
  bool skip = false;
  if (body.contains("skip_special_tokens")) {
    if (!body["skip_special_tokens"].is_boolean())
      return ReplyError(res,
                        WrongType("skip_special_tokens", "a boolean", body["skip_special_tokens"]));
    skip = body["skip_special_tokens"].get<bool>();
  }
  const auto it = body.find("tokens");
  if (it == body.end() || !it->is_array())
    return ReplyError(res, it == body.end() ? BadRequest("Missing required parameter: 'tokens'.",
                                                         "tokens", "missing_required_parameter")
                                            : WrongType("tokens", "an array of token ids", *it));
  const bool list = !it->empty() && (*it)[0].is_array();
  json texts = json::array();
  for (const auto& seq : list ? *it : ordered_json::array({*it})) {
    if (!seq.is_array()) return ReplyError(res, WrongType("tokens", "an array of token ids", *it));
    std::vector<int32_t> ids;
    for (const auto& x : seq) {
      if (!x.is_number_integer())
        return ReplyError(res, WrongType("tokens", "an array of token ids", *it));
      const int64_t v = x.get<int64_t>();
      if (v < 0 || v >= m.vocab_size)
        return ReplyError(res, BadRequest("Invalid 'tokens': token id " + std::to_string(v) +
                                              " is outside the vocabulary.",
                                          "tokens", "invalid_token_id"));
      ids.push_back(static_cast<int32_t>(v));
    }
    texts.push_back(m.tokenizer->Decode(ids, skip));
  }
  ReplyJson(res, {{"text", list ? texts : texts[0]}});
}

Status RunTestGeneration(Engine& engine, int32_t prompt_token, int64_t max_tokens,
                         std::chrono::milliseconds timeout) {
  GenerationRequest g;
  g.prompt = {prompt_token};
  g.sampling.temperature = 0;
  g.sampling.max_tokens = max_tokens;
  g.sampling.ignore_eos = true;
  GenerationJob job(&engine, nullptr, {g}, {0}, Clock::now());
  LUCID_RETURN_IF_ERROR(job.Submit());
  const auto deadline = Clock::now() + timeout;
  while (!job.AllFinished() && Clock::now() < deadline) job.Next(milliseconds(100));
  if (!job.AllFinished())
    return Status(StatusCode::kUnavailable,
                  "no result within " + std::to_string(timeout.count()) + " ms");
  const ChoiceState& c = job.choices()[0];
  if (c.finish_reason == "error") return c.error;
  if (c.finish_reason != "stop" && c.finish_reason != "length")
    return Status(StatusCode::kUnavailable,
                  "the test generation ended with '" + c.finish_reason + "'");
  return OkStatus();
}

}  // namespace lucid::server
