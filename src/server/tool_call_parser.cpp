#include "server/tool_call_parser.h"

#include <algorithm>
#include <cctype>

namespace lucid::server {
namespace {

using ordered_json = nlohmann::ordered_json;

struct Markers {
  std::string_view begin, end;
};

Markers MarkersOf(ToolCallFormat f) {
  switch (f) {
    case ToolCallFormat::kGlm45:
      return {"<tool_call>", "</tool_call>"};
    case ToolCallFormat::kDeepSeekV31:
      return {"<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"};
    case ToolCallFormat::kDeepSeekV32:
      return {"<｜DSML｜function_calls>", "</｜DSML｜function_calls>"};
  }
  return {"<tool_call>", "</tool_call>"};
}

// A cursor over a block's inner text.
class Cursor {
 public:
  explicit Cursor(std::string_view s) : s_(s) {}
  void SkipSpace() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  bool Eat(std::string_view lit) {
    if (s_.substr(pos_, lit.size()) != lit) return false;
    pos_ += lit.size();
    return true;
  }
  bool AtEnd() const { return pos_ >= s_.size(); }
  // The text up to `lit` (consumed with it); nullopt when `lit` does not follow.
  std::optional<std::string_view> Until(std::string_view lit) {
    const size_t at = s_.find(lit, pos_);
    if (at == std::string_view::npos) return std::nullopt;
    std::string_view out = s_.substr(pos_, at - pos_);
    pos_ = at + lit.size();
    return out;
  }
  // The text up to `lit`, not consumed; the rest when `lit` is absent.
  std::string_view Peek(std::string_view lit) const {
    const size_t at = s_.find(lit, pos_);
    return s_.substr(pos_, at == std::string_view::npos ? std::string_view::npos : at - pos_);
  }
  void Skip(size_t n) { pos_ = std::min(s_.size(), pos_ + n); }

 private:
  std::string_view s_;
  size_t pos_ = 0;
};

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::string Dump(const ordered_json& j) {
  return j.dump(-1, ' ', false, ordered_json::error_handler_t::replace);
}

// The JSON-schema type of `tool`'s parameter `key` ("" when the schema does not say).
std::string ParamType(const ordered_json& tools, std::string_view tool, std::string_view key) {
  if (!tools.is_array()) return "";
  for (const ordered_json& t : tools) {
    const ordered_json* f = t.is_object() && t.contains("function") ? &t["function"] : &t;
    if (!f->is_object() || f->value("name", "") != tool) continue;
    const auto params = f->find("parameters");
    if (params == f->end() || !params->is_object()) return "";
    const auto props = params->find("properties");
    if (props == params->end() || !props->is_object()) return "";
    const auto p = props->find(std::string(key));
    if (p == props->end() || !p->is_object()) return "";
    const auto type = p->find("type");
    return type != p->end() && type->is_string() ? type->get<std::string>() : "";
  }
  return "";
}

// A value read as JSON when `as_json`, falling back to the string itself.
ordered_json TypedValue(std::string_view v, bool as_json) {
  if (as_json) {
    ordered_json j = ordered_json::parse(v, nullptr, /*allow_exceptions=*/false);
    if (!j.is_discarded()) return j;
  }
  return std::string(v);
}

// <tool_call> was eaten; `inner` is up to </tool_call>: NAME then key/value pairs.
std::optional<std::vector<ToolCall>> ParseGlm(std::string_view inner, const ordered_json& tools) {
  Cursor c(inner);
  const std::string_view name = Trim(c.Peek("<arg_key>"));
  if (name.empty() || name.find('<') != std::string_view::npos) return std::nullopt;
  c.Skip(c.Peek("<arg_key>").size());
  ordered_json args = ordered_json::object();
  while (true) {
    c.SkipSpace();
    if (c.AtEnd()) break;
    if (!c.Eat("<arg_key>")) return std::nullopt;
    const auto key = c.Until("</arg_key>");
    if (!key) return std::nullopt;
    c.SkipSpace();
    if (!c.Eat("<arg_value>")) return std::nullopt;
    const auto value = c.Until("</arg_value>");
    if (!value) return std::nullopt;
    const std::string type = ParamType(tools, name, Trim(*key));
    args[std::string(Trim(*key))] = TypedValue(*value, !type.empty() && type != "string");
  }
  return std::vector<ToolCall>{{std::string(name), Dump(args)}};
}

std::optional<std::vector<ToolCall>> ParseDeepSeekV31(std::string_view inner) {
  Cursor c(inner);
  std::vector<ToolCall> calls;
  while (true) {
    c.SkipSpace();
    if (c.AtEnd()) break;
    if (!c.Eat("<｜tool▁call▁begin｜>")) return std::nullopt;
    const auto name = c.Until("<｜tool▁sep｜>");
    const auto args = name ? c.Until("<｜tool▁call▁end｜>") : std::nullopt;
    if (!args || Trim(*name).empty()) return std::nullopt;
    const ordered_json j = ordered_json::parse(Trim(*args), nullptr, false);
    if (j.is_discarded() || !j.is_object()) return std::nullopt;
    calls.push_back({std::string(Trim(*name)), Dump(j)});
  }
  if (calls.empty()) return std::nullopt;
  return calls;
}

// `name="..."` right after the cursor (which is after the tag's name).
std::optional<std::string_view> Attribute(Cursor& c, std::string_view attr) {
  c.SkipSpace();
  if (!c.Eat(attr) || !c.Eat("=\"")) return std::nullopt;
  return c.Until("\"");
}

std::optional<std::vector<ToolCall>> ParseDeepSeekV32(std::string_view inner) {
  Cursor c(inner);
  std::vector<ToolCall> calls;
  while (true) {
    c.SkipSpace();
    if (c.AtEnd()) break;
    if (!c.Eat("<｜DSML｜invoke")) return std::nullopt;
    const auto name = Attribute(c, "name");
    if (!name || name->empty() || !c.Eat(">")) return std::nullopt;
    ordered_json args = ordered_json::object();
    while (true) {
      c.SkipSpace();
      if (c.Eat("</｜DSML｜invoke>")) break;
      if (!c.Eat("<｜DSML｜parameter")) return std::nullopt;
      const auto key = Attribute(c, "name");
      const auto is_str = key ? Attribute(c, "string") : std::nullopt;
      if (!is_str || !c.Eat(">")) return std::nullopt;
      const auto value = c.Until("</｜DSML｜parameter>");
      if (!value) return std::nullopt;
      if (*is_str == "true") {
        args[std::string(*key)] = std::string(*value);
      } else {
        const ordered_json j = ordered_json::parse(*value, nullptr, false);
        if (j.is_discarded()) return std::nullopt;
        args[std::string(*key)] = j;
      }
    }
    calls.push_back({std::string(*name), Dump(args)});
  }
  if (calls.empty()) return std::nullopt;
  return calls;
}

std::optional<std::vector<ToolCall>> ParseBlock(ToolCallFormat f, std::string_view inner,
                                                const ordered_json& tools) {
  switch (f) {
    case ToolCallFormat::kGlm45:
      return ParseGlm(inner, tools);
    case ToolCallFormat::kDeepSeekV31:
      return ParseDeepSeekV31(inner);
    case ToolCallFormat::kDeepSeekV32:
      return ParseDeepSeekV32(inner);
  }
  return std::nullopt;
}

// The longest suffix of `s` that is a proper prefix of `marker`.
size_t PartialMarkerTail(std::string_view s, std::string_view marker) {
  for (size_t len = std::min(s.size(), marker.size() - 1); len > 0; --len)
    if (s.substr(s.size() - len) == marker.substr(0, len)) return len;
  return 0;
}

}  // namespace

std::optional<ToolCallFormat> ToolCallFormatFromName(std::string_view name) {
  if (name == "glm45" || name == "glm47") return ToolCallFormat::kGlm45;
  if (name == "deepseekv31") return ToolCallFormat::kDeepSeekV31;
  if (name == "deepseekv32") return ToolCallFormat::kDeepSeekV32;
  return std::nullopt;
}

const std::vector<std::string>& ToolCallParserNames() {
  static const std::vector<std::string> kNames = {"glm45", "glm47", "deepseekv31", "deepseekv32"};
  return kNames;
}

ToolCallStreamer::ToolCallStreamer(ToolCallFormat format, ordered_json tools)
    : format_(format), tools_(std::move(tools)) {}

ToolCallPiece ToolCallStreamer::Push(std::string_view text) {
  pending_ += text;
  const Markers m = MarkersOf(format_);
  ToolCallPiece out;
  while (true) {
    const size_t begin = pending_.find(m.begin);
    if (begin == std::string::npos) {
      const size_t hold = PartialMarkerTail(pending_, m.begin);
      out.content += pending_.substr(0, pending_.size() - hold);
      pending_.erase(0, pending_.size() - hold);
      return out;
    }
    out.content += pending_.substr(0, begin);
    pending_.erase(0, begin);
    const size_t end = pending_.find(m.end, m.begin.size());
    if (end == std::string::npos) return out;  // the block is not complete yet
    const std::string_view inner =
        std::string_view(pending_).substr(m.begin.size(), end - m.begin.size());
    const size_t block = end + m.end.size();
    if (auto calls = ParseBlock(format_, inner, tools_)) {
      for (ToolCall& c : *calls) out.calls.push_back(std::move(c));
    } else {
      out.content += pending_.substr(0, block);  // malformed: the model's text, as content
    }
    pending_.erase(0, block);
  }
}

ToolCallPiece ToolCallStreamer::Finish() {
  ToolCallPiece out;
  out.content = std::move(pending_);
  pending_.clear();
  return out;
}

ToolCallPiece ParseToolCalls(ToolCallFormat format, std::string_view text,
                             const ordered_json& tools) {
  ToolCallStreamer s(format, tools);
  ToolCallPiece out = s.Push(text);
  ToolCallPiece rest = s.Finish();
  out.content += rest.content;
  return out;
}

}  // namespace lucid::server
