// ChatTemplate: renders a Hugging Face `chat_template` (Jinja) into the prompt text.
//
// Parse once (at model load) and Render per request. The render context matches transformers'
// apply_chat_template: `messages`, `tools` (None when absent), `documents` (None),
// `add_generation_prompt`, the special tokens (`bos_token`, `eos_token`, ...) and any extra
// template kwargs the request passes (e.g. `enable_thinking`). Template errors — syntax errors
// at Parse, raise_exception or type errors at Render — become InvalidArgument statuses that name
// the template line; the interpreter never crashes the server (it also bounds output size, loop
// steps and macro recursion).
// JSON inputs are ordered_json: key order reaches the prompt (tojson of tool schemas), so callers
// must parse request bodies with nlohmann::ordered_json to match transformers byte for byte.
// Thread-safety: a parsed ChatTemplate is immutable; Render may run concurrently.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "core/status.h"

namespace lucid::jinja {
struct Template;
}

namespace lucid::tok {

struct ChatRequest {
  nlohmann::ordered_json messages =
      nlohmann::ordered_json::array();  // [{"role": ..., "content": ...}, ...]
  nlohmann::ordered_json tools;         // null or a list of tool schemas
  bool add_generation_prompt = false;
  std::string bos_token, eos_token;
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();  // extra template kwargs
};

class ChatTemplate {
 public:
  static StatusOr<ChatTemplate> Parse(const std::string& source);

  StatusOr<std::string> Apply(const ChatRequest& request) const;
  // Renders with an explicit context object (every key becomes a template variable).
  StatusOr<std::string> Render(const nlohmann::ordered_json& context) const;

 private:
  std::shared_ptr<const jinja::Template> template_;
};

}  // namespace lucid::tok
