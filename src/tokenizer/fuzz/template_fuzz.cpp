// libFuzzer target: parse arbitrary text as a chat template and render it with a typical
// conversation. Any input must yield a template or an error Status, never a crash or a hang
// (the interpreter bounds steps, output and recursion).
#include <cstdint>
#include <string>

#include "tokenizer/chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const nlohmann::ordered_json ctx = nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "sys"},
      {"role": "user", "content": "hi <think>x</think> there"},
      {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "f", "arguments": {"a": 1, "b": [true, null]}}}]},
      {"role": "tool", "content": "{\"ok\": 1.5}"}
    ],
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
    "documents": null, "add_generation_prompt": true,
    "bos_token": "<s>", "eos_token": "</s>", "enable_thinking": false
  })");
  auto tpl =
      lucid::tok::ChatTemplate::Parse(std::string(reinterpret_cast<const char*>(data), size));
  if (tpl.ok()) (void)tpl->Render(ctx);
  return 0;
}
