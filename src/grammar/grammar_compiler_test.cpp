// Tests of GrammarCompiler over two byte-level vocabularies: the tiny models' 256-byte one (the
// e2e server's) and Qwen2's 151k-token one (tests/fixtures/tokenizers/qwen2). The expectations
// are JSON Schema / regex / EBNF semantics, written by hand: a valid instance is walked token by
// token (each token must survive the mask and be accepted, then EOS ends it); an invalid one must
// be refused at some token.
#include "grammar/grammar_compiler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "server/byte_tokenizer_for_test.h"
#include "tokenizer/tokenizer.h"

namespace lucid::grammar {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

struct Vocab {
  std::unique_ptr<tok::Tokenizer> tokenizer;
  std::unique_ptr<GrammarCompiler> compiler;
  int32_t eos = 0;
};

Vocab MakeVocab(const std::string& json, int64_t vocab_size, int32_t eos) {
  Vocab v;
  auto t = tok::Tokenizer::FromJsonString(json);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  v.tokenizer = std::move(*t);
  auto spec = VocabFromTokenizer(json, *v.tokenizer, vocab_size, {eos});
  EXPECT_TRUE(spec.ok()) << spec.status().ToString();
  auto c = GrammarCompiler::Create(*spec);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  v.compiler = std::move(*c);
  v.eos = eos;
  return v;
}

Vocab& ByteVocab() {  // id 1 is the tiny models' EOS
  static Vocab v = MakeVocab(server::ByteLevelTokenizerJson(), 256, 1);
  return v;
}

Vocab& Qwen2Vocab() {  // "<|endoftext|>" is 151643; the model row is padded to 151936
  static Vocab v = MakeVocab(
      ReadFile(std::string(LUCID_SOURCE_DIR) + "/tests/fixtures/tokenizers/qwen2/tokenizer.json"),
      151936, 151643);
  return v;
}

// Walks `text` (tokenized by the vocabulary's tokenizer) through a fresh matcher: true when every
// token is allowed by the mask and accepted and EOS then terminates the output.
bool Walks(Vocab& v, const GrammarSpec& spec, const std::string& text) {
  auto c = v.compiler->Compile(spec);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  if (!c.ok()) return false;
  std::unique_ptr<TokenMatcher> m = (*c)->NewMatcher();
  auto ids = v.tokenizer->Encode(text, /*add_special_tokens=*/false);
  EXPECT_TRUE(ids.ok());
  std::vector<float> row(static_cast<size_t>(v.compiler->vocab_size()));
  std::vector<int32_t> all = *ids;
  all.push_back(v.eos);
  for (int32_t id : all) {
    std::fill(row.begin(), row.end(), 0.0f);
    m->MaskLogits(row);
    if (std::isinf(row[id])) return false;
    EXPECT_TRUE(m->Accept(id)) << "the mask allowed token " << id << " but Accept refused it";
  }
  return m->IsTerminated();
}

const GrammarSpec kPerson{GrammarKind::kJsonSchema, R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "maxLength": 8},
    "age": {"type": "integer", "minimum": 0, "maximum": 150},
    "role": {"enum": ["admin", "user"]},
    "tags": {"type": "array", "items": {"type": "boolean"}, "maxItems": 2}
  },
  "required": ["name", "role"]
})"};

TEST(GrammarCompiler, JsonSchemaAcceptsValidInstancesOnBothVocabularies) {
  for (Vocab* v : {&ByteVocab(), &Qwen2Vocab()}) {
    EXPECT_TRUE(Walks(*v, kPerson, R"({"name":"ann","role":"user"})"));
    EXPECT_TRUE(Walks(*v, kPerson, R"({"name":"bo","age":42,"role":"admin","tags":[true,false]})"));
  }
}

TEST(GrammarCompiler, JsonSchemaRefusesInvalidInstances) {
  for (Vocab* v : {&ByteVocab(), &Qwen2Vocab()}) {
    EXPECT_FALSE(Walks(*v, kPerson, R"({"name":"ann"})"));                // role required
    EXPECT_FALSE(Walks(*v, kPerson, R"({"name":"ann","role":"root"})"));  // not in the enum
    EXPECT_FALSE(Walks(*v, kPerson, R"({"name":"ann","age":151,"role":"user"})"));  // > maximum
    EXPECT_FALSE(Walks(*v, kPerson, R"({"name":"annabelle","role":"user"})"));      // > maxLength
    EXPECT_FALSE(Walks(*v, kPerson, R"({"name":"a","role":"user","x":1})"));        // strict: extra
    EXPECT_FALSE(Walks(*v, kPerson, R"({"name": "ann","role":"user"})"));           // compact only
    EXPECT_FALSE(Walks(*v, kPerson, R"({"name":"ann","role":"user","tags":[1]})"));  // item type
    // A raw control character is not JSON, in a length-bounded string too (xgrammar 0.2.8 let it
    // through; scripts/patches/xgrammar-0.2.8-json-strings.patch).
    EXPECT_FALSE(Walks(*v, kPerson, "{\"name\":\"a\x02\",\"role\":\"user\"}"));
    EXPECT_FALSE(Walks(*v, kPerson, "{\"name\":\"a\x1f\",\"role\":\"user\"}"));
  }
}

// The byte vocabulary walks raw bytes (id = byte), valid UTF-8 or not.
bool WalksBytes(const GrammarSpec& spec, const std::string& bytes) {
  Vocab& v = ByteVocab();
  auto c = v.compiler->Compile(spec);
  EXPECT_TRUE(c.ok());
  auto m = (*c)->NewMatcher();
  for (unsigned char b : bytes)
    if (!m->Accept(b)) return false;
  return m->Accept(v.eos) && m->IsTerminated();
}

TEST(GrammarCompiler, StringsAreValidUtf8WithoutSurrogates) {
  const GrammarSpec any{GrammarKind::kJsonSchema, R"({"type": "string"})"};
  const GrammarSpec bounded{GrammarKind::kJsonSchema, R"({"type": "string", "maxLength": 3})"};
  for (const GrammarSpec* s : {&any, &bounded}) {
    EXPECT_TRUE(WalksBytes(*s, "\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"")) << s->source;
    EXPECT_FALSE(WalksBytes(*s, "\"\xed\xa0\x80\"")) << s->source;   // U+D800
    EXPECT_FALSE(WalksBytes(*s, "\"\xed\xbf\xbf\"")) << s->source;   // U+DFFF
    EXPECT_FALSE(WalksBytes(*s, "\"\xc0\x80\"")) << s->source;       // overlong
    EXPECT_FALSE(WalksBytes(*s, "\"\xf0\x90\x80t\"")) << s->source;  // truncated
    EXPECT_FALSE(WalksBytes(*s, "\"\x02\"")) << s->source;           // control character
  }
  EXPECT_TRUE(WalksBytes(any, "\"\xed\x9f\xbf\xee\x80\x80\""));  // U+D7FF, U+E000
}

TEST(GrammarCompiler, FirstMaskAllowsOnlyTheOpeningBrace) {
  Vocab& v = ByteVocab();
  auto c = v.compiler->Compile(kPerson);
  ASSERT_TRUE(c.ok());
  auto m = (*c)->NewMatcher();
  std::vector<float> row(256, 1.0f);
  m->MaskLogits(row);
  for (int b = 0; b < 256; ++b) EXPECT_EQ(std::isinf(row[b]), b != '{') << "byte " << b;
  EXPECT_FALSE(m->Accept('['));
  EXPECT_TRUE(m->Accept('{'));
  EXPECT_FALSE(m->IsTerminated());
}

TEST(GrammarCompiler, JsonObjectAcceptsAnyObjectOnly) {
  const GrammarSpec obj{GrammarKind::kJsonObject, ""};
  // xgrammar 0.2.8's any-JSON rules put ", " between items (the schema rules use ",").
  EXPECT_TRUE(Walks(ByteVocab(), obj, R"({"a":[1, {"b":null}], "c":"d"})"));
  EXPECT_TRUE(Walks(ByteVocab(), obj, R"({})"));
  EXPECT_FALSE(Walks(ByteVocab(), obj, R"([1,2])"));
  EXPECT_FALSE(Walks(ByteVocab(), obj, R"("text")"));
}

TEST(GrammarCompiler, RegexAndEbnf) {
  const GrammarSpec re{GrammarKind::kRegex, "[0-9]{3}-(yes|no)"};
  for (Vocab* v : {&ByteVocab(), &Qwen2Vocab()}) {
    EXPECT_TRUE(Walks(*v, re, "123-yes"));
    EXPECT_TRUE(Walks(*v, re, "007-no"));
    EXPECT_FALSE(Walks(*v, re, "12-yes"));
    EXPECT_FALSE(Walks(*v, re, "123-maybe"));
  }
  const GrammarSpec ebnf{GrammarKind::kEbnf,
                         "root ::= \"(\" digit (\"+\" digit)* \")\"\ndigit ::= [0-9]"};
  EXPECT_TRUE(Walks(ByteVocab(), ebnf, "(1+2+3)"));
  EXPECT_FALSE(Walks(ByteVocab(), ebnf, "(1+)"));
}

TEST(GrammarCompiler, EosOnlyOnceComplete) {
  Vocab& v = ByteVocab();
  auto c = v.compiler->Compile({GrammarKind::kRegex, "ab"});
  ASSERT_TRUE(c.ok());
  auto m = (*c)->NewMatcher();
  std::vector<float> row(256, 0.0f);
  ASSERT_TRUE(m->Accept('a'));
  m->MaskLogits(row);
  EXPECT_TRUE(std::isinf(row[v.eos]));
  EXPECT_FALSE(m->Accept(v.eos));
  ASSERT_TRUE(m->Accept('b'));
  std::fill(row.begin(), row.end(), 0.0f);
  m->MaskLogits(row);
  for (int b = 0; b < 256; ++b) EXPECT_EQ(std::isinf(row[b]), b != v.eos) << "byte " << b;
  EXPECT_TRUE(m->Accept(v.eos));
  EXPECT_TRUE(m->IsTerminated());
}

// A json_object matcher over Qwen2's vocabulary that has accepted `{"`: inside a key, any text
// token is allowed, no special token and no padding column.
std::unique_ptr<TokenMatcher> Qwen2MatcherInsideAKey() {
  Vocab& v = Qwen2Vocab();
  auto c = v.compiler->Compile({GrammarKind::kJsonObject, ""});
  EXPECT_TRUE(c.ok());
  if (!c.ok()) return nullptr;
  auto m = (*c)->NewMatcher();
  EXPECT_TRUE(m->Accept(*v.tokenizer->TokenToId("{")));
  EXPECT_TRUE(m->Accept(*v.tokenizer->TokenToId("\"")));
  return m;
}

TEST(GrammarCompiler, ColumnsPastTheTokenizerAndSpecialTokensAreNeverAllowed) {
  Vocab& v = Qwen2Vocab();
  auto m = Qwen2MatcherInsideAKey();
  ASSERT_NE(m, nullptr);
  std::vector<float> row(151936, 0.0f);
  m->MaskLogits(row);  // inside a key: any text token, but no special one and no padding column
  EXPECT_FALSE(std::isinf(row[*v.tokenizer->TokenToId("abc")]));
  EXPECT_TRUE(std::isinf(row[*v.tokenizer->TokenToId("<|im_start|>")]));
  for (int64_t i = static_cast<int64_t>(v.tokenizer->vocab_size()); i < 151936; ++i)
    ASSERT_TRUE(std::isinf(row[i])) << i;
}

// The bitmask the engine uploads to a device holds exactly the tokens MaskLogits leaves (and the
// base class's derivation from MaskLogits agrees), for the model's row width, a narrower one that
// ends inside a word, and a wider one: bits past the width or the tokenizer are 0.
TEST(GrammarCompiler, FillBitmaskAllowsExactlyWhatMaskLogitsLeaves) {
  auto m = Qwen2MatcherInsideAKey();
  ASSERT_NE(m, nullptr);
  for (int64_t columns : {int64_t{151936}, int64_t{100005}, int64_t{151936 + 70}}) {
    std::vector<float> row(static_cast<size_t>(columns), 0.0f);
    m->MaskLogits(row);
    const size_t W = static_cast<size_t>((columns + 31) / 32);
    std::vector<int32_t> words(W, 0x5a5a5a5a), base(W, 0x5a5a5a5a);
    m->FillBitmask(words, columns);
    m->TokenMatcher::FillBitmask(base, columns);
    EXPECT_EQ(words, base) << columns;
    int64_t allowed = 0;
    for (int64_t j = 0; j < static_cast<int64_t>(32 * W); ++j) {
      const bool bit = (static_cast<uint32_t>(words[j / 32]) >> (j % 32)) & 1u;
      ASSERT_EQ(bit, j < columns && !std::isinf(row[j])) << "column " << j << " of " << columns;
      allowed += bit;
    }
    EXPECT_GT(allowed, 1000) << columns;  // inside a key: most text tokens
  }
}

TEST(GrammarCompiler, CachesBySourceText) {
  auto made = GrammarCompiler::Create(
      *VocabFromTokenizer(server::ByteLevelTokenizerJson(), *ByteVocab().tokenizer, 256, {1}));
  ASSERT_TRUE(made.ok());
  GrammarCompiler& c = **made;
  const GrammarSpec a{GrammarKind::kRegex, "a+"}, b{GrammarKind::kEbnf, "root ::= \"a\"+"};
  auto a1 = c.Compile(a), a2 = c.Compile(a), b1 = c.Compile(b);
  ASSERT_TRUE(a1.ok() && a2.ok() && b1.ok());
  EXPECT_EQ(a1->get(), a2->get());
  EXPECT_NE(a1->get(), b1->get());
  EXPECT_EQ(c.compilations(), 2);
}

TEST(GrammarCompiler, BadSourcesAreInvalidArgumentNamingTheKind) {
  GrammarCompiler& c = *ByteVocab().compiler;
  for (const GrammarSpec& s : {GrammarSpec{GrammarKind::kJsonSchema, "{not json"},
                               GrammarSpec{GrammarKind::kJsonSchema, R"({"type": "frobnicate"})"},
                               GrammarSpec{GrammarKind::kRegex, "(unclosed"},
                               GrammarSpec{GrammarKind::kEbnf, "root ::= undefined_rule"}}) {
    auto r = c.Compile(s);
    ASSERT_FALSE(r.ok()) << s.source;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(GrammarKindName(s.kind)), std::string::npos)
        << r.status().message();
  }
}

TEST(GrammarCompiler, VocabularyErrors) {
  const std::string json = server::ByteLevelTokenizerJson();
  const tok::Tokenizer& t = *ByteVocab().tokenizer;
  EXPECT_FALSE(VocabFromTokenizer(json, t, 100, {1}).ok());  // smaller than the tokenizer
  EXPECT_FALSE(VocabFromTokenizer(json, t, 256, {300}).ok());
  auto no_stop = VocabFromTokenizer(json, t, 256, {});
  ASSERT_TRUE(no_stop.ok());
  EXPECT_FALSE(GrammarCompiler::Create(*no_stop).ok());
}

}  // namespace
}  // namespace lucid::grammar
