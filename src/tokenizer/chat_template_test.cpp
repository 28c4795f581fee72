// Chat templates rendered byte for byte like Python jinja2 with transformers' settings
// (goldens from tools/reference/tokenizer/gen_template_goldens.py), plus error reporting.
#include "tokenizer/chat_template.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer_test_util.h"

namespace lucid::tok {
namespace {

using json = nlohmann::ordered_json;
using testing::FixturePath;
using testing::ReadFile;

TEST(ChatTemplateGolden, MatchesJinja2) {
  const json goldens = json::parse(ReadFile(FixturePath("chat_templates/goldens.json")));
  ASSERT_GE(goldens.size(), 100u);
  int checked = 0, real_templates = 0;
  for (const auto& g : goldens) {
    const std::string name = g["template"].get<std::string>();
    const std::string source = g.contains("source")
                                   ? g["source"].get<std::string>()
                                   : ReadFile(FixturePath("chat_templates/" + name));
    const std::string label = name + " " + g.value("conversation", "") + " " + g["context"].dump();
    auto tpl = ChatTemplate::Parse(source);
    if (!tpl.ok()) {
      EXPECT_TRUE(g.contains("error")) << label << ": " << tpl.status().ToString();
      ++checked;
      continue;
    }
    auto out = tpl->Render(g["context"]);
    if (g.contains("error")) {
      EXPECT_FALSE(out.ok()) << label << " rendered " << json(out.ok() ? *out : "").dump()
                             << " but jinja2 raised " << g["error"];
    } else {
      ASSERT_TRUE(out.ok()) << label << ": " << out.status().ToString();
      EXPECT_EQ(*out, g["output"].get<std::string>()) << label;
    }
    ++checked;
    real_templates += !g.contains("source");
  }
  EXPECT_EQ(checked, static_cast<int>(goldens.size()));
  EXPECT_GE(real_templates, 100);
}

TEST(ChatTemplate, ApplyBuildsTransformersContext) {
  auto tpl = ChatTemplate::Parse(
      "{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
      "{% if tools is none %}[no tools]{% endif %}{% if add_generation_prompt %}<assistant>"
      "{% endif %}{{ flavor }}");
  ASSERT_TRUE(tpl.ok()) << tpl.status().ToString();
  ChatRequest r;
  r.messages = json::array({{{"role", "user"}, {"content", "hi"}}});
  r.add_generation_prompt = true;
  r.bos_token = "<s>";
  r.extra = {{"flavor", "!"}};
  auto out = tpl->Apply(r);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(*out, "<s><user>hi[no tools]<assistant>!");
}

TEST(ChatTemplate, ErrorsNameTheLine) {
  auto tpl =
      ChatTemplate::Parse("line1\n{% if true %}\n{{ raise_exception('bad role') }}\n{% endif %}");
  ASSERT_TRUE(tpl.ok());
  auto out = tpl->Render(json::object());
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(out.status().message().find("line 3"), std::string::npos) << out.status().message();
  EXPECT_NE(out.status().message().find("bad role"), std::string::npos);

  auto bad = ChatTemplate::Parse("ok\n\n{% for x in y %}\n{{ x }");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("line 4"), std::string::npos) << bad.status().message();
}

TEST(ChatTemplate, RunawayTemplatesAreBounded) {
  auto tpl = ChatTemplate::Parse(
      "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}");
  ASSERT_TRUE(tpl.ok());
  EXPECT_FALSE(tpl->Render(json::object()).ok());
  auto rec = ChatTemplate::Parse("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  ASSERT_TRUE(rec.ok());
  EXPECT_FALSE(rec->Render(json::object()).ok());
}

// Expressions nest at most 200 deep: thousands of unary minus signs overflowed the interpreter's
// stack (found by template_fuzz); left-deep operator and attribute chains and parentheses are
// bounded the same way. A parse error naming the limit, not a crash; shallow nesting still works.
TEST(ChatTemplate, DeepExpressionsAreAParseError) {
  const std::string minus(3000, '-'), not_chain = [] {
    std::string s;
    for (int i = 0; i < 3000; ++i) s += "not ";
    return s;
  }();
  std::string chain = "x", parens = "(1)", attrs = "x";
  for (int i = 0; i < 3000; ++i) chain += "-x", attrs += ".a";
  for (int i = 0; i < 300; ++i) parens = "(" + parens + ")";
  for (const std::string& src :
       {"{{ bos_token }}{% if mess" + minus + "1 %}{% endif %}", "{{ " + chain + " }}",
        "{{ " + not_chain + "x }}", "{{ " + parens + " }}", "{{ " + attrs + " }}",
        "{% set y = " + chain + " %}"}) {
    auto tpl = ChatTemplate::Parse(src);
    ASSERT_FALSE(tpl.ok()) << src.substr(0, 60);
    EXPECT_NE(tpl.status().message().find("nests deeper than 200"), std::string::npos)
        << tpl.status().message();
  }
  std::string ok = "1";
  for (int i = 0; i < 50; ++i) ok = "(" + ok + " - -1)";
  auto tpl = ChatTemplate::Parse("{{ " + ok + " }}");
  ASSERT_TRUE(tpl.ok()) << tpl.status().ToString();
  auto out = tpl->Render(json::object());
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(*out, "51");
}

// Jinja's integers are Python's, unbounded; lucid's are 64-bit. A result out of range is a clear
// render error (it was undefined behaviour, found by template_fuzz), and in-range arithmetic near
// the limits still follows Python (floor division and modulo signs).
TEST(ChatTemplate, IntegerOverflowIsARenderError) {
  for (const char* src :
       {"{{ 66 * 9223372036854775807 }}", "{{ 9223372036854775807 + 1 }}",
        "{{ -9223372036854775807 - 2 }}", "{{ 3 ** 63 }}", "{{ (-9223372036854775807 - 1) // -1 }}",
        "{{ -(-9223372036854775807 - 1) }}", "{{ [9223372036854775807, 1] | sum }}",
        "{{ 'ab' * 9223372036854775807 }}"}) {
    auto tpl = ChatTemplate::Parse(src);
    ASSERT_TRUE(tpl.ok()) << src;
    auto out = tpl->Render(json::object());
    ASSERT_FALSE(out.ok()) << src << " rendered " << *out;
    EXPECT_TRUE(out.status().message().find("overflow") != std::string::npos ||
                out.status().message().find("too large") != std::string::npos)
        << src << ": " << out.status().message();
  }
  // Python: -7 // 2 == -4, -7 % 2 == 1, 7 % -2 == -1, (-2**63) % -1 == 0; 2**63 - 1 and -2**63 fit.
  auto ok = ChatTemplate::Parse(
      "{{ -7 // 2 }} {{ -7 % 2 }} {{ 7 % -2 }} {{ (-9223372036854775807 - 1) % -1 }} "
      "{{ 4611686018427387903 * 2 + 1 + -4611686018427387904 * 2 }}");
  ASSERT_TRUE(ok.ok());
  auto out = ok->Render(json::object());
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(*out, "-4 1 -1 0 -1");
}

}  // namespace
}  // namespace lucid::tok
