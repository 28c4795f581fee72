#include "server/structured_output.h"

#include <random>

#include "server/generation_job.h"

namespace lucid::server {
namespace {

using ordered_json = nlohmann::ordered_json;
using Err = std::optional<ApiError>;
using grammar::GrammarKind;

const ordered_json* Field(const ordered_json& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

std::string Join(const std::string& prefix, const std::string& key) {
  return prefix.empty() ? key : prefix + "." + key;
}

// Records one constraint; a second one is a 400.
Err Set(StructuredOutput* out, const std::string& param, GrammarKind kind, std::string source) {
  if (out->grammar)
    return BadRequest("'" + param + "' cannot be combined with '" + out->param +
                          "': a request's output follows one grammar at most.",
                      param, "invalid_value");
  out->grammar = grammar::GrammarSpec{kind, std::move(source)};
  out->param = param;
  return std::nullopt;
}

Err ParseResponseFormat(const ordered_json& rf, StructuredOutput* out) {
  if (!rf.is_object()) return WrongType("response_format", "an object", rf);
  const ordered_json* type = Field(rf, "type");
  if (!type)
    return BadRequest("Missing required parameter: 'response_format.type'.", "response_format.type",
                      "missing_required_parameter");
  if (!type->is_string()) return WrongType("response_format.type", "a string", *type);
  const std::string t = type->get<std::string>();
  if (t == "text") return std::nullopt;
  if (t == "json_object") return Set(out, "response_format", GrammarKind::kJsonObject, "");
  if (t != "json_schema")
    return BadRequest("Invalid value for 'response_format.type': '" + t +
                          "'. Supported values are: 'text', 'json_object' and 'json_schema'.",
                      "response_format.type", "invalid_value");
  const ordered_json* js = Field(rf, "json_schema");
  if (!js)
    return BadRequest("Missing required parameter: 'response_format.json_schema'.",
                      "response_format.json_schema", "missing_required_parameter");
  if (!js->is_object()) return WrongType("response_format.json_schema", "an object", *js);
  if (const ordered_json* name = Field(*js, "name"); name && !name->is_string())
    return WrongType("response_format.json_schema.name", "a string", *name);
  if (const ordered_json* strict = Field(*js, "strict"); strict && !strict->is_boolean())
    return WrongType("response_format.json_schema.strict", "a boolean", *strict);
  const ordered_json* schema = Field(*js, "schema");
  if (!schema) return Set(out, "response_format", GrammarKind::kJsonObject, "");
  if (!schema->is_object())
    return WrongType("response_format.json_schema.schema", "an object", *schema);
  return Set(out, "response_format", GrammarKind::kJsonSchema, schema->dump());
}

Err GetSource(const ordered_json& body, const char* key, const std::string& prefix,
              GrammarKind kind, StructuredOutput* out) {
  const ordered_json* v = Field(body, key);
  if (!v) return std::nullopt;
  const std::string param = Join(prefix, key);
  if (!v->is_string()) return WrongType(param, "a string", *v);
  if (v->get<std::string>().empty())
    return BadRequest("Invalid '" + param + "': empty.", param, "invalid_value");
  return Set(out, param, kind, v->get<std::string>());
}

// The tools' {name: parameters schema}, in order; 400 naming a malformed tool.
Err ToolSchemas(const ordered_json& tools, std::vector<std::pair<std::string, ordered_json>>* out) {
  if (!tools.is_array() || tools.empty())
    return BadRequest("'tool_choice' forces a tool call, but no 'tools' are given.", "tool_choice",
                      "invalid_value");
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string p = "tools[" + std::to_string(i) + "]";
    const ordered_json& t = tools[i];
    const ordered_json* fn = t.is_object() ? Field(t, "function") : nullptr;
    const ordered_json* name = fn && fn->is_object() ? Field(*fn, "name") : nullptr;
    if (!name || !name->is_string())
      return BadRequest("Invalid '" + p + "': a tool needs 'function.name' (a string).", p);
    ordered_json params = {{"type", "object"}, {"properties", ordered_json::object()}};
    if (const ordered_json* ps = Field(*fn, "parameters")) {
      if (!ps->is_object()) return WrongType(p + ".function.parameters", "an object", *ps);
      params = *ps;
    }
    out->emplace_back(name->get<std::string>(), std::move(params));
  }
  return std::nullopt;
}

Err ParseToolChoice(const ordered_json& choice, const ordered_json& tools, StructuredOutput* out) {
  if (choice.is_string()) {
    const std::string c = choice.get<std::string>();
    if (c == "none" || c == "auto") return std::nullopt;
    if (c != "required")
      return BadRequest("Invalid value for 'tool_choice': '" + c +
                            "'. Supported values are: 'none', 'auto', 'required' or a named "
                            "function.",
                        "tool_choice", "invalid_value");
    std::vector<std::pair<std::string, ordered_json>> schemas;
    if (Err e = ToolSchemas(tools, &schemas)) return e;
    ordered_json any_of = ordered_json::array();
    for (const auto& [name, params] : schemas)
      any_of.push_back(
          {{"type", "object"},
           {"properties",
            {{"name", {{"type", "string"}, {"enum", {name}}}}, {"parameters", params}}},
           {"required", {"name", "parameters"}}});
    out->tools = ForcedTools::kRequired;
    ordered_json schema = {{"type", "array"}, {"minItems", 1}, {"items", {{"anyOf", any_of}}}};
    return Set(out, "tool_choice", GrammarKind::kJsonSchema, schema.dump());
  }
  const ordered_json* fn = choice.is_object() ? Field(choice, "function") : nullptr;
  const ordered_json* name = fn && fn->is_object() ? Field(*fn, "name") : nullptr;
  if (!name || !name->is_string())
    return WrongType("tool_choice",
                     "'none', 'auto', 'required' or {\"type\": \"function\", \"function\": "
                     "{\"name\": ...}}",
                     choice);
  std::vector<std::pair<std::string, ordered_json>> schemas;
  if (Err e = ToolSchemas(tools, &schemas)) return e;
  for (const auto& [n, params] : schemas) {
    if (n != name->get<std::string>()) continue;
    out->tools = ForcedTools::kNamed;
    out->tool_name = n;
    return Set(out, "tool_choice", GrammarKind::kJsonSchema, params.dump());
  }
  return BadRequest(
      "Invalid 'tool_choice': no tool named '" + name->get<std::string>() + "' in 'tools'.",
      "tool_choice", "invalid_value");
}

std::string NewCallId() {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  static const char kChars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += kChars[rng() % (sizeof(kChars) - 1)];
  return id;
}

nlohmann::json Call(const std::string& name, const ordered_json& arguments) {
  return {{"id", NewCallId()},
          {"type", "function"},
          {"function", {{"name", name}, {"arguments", arguments.dump()}}}};
}

}  // namespace

std::optional<ApiError> ParseStructuredOutput(const ordered_json& body, bool chat,
                                              bool sglang_native, const ordered_json& tools,
                                              StructuredOutput* out) {
  *out = StructuredOutput{};
  if (sglang_native) {
    const ordered_json* sp = Field(body, "sampling_params");
    if (!sp || !sp->is_object()) return std::nullopt;
    const std::string prefix = "sampling_params";
    if (const ordered_json* js = Field(*sp, "json_schema")) {
      if (!js->is_string()) return WrongType(Join(prefix, "json_schema"), "a string", *js);
      const ordered_json parsed = ordered_json::parse(js->get<std::string>(), nullptr, false);
      if (parsed.is_discarded() || !parsed.is_object())
        return BadRequest("Invalid 'sampling_params.json_schema': not a JSON object.",
                          "sampling_params.json_schema", "invalid_value");
      if (Err e = Set(out, Join(prefix, "json_schema"), GrammarKind::kJsonSchema, parsed.dump()))
        return e;
    }
    if (Err e = GetSource(*sp, "regex", prefix, GrammarKind::kRegex, out)) return e;
    return GetSource(*sp, "ebnf", prefix, GrammarKind::kEbnf, out);
  }
  if (const ordered_json* rf = Field(body, "response_format"))
    if (Err e = ParseResponseFormat(*rf, out)) return e;
  if (Err e = GetSource(body, "regex", "", GrammarKind::kRegex, out)) return e;
  if (Err e = GetSource(body, "ebnf", "", GrammarKind::kEbnf, out)) return e;
  if (const ordered_json* tc = Field(body, "tool_choice"); tc && chat)
    if (Err e = ParseToolChoice(*tc, tools, out)) return e;
  return std::nullopt;
}

std::optional<nlohmann::json> ForcedToolCalls(const StructuredOutput& s, const std::string& text) {
  const ordered_json v = ordered_json::parse(text, nullptr, false);
  if (v.is_discarded()) return std::nullopt;
  nlohmann::json calls = nlohmann::json::array();
  if (s.tools == ForcedTools::kNamed) {
    calls.push_back(Call(s.tool_name, v));
  } else if (s.tools == ForcedTools::kRequired && v.is_array()) {
    for (const auto& item : v) {
      if (!item.is_object() || !item.contains("name") || !item["name"].is_string())
        return std::nullopt;
      calls.push_back(
          Call(item["name"].get<std::string>(), item.value("parameters", ordered_json::object())));
    }
  } else {
    return std::nullopt;
  }
  return calls;
}

}  // namespace lucid::server

namespace lucid::server {

void ApplyForcedToolCalls(const StructuredOutput& s, const std::vector<ChoiceState>& choices,
                          nlohmann::json* response) {
  if (s.tools == ForcedTools::kNone) return;
  for (size_t i = 0; i < choices.size(); ++i) {
    if (choices[i].finish_reason != "stop") continue;
    std::optional<nlohmann::json> calls = ForcedToolCalls(s, choices[i].text);
    if (!calls) continue;
    nlohmann::json& c = (*response)["choices"][i];
    c["message"]["content"] = nullptr;
    c["message"]["tool_calls"] = *calls;
    c["finish_reason"] = "tool_calls";
  }
}

std::optional<nlohmann::json> ForcedToolCallsDelta(const StructuredOutput& s,
                                                   const std::string& text) {
  std::optional<nlohmann::json> calls = ForcedToolCalls(s, text);
  if (!calls) return std::nullopt;
  for (size_t k = 0; k < calls->size(); ++k) (*calls)[k]["index"] = k;
  return nlohmann::json{{"tool_calls", *calls}};
}

}  // namespace lucid::server
