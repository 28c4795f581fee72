// The generation routes of HttpServer (/v1/completions, /v1/chat/completions, /generate), their
// SSE streaming, the tokenize/detokenize routes and the test generation behind /health and
// /health_generate. See http_server.h for the contract.
#include <arpa/inet.h>
#include <dirent.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <cstdlib>
#include <ctime>

#include "server/chat_output.h"
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

// Names the unknown fields a lenient parse ignored: response header and log (as vLLM logs them).
void ReportIgnoredFields(const std::vector<std::string>& fields, const std::string& route,
                         httplib::Response& res) {
  if (fields.empty()) return;
  std::string list;
  for (const std::string& f : fields) list += (list.empty() ? "" : ", ") + f;
  res.set_header("X-Lucid-Ignored-Fields", list);
  LogWarning(route + ": ignored unknown request fields: " + list +
             " (--strict-request-fields makes them a 400)");
}

// The accepted socket that `req` arrived on, or -1: httplib 0.11 does not expose it, so it is
// found among this process's descriptors by its local and peer ports. While the handler runs,
// httplib keeps the connection open, so the descriptor cannot be reused meanwhile.
int ConnectionSocket(const httplib::Request& req) {
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return -1;
  int found = -1;
  while (dirent* e = readdir(dir)) {
    const int fd = std::atoi(e->d_name);
    if (fd <= 2) continue;
    sockaddr_storage local{}, peer{};
    socklen_t ll = sizeof local, pl = sizeof peer;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &ll) != 0 ||
        getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &pl) != 0)
      continue;
    const auto port = [](const sockaddr_storage& a) {
      if (a.ss_family == AF_INET)
        return int(ntohs(reinterpret_cast<const sockaddr_in&>(a).sin_port));
      if (a.ss_family == AF_INET6)
        return int(ntohs(reinterpret_cast<const sockaddr_in6&>(a).sin6_port));
      return -1;
    };
    if (port(local) == req.local_port && port(peer) == req.remote_port) {
      found = fd;
      break;
    }
  }
  closedir(dir);
  return found;
}

// True when the peer closed the connection (hang-up, error, or end of stream ahead).
bool PeerClosed(int fd) {
  pollfd p{fd, POLLIN | POLLRDHUP, 0};
  if (poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLHUP | POLLERR | POLLRDHUP)) return true;
  char c;
  return (p.revents & POLLIN) && recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

// The chat output parsers that apply: reasoning when the server has a reasoning parser; tool
// calls when it has a tool-call parser and the request gives tools.
ChatParsing ChatParsingFor(const ParsedRequest& r, const ServingModel& m,
                           const std::string& prompt) {
  ChatParsing p;
  p.reasoning = m.reasoning_parser;
  p.starts_in_reasoning = p.reasoning && PromptOpensReasoning(prompt);
  if (m.tool_call_format && r.tools.is_array() && !r.tools.empty() && !r.tool_choice_none &&
      r.structured.tools == ForcedTools::kNone) {  // a forced call is JSON, parsed as such
    p.tool_format = m.tool_call_format;
    p.tools = r.tools;
  }
  return p;
}

// vLLM's truncate_prompt_tokens: keeps the last k tokens of each prompt (-1: the context length).
void TruncatePrompts(const ParsedRequest& r, const ServingModel& m,
                     std::vector<PreparedPrompt>* prompts) {
  if (!r.truncate_prompt_tokens) return;
  const size_t keep = static_cast<size_t>(
      *r.truncate_prompt_tokens < 0 ? m.context_length : *r.truncate_prompt_tokens);
  for (PreparedPrompt& p : *prompts) {
    if (p.ids.size() <= keep) continue;
    p.ids.erase(p.ids.begin(), p.ids.end() - static_cast<std::ptrdiff_t>(keep));
    if (m.tokenizer) p.text = m.tokenizer->Decode(p.ids, /*skip_special_tokens=*/false);
  }
}

// vLLM's return_token_ids: each choice's `token_ids` (output, stop token included) and
// `prompt_token_ids` (completions: per choice; chat: on the response, as vLLM).
void AddTokenIds(const std::vector<ChoiceState>& choices,
                 const std::vector<PreparedPrompt>& prompts, ApiKind kind, json* response) {
  for (size_t i = 0; i < choices.size(); ++i) {
    json& c = (*response)["choices"][i];
    c["token_ids"] = choices[i].tokens;
    if (kind == ApiKind::kCompletions) c["prompt_token_ids"] = prompts[choices[i].prompt_index].ids;
  }
  if (kind == ApiKind::kChat && !prompts.empty()) (*response)["prompt_token_ids"] = prompts[0].ids;
}

// A choice's prompt logprobs in the legacy completions form (as vLLM: the first prompt token has a
// null logprob and top_logprobs); `offset` ends after the prompt tokens' text.
json PromptLogprobs(const ChoiceState& c, const std::vector<int32_t>& prompt,
                    const tok::Tokenizer* tk, int top, size_t* offset) {
  std::vector<TokenLogprob> lps = {TokenLogprob{prompt[0], 0.0f, {}}};
  lps.insert(lps.end(), c.prompt_logprobs.begin(), c.prompt_logprobs.end());
  *offset = 0;
  json head = CompletionLogprobs(lps, tk, top, offset);
  head["token_logprobs"][0] = nullptr;
  head["top_logprobs"][0] = nullptr;
  return head;
}

// Prompt logprobs before the generated tokens' (echo + logprobs); text_offset runs over both.
void PrependPromptLogprobs(const ChoiceState& c, const std::vector<int32_t>& prompt,
                           const std::string& echo_prefix, const tok::Tokenizer* tk, int top,
                           json* logprobs) {
  size_t offset = 0;
  json head = PromptLogprobs(c, prompt, tk, top, &offset);
  const size_t shift = offset - Utf8Chars(echo_prefix);  // generated offsets start after it
  json& lp = *logprobs;
  for (const char* k : {"tokens", "token_logprobs", "top_logprobs"})
    for (auto& v : lp[k]) head[k].push_back(v);
  for (auto& v : lp["text_offset"]) head["text_offset"].push_back(v.get<size_t>() + shift);
  lp = std::move(head);
}

// SGLang's input_token_logprobs / input_top_logprobs ([logprob, id, text] from position `from`;
// position 0 has a null logprob).
void AddInputLogprobs(const ChoiceState& c, const std::vector<int32_t>& prompt, int64_t from,
                      const tok::Tokenizer* tk, json* result) {
  const auto text = [&](int32_t id) { return tk ? json(TokenText(tk, id)) : json(nullptr); };
  json lps = json::array(), tops = json::array();
  if (from == 0) {
    lps.push_back({nullptr, prompt[0], text(prompt[0])});
    tops.push_back(nullptr);
  }
  for (const TokenLogprob& lp : c.prompt_logprobs) {
    lps.push_back({lp.logprob, lp.token, text(lp.token)});
    json alts = json::array();
    for (const auto& [id, v] : lp.top) alts.push_back({v, id, text(id)});
    tops.push_back(alts);
  }
  (*result)["meta_info"]["input_token_logprobs"] = lps;
  (*result)["meta_info"]["input_top_logprobs"] = tops;
}

// The logit_bias ids and min_tokens, which need the vocabulary and max_tokens.
std::optional<ApiError> CheckVllmExtras(const SamplingParams& sp, int64_t vocab_size) {
  std::vector<int32_t> ids;
  for (const auto& [id, bias] : sp.logit_bias) ids.push_back(id);
  if (auto e = CheckTokenIds(ids, vocab_size, "logit_bias")) return e;
  if (sp.min_tokens > sp.max_tokens)
    return BadRequest("Invalid 'min_tokens': " + std::to_string(sp.min_tokens) +
                          " is more than max_tokens (" + std::to_string(sp.max_tokens) + ").",
                      "min_tokens", "invalid_value");
  return std::nullopt;
}

// One engine request per prompt x n, with the length limits, the vLLM extras' checks and the
// prompt logprobs asked for; `prompt_index[i]` names request i's prompt.
std::optional<ApiError> BuildEngineRequests(const ParsedRequest& r, const ServingModel& m,
                                            const std::vector<PreparedPrompt>& prompts,
                                            std::vector<GenerationRequest>* reqs,
                                            std::vector<size_t>* prompt_index) {
  for (size_t p = 0; p < prompts.size(); ++p) {
    SamplingParams sp = r.sampling;
    const int64_t len = static_cast<int64_t>(prompts[p].ids.size());
    if (auto e = ApplyLengthLimits(r, len, m.context_length, &sp)) return e;
    if (auto e = CheckVllmExtras(sp, m.vocab_size)) return e;
    if (r.prompt_logprobs_from >= len)
      return BadRequest("Invalid 'logprob_start_len': " + std::to_string(r.prompt_logprobs_from) +
                            " is not below the " + std::to_string(len) + " prompt tokens.",
                        "logprob_start_len", "invalid_value");
    for (int j = 0; j < r.n; ++j) {
      GenerationRequest g{prompts[p].ids, sp};
      if (r.prompt_logprobs_from >= 0) {
        g.prompt_logprobs = r.top_logprobs;
        g.prompt_logprobs_start = std::max<int64_t>(1, r.prompt_logprobs_from);
      }
      if (sp.seed && j > 0) g.sampling.seed = *sp.seed + uint64_t(j);
      reqs->push_back(std::move(g));
      prompt_index->push_back(p);
    }
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
  std::vector<std::vector<int32_t>> prompt_ids;  // per prompt, for echo + logprobs
  std::vector<bool> echo_pending;   // echo + logprobs: the echo waits for the prompt's logprobs
  std::vector<size_t> text_offset;  // completions logprobs: characters so far per choice
  std::vector<ChatDeltaStream> chat_parsers;  // chat with output parsing: one per choice
  std::vector<bool> named_call_sent;          // forced named tool: the call's first delta went out
  bool started = false;
  bool done = false;
};

// vLLM's per-chunk extras: the chunk's token_ids (return_token_ids) and the choice's usage so far
// (stream_options.continuous_usage_stats with include_usage).
json Decorated(const StreamState& st, const RequestOutput& o, json chunk) {
  if (st.req.return_token_ids) chunk["choices"][0]["token_ids"] = o.new_tokens;
  if (st.req.include_usage && st.req.continuous_usage_stats)
    chunk["usage"] = {{"prompt_tokens", o.prompt_tokens},
                      {"completion_tokens", o.completion_tokens},
                      {"total_tokens", o.prompt_tokens + o.completion_tokens}};
  return chunk;
}

std::string StartChunks(StreamState& st) {
  std::string out;
  for (size_t i = 0; i < st.job->choices().size(); ++i) {
    const ChoiceState& c = st.job->choices()[i];
    if (st.req.kind == ApiKind::kChat) {
      RequestOutput none;
      none.prompt_tokens = c.prompt_tokens;
      out += SseData(Decorated(
          st, none, ChatChunk(st.meta, i, {{"role", "assistant"}, {"content", ""}}, nullptr, "")));
    } else if (st.req.kind == ApiKind::kCompletions && st.req.echo &&
               st.req.prompt_logprobs_from >= 0) {
      st.echo_pending[i] = true;
    } else if (st.req.kind == ApiKind::kCompletions && st.req.echo) {
      const std::string& p = st.echo_prefix[c.prompt_index];
      out += SseData(CompletionChunk(st.meta, i, p, nullptr, ""));
      st.text_offset[i] = Utf8Chars(p);
    }
  }
  return out;
}

// A chat event through the choice's output parsers: one chunk per delta they give (logprobs and
// token ids go with the first), then the finish chunk.
std::string ParsedChatChunks(StreamState& st, const ChoiceEvent& e) {
  const RequestOutput& o = e.output;
  ChatDeltaStream& parser = st.chat_parsers[e.choice];
  std::vector<json> deltas = parser.Push(o.text);
  if (o.finished)
    for (json& d : parser.Finish()) deltas.push_back(std::move(d));
  json lp = st.req.want_logprobs && !o.logprobs.empty()
                ? ChatLogprobs(o.logprobs, st.tokenizer, st.req.top_logprobs)
                : json(nullptr);
  RequestOutput rest = o;
  if (deltas.empty() && (!o.new_tokens.empty() && (st.req.return_token_ids || !lp.is_null())))
    deltas.push_back({{"content", ""}});  // the tokens' logprobs / ids still go out
  std::string out;
  for (json& d : deltas) {
    out += SseData(Decorated(st, rest, ChatChunk(st.meta, e.choice, d, lp, "")));
    lp = nullptr;
    rest.new_tokens.clear();
  }
  if (o.finished) {
    std::string finish = FinishReason(o.finish_reason);
    if (finish == "stop" && parser.made_calls()) finish = "tool_calls";
    out +=
        SseData(Decorated(st, rest, ChatChunk(st.meta, e.choice, json::object(), nullptr, finish)));
  }
  return out;
}

// tool_choice naming a function: the output is that function's arguments (the grammar makes it a
// JSON object), so the call streams as vLLM streams it: the first delta names the call, then the
// output's text goes out as pieces of its arguments; the finish reason is "tool_calls" when the
// output completed (stop), else the engine's ("length": the arguments are cut).
std::string NamedToolChunks(StreamState& st, const ChoiceEvent& e) {
  const RequestOutput& o = e.output;
  std::string out;
  if (!st.named_call_sent[e.choice]) {
    st.named_call_sent[e.choice] = true;
    json head = {{"index", 0},
                 {"id", NewResponseId("call_")},
                 {"type", "function"},
                 {"function", {{"name", st.req.structured.tool_name}, {"arguments", ""}}}};
    out +=
        SseData(ChatChunk(st.meta, e.choice, {{"tool_calls", json::array({head})}}, nullptr, ""));
  }
  if (!o.text.empty() || !o.new_tokens.empty()) {
    const json piece = {
        {"tool_calls", json::array({{{"index", 0}, {"function", {{"arguments", o.text}}}}})}};
    out += SseData(Decorated(st, o, ChatChunk(st.meta, e.choice, piece, nullptr, "")));
  }
  if (o.finished) {
    const std::string finish = FinishReason(o.finish_reason);
    RequestOutput none = o;
    none.new_tokens.clear();
    out += SseData(Decorated(st, none,
                             ChatChunk(st.meta, e.choice, json::object(), nullptr,
                                       finish == "stop" ? "tool_calls" : finish)));
  }
  return out;
}

// Completions echo + logprobs, streaming (as vLLM): the choice's first chunk is the echoed prompt
// with the prompt's logprobs, sent with its first event (the engine computes them with the first
// generated token); the generated tokens' text_offset continues after the prompt tokens' text.
std::string EchoWithPromptLogprobs(StreamState& st, size_t i) {
  st.echo_pending[i] = false;
  const ChoiceState& c = st.job->choices()[i];
  size_t offset = 0;
  json lp =
      PromptLogprobs(c, st.prompt_ids[c.prompt_index], st.tokenizer, st.req.top_logprobs, &offset);
  st.text_offset[i] = offset;
  return SseData(CompletionChunk(st.meta, i, st.echo_prefix[c.prompt_index], lp, ""));
}

std::string EventChunks(StreamState& st, const ChoiceEvent& e) {
  const RequestOutput& o = e.output;
  if (o.finished && o.finish_reason == "error") return "";  // reported as an error event
  const size_t i = e.choice;
  const std::string finish = o.finished ? FinishReason(o.finish_reason) : "";
  const bool has_content = !o.text.empty() || !o.new_tokens.empty();
  std::string out;
  if (st.req.kind == ApiKind::kCompletions) {
    if (st.echo_pending[i]) out += EchoWithPromptLogprobs(st, i);
    if (!has_content && !o.finished) return out;
    json lp = nullptr;
    if (st.req.want_logprobs)
      lp = CompletionLogprobs(o.logprobs, st.tokenizer, st.req.top_logprobs, &st.text_offset[i]);
    out += SseData(Decorated(st, o, CompletionChunk(st.meta, i, o.text, lp, finish)));
  } else if (st.req.kind == ApiKind::kChat && st.req.structured.tools == ForcedTools::kNamed) {
    out += NamedToolChunks(st, e);
  } else if (st.req.kind == ApiKind::kChat && st.req.structured.tools != ForcedTools::kNone) {
    // "required": the calls are sent whole once the output is complete (it must parse first).
    if (!o.finished) return "";
    const ChoiceState& c = st.job->choices()[i];
    std::optional<json> delta =
        c.finish_reason == "stop" ? ForcedToolCallsDelta(st.req.structured, c.text) : std::nullopt;
    out += SseData(Decorated(
        st, o, ChatChunk(st.meta, i, delta ? *delta : json{{"content", c.text}}, nullptr, "")));
    out += SseData(Decorated(
        st, o, ChatChunk(st.meta, i, json::object(), nullptr, delta ? "tool_calls" : finish)));
  } else if (st.req.kind == ApiKind::kChat && !st.chat_parsers.empty()) {
    out += ParsedChatChunks(st, e);
  } else if (st.req.kind == ApiKind::kChat) {
    if (has_content) {
      json lp = st.req.want_logprobs ? ChatLogprobs(o.logprobs, st.tokenizer, st.req.top_logprobs)
                                     : json(nullptr);
      out += SseData(Decorated(st, o, ChatChunk(st.meta, i, {{"content", o.text}}, lp, "")));
    }
    if (o.finished) {
      RequestOutput none = o;
      none.new_tokens.clear();  // the tokens went with the content chunk
      out += SseData(Decorated(st, none, ChatChunk(st.meta, i, json::object(), nullptr, finish)));
    }
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

// Answers `res` with the SSE stream of `st`; a client that goes away aborts the job.
void ServeStream(std::shared_ptr<StreamState> st, httplib::Response& res) {
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream", [st](size_t, httplib::DataSink& sink) { return StreamStep(*st, sink); },
      [st](bool) {
        if (!st->done) {
          LogInfo("stream " + st->meta.id + ": client gone; aborting its requests");
          st->job->AbortUnfinished();
        }
        st->slot.reset();
      });
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
  const bool strict = options_.strict_request_fields;
  if (!err)
    err = kind == ApiKind::kCompletions ? ParseCompletionRequest(body, &r, strict)
          : kind == ApiKind::kChat      ? ParseChatRequest(body, &r, strict)
                                        : ParseGenerateRequest(body, &r, strict);
  if (!err) ReportIgnoredFields(r.ignored_fields, http_req.path, res);
  if (!err && !r.model.empty() && r.model != a->model.name)
    err = NotFoundError(
        "The model '" + r.model + "' does not exist. This server serves '" + a->model.name + "'.",
        "model_not_found");
  std::vector<PreparedPrompt> prompts;
  if (!err) err = BuildPrompts(r, a->model, &prompts);
  if (!err) TruncatePrompts(r, a->model, &prompts);
  if (!err) err = CheckTokenIds(r.sampling.stop_token_ids, a->model.vocab_size, "stop_token_ids");
  ChatParsing parsing;
  if (!err && kind == ApiKind::kChat) parsing = ChatParsingFor(r, a->model, prompts[0].text);
  if (parsing.tool_format) r.sampling.skip_special_tokens = false;  // the call markers survive
  std::shared_ptr<const TokenConstraint> constraint;
  if (!err) err = CompileConstraint(r.structured, a->model, &constraint);
  r.sampling.constraint = constraint;
  std::vector<GenerationRequest> reqs;
  std::vector<size_t> prompt_index;
  if (!err) err = BuildEngineRequests(r, a->model, prompts, &reqs, &prompt_index);
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
    st->named_call_sent.assign(job->choices().size(), false);
    st->echo_pending.assign(job->choices().size(), false);
    for (const PreparedPrompt& p : prompts) st->prompt_ids.push_back(p.ids);
    if (parsing.active())
      for (size_t i = 0; i < job->choices().size(); ++i) st->chat_parsers.emplace_back(parsing);
    ServeStream(st, res);
    return;
  }

  const int conn = ConnectionSocket(http_req);
  while (!job->AllFinished()) {
    job->Next(milliseconds(200));
    if (conn >= 0 && !job->AllFinished() && PeerClosed(conn)) {
      LogInfo("request " + meta.id + ": client gone; aborting its requests");
      job->AbortUnfinished();
      return;  // nobody to answer; the job's destructor finishes the aborts
    }
  }
  if (const ChoiceState* e = job->FirstError()) return ReplyError(res, FromStatus(e->error));
  for (const ChoiceState& c : job->choices())
    if (c.finish_reason == "abort" &&
        (phase_.load() == Phase::kShuttingDown || phase_.load() == Phase::kFailed))
      return ReplyError(
          res, Unavailable(std::string("The server ") +
                           (phase_.load() == Phase::kFailed ? "failed" : "is shutting down") +
                           "; the request was aborted."));
  const tok::Tokenizer* tk = a->model.tokenizer.get();
  if (kind != ApiKind::kGenerate) {
    json out = kind == ApiKind::kCompletions
                   ? CompletionResponse(meta, job->choices(), echo_prefix, r.want_logprobs,
                                        r.top_logprobs, tk)
                   : ChatResponse(meta, job->choices(), r.want_logprobs, r.top_logprobs, tk);
    for (size_t i = 0; kind == ApiKind::kChat && i < job->choices().size(); ++i)
      ApplyChatParsers(parsing, job->choices()[i].text, &out["choices"][i]);
    if (kind == ApiKind::kChat) ApplyForcedToolCalls(r.structured, job->choices(), &out);
    if (r.return_token_ids) AddTokenIds(job->choices(), prompts, kind, &out);
    for (size_t i = 0; r.prompt_logprobs_from >= 0 && i < job->choices().size(); ++i) {
      const ChoiceState& c = job->choices()[i];
      PrependPromptLogprobs(c, prompts[c.prompt_index].ids, echo_prefix[c.prompt_index], tk,
                            r.top_logprobs, &out["choices"][i]["logprobs"]);
    }
    return ReplyJson(res, out);
  }
  json results = json::array();
  const double e2e = std::chrono::duration<double>(Clock::now() - arrival).count();
  for (size_t i = 0; i < job->choices().size(); ++i) {
    const ChoiceState& c = job->choices()[i];
    results.push_back(
        GenerateResult(c, meta.id + "-" + std::to_string(i), e2e, r.want_logprobs, tk));
    if (r.prompt_logprobs_from >= 0)
      AddInputLogprobs(c, prompts[c.prompt_index].ids, r.prompt_logprobs_from, tk, &results.back());
  }
  ReplyJson(res, r.batch || r.n > 1 ? results : results[0]);
}

void HttpServer::HandleTokenize(const httplib::Request& http_req, httplib::Response& res) const {
  auto a = attached();
  if (!a) return ReplyError(res, Unavailable("The model is still loading."));
  const ServingModel& m = a->model;
  ordered_json body;
  if (auto e = ParseJsonBody(http_req.body, &body)) return ReplyError(res, *e);
  std::vector<std::string> ignored;
  for (auto it = body.begin(); it != body.end(); ++it) {
    static const std::set<std::string> kKnown = {"model",
                                                 "prompt",
                                                 "add_special_tokens",
                                                 "messages",
                                                 "tools",
                                                 "chat_template_kwargs",
                                                 "add_generation_prompt"};
    if (!kKnown.count(it.key())) {
      if (!options_.strict_request_fields) {
        ignored.push_back(it.key());
        continue;
      }
      return ReplyError(res, BadRequest("Unrecognized request argument supplied: " + it.key(),
                                        it.key(), "unknown_parameter"));
    }
  }
  ReportIgnoredFields(ignored, http_req.path, res);
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
  std::vector<std::string> ignored;
  for (auto it = body.begin(); it != body.end(); ++it) {
    if (it.key() == "model" || it.key() == "tokens" || it.key() == "skip_special_tokens") continue;
    if (!options_.strict_request_fields) {
      ignored.push_back(it.key());
      continue;
    }
    return ReplyError(res, BadRequest("Unrecognized request argument supplied: " + it.key(),
                                      it.key(), "unknown_parameter"));
  }
  ReportIgnoredFields(ignored, http_req.path, res);
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
  // "prompt" is vLLM's key for the same text.
  ReplyJson(res, {{"text", list ? texts : texts[0]}, {"prompt", list ? texts : texts[0]}});
}

Status RunTestGeneration(Engine& engine, std::vector<int32_t> prompt, int64_t max_tokens,
                         std::chrono::milliseconds timeout) {
  GenerationRequest g;
  g.prompt = std::move(prompt);
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
