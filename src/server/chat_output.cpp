#include "server/chat_output.h"

#include "server/openai_format.h"

namespace lucid::server {

using json = nlohmann::json;

namespace {

json CallJson(const ToolCall& c) {
  return {{"id", NewResponseId("call_")},
          {"type", "function"},
          {"function", {{"name", c.name}, {"arguments", c.arguments}}}};
}

}  // namespace

void ApplyChatParsers(const ChatParsing& p, const std::string& text, json* choice) {
  if (!p.active()) return;
  ReasoningPiece r{"", text};
  if (p.reasoning) r = SplitReasoning(text, p.starts_in_reasoning);
  json& msg = (*choice)["message"];
  if (p.reasoning) msg["reasoning_content"] = r.reasoning;
  if (!p.tool_format) {
    msg["content"] = r.content;
    return;
  }
  const ToolCallPiece t = ParseToolCalls(*p.tool_format, r.content, p.tools);
  if (t.calls.empty()) {
    msg["content"] = t.content;
    return;
  }
  const size_t b = t.content.find_first_not_of(" \t\r\n");
  msg["content"] = b == std::string::npos ? json(nullptr) : json(t.content);
  json calls = json::array();
  for (const ToolCall& c : t.calls) calls.push_back(CallJson(c));
  msg["tool_calls"] = calls;
  if ((*choice)["finish_reason"] == "stop") (*choice)["finish_reason"] = "tool_calls";
}

ChatDeltaStream::ChatDeltaStream(const ChatParsing& p) : p_(p) {
  if (p_.reasoning) reasoning_.emplace(p_.starts_in_reasoning);
  if (p_.tool_format) tools_.emplace(*p_.tool_format, p_.tools);
}

void ChatDeltaStream::AddTools(const std::vector<ToolCallDelta>& deltas, std::vector<json>* out) {
  for (const ToolCallDelta& d : deltas) {
    if (d.index < 0) {
      if (!d.content.empty()) out->push_back({{"content", d.content}});
      continue;
    }
    if (!d.name.empty()) {
      json head = CallJson({d.name, ""});
      head["index"] = d.index;
      out->push_back({{"tool_calls", json::array({head})}});
      ++calls_;
      continue;
    }
    if (d.arguments.empty()) continue;
    // Pieces of the same call's arguments in a row go out as one delta.
    json* last = out->empty() ? nullptr : &out->back();
    if (last && last->contains("tool_calls") && (*last)["tool_calls"][0]["index"] == d.index &&
        !(*last)["tool_calls"][0].contains("id")) {
      json& args = (*last)["tool_calls"][0]["function"]["arguments"];
      args = args.get<std::string>() + d.arguments;
      continue;
    }
    out->push_back({{"tool_calls", json::array({{{"index", d.index},
                                                 {"function", {{"arguments", d.arguments}}}}})}});
  }
}

void ChatDeltaStream::Add(const ReasoningPiece& r, std::vector<json>* out) {
  if (!r.reasoning.empty()) out->push_back({{"reasoning_content", r.reasoning}});
  if (r.content.empty()) return;
  if (tools_)
    AddTools(tools_->Push(r.content), out);
  else
    out->push_back({{"content", r.content}});
}

std::vector<json> ChatDeltaStream::Push(const std::string& text) {
  std::vector<json> out;
  if (reasoning_)
    Add(reasoning_->Push(text), &out);
  else
    Add({"", text}, &out);
  return out;
}

std::vector<json> ChatDeltaStream::Finish() {
  std::vector<json> out;
  if (reasoning_) Add(reasoning_->Finish(), &out);
  if (tools_) AddTools(tools_->Finish(), &out);
  return out;
}

}  // namespace lucid::server
