// Chat output parsing: each choice's generated text through the reasoning parser
// (message.reasoning_content / delta.reasoning_content) and the tool-call parser
// (message.tool_calls / delta.tool_calls, finish_reason "tool_calls"), in that order. See
// reasoning_parser.h and tool_call_parser.h for the formats.
// Tool calls get fresh ids "call_<24 hex>" and type "function"; arguments are JSON text. In a
// stream, a call is sent once its markup is complete, as two deltas with its index: the id,
// type and name with empty arguments, then the arguments (the openai client concatenates
// arguments by index). finish_reason "stop" becomes "tool_calls" when the choice made a call.
// Thread-safety: a ChatDeltaStream belongs to one choice; ApplyChatParsers is pure.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "server/reasoning_parser.h"
#include "server/tool_call_parser.h"

namespace lucid::server {

struct ChatParsing {
  bool reasoning = false;                     // split <think>...</think>
  bool starts_in_reasoning = false;           // the prompt ended inside the reasoning
  std::optional<ToolCallFormat> tool_format;  // set when the request has tools and a parser
  nlohmann::ordered_json tools;
  bool active() const { return reasoning || tool_format.has_value(); }
};

// Non-streaming: rewrites `choice["message"]` from `text` and adjusts `choice["finish_reason"]`.
void ApplyChatParsers(const ChatParsing& p, const std::string& text, nlohmann::json* choice);

class ChatDeltaStream {
 public:
  explicit ChatDeltaStream(const ChatParsing& p);
  // The deltas (objects for a chunk's "delta") that `text` completes, in order.
  std::vector<nlohmann::json> Push(const std::string& text);
  // The end of the choice's output: what was held back.
  std::vector<nlohmann::json> Finish();
  bool made_calls() const { return calls_ > 0; }

 private:
  void Add(const ReasoningPiece& r, std::vector<nlohmann::json>* out);
  void AddTools(const ToolCallPiece& t, std::vector<nlohmann::json>* out);

  ChatParsing p_;
  std::optional<ReasoningStreamer> reasoning_;
  std::optional<ToolCallStreamer> tools_;
  int calls_ = 0;
};

}  // namespace lucid::server
