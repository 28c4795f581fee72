// Tool-call parsers: turn the tool-call markup a model writes into OpenAI `tool_calls`, keeping
// the text around the calls as content. Formats (--tool-call-parser, SGLang's names):
//   glm45 / glm47   GLM-4.5, 4.6 / GLM-4.7, GLM-5:
//                   <tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value>...</tool_call>
//                   (4.5/4.6 put newlines between the tags, 4.7/5 none: whitespace between tags
//                   is ignored, so one parser reads both). A value is typed by the tool's JSON
//                   schema: kept as a string when the parameter's type is "string" or unknown,
//                   else read as JSON (and kept as a string when it is not JSON).
//   deepseekv31     DeepSeek-V3.1: <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>
//                   {JSON arguments}<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>
//   deepseekv32     DeepSeek-V3.2's DSML: <｜DSML｜function_calls><｜DSML｜invoke name="NAME">
//                   <｜DSML｜parameter name="K" string="true|false">V</｜DSML｜parameter>...
//                   </｜DSML｜invoke>...</｜DSML｜function_calls> (string="false": V is JSON)
// A block whose markup does not parse (a malformed call from the model) is kept, verbatim, as
// content: never an error. An unterminated block at the end of the output is content too.
// ToolCallStreamer is the one implementation: ParseToolCalls is Push(all) + Finish(), so any split
// of the text into pieces gives the same content and calls.
// Thread-safety: a ToolCallStreamer belongs to one choice; the free functions are pure.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace lucid::server {

enum class ToolCallFormat { kGlm45, kDeepSeekV31, kDeepSeekV32 };

// "glm45", "glm47" (the same parser), "deepseekv31", "deepseekv32"; nullopt otherwise.
std::optional<ToolCallFormat> ToolCallFormatFromName(std::string_view name);
// The names ToolCallFormatFromName accepts.
const std::vector<std::string>& ToolCallParserNames();

struct ToolCall {
  std::string name;
  std::string arguments;  // a JSON object, as text (OpenAI's function.arguments)
};

struct ToolCallPiece {
  std::string content;          // text safe to emit as content now
  std::vector<ToolCall> calls;  // calls completed by this piece
};

class ToolCallStreamer {
 public:
  // `tools` is the request's tool list (OpenAI schema), used to type GLM argument values.
  ToolCallStreamer(ToolCallFormat format, nlohmann::ordered_json tools);

  // Feeds generated text; returns the content that cannot start a call, and completed calls.
  ToolCallPiece Push(std::string_view text);
  // The end of the output: what is held back (a partial marker, an unterminated block) as content.
  ToolCallPiece Finish();

 private:
  ToolCallFormat format_;
  nlohmann::ordered_json tools_;
  std::string pending_;
};

// The whole output at once: content (text outside calls) and the calls, in order.
ToolCallPiece ParseToolCalls(ToolCallFormat format, std::string_view text,
                             const nlohmann::ordered_json& tools);

}  // namespace lucid::server
