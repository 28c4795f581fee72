// Structured output's per-step cost, as the engine pays it (EngineCore::Step): the `batch`
// requests' grammar masks filled and applied to their logits rows (MaskLogitsInParallel, i.e.
// TokenMatcher::MaskLogits over the kernels' threads), then each sampled token accepted (Accept).
// Each request walks a fixed valid instance of a nested JSON schema, so the steps cover keys,
// strings, numbers, enums and structure. Vocabularies: the tiny models' 256-byte one and Qwen2's
// 151k-token byte-level one (tests/fixtures/tokenizers/qwen2, padded to 151936 columns like the
// model), close to GLM-5's 154k.
//   ./build/benchmarks/lucid_grammar_bench
// Reported per iteration = one engine step over the whole batch; apply:0 fills the bitmask only;
// threads:1 masks the requests one after another, threads:0 uses every thread (OMP_NUM_THREADS).
#include <benchmark/benchmark.h>

#include <fstream>
#include <sstream>

#include "core/parallel.h"
#include "grammar/grammar_compiler.h"
#include "server/byte_tokenizer_for_test.h"
#include "tokenizer/tokenizer.h"

namespace {

using namespace lucid;
using namespace lucid::grammar;

const char* kSchema = R"({"type": "object", "properties": {
  "name": {"type": "string", "maxLength": 40},
  "age": {"type": "integer", "minimum": 0, "maximum": 150},
  "role": {"enum": ["admin", "user", "guest"]},
  "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 4},
  "address": {"type": "object", "properties": {"city": {"type": "string"},
                                               "zip": {"type": "string"}},
              "required": ["city"]}},
  "required": ["name", "age", "role"]})";
const char* kInstance =
    R"({"name":"Ada Lovelace","age":36,"role":"admin","tags":["math","poetry"],)"
    R"("address":{"city":"London","zip":"W1"}})";

struct Setup {
  std::unique_ptr<tok::Tokenizer> tokenizer;
  std::unique_ptr<GrammarCompiler> compiler;
  std::shared_ptr<const TokenConstraint> constraint;
  std::vector<int32_t> walk;  // the instance's tokens, then EOS
};

Setup Make(const std::string& json, int64_t vocab, int32_t eos) {
  Setup s;
  s.tokenizer = tok::Tokenizer::FromJsonString(json).value();
  s.compiler =
      GrammarCompiler::Create(VocabFromTokenizer(json, *s.tokenizer, vocab, {eos}).value()).value();
  s.constraint = *s.compiler->Compile({GrammarKind::kJsonSchema, kSchema});
  s.walk = *s.tokenizer->Encode(kInstance, false);
  s.walk.push_back(eos);
  return s;
}

const Setup& Vocab(int which) {
  static Setup byte_vocab = Make(server::ByteLevelTokenizerJson(), 256, 1);
  static Setup qwen2 = [] {
    std::ifstream f(std::string(LUCID_SOURCE_DIR) +
                    "/tests/fixtures/tokenizers/qwen2/tokenizer.json");
    std::stringstream ss;
    ss << f.rdbuf();
    return Make(ss.str(), 151936, 151643);
  }();
  return which == 0 ? byte_vocab : qwen2;
}

void BM_GrammarMaskStep(benchmark::State& state) {
  const Setup& s = Vocab(static_cast<int>(state.range(0)));
  const int batch = static_cast<int>(state.range(1));
  const bool apply = state.range(2) != 0;  // 0: fill the bitmask only (an empty logits span)
  static const int all_threads = NumThreads();
  SetNumThreads(state.range(3) > 0 ? static_cast<int>(state.range(3)) : all_threads);
  const size_t V = static_cast<size_t>(s.compiler->vocab_size());
  std::vector<std::vector<float>> rows(batch, std::vector<float>(V, 0.5f));
  std::vector<std::unique_ptr<TokenMatcher>> m(batch);
  std::vector<MaskJob> jobs(batch);
  size_t step = s.walk.size();
  for (auto _ : state) {
    if (step == s.walk.size()) {  // a fresh batch of requests (not timed)
      state.PauseTiming();
      for (int b = 0; b < batch; ++b) {
        m[b] = s.constraint->NewMatcher();
        jobs[b] = {m[b].get(), apply ? std::span<float>(rows[b]) : std::span<float>()};
      }
      step = 0;
      state.ResumeTiming();
    }
    MaskLogitsInParallel(jobs);
    for (int b = 0; b < batch; ++b)
      if (!m[b]->Accept(s.walk[step])) state.SkipWithError("the walk left the grammar");
    ++step;
    benchmark::DoNotOptimize(rows[0].data());
  }
  SetNumThreads(all_threads);
  state.counters["vocab"] = static_cast<double>(V);
  state.counters["tokens_in_walk"] = static_cast<double>(s.walk.size());
  state.counters["threads"] =
      static_cast<double>(state.range(3) > 0 ? state.range(3) : all_threads);
}
BENCHMARK(BM_GrammarMaskStep)
    ->ArgNames({"qwen2_vocab", "batch", "apply", "threads"})
    ->Args({0, 1, 1, 0})
    ->Args({0, 32, 1, 0})
    ->Args({1, 1, 1, 0})
    ->Args({1, 32, 1, 1})
    ->Args({1, 32, 1, 0})
    ->Args({1, 1, 0, 0})
    ->Args({1, 32, 0, 1})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
