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
// Arguments: for the GLM and DSML formats a JSON object built from the pairs in order
// ({"K":V,...}, compact); for deepseekv31 the model's JSON text itself, trimmed.
// A block whose markup does not parse (a malformed call from the model) is kept, verbatim, as
// content: never an error. An unterminated block at the end of the output is content too.
//
// Streaming (ToolCallStreamer): a call's first delta carries its name (once the name is complete),
// then its arguments follow in pieces as the markup arrives: a GLM / DSML pair when it completes,
// and a string value (a schema "string" or untyped GLM value, a string="true" DSML value) as its
// characters arrive, escaped; deepseekv31's JSON text as it arrives. The pieces concatenate to
// exactly the arguments ParseToolCalls gives for the whole text, for any split of a well-formed
// output. A stream cannot take back what it sent: when a block whose call was already begun turns
// out malformed, or the output ends inside it, the begun calls are closed where they stand (their
// JSON completed with the quote and brace it lacks) and the rest of the block is dropped.
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

// One step of a streamed parse, in output order: content text, or a piece of a call.
struct ToolCallDelta {
  int index = -1;         // < 0: `content` is text outside calls; else the call (0, 1, ...)
  std::string content;    // index < 0: the text
  std::string name;       // a call's first delta: its function name (and no arguments)
  std::string arguments;  // a piece of the call's arguments
};

// Content and calls assembled from deltas.
struct ToolCallPiece {
  std::string content;
  std::vector<ToolCall> calls;
};

class ToolCallStreamer {
 public:
  // `tools` is the request's tool list (OpenAI schema), used to type GLM argument values.
  // `incremental` false: a call is given only once its block is complete (ParseToolCalls' mode).
  ToolCallStreamer(ToolCallFormat format, nlohmann::ordered_json tools, bool incremental = true);

  // Feeds generated text; returns the deltas it completes.
  std::vector<ToolCallDelta> Push(std::string_view text);
  // The end of the output: what is held back (a partial marker, an unterminated block).
  std::vector<ToolCallDelta> Finish();

 private:
  struct Sent {
    std::string arguments;  // sent so far
    std::string closer;     // what closes `arguments` as they stand
  };
  void Advance(std::string_view inner, bool complete, std::vector<ToolCallDelta>* out);
  void CloseBegun(std::vector<ToolCallDelta>* out);

  ToolCallFormat format_;
  nlohmann::ordered_json tools_;
  bool incremental_;
  std::string pending_;     // held-back content, or the open block from its begin marker
  bool in_block_ = false;   // pending_ starts with the begin marker
  std::vector<Sent> sent_;  // the open block's begun calls
  int next_index_ = 0;      // the index of the open block's first call
};

// Concatenates deltas into content and calls (by index).
void AssembleToolCalls(const std::vector<ToolCallDelta>& deltas, ToolCallPiece* out);

// The whole output at once: content (text outside calls) and the calls, in order.
ToolCallPiece ParseToolCalls(ToolCallFormat format, std::string_view text,
                             const nlohmann::ordered_json& tools);

}  // namespace lucid::server
