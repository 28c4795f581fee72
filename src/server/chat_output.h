// Chat output parsing: each choice's generated text through the reasoning parser
// (message.reasoning_content / delta.reasoning_content) and the tool-call parser
// (message.tool_calls / delta.tool_calls, finish_reason "tool_calls"), in that order. See
// reasoning_parser.h and tool_call_parser.h for the formats.
// Tool calls get fresh ids "call_<24 hex>" and type "function"; arguments are JSON text. In a
// stream, as the OpenAI client assembles them: a call's first delta (with its index) carries the
// id, type and name with empty arguments, once the name is complete; then deltas with the index
// carry the arguments in pieces as the model writes them (ToolCallStreamer says when a piece is
// ready; the client concatenates them by index). finish_reason "stop" becomes "tool_calls" when
// the choice made a call.
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
  void AddTools(const std::vector<ToolCallDelta>& deltas, std::vector<nlohmann::json>* out);

  ChatParsing p_;
  std::optional<ReasoningStreamer> reasoning_;
  std::optional<ToolCallStreamer> tools_;
  int calls_ = 0;
};

}  // namespace lucid::server
