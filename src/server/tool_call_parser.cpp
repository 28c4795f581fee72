#include "server/tool_call_parser.h"

#include <algorithm>
#include <cctype>

namespace lucid::server {
namespace {

using ordered_json = nlohmann::ordered_json;
constexpr size_t npos = std::string_view::npos;

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

// Whether a literal is next: it is (and was eaten), the text ends inside it, or it is not.
enum class Match { kYes, kMore, kNo };

// A cursor over a block's inner text.
class Cursor {
 public:
  explicit Cursor(std::string_view s) : s_(s) {}
  void SkipSpace() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  bool Eat(std::string_view lit) { return Expect(lit) == Match::kYes; }
  Match Expect(std::string_view lit) {
    const std::string_view rest = Rest();
    if (rest.substr(0, lit.size()) == lit) {
      pos_ += lit.size();
      return Match::kYes;
    }
    return rest.size() < lit.size() && lit.substr(0, rest.size()) == rest ? Match::kMore
                                                                          : Match::kNo;
  }
  bool AtEnd() const { return pos_ >= s_.size(); }
  std::string_view Rest() const { return s_.substr(pos_); }
  // The text up to `lit` (consumed with it); nullopt when `lit` does not follow.
  std::optional<std::string_view> Until(std::string_view lit) {
    const size_t at = s_.find(lit, pos_);
    if (at == npos) return std::nullopt;
    std::string_view out = s_.substr(pos_, at - pos_);
    pos_ = at + lit.size();
    return out;
  }

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

// The longest suffix of `s` that is a proper prefix of `marker`.
size_t PartialMarkerTail(std::string_view s, std::string_view marker) {
  for (size_t len = std::min(s.size(), marker.size() - 1); len > 0; --len)
    if (s.substr(s.size() - len) == marker.substr(0, len)) return len;
  return 0;
}

// The bytes at the end of `s` that start a UTF-8 sequence it does not finish.
size_t IncompleteUtf8Tail(std::string_view s) {
  for (size_t back = 1; back <= std::min<size_t>(4, s.size()); ++back) {
    const auto b = static_cast<unsigned char>(s[s.size() - back]);
    if ((b & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    const size_t need = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 1;
    return need > back ? back : 0;
  }
  return 0;
}

// The text `s` with a possible start of `marker` and an unfinished UTF-8 sequence held back.
std::string_view Settled(std::string_view s, std::string_view marker) {
  s.remove_suffix(PartialMarkerTail(s, marker));
  s.remove_suffix(IncompleteUtf8Tail(s));
  return s;
}

// The JSON text of a string value still being written, without its closing quote: a prefix of
// the JSON text of the whole value.
std::string OpenString(std::string_view so_far, std::string_view end_marker) {
  std::string d = Dump(ordered_json(std::string(Settled(so_far, end_marker))));
  d.pop_back();
  return d;
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

// What a block's text so far says about its calls. For a well-formed block, each call's
// `arguments` is a prefix of its final arguments (the final ones once the block is complete).
struct PartialCall {
  std::string name;
  std::string arguments;
  std::string closer;  // closes `arguments` as they stand ("" once complete)
};
struct PartialBlock {
  std::vector<PartialCall> calls;
  bool malformed = false;
};

// Stops a parse where the text ran out (`m` kMore) or does not parse (kNo); running out is
// malformed too once the block is complete.
PartialBlock Stop(PartialBlock b, Match m, bool complete) {
  if (m == Match::kNo || complete) b.malformed = true;
  return b;
}

// <tool_call> was eaten; `inner` is the text after it (all of it up to </tool_call> when
// `complete`): NAME then key/value pairs.
PartialBlock ParseGlm(std::string_view inner, bool complete, const ordered_json& tools) {
  PartialBlock b;
  const size_t at = inner.find("<arg_key>");
  if (at == npos && !complete) return b;  // the name may go on
  const std::string_view name = Trim(inner.substr(0, at));
  if (name.empty() || name.find('<') != npos) return Stop(std::move(b), Match::kNo, complete);
  b.calls.push_back({std::string(name), "{", "}"});
  PartialCall& call = b.calls.back();
  Cursor c(at == npos ? std::string_view() : inner.substr(at));
  const char* sep = "";
  while (true) {
    c.SkipSpace();
    if (c.AtEnd()) {
      if (complete) call = {call.name, call.arguments + "}", ""};
      return b;
    }
    Match m = c.Expect("<arg_key>");
    if (m != Match::kYes) return Stop(std::move(b), m, complete);
    const auto key = c.Until("</arg_key>");
    if (!key) return Stop(std::move(b), Match::kMore, complete);
    c.SkipSpace();
    if ((m = c.Expect("<arg_value>")) != Match::kYes) return Stop(std::move(b), m, complete);
    const std::string k(Trim(*key));
    const std::string type = ParamType(tools, name, k);
    const bool as_json = !type.empty() && type != "string";
    const std::string head = sep + Dump(ordered_json(k)) + ":";
    const auto value = c.Until("</arg_value>");
    if (!value) {
      if (!as_json && !complete) {
        call.arguments += head + OpenString(c.Rest(), "</arg_value>");
        call.closer = "\"}";
      }
      return Stop(std::move(b), Match::kMore, complete);
    }
    call.arguments += head + Dump(TypedValue(*value, as_json));
    sep = ",";
  }
}

PartialBlock ParseDeepSeekV31(std::string_view inner, bool complete) {
  static constexpr std::string_view kEnd = "<｜tool▁call▁end｜>";
  PartialBlock b;
  Cursor c(inner);
  while (true) {
    c.SkipSpace();
    if (c.AtEnd()) return b.calls.empty() ? Stop(std::move(b), Match::kMore, complete) : b;
    const Match m = c.Expect("<｜tool▁call▁begin｜>");
    if (m != Match::kYes) return Stop(std::move(b), m, complete);
    const auto name = c.Until("<｜tool▁sep｜>");
    if (!name) return Stop(std::move(b), Match::kMore, complete);
    if (Trim(*name).empty()) return Stop(std::move(b), Match::kNo, complete);
    b.calls.push_back({std::string(Trim(*name)), "", ""});
    const auto args = c.Until(kEnd);
    if (!args) {
      // The JSON text so far, with the whitespace it may end in held back (the final text is
      // trimmed).
      if (!complete) b.calls.back().arguments = std::string(Trim(Settled(c.Rest(), kEnd)));
      return Stop(std::move(b), Match::kMore, complete);
    }
    const std::string_view text = Trim(*args);
    const ordered_json j = ordered_json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return Stop(std::move(b), Match::kNo, complete);
    b.calls.back().arguments = std::string(text);
  }
}

// `name="..."` at the cursor (after whitespace).
std::optional<std::string_view> Attribute(Cursor& c, std::string_view attr) {
  c.SkipSpace();
  if (!c.Eat(attr) || !c.Eat("=\"")) return std::nullopt;
  return c.Until("\"");
}

// An invoke's parameters up to </｜DSML｜invoke>, into `call`; false when the parse stops there
// (`b` says how).
bool ParseDsmlParams(Cursor& c, bool complete, PartialCall* call, PartialBlock* b) {
  static constexpr std::string_view kEnd = "</｜DSML｜parameter>";
  const char* sep = "";
  while (true) {
    c.SkipSpace();
    const Match end = c.Expect("</｜DSML｜invoke>");
    if (end == Match::kYes) {
      *call = {call->name, call->arguments + "}", ""};
      return true;
    }
    const Match param = c.Expect("<｜DSML｜parameter");
    if (param != Match::kYes) {
      const bool more = end == Match::kMore || param == Match::kMore;
      *b = Stop(std::move(*b), more ? Match::kMore : Match::kNo, complete);
      return false;
    }
    const auto tag = c.Until(">");
    Cursor t(tag.value_or(""));
    const auto key = tag ? Attribute(t, "name") : std::nullopt;
    const auto is_str = key ? Attribute(t, "string") : std::nullopt;
    t.SkipSpace();
    if (!is_str || !t.AtEnd()) {
      *b = Stop(std::move(*b), tag ? Match::kNo : Match::kMore, complete);
      return false;
    }
    const bool string = *is_str == "true";
    const std::string head = sep + Dump(ordered_json(std::string(*key))) + ":";
    const auto value = c.Until(kEnd);
    if (!value) {
      if (string && !complete) {
        call->arguments += head + OpenString(c.Rest(), kEnd);
        call->closer = "\"}";
      }
      *b = Stop(std::move(*b), Match::kMore, complete);
      return false;
    }
    const ordered_json j =
        string ? ordered_json(std::string(*value)) : ordered_json::parse(*value, nullptr, false);
    if (j.is_discarded()) {
      *b = Stop(std::move(*b), Match::kNo, complete);
      return false;
    }
    call->arguments += head + Dump(j);
    sep = ",";
  }
}

PartialBlock ParseDeepSeekV32(std::string_view inner, bool complete) {
  PartialBlock b;
  Cursor c(inner);
  while (true) {
    c.SkipSpace();
    if (c.AtEnd()) return b.calls.empty() ? Stop(std::move(b), Match::kMore, complete) : b;
    const Match m = c.Expect("<｜DSML｜invoke");
    if (m != Match::kYes) return Stop(std::move(b), m, complete);
    const auto tag = c.Until(">");
    if (!tag) return Stop(std::move(b), Match::kMore, complete);
    Cursor t(*tag);
    const auto name = Attribute(t, "name");
    t.SkipSpace();
    if (!name || name->empty() || !t.AtEnd()) return Stop(std::move(b), Match::kNo, complete);
    b.calls.push_back({std::string(*name), "{", "}"});
    PartialCall call = b.calls.back();
    const bool closed = ParseDsmlParams(c, complete, &call, &b);
    b.calls.back() = std::move(call);
    if (!closed) return b;
  }
}

PartialBlock ParseBlock(ToolCallFormat f, std::string_view inner, bool complete,
                        const ordered_json& tools) {
  switch (f) {
    case ToolCallFormat::kGlm45:
      return ParseGlm(inner, complete, tools);
    case ToolCallFormat::kDeepSeekV31:
      return ParseDeepSeekV31(inner, complete);
    case ToolCallFormat::kDeepSeekV32:
      return ParseDeepSeekV32(inner, complete);
  }
  return {{}, true};
}

void AddContent(std::string_view text, std::vector<ToolCallDelta>* out) {
  if (text.empty()) return;
  if (!out->empty() && out->back().index < 0) {
    out->back().content += text;
    return;
  }
  ToolCallDelta d;
  d.content = std::string(text);
  out->push_back(std::move(d));
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

ToolCallStreamer::ToolCallStreamer(ToolCallFormat format, ordered_json tools, bool incremental)
    : format_(format), tools_(std::move(tools)), incremental_(incremental) {}

void ToolCallStreamer::Advance(std::string_view inner, bool complete,
                               std::vector<ToolCallDelta>* out) {
  const PartialBlock b = ParseBlock(format_, inner, complete, tools_);
  if (b.malformed) return;
  for (size_t i = 0; i < b.calls.size(); ++i) {
    const PartialCall& c = b.calls[i];
    const int index = next_index_ + static_cast<int>(i);
    if (i == sent_.size()) {
      sent_.push_back({});
      out->push_back({index, "", c.name, ""});
    }
    Sent& s = sent_[i];
    if (c.arguments.size() > s.arguments.size() &&
        c.arguments.compare(0, s.arguments.size(), s.arguments) == 0) {
      out->push_back({index, "", "", c.arguments.substr(s.arguments.size())});
      s.arguments = c.arguments;
    }
    s.closer = c.closer;
  }
}

void ToolCallStreamer::CloseBegun(std::vector<ToolCallDelta>* out) {
  for (size_t i = 0; i < sent_.size(); ++i)
    if (!sent_[i].closer.empty())
      out->push_back({next_index_ + static_cast<int>(i), "", "", sent_[i].closer});
}

std::vector<ToolCallDelta> ToolCallStreamer::Push(std::string_view text) {
  pending_ += text;
  const Markers m = MarkersOf(format_);
  std::vector<ToolCallDelta> out;
  while (true) {
    if (!in_block_) {
      const size_t begin = pending_.find(m.begin);
      const size_t keep =
          begin == npos ? PartialMarkerTail(pending_, m.begin) : pending_.size() - begin;
      AddContent(std::string_view(pending_).substr(0, pending_.size() - keep), &out);
      pending_.erase(0, pending_.size() - keep);
      if (begin == npos) return out;
      in_block_ = true;
    }
    const size_t end = pending_.find(m.end, m.begin.size());
    const std::string_view inner = std::string_view(pending_).substr(
        m.begin.size(), end == npos ? npos : end - m.begin.size());
    if (end == npos) {
      if (incremental_) Advance(inner, /*complete=*/false, &out);
      return out;
    }
    const size_t block = end + m.end.size();
    if (!ParseBlock(format_, inner, /*complete=*/true, tools_).malformed)
      Advance(inner, /*complete=*/true, &out);
    else if (sent_.empty())
      AddContent(std::string_view(pending_).substr(0, block), &out);  // the model's text
    else
      CloseBegun(&out);
    next_index_ += static_cast<int>(sent_.size());
    sent_.clear();
    pending_.erase(0, block);
    in_block_ = false;
  }
}

std::vector<ToolCallDelta> ToolCallStreamer::Finish() {
  std::vector<ToolCallDelta> out;
  if (in_block_ && !sent_.empty())
    CloseBegun(&out);
  else
    AddContent(pending_, &out);
  next_index_ += static_cast<int>(sent_.size());
  sent_.clear();
  pending_.clear();
  in_block_ = false;
  return out;
}

void AssembleToolCalls(const std::vector<ToolCallDelta>& deltas, ToolCallPiece* out) {
  for (const ToolCallDelta& d : deltas) {
    if (d.index < 0) {
      out->content += d.content;
      continue;
    }
    if (out->calls.size() <= static_cast<size_t>(d.index)) out->calls.resize(d.index + 1);
    if (!d.name.empty()) out->calls[d.index].name = d.name;
    out->calls[d.index].arguments += d.arguments;
  }
}

ToolCallPiece ParseToolCalls(ToolCallFormat format, std::string_view text,
                             const ordered_json& tools) {
  ToolCallStreamer s(format, tools, /*incremental=*/false);
  ToolCallPiece out;
  AssembleToolCalls(s.Push(text), &out);
  AssembleToolCalls(s.Finish(), &out);
  return out;
}

}  // namespace lucid::server
