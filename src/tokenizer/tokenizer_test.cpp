// Golden tests: encode/decode against HF `tokenizers` 0.23.3 on the shared corpus, for each fixture
// tokenizer and derived variant (tools/reference/tokenizer/gen_goldens.py), plus streaming decode.
#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>

#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/tokenizer_test_util.h"
#include "tokenizer/utf8.h"

namespace lucid::tok {
namespace {

using nlohmann::json;
using testing::FixturePath;
using testing::ReadFile;

struct Golden {
  std::vector<int32_t> ids, ids_sp;
  bool has_sp = false;
  std::optional<std::string> dec, dec_skip;
};

// tokenizer.json text for a fixture name (a base directory or a variant of variants.json).
std::string TokenizerJson(const std::string& name) {
  const json variants = json::parse(ReadFile(FixturePath("tokenizers/variants.json")));
  if (!variants.contains(name))
    return ReadFile(FixturePath("tokenizers/" + name + "/tokenizer.json"));
  const json& v = variants[name];
  json base = json::parse(
      ReadFile(FixturePath("tokenizers/" + v["base"].get<std::string>() + "/tokenizer.json")));
  for (auto it = v["replace"].begin(); it != v["replace"].end(); ++it) base[it.key()] = it.value();
  return base.dump();
}

std::vector<std::string> Corpus() {
  return json::parse(ReadFile(FixturePath("tokenizers/corpus.json")))
      .get<std::vector<std::string>>();
}

std::vector<Golden> Goldens(const std::string& name) {
  std::vector<Golden> out;
  std::istringstream in(ReadFile(FixturePath("tokenizers/goldens/" + name + ".jsonl")));
  for (std::string line; std::getline(in, line);) {
    const json j = json::parse(line);
    Golden g;
    g.ids = j["ids"].get<std::vector<int32_t>>();
    if (j.contains("ids_sp")) {
      g.has_sp = true;
      g.ids_sp = j["ids_sp"].get<std::vector<int32_t>>();
    }
    if (j.contains("dec")) g.dec = j["dec"].get<std::string>();
    if (j.contains("dec_skip")) g.dec_skip = j["dec_skip"].get<std::string>();
    out.push_back(std::move(g));
  }
  return out;
}

std::string Show(const std::vector<int32_t>& v) {
  std::string s;
  for (int32_t x : v) s += std::to_string(x) + " ";
  return s;
}

class GoldenTest : public ::testing::TestWithParam<std::string> {
 protected:
  static std::map<std::string, std::shared_ptr<Tokenizer>>& Cache() {
    static std::map<std::string, std::shared_ptr<Tokenizer>> cache;
    return cache;
  }
  const Tokenizer& Tok() {
    auto& c = Cache()[GetParam()];
    if (!c) {
      auto t = Tokenizer::FromJsonString(TokenizerJson(GetParam()));
      EXPECT_TRUE(t.ok()) << t.status().ToString();
      c = std::move(t).value();
    }
    return *c;
  }
};

TEST_P(GoldenTest, EncodeMatchesHf) {
  const Tokenizer& tok = Tok();
  const auto corpus = Corpus();
  const auto goldens = Goldens(GetParam());
  ASSERT_EQ(corpus.size(), goldens.size());
  ASSERT_GE(corpus.size(), 2000u);
  int failures = 0;
  for (size_t i = 0; i < corpus.size(); ++i) {
    auto ids = tok.Encode(corpus[i], false);
    ASSERT_TRUE(ids.ok()) << ids.status().ToString();
    auto ids_sp = tok.Encode(corpus[i], true);
    ASSERT_TRUE(ids_sp.ok());
    const auto& want_sp = goldens[i].has_sp ? goldens[i].ids_sp : goldens[i].ids;
    if (*ids != goldens[i].ids || *ids_sp != want_sp) {
      if (++failures <= 5) {
        ADD_FAILURE() << "corpus[" << i << "] = " << json(corpus[i]).dump() << "\n got "
                      << Show(*ids) << "\nwant " << Show(goldens[i].ids) << "\n got+sp "
                      << Show(*ids_sp) << "\nwant+sp " << Show(want_sp);
      }
    }
  }
  EXPECT_EQ(failures, 0) << "of " << corpus.size();
}

TEST_P(GoldenTest, DecodeMatchesHf) {
  const Tokenizer& tok = Tok();
  const auto corpus = Corpus();
  const auto goldens = Goldens(GetParam());
  int failures = 0;
  for (size_t i = 0; i < corpus.size(); ++i) {
    const auto& g = goldens[i];
    const std::string want = g.dec.value_or(corpus[i]);
    const std::string want_skip = g.dec_skip.value_or(want);
    const std::string got = tok.Decode(g.ids, false), got_skip = tok.Decode(g.ids, true);
    if (got != want || got_skip != want_skip) {
      if (++failures <= 5) {
        ADD_FAILURE() << "corpus[" << i << "] ids " << Show(g.ids) << "\n got " << json(got).dump()
                      << "\nwant " << json(want).dump() << "\n got skip " << json(got_skip).dump()
                      << "\nwant skip " << json(want_skip).dump();
      }
    }
  }
  EXPECT_EQ(failures, 0) << "of " << corpus.size();
}

TEST_P(GoldenTest, StreamingConcatenatesToFullDecode) {
  const Tokenizer& tok = Tok();
  const auto goldens = Goldens(GetParam());
  int failures = 0;
  for (size_t i = 0; i < goldens.size(); ++i) {
    for (bool skip : {false, true}) {
      IncrementalDetokenizer detok(&tok, skip);
      std::string streamed;
      for (int32_t id : goldens[i].ids) {
        const std::string chunk = detok.Add(id);
        EXPECT_TRUE(IsValidUtf8(chunk));
        streamed += chunk;
      }
      streamed += detok.Finish();
      if (streamed != tok.Decode(goldens[i].ids, skip) && ++failures <= 5) {
        ADD_FAILURE() << "corpus[" << i << "] skip=" << skip << " streamed "
                      << json(streamed).dump() << " vs "
                      << json(tok.Decode(goldens[i].ids, skip)).dump();
      }
    }
  }
  EXPECT_EQ(failures, 0);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GoldenTest,
                         ::testing::Values("deepseek-coder", "qwen2", "llama-spm", "gpt-2",
                                           "llama-spm-legacy", "llama-spm-flags", "qwen2-flags"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n) {
                             if (c == '-') c = '_';
                           }
                           return n;
                         });

}  // namespace
}  // namespace lucid::tok
