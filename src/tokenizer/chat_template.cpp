#include "tokenizer/chat_template.h"

#include "tokenizer/jinja_interpreter.h"
#include "tokenizer/jinja_parser.h"

namespace lucid::tok {

namespace {
Status TemplateError(const jinja::JinjaError& e) {
  return InvalidArgument("chat template error at line " + std::to_string(e.line) + ": " +
                         e.message);
}
}  // namespace

StatusOr<ChatTemplate> ChatTemplate::Parse(const std::string& source) {
  try {
    ChatTemplate t;
    t.template_ = jinja::ParseTemplate(source);
    return t;
  } catch (const jinja::JinjaError& e) {
    return TemplateError(e);
  } catch (const std::exception& e) {
    return Internal(std::string("chat template parser: ") + e.what());
  }
}

StatusOr<std::string> ChatTemplate::Render(const nlohmann::ordered_json& context) const {
  if (!context.is_object()) return InvalidArgument("template context must be an object");
  try {
    std::map<std::string, jinja::Value> globals;
    for (auto it = context.begin(); it != context.end(); ++it) {
      globals[it.key()] = jinja::Value::FromJson(it.value());
    }
    jinja::Interpreter interp;
    return interp.Render(*template_, globals);
  } catch (const jinja::JinjaError& e) {
    return TemplateError(e);
  } catch (const std::exception& e) {
    return Internal(std::string("chat template render: ") + e.what());
  }
}

StatusOr<std::string> ChatTemplate::Apply(const ChatRequest& r) const {
  nlohmann::ordered_json ctx = r.extra.is_object() ? r.extra : nlohmann::ordered_json::object();
  ctx["messages"] = r.messages;
  ctx["tools"] = r.tools;
  if (!ctx.contains("documents")) ctx["documents"] = nullptr;
  ctx["add_generation_prompt"] = r.add_generation_prompt;
  ctx["bos_token"] = r.bos_token;
  ctx["eos_token"] = r.eos_token;
  return Render(ctx);
}

}  // namespace lucid::tok
