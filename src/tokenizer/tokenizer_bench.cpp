// Encode throughput (MB/s) of the fixture tokenizers on a large text; not run by ctest.
//   cmake --build build --target lucid_tokenizer_bench && build/src/tokenizer/lucid_tokenizer_bench
// The text is built exactly as tools/reference/tokenizer/bench_hf.py builds it (the corpus joined
// by newlines, then every chat template fixture in name order, the whole repeated 8 times), so
// the HF `tokenizers` figure printed by that script is directly comparable.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_test_util.h"

namespace lucid::tok {
namespace {

const std::string& BenchText() {
  static const std::string text = [] {
    using testing::FixturePath;
    using testing::ReadFile;
    const auto corpus = nlohmann::json::parse(ReadFile(FixturePath("tokenizers/corpus.json")));
    std::string base;
    for (size_t i = 0; i < corpus.size(); ++i) {
      base += (i ? "\n" : "") + corpus[i].get<std::string>();
    }
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(FixturePath("chat_templates"))) {
      if (e.path().extension() == ".jinja") names.push_back(e.path().string());
    }
    std::sort(names.begin(), names.end());
    for (const auto& n : names) base += ReadFile(n);
    std::string all;
    for (int k = 0; k < 8; ++k) all += base;
    return all;
  }();
  return text;
}

void BM_Encode(benchmark::State& state, const char* name) {
  auto tok = Tokenizer::FromFile(
      testing::FixturePath(std::string("tokenizers/") + name + "/tokenizer.json"));
  if (!tok.ok()) {
    state.SkipWithError(tok.status().ToString().c_str());
    return;
  }
  const std::string& text = BenchText();
  size_t n_tokens = 0;
  for (auto _ : state) {
    auto ids = (*tok)->Encode(text, false);
    n_tokens = ids->size();
    benchmark::DoNotOptimize(ids);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
  state.counters["tokens"] = static_cast<double>(n_tokens);
  state.counters["text_MB"] = static_cast<double>(text.size()) / 1e6;
}

BENCHMARK_CAPTURE(BM_Encode, qwen2, "qwen2")
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_Encode, deepseek_coder, "deepseek-coder")
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_Encode, gpt_2, "gpt-2")
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_Encode, llama_spm, "llama-spm")
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0)
    ->UseRealTime();

}  // namespace
}  // namespace lucid::tok

BENCHMARK_MAIN();
