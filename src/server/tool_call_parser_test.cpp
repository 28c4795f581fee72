// Tool-call and reasoning parsers on recorded model outputs
// (tests/fixtures/tool_calls/recorded.json: rendered by jinja2 through the models' own chat
// templates; see tools/reference/tokenizer/gen_tool_call_fixtures.py), whole and split at every
// byte.
#include "server/tool_call_parser.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "server/reasoning_parser.h"

namespace lucid::server {
namespace {

using ordered_json = nlohmann::ordered_json;

ordered_json Recorded() {
  std::ifstream f(std::string(LUCID_SOURCE_DIR) + "/tests/fixtures/tool_calls/recorded.json");
  std::stringstream ss;
  ss << f.rdbuf();
  return ordered_json::parse(ss.str());
}

std::string Trim(std::string s) {
  const size_t b = s.find_first_not_of(" \n\t");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \n\t") - b + 1);
}

struct Result {
  std::string reasoning, content;
  std::vector<ToolCall> calls;
  int argument_deltas = 0;  // deltas carrying a piece of some call's arguments
};

// Checks the order of a stream's call deltas: a call's first delta names it (index the next
// unused one, no arguments), then only argument pieces follow for it.
void CheckDeltaOrder(const std::vector<ToolCallDelta>& ds, size_t* calls_seen,
                     const std::string& where) {
  for (const ToolCallDelta& d : ds) {
    if (d.index < 0) continue;
    if (!d.name.empty()) {
      EXPECT_EQ(static_cast<size_t>(d.index), *calls_seen) << where;
      EXPECT_TRUE(d.arguments.empty()) << where;
      ++*calls_seen;
    } else {
      EXPECT_LT(static_cast<size_t>(d.index), *calls_seen) << where << ": arguments before name";
    }
  }
}

// The output fed in pieces split at `cuts` through both parsers, as the server chains them.
Result Stream(ToolCallFormat f, const ordered_json& tools, bool in_reasoning,
              const std::string& text, const std::vector<size_t>& cuts) {
  ReasoningStreamer reasoning(in_reasoning);
  ToolCallStreamer calls(f, tools);
  Result r;
  ToolCallPiece assembled;
  size_t calls_seen = 0;
  auto add = [&](const std::vector<ToolCallDelta>& ds) {
    CheckDeltaOrder(ds, &calls_seen, text);
    for (const ToolCallDelta& d : ds) r.argument_deltas += d.index >= 0 && !d.arguments.empty();
    AssembleToolCalls(ds, &assembled);
  };
  auto take = [&](const ReasoningPiece& p) {
    r.reasoning += p.reasoning;
    add(calls.Push(p.content));
  };
  size_t at = 0;
  for (size_t cut : cuts) {
    take(reasoning.Push(text.substr(at, cut - at)));
    at = cut;
  }
  take(reasoning.Push(text.substr(at)));
  take(reasoning.Finish());
  add(calls.Finish());
  r.content = assembled.content;
  r.calls = assembled.calls;
  return r;
}

void ExpectCase(const ordered_json& c, const Result& r, const std::string& where) {
  ASSERT_EQ(r.calls.size(), c["calls"].size()) << where;
  for (size_t i = 0; i < r.calls.size(); ++i) {
    EXPECT_EQ(r.calls[i].name, c["calls"][i]["name"]) << where;
    const ordered_json args = ordered_json::parse(r.calls[i].arguments, nullptr, false);
    EXPECT_EQ(args, c["calls"][i]["arguments"]) << where << ": " << r.calls[i].arguments;
  }
  EXPECT_EQ(Trim(r.content), c["content"]) << where;
  EXPECT_EQ(Trim(r.reasoning), c.value("reasoning", "")) << where;
}

TEST(ToolCallParser, RecordedOutputsParseBackToTheirCallsWholeAndAtEverySplit) {
  const ordered_json rec = Recorded();
  ASSERT_GE(rec["cases"].size(), 24u);
  for (const ordered_json& c : rec["cases"]) {
    const auto f = ToolCallFormatFromName(c["format"].get<std::string>());
    ASSERT_TRUE(f) << c["format"];
    const std::string text = c["output"];
    const bool in_reasoning = PromptOpensReasoning(c.value("prompt_tail", ""));
    const std::string name = c["format"].get<std::string>() + "/" + c["name"].get<std::string>() +
                             " " + c["context"].dump() + " " + c["content"].dump();
    // Whole, through the one-shot functions.
    const ReasoningPiece split = SplitReasoning(text, in_reasoning);
    const ToolCallPiece whole = ParseToolCalls(*f, split.content, rec["tools"]);
    ExpectCase(c, {split.reasoning, whole.content, whole.calls}, name + " whole");
    for (size_t cut = 0; cut <= text.size(); ++cut) {
      const Result r = Stream(*f, rec["tools"], in_reasoning, text, {cut});
      const std::string where = name + " cut at " + std::to_string(cut);
      ExpectCase(c, r, where);
      // The streamed pieces make exactly the arguments the whole parse gives.
      for (size_t i = 0; i < r.calls.size() && i < whole.calls.size(); ++i)
        EXPECT_EQ(r.calls[i].arguments, whole.calls[i].arguments) << where;
    }
    // Fed one byte at a time, each call's arguments come in more than one piece.
    std::vector<size_t> every;
    for (size_t k = 1; k < text.size(); ++k) every.push_back(k);
    const Result bytes = Stream(*f, rec["tools"], in_reasoning, text, every);
    ExpectCase(c, bytes, name + " byte by byte");
    EXPECT_GT(bytes.argument_deltas, static_cast<int>(c["calls"].size())) << name;
  }
}

// Each call's arguments as the stream had sent them after each prefix of `text` (fed byte by byte).
std::vector<std::string> ArgumentsAfterEachByte(ToolCallFormat f, const ordered_json& tools,
                                                const std::string& text) {
  ToolCallStreamer s(f, tools);
  ToolCallPiece p;
  std::vector<std::string> seen;
  for (size_t k = 0; k < text.size(); ++k) {
    AssembleToolCalls(s.Push(text.substr(k, 1)), &p);
    seen.push_back(p.calls.empty() ? "" : p.calls[0].arguments);
  }
  AssembleToolCalls(s.Finish(), &p);
  seen.push_back(p.calls.empty() ? "" : p.calls[0].arguments);
  return seen;
}

TEST(ToolCallStreamer, StringValuesStreamAsTheyArrive) {
  const ordered_json tools = ordered_json::parse(R"([{"type": "function", "function": {
      "name": "write", "parameters": {"type": "object", "properties": {
        "path": {"type": "string"}, "n": {"type": "integer"}}}}}])");
  const struct {
    ToolCallFormat f;
    std::string text, value_prefix;  // the arguments once the value's first bytes arrived
  } cases[] = {
      {ToolCallFormat::kGlm45,
       "<tool_call>write<arg_key>n</arg_key><arg_value>7</arg_value><arg_key>path</arg_key>"
       "<arg_value>a/\"b\"\n</arg_value></tool_call>",
       R"({"n":7,"path":"a/\")"},
      {ToolCallFormat::kDeepSeekV32,
       "<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"write\">\n<｜DSML｜parameter name=\"n\" "
       "string=\"false\">7</｜DSML｜parameter>\n<｜DSML｜parameter name=\"path\" string=\"true\">"
       "a/\"b\"\n</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜function_calls>",
       R"({"n":7,"path":"a/\")"},
      {ToolCallFormat::kDeepSeekV31,
       "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>write<｜tool▁sep｜> {\"n\": 7, \"path\": "
       "\"a/\\\"b\"} <｜tool▁call▁end｜><｜tool▁calls▁end｜>",
       R"({"n": 7, "path": "a/\")"},
  };
  for (const auto& c : cases) {
    const std::vector<std::string> seen = ArgumentsAfterEachByte(c.f, tools, c.text);
    const std::string& final_args = seen.back();
    EXPECT_EQ(ordered_json::parse(final_args)["path"].get<std::string>().substr(0, 3), "a/\"")
        << c.text;
    // Every state is a prefix of the final arguments, and the value's start shows up before
    // the value is complete.
    bool saw_prefix = false;
    for (const std::string& s : seen) {
      EXPECT_EQ(final_args.compare(0, s.size(), s), 0) << s << " vs " << final_args;
      saw_prefix |= s == c.value_prefix;
    }
    EXPECT_TRUE(saw_prefix) << c.text;
  }
}

TEST(ToolCallStreamer, BegunCallsAreClosedWhenTheBlockBreaksOrTheOutputEnds) {
  const ordered_json tools = ordered_json::array();
  const struct {
    ToolCallFormat f;
    std::string text, arguments, content;
  } cases[] = {
      // Cut by max_tokens inside a string value: the call is closed where it stands.
      {ToolCallFormat::kGlm45, "a<tool_call>f<arg_key>k</arg_key><arg_value>va", R"({"k":"va"})",
       "a"},
      {ToolCallFormat::kGlm45, "<tool_call>f<arg_key>k</arg_key><arg_value>v</arg_value><arg_",
       R"({"k":"v"})", ""},
      // Malformed after the name went out: closed, the rest of the block dropped.
      {ToolCallFormat::kGlm45, "<tool_call>f<arg_key>k</arg_value></tool_call>b", "{}", "b"},
      {ToolCallFormat::kDeepSeekV32,
       "<｜DSML｜function_calls><｜DSML｜invoke name=\"f\"><｜DSML｜parameter name=\"k\" "
       "string=\"false\">{bad</｜DSML｜parameter></｜DSML｜invoke></｜DSML｜function_calls>",
       "{}", ""},
  };
  for (const auto& c : cases) {
    ToolCallStreamer s(c.f, tools);
    ToolCallPiece p;
    for (size_t k = 0; k < c.text.size(); ++k) AssembleToolCalls(s.Push(c.text.substr(k, 1)), &p);
    AssembleToolCalls(s.Finish(), &p);
    ASSERT_EQ(p.calls.size(), 1u) << c.text;
    EXPECT_EQ(p.calls[0].name, "f");
    EXPECT_EQ(p.calls[0].arguments, c.arguments) << c.text;
    EXPECT_EQ(p.content, c.content) << c.text;
  }
}

bool ValidUtf8(const std::string& s) {
  try {
    (void)ordered_json(s).dump();  // the strict error handler throws on invalid UTF-8
    return true;
  } catch (const ordered_json::exception&) {
    return false;
  }
}

TEST(ToolCallStreamer, MultiByteCharactersAreNotSplit) {
  // A value whose UTF-8 bytes arrive one at a time: no piece ends inside a character.
  const std::string text =
      "<tool_call>f<arg_key>k</arg_key><arg_value>Zü€😀</arg_value></tool_call>";
  ToolCallStreamer s(ToolCallFormat::kGlm45, ordered_json::array());
  std::string args;
  for (size_t k = 0; k <= text.size(); ++k) {
    const auto ds = k < text.size() ? s.Push(text.substr(k, 1)) : s.Finish();
    for (const ToolCallDelta& d : ds) {
      EXPECT_TRUE(ValidUtf8(d.arguments)) << k;
      args += d.arguments;
    }
  }
  EXPECT_EQ(args, R"({"k":"Zü€😀"})");
}

TEST(ToolCallParser, ValuesAreTypedByTheToolSchema) {
  const ordered_json tools = ordered_json::parse(R"([{"type": "function", "function": {
      "name": "f", "parameters": {"type": "object", "properties": {
        "s": {"type": "string"}, "n": {"type": "integer"}, "o": {"type": "object"}}}}}])");
  const ToolCallPiece p = ParseToolCalls(
      ToolCallFormat::kGlm45,
      "<tool_call>f<arg_key>s</arg_key><arg_value>42</arg_value><arg_key>n</arg_key>"
      "<arg_value>42</arg_value><arg_key>o</arg_key><arg_value>{\"a\": [1]}</arg_value>"
      "<arg_key>x</arg_key><arg_value>7</arg_value><arg_key>n2</arg_key><arg_value>7</arg_value>"
      "</tool_call>",
      tools);
  ASSERT_EQ(p.calls.size(), 1u);
  // A string parameter stays a string; an unknown one too; JSON types are read as JSON.
  EXPECT_EQ(ordered_json::parse(p.calls[0].arguments),
            ordered_json::parse(R"({"s": "42", "n": 42, "o": {"a": [1]}, "x": "7", "n2": "7"})"));
  // Not JSON where the schema wants a number: kept as the string.
  const ToolCallPiece q = ParseToolCalls(
      ToolCallFormat::kGlm45,
      "<tool_call>f<arg_key>n</arg_key><arg_value>many</arg_value></tool_call>", tools);
  EXPECT_EQ(ordered_json::parse(q.calls[0].arguments), ordered_json::parse(R"({"n": "many"})"));
}

TEST(ToolCallParser, MalformedCallsAreKeptAsContent) {
  const ordered_json tools = ordered_json::array();
  const struct {
    ToolCallFormat f;
    std::string text;
  } cases[] = {
      {ToolCallFormat::kGlm45, "a<tool_call>f<arg_key>k</arg_value></tool_call>b"},
      {ToolCallFormat::kGlm45,
       "a<tool_call><arg_key>k</arg_key><arg_value>v</arg_value></tool_call>"},
      {ToolCallFormat::kGlm45, "a<tool_call>f<arg_key>k</arg_key><arg_value>v"},  // unterminated
      {ToolCallFormat::kDeepSeekV31,
       "x<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{not json<｜tool▁call▁end｜>"
       "<｜tool▁calls▁end｜>"},
      {ToolCallFormat::kDeepSeekV31, "x<｜tool▁calls▁begin｜>junk<｜tool▁calls▁end｜>"},
      {ToolCallFormat::kDeepSeekV32,
       "<｜DSML｜function_calls><｜DSML｜invoke name=\"f\"><｜DSML｜parameter name=\"k\">v"
       "</｜DSML｜parameter></｜DSML｜invoke></｜DSML｜function_calls>"},
      {ToolCallFormat::kDeepSeekV32,
       "<｜DSML｜function_calls><｜DSML｜invoke name=\"f\"><｜DSML｜parameter name=\"k\" "
       "string=\"false\">{bad</｜DSML｜parameter></｜DSML｜invoke></｜DSML｜function_calls>"},
  };
  for (const auto& c : cases) {
    const ToolCallPiece p = ParseToolCalls(c.f, c.text, tools);
    EXPECT_TRUE(p.calls.empty()) << c.text;
    EXPECT_EQ(p.content, c.text);
  }
  // A malformed block does not hide a good one after it.
  const ToolCallPiece p = ParseToolCalls(
      ToolCallFormat::kGlm45, "<tool_call>f<x></tool_call><tool_call>g</tool_call>", tools);
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].name, "g");
  EXPECT_EQ(p.calls[0].arguments, "{}");
  EXPECT_EQ(p.content, "<tool_call>f<x></tool_call>");
}

TEST(ToolCallParser, Names) {
  EXPECT_EQ(ToolCallFormatFromName("glm47"), ToolCallFormat::kGlm45);
  EXPECT_EQ(ToolCallFormatFromName("deepseekv32"), ToolCallFormat::kDeepSeekV32);
  EXPECT_FALSE(ToolCallFormatFromName("hermes"));
  for (const std::string& n : ToolCallParserNames()) EXPECT_TRUE(ToolCallFormatFromName(n)) << n;
}

TEST(ReasoningParser, ThinkBlocksAtEverySplit) {
  const struct {
    std::string text;
    bool in_reasoning;
    std::string reasoning, content;
  } cases[] = {
      {"<think>plan</think>answer", false, "plan", "answer"},
      {"\n<think></think>\nanswer", false, "", "\nanswer"},
      {"plan</think>\n\nanswer", true, "plan", "\n\nanswer"},  // the prompt opened it
      {"no think here", false, "", "no think here"},
      {"still thinking", true, "still thinking", ""},
      {"<thin", false, "", "<thin"},
      {"<think>a</thi", false, "a</thi", ""},
      {"x <think>y</think>", false, "", "x <think>y</think>"},
  };
  for (const auto& c : cases) {
    for (size_t cut = 0; cut <= c.text.size(); ++cut) {
      ReasoningStreamer s(c.in_reasoning);
      ReasoningPiece a = s.Push(c.text.substr(0, cut));
      ReasoningPiece b = s.Push(c.text.substr(cut));
      ReasoningPiece e = s.Finish();
      EXPECT_EQ(a.reasoning + b.reasoning + e.reasoning, c.reasoning) << c.text << " @" << cut;
      EXPECT_EQ(a.content + b.content + e.content, c.content) << c.text << " @" << cut;
    }
  }
  EXPECT_TRUE(PromptOpensReasoning("<｜Assistant｜><think>\n"));
  EXPECT_FALSE(PromptOpensReasoning("<｜Assistant｜><think></think>"));
}

}  // namespace
}  // namespace lucid::server
