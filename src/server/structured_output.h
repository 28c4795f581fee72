// Structured output for the generation routes: which grammar a request's output must follow, and
// the tool calls made of that output when tool_choice forces one.
//
// Accepted (docs/SERVING.md):
// - OpenAI routes: "response_format" {"type": "text"} (no grammar), {"type": "json_object"} (any
//   JSON object), {"type": "json_schema", "json_schema": {"name", "schema", "strict",
//   "description"}} (the schema; without "schema": any JSON object); SGLang's top-level "regex"
//   and "ebnf" (a GBNF grammar with a "root" rule).
// - /generate: "sampling_params" {"json_schema": a JSON string, "regex", "ebnf"} as SGLang.
// - chat "tool_choice": "none" / "auto" (no grammar), "required" (the output is a JSON array of
//   one or more {"name": one of the tools, "parameters": that tool's parameters}), or
//   {"type": "function", "function": {"name": N}} (the output is N's parameters object). As vLLM
//   does, the output then becomes message.tool_calls with finish_reason "tool_calls".
// At most one of these may constrain a request (400 naming the second one).
// Thread-safety: pure functions.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "grammar/grammar_compiler.h"
#include "server/api_error.h"

namespace lucid::server {

enum class ForcedTools { kNone, kRequired, kNamed };

struct StructuredOutput {
  std::optional<grammar::GrammarSpec> grammar;  // null: the output is unconstrained
  std::string param;                            // the field that set it (for errors)
  ForcedTools tools = ForcedTools::kNone;
  std::string tool_name;  // kNamed: the forced function
};

// Reads the fields above from `body` (for /generate: its sampling_params object, `prefix`
// "sampling_params"). `chat` enables tool_choice; `tools` is the validated tools list or null.
// 400 naming the field for wrong types, unknown response_format types, a tool_choice naming no
// tool, "required" without tools, or two constraints at once.
std::optional<ApiError> ParseStructuredOutput(const nlohmann::ordered_json& body, bool chat,
                                              bool sglang_native,
                                              const nlohmann::ordered_json& tools,
                                              StructuredOutput* out);

// The tool calls of a forced-tool output `text` (which the grammar made valid JSON): an array of
// {"id", "type": "function", "function": {"name", "arguments": JSON string}}. nullopt if the text
// does not parse (the output was cut by max_tokens).
std::optional<nlohmann::json> ForcedToolCalls(const StructuredOutput& s, const std::string& text);

}  // namespace lucid::server

namespace lucid::server {

struct ChoiceState;

// For a forced-tool chat request: each choice that finished with "stop" and whose text parses
// gets message {"role": "assistant", "content": null, "tool_calls": [...]} and finish_reason
// "tool_calls" in `response` (a ChatResponse body); other choices are left as they are.
void ApplyForcedToolCalls(const StructuredOutput& s, const std::vector<ChoiceState>& choices,
                          nlohmann::json* response);

// The streaming form: the delta carrying the calls (each with its "index"), or nullopt.
std::optional<nlohmann::json> ForcedToolCallsDelta(const StructuredOutput& s,
                                                   const std::string& text);

}  // namespace lucid::server
