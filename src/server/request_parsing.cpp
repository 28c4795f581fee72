#include "server/request_parsing.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <set>
#include <sstream>

namespace lucid::server {
namespace {

using Err = std::optional<ApiError>;

#define LUCID_API_RETURN_IF_ERROR(expr)        \
  do {                                         \
    Err lucid_api_err_ = (expr);               \
    if (lucid_api_err_) return lucid_api_err_; \
  } while (0)

std::string Join(const std::string& prefix, const std::string& key) {
  return prefix.empty() ? key : prefix + "." + key;
}

// Present and not null.
const ordered_json* Field(const ordered_json& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

// Unknown fields: a 400 naming the first when `out->strict_fields` (OpenAI), else each is
// recorded in `out->ignored_fields` and otherwise ignored (vLLM, SGLang).
Err CheckKnown(const ordered_json& obj, const std::set<std::string>& known,
               const std::string& prefix, ParsedRequest* out) {
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    if (known.count(it.key())) continue;
    if (!out->strict_fields) {
      out->ignored_fields.push_back(Join(prefix, it.key()));
      continue;
    }
    return BadRequest("Unrecognized request argument supplied: " + Join(prefix, it.key()),
                      Join(prefix, it.key()), "unknown_parameter");
  }
  return std::nullopt;
}

Err Unsupported(const std::string& param, const std::string& what) {
  return BadRequest(
      "'" + param + "' is not supported by this server" + (what.empty() ? "" : ": " + what) + ".",
      param, "unsupported_parameter");
}

Err GetBool(const ordered_json& obj, const char* key, const std::string& prefix, bool* out) {
  const ordered_json* v = Field(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) return WrongType(Join(prefix, key), "a boolean", *v);
  *out = v->get<bool>();
  return std::nullopt;
}

// Integers; an integral decimal (2.0) is accepted as the integer.
Err AsInt(const ordered_json& v, const std::string& param, int64_t* out) {
  if (v.is_number_integer()) {
    if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
      return BadRequest("Invalid '" + param + "': integer too large.", param, "invalid_value");
    *out = v.get<int64_t>();
    return std::nullopt;
  }
  if (v.is_number_float()) {
    double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e15) {
      *out = static_cast<int64_t>(d);
      return std::nullopt;
    }
  }
  return WrongType(param, "an integer", v);
}

Err GetInt(const ordered_json& obj, const char* key, const std::string& prefix, int64_t lo,
           int64_t hi, std::optional<int64_t>* out) {
  const ordered_json* v = Field(obj, key);
  if (!v) return std::nullopt;
  const std::string param = Join(prefix, key);
  int64_t x = 0;
  LUCID_API_RETURN_IF_ERROR(AsInt(*v, param, &x));
  if (x < lo)
    return BadRequest("Invalid '" + param + "': integer below minimum value. Expected a value >= " +
                          std::to_string(lo) + ", but got " + std::to_string(x) + " instead.",
                      param, "integer_below_min_value");
  if (x > hi)
    return BadRequest("Invalid '" + param + "': integer above maximum value. Expected a value <= " +
                          std::to_string(hi) + ", but got " + std::to_string(x) + " instead.",
                      param, "integer_above_max_value");
  *out = x;
  return std::nullopt;
}

std::string Num(double d) {
  std::ostringstream os;
  os << d;
  return os.str();
}

// A number in [lo, hi] (or (lo, hi] with lo_open).
Err GetFloat(const ordered_json& obj, const char* key, const std::string& prefix, double lo,
             bool lo_open, double hi, float* out) {
  const ordered_json* v = Field(obj, key);
  if (!v) return std::nullopt;
  const std::string param = Join(prefix, key);
  if (!v->is_number()) return WrongType(param, "a number", *v);
  const double d = v->get<double>();
  if (!std::isfinite(d) || d < lo || (lo_open && d <= lo))
    return BadRequest("Invalid '" + param + "': decimal below minimum value. Expected a value " +
                          (lo_open ? "> " : ">= ") + Num(lo) + ", but got " + Num(d) + " instead.",
                      param, "decimal_below_min_value");
  if (d > hi)
    return BadRequest("Invalid '" + param + "': decimal above maximum value. Expected a value <= " +
                          Num(hi) + ", but got " + Num(d) + " instead.",
                      param, "decimal_above_max_value");
  *out = static_cast<float>(d);
  return std::nullopt;
}

Err GetStop(const ordered_json& obj, const char* key, const std::string& prefix,
            std::vector<std::string>* out) {
  const ordered_json* v = Field(obj, key);
  if (!v) return std::nullopt;
  const std::string param = Join(prefix, key);
  std::vector<std::string> stops;
  if (v->is_string()) {
    stops.push_back(v->get<std::string>());
  } else if (v->is_array()) {
    for (const auto& s : *v) {
      if (!s.is_string()) return WrongType(param, "a string or an array of strings", *v);
      stops.push_back(s.get<std::string>());
    }
  } else {
    return WrongType(param, "a string or an array of strings", *v);
  }
  if (stops.size() > static_cast<size_t>(kMaxStop))
    return BadRequest("Invalid '" + param + "': at most " + std::to_string(kMaxStop) +
                          " stop sequences are allowed, got " + std::to_string(stops.size()) + ".",
                      param, "array_above_max_length");
  for (const auto& s : stops)
    if (s.empty()) return BadRequest("Invalid '" + param + "': empty stop string.", param);
  *out = std::move(stops);
  return std::nullopt;
}

Err AsIdList(const ordered_json& v, const std::string& param, std::vector<int32_t>* out) {
  out->clear();
  for (const auto& x : v) {
    int64_t id = 0;
    if (!x.is_number_integer()) return WrongType(param, "an array of token ids", v);
    LUCID_API_RETURN_IF_ERROR(AsInt(x, param, &id));
    if (id < 0 || id > std::numeric_limits<int32_t>::max())
      return BadRequest(
          "Invalid '" + param + "': token id " + std::to_string(id) + " is out of range.", param,
          "invalid_token_id");
    out->push_back(static_cast<int32_t>(id));
  }
  return std::nullopt;
}

// The sampling fields shared by the OpenAI routes (top level) and /generate (sampling_params).
Err ParseCommonSampling(const ordered_json& o, const std::string& prefix, double max_temperature,
                        ParsedRequest* out) {
  SamplingParams& s = out->sampling;
  LUCID_API_RETURN_IF_ERROR(
      GetFloat(o, "temperature", prefix, 0.0, false, max_temperature, &s.temperature));
  LUCID_API_RETURN_IF_ERROR(GetFloat(o, "top_p", prefix, 0.0, true, 1.0, &s.top_p));
  std::optional<int64_t> top_k;
  LUCID_API_RETURN_IF_ERROR(GetInt(o, "top_k", prefix, -1, 1 << 30, &top_k));
  if (top_k) s.top_k = *top_k < 0 ? 0 : static_cast<int32_t>(*top_k);
  LUCID_API_RETURN_IF_ERROR(GetFloat(o, "min_p", prefix, 0.0, false, 1.0, &s.min_p));
  LUCID_API_RETURN_IF_ERROR(
      GetFloat(o, "repetition_penalty", prefix, 0.0, true, 2.0, &s.repetition_penalty));
  LUCID_API_RETURN_IF_ERROR(
      GetFloat(o, "frequency_penalty", prefix, -2.0, false, 2.0, &s.frequency_penalty));
  LUCID_API_RETURN_IF_ERROR(
      GetFloat(o, "presence_penalty", prefix, -2.0, false, 2.0, &s.presence_penalty));
  LUCID_API_RETURN_IF_ERROR(GetStop(o, "stop", prefix, &s.stop));
  LUCID_API_RETURN_IF_ERROR(GetBool(o, "ignore_eos", prefix, &s.ignore_eos));
  LUCID_API_RETURN_IF_ERROR(GetBool(o, "skip_special_tokens", prefix, &s.skip_special_tokens));
  if (const ordered_json* v = Field(o, "stop_token_ids")) {
    if (!v->is_array())
      return WrongType(Join(prefix, "stop_token_ids"), "an array of token ids", *v);
    LUCID_API_RETURN_IF_ERROR(AsIdList(*v, Join(prefix, "stop_token_ids"), &s.stop_token_ids));
  }
  for (const char* key : {"seed", "sampling_seed"}) {
    if (const ordered_json* v = Field(o, key)) {
      int64_t seed = 0;
      LUCID_API_RETURN_IF_ERROR(AsInt(*v, Join(prefix, key), &seed));
      s.seed = static_cast<uint64_t>(seed);
    }
  }
  std::optional<int64_t> n;
  LUCID_API_RETURN_IF_ERROR(GetInt(o, "n", prefix, 1, kMaxChoices, &n));
  if (n) out->n = static_cast<int>(*n);
  return std::nullopt;
}

Err ParseStreamFlags(const ordered_json& body, ParsedRequest* out) {
  LUCID_API_RETURN_IF_ERROR(GetBool(body, "stream", "", &out->stream));
  if (const ordered_json* so = Field(body, "stream_options")) {
    if (!so->is_object()) return WrongType("stream_options", "an object", *so);
    if (!out->stream)
      return BadRequest("The 'stream_options' parameter is only allowed when 'stream' is enabled.",
                        "stream_options");
    LUCID_API_RETURN_IF_ERROR(
        CheckKnown(*so, {"include_usage", "continuous_usage_stats"}, "stream_options", out));
    LUCID_API_RETURN_IF_ERROR(GetBool(*so, "include_usage", "stream_options", &out->include_usage));
    LUCID_API_RETURN_IF_ERROR(
        GetBool(*so, "continuous_usage_stats", "stream_options", &out->continuous_usage_stats));
  }
  return std::nullopt;
}

Err ParseModel(const ordered_json& body, ParsedRequest* out) {
  if (const ordered_json* m = Field(body, "model")) {
    if (!m->is_string()) return WrongType("model", "a string", *m);
    out->model = m->get<std::string>();
  }
  return std::nullopt;
}

// Fields OpenAI knows that lucid does not implement: accepted only at their neutral value.
Err RejectUnsupported(const ordered_json& body) {
  if (const ordered_json* v = Field(body, "suffix"))
    if (!(v->is_string() && v->get<std::string>().empty())) return Unsupported("suffix", "");
  for (const char* key : {"reasoning_effort", "modalities", "audio", "prediction",
                          "web_search_options", "functions", "function_call"}) {
    if (Field(body, key)) return Unsupported(key, "");
  }
  return std::nullopt;
}

// OpenAI's logit_bias and vLLM's extra request fields of the OpenAI routes (issue 24).
const std::set<std::string> kVllmExtras = {"logit_bias",
                                           "min_tokens",
                                           "include_stop_str_in_output",
                                           "return_token_ids",
                                           "truncate_prompt_tokens",
                                           "priority"};

Err ParseVllmExtras(const ordered_json& body, ParsedRequest* out) {
  SamplingParams& s = out->sampling;
  if (const ordered_json* v = Field(body, "logit_bias")) {
    if (!v->is_object()) return WrongType("logit_bias", "an object of token id -> bias", *v);
    for (auto it = v->begin(); it != v->end(); ++it) {
      const std::string& key = it.key();
      char* end = nullptr;
      const long long id = std::strtoll(key.c_str(), &end, 10);
      if (key.empty() || *end != '\0' || id < 0 || id > std::numeric_limits<int32_t>::max())
        return BadRequest("Invalid 'logit_bias': key '" + key + "' is not a token id.",
                          "logit_bias", "invalid_value");
      if (!it->is_number()) return WrongType("logit_bias", "an object of token id -> bias", *v);
      const double bias = it->get<double>();
      if (!std::isfinite(bias) || bias < -100 || bias > 100)
        return BadRequest("Invalid 'logit_bias': the bias of token " + key +
                              " must be in [-100, 100], got " + Num(bias) + ".",
                          "logit_bias", "invalid_value");
      s.logit_bias.push_back({static_cast<int32_t>(id), static_cast<float>(bias)});
    }
  }
  std::optional<int64_t> min_tokens, truncate, priority;
  LUCID_API_RETURN_IF_ERROR(
      GetInt(body, "min_tokens", "", 0, std::numeric_limits<int32_t>::max(), &min_tokens));
  if (min_tokens) s.min_tokens = *min_tokens;
  LUCID_API_RETURN_IF_ERROR(
      GetBool(body, "include_stop_str_in_output", "", &s.include_stop_str_in_output));
  LUCID_API_RETURN_IF_ERROR(GetBool(body, "return_token_ids", "", &out->return_token_ids));
  LUCID_API_RETURN_IF_ERROR(GetInt(body, "truncate_prompt_tokens", "", -1,
                                   std::numeric_limits<int32_t>::max(), &truncate));
  if (truncate && *truncate == 0)
    return BadRequest("Invalid 'truncate_prompt_tokens': 0 would leave an empty prompt.",
                      "truncate_prompt_tokens", "invalid_value");
  out->truncate_prompt_tokens = truncate;
  LUCID_API_RETURN_IF_ERROR(GetInt(body, "priority", "", std::numeric_limits<int32_t>::min(),
                                   std::numeric_limits<int32_t>::max(), &priority));
  if (priority && *priority != 0)
    return Unsupported("priority",
                       "the scheduler serves requests first come, first served, so only "
                       "priority 0 applies (vLLM answers the same without --scheduling-policy "
                       "priority)");
  return std::nullopt;
}

const std::set<std::string> kSamplingExtras = {
    "top_k", "min_p", "repetition_penalty", "ignore_eos", "stop_token_ids", "skip_special_tokens"};

std::set<std::string> With(std::set<std::string> a, const std::set<std::string>& b) {
  a.insert(b.begin(), b.end());
  return a;
}

Err ParsePrompt(const ordered_json& v, const std::string& param, ParsedRequest* out) {
  out->prompts.clear();
  if (v.is_string()) {
    out->prompts.push_back({true, v.get<std::string>(), {}});
    return std::nullopt;
  }
  const std::string expected =
      "a string, an array of strings, an array of token ids or an array "
      "of arrays of token ids";
  if (!v.is_array()) return WrongType(param, expected, v);
  if (v.empty())
    return BadRequest("Invalid '" + param + "': the prompt is empty.", param, "empty_array");
  if (v[0].is_number()) {
    PromptSpec p;
    LUCID_API_RETURN_IF_ERROR(AsIdList(v, param, &p.ids));
    out->prompts.push_back(std::move(p));
    return std::nullopt;
  }
  out->batch = true;
  for (const auto& item : v) {
    PromptSpec p;
    if (item.is_string()) {
      p.is_text = true;
      p.text = item.get<std::string>();
    } else if (item.is_array()) {
      if (item.empty())
        return BadRequest("Invalid '" + param + "': a prompt is empty.", param, "empty_array");
      LUCID_API_RETURN_IF_ERROR(AsIdList(item, param, &p.ids));
    } else {
      return WrongType(param, expected, v);
    }
    out->prompts.push_back(std::move(p));
  }
  return std::nullopt;
}

Err CheckChoiceCount(const ParsedRequest& r) {
  const size_t total = r.prompts.size() * static_cast<size_t>(r.n);
  if (total > static_cast<size_t>(kMaxChoices))
    return BadRequest("Too many choices: " + std::to_string(r.prompts.size()) + " prompts x n=" +
                          std::to_string(r.n) + " exceeds " + std::to_string(kMaxChoices) + ".",
                      "n");
  return std::nullopt;
}

// Flattens a message's content to a string: text parts are concatenated.
Err NormalizeContent(ordered_json* content, const std::string& param) {
  if (content->is_null() || content->is_string()) return std::nullopt;
  if (!content->is_array())
    return WrongType(param, "a string or an array of content parts", *content);
  std::string text;
  for (const auto& part : *content) {
    if (!part.is_object()) return WrongType(param, "an array of content parts", *content);
    const auto type = part.find("type");
    if (type == part.end() || !type->is_string())
      return BadRequest("Invalid '" + param + "': each content part needs a string 'type'.", param);
    if (*type != "text")
      return Unsupported(param,
                         "content parts of type '" + type->get<std::string>() + "' (only 'text')");
    const auto t = part.find("text");
    if (t == part.end() || !t->is_string())
      return BadRequest("Invalid '" + param + "': a text part needs a string 'text'.", param);
    text += t->get<std::string>();
  }
  *content = text;
  return std::nullopt;
}

// An assistant turn's tool calls carry their arguments as JSON text (OpenAI's form); chat
// templates iterate them as a mapping (GLM's `arguments.items()`, DeepSeek-V3.2's), so, as vLLM
// does, arguments that parse as a JSON object are handed to the template as that object.
void ToolCallArgumentsAsObjects(ordered_json* msg) {
  const auto calls = msg->find("tool_calls");
  if (calls == msg->end() || !calls->is_array()) return;
  for (ordered_json& call : *calls) {
    if (!call.is_object()) continue;
    const auto f = call.find("function");
    if (f == call.end() || !f->is_object()) continue;
    const auto args = f->find("arguments");
    if (args == f->end() || !args->is_string()) continue;
    ordered_json parsed = ordered_json::parse(args->get<std::string>(), nullptr, false);
    if (!parsed.is_discarded() && parsed.is_object()) *args = std::move(parsed);
  }
}

Err ParseMessages(const ordered_json& body, ParsedRequest* out) {
  const ordered_json* m = Field(body, "messages");
  if (!m)
    return BadRequest("Missing required parameter: 'messages'.", "messages",
                      "missing_required_parameter");
  if (!m->is_array()) return WrongType("messages", "an array", *m);
  if (m->empty())
    return BadRequest(
        "Invalid 'messages': empty array. Expected an array with minimum length 1, "
        "but got an empty array instead.",
        "messages", "empty_array");
  static const std::set<std::string> kRoles = {"system", "developer", "user", "assistant", "tool"};
  out->messages = ordered_json::array();
  for (size_t i = 0; i < m->size(); ++i) {
    const std::string param = "messages[" + std::to_string(i) + "]";
    ordered_json msg = (*m)[i];
    if (!msg.is_object()) return WrongType(param, "an object", msg);
    auto role = msg.find("role");
    if (role == msg.end())
      return BadRequest("Missing required parameter: '" + param + ".role'.", param + ".role",
                        "missing_required_parameter");
    if (!role->is_string()) return WrongType(param + ".role", "a string", *role);
    if (!kRoles.count(role->get<std::string>()))
      return BadRequest("Invalid value for '" + param + ".role': '" + role->get<std::string>() +
                            "'. Supported values are: 'system', 'developer', 'user', 'assistant', "
                            "and 'tool'.",
                        param + ".role", "invalid_value");
    // By value: msg["content"] below may grow msg, which moves its members (`role` would dangle;
    // found by scripts/sanitize.sh, an assistant message without content).
    const std::string role_name = role->get<std::string>();
    auto content = msg.find("content");
    if (content == msg.end()) {
      if (role_name != "assistant")
        return BadRequest("Missing required parameter: '" + param + ".content'.",
                          param + ".content", "missing_required_parameter");
      msg["content"] = nullptr;
    } else {
      LUCID_API_RETURN_IF_ERROR(NormalizeContent(&*content, param + ".content"));
    }
    if (role_name == "assistant") ToolCallArgumentsAsObjects(&msg);
    out->messages.push_back(std::move(msg));
  }
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> ParseJsonBody(const std::string& body, ordered_json* out) {
  // Bound nesting before parsing: deep nesting would recurse when the value is printed.
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char c : body) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"')
      in_string = true;
    else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth)
        return BadRequest(
            "The JSON body is nested deeper than " + std::to_string(kMaxJsonDepth) + " levels.", "",
            "invalid_json");
    } else if (c == ']' || c == '}')
      --depth;
  }
  *out = ordered_json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (out->is_discarded())
    return BadRequest(
        "We could not parse the JSON body of your request. (HINT: This likely means "
        "you aren't using your HTTP library correctly. The OpenAI API expects a JSON "
        "payload, but what was sent was not valid JSON.)",
        "", "invalid_json");
  if (!out->is_object())
    return BadRequest("The request body must be a JSON object.", "", "invalid_json");
  return std::nullopt;
}

std::optional<ApiError> ParseCompletionRequest(const ordered_json& body, ParsedRequest* out,
                                               bool strict_fields) {
  *out = ParsedRequest{};
  out->strict_fields = strict_fields;
  out->kind = ApiKind::kCompletions;
  static const std::set<std::string> kKnown =
      With({"model", "prompt", "max_tokens", "temperature", "top_p", "n", "stream",
            "stream_options", "stop", "seed", "logprobs", "echo", "presence_penalty",
            "frequency_penalty", "best_of", "logit_bias", "suffix", "user", "response_format",
            "regex", "ebnf"},
           With(kSamplingExtras, kVllmExtras));
  LUCID_API_RETURN_IF_ERROR(CheckKnown(body, kKnown, "", out));
  LUCID_API_RETURN_IF_ERROR(RejectUnsupported(body));
  LUCID_API_RETURN_IF_ERROR(ParseModel(body, out));
  const ordered_json* prompt = Field(body, "prompt");
  if (!prompt)
    return BadRequest("Missing required parameter: 'prompt'.", "prompt",
                      "missing_required_parameter");
  LUCID_API_RETURN_IF_ERROR(ParsePrompt(*prompt, "prompt", out));
  LUCID_API_RETURN_IF_ERROR(ParseCommonSampling(body, "", 2.0, out));
  LUCID_API_RETURN_IF_ERROR(
      GetInt(body, "max_tokens", "", 1, std::numeric_limits<int32_t>::max(), &out->max_tokens));
  std::optional<int64_t> best_of;
  LUCID_API_RETURN_IF_ERROR(GetInt(body, "best_of", "", 1, kMaxChoices, &best_of));
  if (best_of && *best_of != out->n) return Unsupported("best_of", "only best_of == n");
  std::optional<int64_t> logprobs;
  LUCID_API_RETURN_IF_ERROR(GetInt(body, "logprobs", "", 0, kMaxTopLogprobs, &logprobs));
  if (logprobs) {
    out->want_logprobs = true;
    out->top_logprobs = static_cast<int>(*logprobs);
    out->sampling.logprobs = out->top_logprobs;
  }
  LUCID_API_RETURN_IF_ERROR(ParseVllmExtras(body, out));
  LUCID_API_RETURN_IF_ERROR(GetBool(body, "echo", "", &out->echo));
  LUCID_API_RETURN_IF_ERROR(ParseStreamFlags(body, out));
  if (out->echo && out->want_logprobs) out->prompt_logprobs_from = 0;
  LUCID_API_RETURN_IF_ERROR(ParseStructuredOutput(body, false, false, nullptr, &out->structured));
  return CheckChoiceCount(*out);
}

std::optional<ApiError> ParseChatRequest(const ordered_json& body, ParsedRequest* out,
                                         bool strict_fields) {
  *out = ParsedRequest{};
  out->strict_fields = strict_fields;
  out->kind = ApiKind::kChat;
  static const std::set<std::string> kKnown = With({"model",
                                                    "messages",
                                                    "max_tokens",
                                                    "max_completion_tokens",
                                                    "temperature",
                                                    "top_p",
                                                    "n",
                                                    "stream",
                                                    "stream_options",
                                                    "stop",
                                                    "seed",
                                                    "logprobs",
                                                    "top_logprobs",
                                                    "presence_penalty",
                                                    "frequency_penalty",
                                                    "logit_bias",
                                                    "user",
                                                    "tools",
                                                    "tool_choice",
                                                    "parallel_tool_calls",
                                                    "response_format",
                                                    "store",
                                                    "metadata",
                                                    "service_tier",
                                                    "reasoning_effort",
                                                    "modalities",
                                                    "audio",
                                                    "prediction",
                                                    "web_search_options",
                                                    "functions",
                                                    "function_call",
                                                    "chat_template_kwargs",
                                                    "add_generation_prompt",
                                                    "regex",
                                                    "ebnf"},
                                                   With(kSamplingExtras, kVllmExtras));
  LUCID_API_RETURN_IF_ERROR(CheckKnown(body, kKnown, "", out));
  LUCID_API_RETURN_IF_ERROR(RejectUnsupported(body));
  LUCID_API_RETURN_IF_ERROR(ParseModel(body, out));
  LUCID_API_RETURN_IF_ERROR(ParseMessages(body, out));
  LUCID_API_RETURN_IF_ERROR(ParseCommonSampling(body, "", 2.0, out));
  const int32_t kMaxInt = std::numeric_limits<int32_t>::max();
  LUCID_API_RETURN_IF_ERROR(GetInt(body, "max_tokens", "", 1, kMaxInt, &out->max_tokens));
  std::optional<int64_t> mct;
  LUCID_API_RETURN_IF_ERROR(GetInt(body, "max_completion_tokens", "", 1, kMaxInt, &mct));
  if (mct) out->max_tokens = mct;
  LUCID_API_RETURN_IF_ERROR(GetBool(body, "logprobs", "", &out->want_logprobs));
  std::optional<int64_t> top;
  LUCID_API_RETURN_IF_ERROR(GetInt(body, "top_logprobs", "", 0, kMaxTopLogprobs, &top));
  if (top && !out->want_logprobs)
    return BadRequest(
        "Invalid value for 'top_logprobs': 'logprobs' must be set to true when "
        "'top_logprobs' is used.",
        "top_logprobs");
  if (out->want_logprobs) {
    out->top_logprobs = top ? static_cast<int>(*top) : 0;
    out->sampling.logprobs = out->top_logprobs;
  }
  if (const ordered_json* tools = Field(body, "tools")) {
    if (!tools->is_array()) return WrongType("tools", "an array", *tools);
    out->tools = *tools;
  }
  if (const ordered_json* tc = Field(body, "tool_choice"))
    out->tool_choice_none = tc->is_string() && *tc == "none";
  if (const ordered_json* kw = Field(body, "chat_template_kwargs")) {
    if (!kw->is_object()) return WrongType("chat_template_kwargs", "an object", *kw);
    out->chat_template_kwargs = *kw;
  }
  LUCID_API_RETURN_IF_ERROR(
      GetBool(body, "add_generation_prompt", "", &out->add_generation_prompt));
  LUCID_API_RETURN_IF_ERROR(ParseVllmExtras(body, out));
  LUCID_API_RETURN_IF_ERROR(ParseStreamFlags(body, out));
  return ParseStructuredOutput(body, true, false, out->tools, &out->structured);
}

std::optional<ApiError> ParseGenerateRequest(const ordered_json& body, ParsedRequest* out,
                                             bool strict_fields) {
  *out = ParsedRequest{};
  out->strict_fields = strict_fields;
  out->kind = ApiKind::kGenerate;
  LUCID_API_RETURN_IF_ERROR(CheckKnown(
      body,
      {"text", "input_ids", "sampling_params", "stream", "return_logprob", "top_logprobs_num",
       "logprob_start_len", "return_text_in_logprobs", "rid", "model"},
      "", out));
  LUCID_API_RETURN_IF_ERROR(ParseModel(body, out));
  const ordered_json* text = Field(body, "text");
  const ordered_json* ids = Field(body, "input_ids");
  if (text && ids) return BadRequest("Give either 'text' or 'input_ids', not both.", "text");
  if (!text && !ids)
    return BadRequest("Missing required parameter: 'text' or 'input_ids'.", "text",
                      "missing_required_parameter");
  if (text) {
    if (!text->is_string() && !text->is_array())
      return WrongType("text", "a string or an array of strings", *text);
    if (text->is_array())
      for (const auto& t : *text)
        if (!t.is_string()) return WrongType("text", "a string or an array of strings", *text);
    LUCID_API_RETURN_IF_ERROR(ParsePrompt(*text, "text", out));
  } else {
    if (!ids->is_array()) return WrongType("input_ids", "an array of token ids", *ids);
    LUCID_API_RETURN_IF_ERROR(ParsePrompt(*ids, "input_ids", out));
  }
  if (const ordered_json* sp = Field(body, "sampling_params")) {
    if (!sp->is_object()) return WrongType("sampling_params", "an object", *sp);
    LUCID_API_RETURN_IF_ERROR(
        CheckKnown(*sp,
                   With({"max_new_tokens", "temperature", "top_p", "n", "stop", "seed",
                         "sampling_seed", "frequency_penalty", "presence_penalty", "no_stop_trim",
                         "spaces_between_special_tokens", "json_schema", "regex", "ebnf"},
                        kSamplingExtras),
                   "sampling_params", out));
    LUCID_API_RETURN_IF_ERROR(ParseCommonSampling(*sp, "sampling_params", 1e6, out));
    LUCID_API_RETURN_IF_ERROR(GetInt(*sp, "max_new_tokens", "sampling_params", 1,
                                     std::numeric_limits<int32_t>::max(), &out->max_tokens));
  }
  LUCID_API_RETURN_IF_ERROR(GetBool(body, "stream", "", &out->stream));
  LUCID_API_RETURN_IF_ERROR(GetBool(body, "return_logprob", "", &out->want_logprobs));
  std::optional<int64_t> top;
  LUCID_API_RETURN_IF_ERROR(GetInt(body, "top_logprobs_num", "", 0, kMaxTopLogprobs, &top));
  if (out->want_logprobs) {
    out->top_logprobs = top ? static_cast<int>(*top) : 0;
    out->sampling.logprobs = out->top_logprobs;
  }
  // SGLang: logprob_start_len -1 (default) gives output logprobs only; L >= 0 also the input
  // tokens' from position L.
  std::optional<int64_t> start;
  LUCID_API_RETURN_IF_ERROR(
      GetInt(body, "logprob_start_len", "", -1, std::numeric_limits<int32_t>::max(), &start));
  if (out->want_logprobs && start && *start >= 0) out->prompt_logprobs_from = *start;
  LUCID_API_RETURN_IF_ERROR(ParseStructuredOutput(body, false, true, nullptr, &out->structured));
  return CheckChoiceCount(*out);
}

std::optional<ApiError> ApplyLengthLimits(const ParsedRequest& req, int64_t prompt_len,
                                          int64_t context_length, SamplingParams* sampling) {
  const std::string param = req.kind == ApiKind::kChat       ? "messages"
                            : req.kind == ApiKind::kGenerate ? "text"
                                                             : "prompt";
  if (prompt_len < 1) return BadRequest("The prompt is empty (0 tokens).", param, "empty_array");
  const int64_t room = context_length - prompt_len;
  if (room < 1)
    return ContextTooLong("This model's maximum context length is " +
                              std::to_string(context_length) + " tokens. However, your prompt is " +
                              std::to_string(prompt_len) +
                              " tokens, which leaves no room for a completion. Please reduce the "
                              "length of the prompt.",
                          param);
  if (req.max_tokens) {
    if (*req.max_tokens > room) {
      const std::string mt =
          req.kind == ApiKind::kGenerate ? "sampling_params.max_new_tokens" : "max_tokens";
      return ContextTooLong(
          "This model's maximum context length is " + std::to_string(context_length) +
              " tokens. However, you requested " + std::to_string(prompt_len + *req.max_tokens) +
              " tokens (" + std::to_string(prompt_len) + " in the prompt, " +
              std::to_string(*req.max_tokens) +
              " in the completion). Please reduce the length "
              "of the prompt or the completion.",
          mt);
    }
    sampling->max_tokens = *req.max_tokens;
    return std::nullopt;
  }
  int64_t def = req.kind == ApiKind::kCompletions ? 16
                : req.kind == ApiKind::kGenerate  ? 128
                                                  : room;
  sampling->max_tokens = std::min(def, room);
  return std::nullopt;
}

std::optional<ApiError> CheckTokenIds(const std::vector<int32_t>& ids, int64_t vocab_size,
                                      const std::string& param) {
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size)
      return BadRequest("Invalid '" + param + "': token id " + std::to_string(id) +
                            " is outside the vocabulary [0, " + std::to_string(vocab_size) + ").",
                        param, "invalid_token_id");
  }
  return std::nullopt;
}

}  // namespace lucid::server
