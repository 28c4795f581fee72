#include "server/reasoning_parser.h"

#include <algorithm>
#include <cctype>

namespace lucid::server {
namespace {

constexpr std::string_view kOpen = "<think>", kClose = "</think>";

size_t LeadingSpace(std::string_view s) {
  size_t n = 0;
  while (n < s.size() && std::isspace(static_cast<unsigned char>(s[n]))) ++n;
  return n;
}

// The longest suffix of `s` that is a proper prefix of `marker`.
size_t PartialTail(std::string_view s, std::string_view marker) {
  for (size_t len = std::min(s.size(), marker.size() - 1); len > 0; --len)
    if (s.substr(s.size() - len) == marker.substr(0, len)) return len;
  return 0;
}

}  // namespace

const std::vector<std::string>& ReasoningParserNames() {
  static const std::vector<std::string> kNames = {"glm45", "deepseek-r1", "deepseek-v3", "qwen3"};
  return kNames;
}

bool PromptOpensReasoning(std::string_view prompt) {
  while (!prompt.empty() && std::isspace(static_cast<unsigned char>(prompt.back())))
    prompt.remove_suffix(1);
  return prompt.size() >= kOpen.size() && prompt.substr(prompt.size() - kOpen.size()) == kOpen;
}

ReasoningStreamer::ReasoningStreamer(bool starts_in_reasoning)
    : state_(starts_in_reasoning ? State::kReasoning : State::kStart) {}

ReasoningPiece ReasoningStreamer::Push(std::string_view text) {
  pending_ += text;
  ReasoningPiece out;
  if (state_ == State::kStart) {
    const size_t ws = LeadingSpace(pending_);
    const std::string_view rest = std::string_view(pending_).substr(ws);
    if (rest.size() < kOpen.size() && kOpen.substr(0, rest.size()) == rest)
      return out;  // may still become "<think>"
    if (rest.substr(0, kOpen.size()) == kOpen) {
      pending_.erase(0, ws + kOpen.size());
      state_ = State::kReasoning;
    } else {
      state_ = State::kContent;
    }
  }
  if (state_ == State::kReasoning) {
    const size_t close = pending_.find(kClose);
    if (close == std::string::npos) {
      const size_t hold = PartialTail(pending_, kClose);
      out.reasoning = pending_.substr(0, pending_.size() - hold);
      pending_.erase(0, pending_.size() - hold);
      return out;
    }
    out.reasoning = pending_.substr(0, close);
    pending_.erase(0, close + kClose.size());
    state_ = State::kContent;
  }
  out.content = std::move(pending_);
  pending_.clear();
  return out;
}

ReasoningPiece ReasoningStreamer::Finish() {
  ReasoningPiece out;
  (state_ == State::kReasoning ? out.reasoning : out.content) = std::move(pending_);
  pending_.clear();
  return out;
}

ReasoningPiece SplitReasoning(std::string_view text, bool starts_in_reasoning) {
  ReasoningStreamer s(starts_in_reasoning);
  ReasoningPiece out = s.Push(text);
  ReasoningPiece rest = s.Finish();
  out.reasoning += rest.reasoning;
  out.content += rest.content;
  return out;
}

}  // namespace lucid::server
