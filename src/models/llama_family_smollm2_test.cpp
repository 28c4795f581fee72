// SmolLM2-135M-Instruct (Q4_1 GGUF, scripts/setup.sh puts it in .cache/models) through the Llama
// family against transformers loading the same file (`gguf_file=`, every tensor dequantized to
// float32): tests/fixtures/gguf/smollm2_logits.json, written by
// tools/reference/gguf/smollm2_logits.py. Checked:
// - the 64-token prompt's logits (each row's 16 largest transformers logits, and its logsumexp),
//   within 1e-4 of the row's max |logit| with the reference kernels and 1e-3 with the default set;
// - the 32-token greedy continuation, equal (reference kernels);
// - the perplexity of tests/fixtures/gguf/paragraph.txt (196 tokens), within 1% (default set).
// Skipped, saying so, when the GGUF file is not in .cache/models.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "backends/cpu/cpu_fast_ops.h"
#include "backends/cpu/cpu_ops.h"
#include "models/registry.h"
#include "runtime/engine_driver.h"

namespace lucid {
namespace {

const std::string kGguf =
    std::string(LUCID_SOURCE_DIR) + "/.cache/models/SmolLM2-135M-Instruct.Q4_1.gguf";

nlohmann::json Fixture() {
  auto j = ReadJsonFile(std::string(LUCID_SOURCE_DIR) + "/tests/fixtures/gguf/smollm2_logits.json");
  LUCID_CHECK(j.ok(), j.status().ToString());
  return *j;
}

double LogSumExp(const float* v, int64_t n) {
  double mx = -INFINITY, s = 0;
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, double(v[i]));
  for (int64_t i = 0; i < n; ++i) s += std::exp(double(v[i]) - mx);
  return mx + std::log(s);
}

// Worst |got - want| / max |want row| over every row's stored top entries and its logsumexp.
double WorstError(const Tensor& logits, const nlohmann::json& rows) {
  const int64_t V = logits.size(1);
  double worst = 0;
  for (size_t r = 0; r < rows.size(); ++r) {
    const float* got = logits.data<float>() + r * V;
    const double scale = rows[r]["max_abs"].get<double>();
    const auto ids = rows[r]["ids"].get<std::vector<int64_t>>();
    const auto vals = rows[r]["values"].get<std::vector<double>>();
    for (size_t i = 0; i < ids.size(); ++i)
      worst = std::max(worst, std::abs(got[ids[i]] - vals[i]) / scale);
    worst =
        std::max(worst, std::abs(LogSumExp(got, V) - rows[r]["logsumexp"].get<double>()) / scale);
  }
  return worst;
}

class SmolLm2Test : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(kGguf))
      GTEST_SKIP() << kGguf << " is absent (scripts/setup.sh fetches it)";
  }
  std::unique_ptr<Model> Load(const Ops& ops) {
    auto m = LoadModel(kGguf, ops);
    LUCID_CHECK(m.ok(), m.status().ToString());
    return std::move(m).value();
  }
};

TEST_F(SmolLm2Test, ReferenceKernelsMatchTransformers) {
  const nlohmann::json f = Fixture();
  const CpuOps ops;
  auto m = Load(ops);
  const auto prompt = f["prompt_ids"].get<std::vector<int32_t>>();
  ASSERT_EQ(prompt.size(), 64u);
  Tensor logits;
  auto out = GreedyGenerate(*m, prompt, 32, &logits);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  const double err = WorstError(logits, f["rows"]);
  EXPECT_LT(err, 1e-4);
  std::printf("reference kernels: worst logit error %.3g of the row's max |logit|\n", err);
  EXPECT_EQ(*out, f["greedy_ids"].get<std::vector<int32_t>>());
}

TEST_F(SmolLm2Test, DefaultKernelsLogitsAndPerplexity) {
  const nlohmann::json f = Fixture();
  const CpuFastOps ops;
  auto m = Load(ops);
  Tensor logits;
  auto out = GreedyGenerate(*m, f["prompt_ids"].get<std::vector<int32_t>>(), 0, &logits);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  const double err = WorstError(logits, f["rows"]);
  EXPECT_LT(err, 1e-3);
  std::printf("default kernels (%s): worst logit error %.3g\n", ops.name(), err);
  const auto ids = f["paragraph_ids"].get<std::vector<int32_t>>();
  Tensor pl;
  ASSERT_TRUE(GreedyGenerate(*m, ids, 0, &pl).ok());
  const int64_t V = pl.size(1);
  double nll = 0;
  for (size_t t = 0; t + 1 < ids.size(); ++t) {
    const float* row = pl.data<float>() + t * V;
    nll += LogSumExp(row, V) - row[ids[t + 1]];
  }
  const double ppl = std::exp(nll / double(ids.size() - 1)), want = f["paragraph_ppl"];
  std::printf("perplexity %.4f (transformers %.4f)\n", ppl, want);
  EXPECT_NEAR(ppl, want, 0.01 * want);
}

}  // namespace
}  // namespace lucid
