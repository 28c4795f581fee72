// Reasoning parser (--reasoning-parser): splits `<think>...</think>`, as GLM-4.5+ / GLM-5 and
// DeepSeek-R1 / V3.1+ write it, into reasoning_content and content.
// Where the reasoning starts: when the rendered prompt ends with "<think>" (DeepSeek-V3.1's
// template with thinking on, R1's), the output starts inside the reasoning; otherwise reasoning is
// only what follows a "<think>" at the very start of the output (after whitespace), as GLM writes
// it ("<think></think>" when thinking is off gives empty reasoning). Everything after the first
// "</think>" is content; an output that never closes the reasoning is all reasoning (SGLang's
// behaviour). Chat template kwargs (enable_thinking / thinking) act through the template, hence
// through the prompt's end.
// ReasoningStreamer is the one implementation: SplitReasoning is Push(all) + Finish(), so any
// split of the text into pieces gives the same two strings.
// Thread-safety: a ReasoningStreamer belongs to one choice.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace lucid::server {

// SGLang's names that select this parser: "glm45", "deepseek-r1", "deepseek-v3", "qwen3".
const std::vector<std::string>& ReasoningParserNames();

// True when a prompt ending this way leaves the model inside its reasoning.
bool PromptOpensReasoning(std::string_view prompt);

struct ReasoningPiece {
  std::string reasoning;
  std::string content;
};

class ReasoningStreamer {
 public:
  explicit ReasoningStreamer(bool starts_in_reasoning);
  ReasoningPiece Push(std::string_view text);
  ReasoningPiece Finish();

 private:
  enum class State { kStart, kReasoning, kContent } state_;
  std::string pending_;
};

ReasoningPiece SplitReasoning(std::string_view text, bool starts_in_reasoning);

}  // namespace lucid::server
