// Sampler semantics without a model.
#include "runtime/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>

namespace lucid {
namespace {

SamplingParams Params(float temperature) {
  SamplingParams p;
  p.temperature = temperature;
  return p;
}

// Counts of tokens sampled over `n` steps (step index = draw index).
std::map<int32_t, int> Histogram(const SamplingParams& p, const std::vector<float>& logits, int n,
                                 uint64_t seed = 1) {
  std::map<int32_t, int> h;
  for (int i = 0; i < n; ++i) {
    RequestSampler s(p, seed, {}, static_cast<int64_t>(logits.size()));
    ++h[s.Sample(logits, i, nullptr)];
  }
  return h;
}

TEST(SamplerTest, CounterUniformIsInRangeAndDependsOnBoth) {
  for (uint64_t c = 0; c < 1000; ++c) {
    const double u = CounterUniform(42, c);
    EXPECT_GE(u, 0.0);
    EXPECT_LT(u, 1.0);
  }
  EXPECT_NE(CounterUniform(1, 0), CounterUniform(2, 0));
  EXPECT_NE(CounterUniform(1, 0), CounterUniform(1, 1));
}

TEST(SamplerTest, GreedyIsTheArgmaxWithTheLowestIdOnTies) {
  RequestSampler s(Params(0), 1, {}, 4);
  EXPECT_EQ(s.Sample(std::vector<float>{1, 3, 3, 2}, 0, nullptr), 1);
}

TEST(SamplerTest, SameSeedSameTokensDifferentSeedDifferentTokens) {
  const std::vector<float> logits = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.0f, 0.2f, 0.1f};
  auto run = [&](uint64_t seed) {
    RequestSampler s(Params(1), seed, {}, 8);
    std::vector<int32_t> out;
    for (int i = 0; i < 64; ++i) out.push_back(s.Sample(logits, i, nullptr));
    return out;
  };
  EXPECT_EQ(run(7), run(7));
  EXPECT_NE(run(7), run(8));
}

TEST(SamplerTest, TemperatureOneFollowsTheSoftmax) {
  const std::vector<float> logits = {0.0f, std::log(2.0f), std::log(3.0f), std::log(4.0f)};
  const int n = 20000;
  auto h = Histogram(Params(1), logits, n);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(h[i] / double(n), (i + 1) / 10.0, 0.015) << i;
}

TEST(SamplerTest, LowTemperatureSharpens) {
  const std::vector<float> logits = {0.0f, 1.0f};
  auto h = Histogram(Params(0.1f), logits, 2000);
  EXPECT_GT(h[1], 1990);
}

TEST(SamplerTest, TopKKeepsTheKMostLikely) {
  SamplingParams p = Params(1);
  p.top_k = 2;
  auto h = Histogram(p, {1.0f, 4.0f, 3.0f, 2.0f}, 4000);
  EXPECT_EQ(h.count(0) + h.count(3), 0u);
  EXPECT_GT(h[1], h[2]);
  p.top_k = 1;
  EXPECT_EQ(Histogram(p, {1.0f, 4.0f, 3.0f, 2.0f}, 500)[1], 500);
}

TEST(SamplerTest, TopPKeepsTheSmallestSetReachingP) {
  // probabilities 0.1 0.2 0.3 0.4: top_p 0.6 keeps {3, 2} (0.7 >= 0.6), not 1 or 0.
  SamplingParams p = Params(1);
  p.top_p = 0.6f;
  auto h = Histogram(p, {0.0f, std::log(2.0f), std::log(3.0f), std::log(4.0f)}, 6000);
  EXPECT_EQ(h.count(0) + h.count(1), 0u);
  EXPECT_NEAR(h[3] / 6000.0, 4.0 / 7.0, 0.02);
  p.top_p = 0.3f;  // only the most likely
  EXPECT_EQ(Histogram(p, {0.0f, std::log(2.0f), std::log(3.0f), std::log(4.0f)}, 300)[3], 300);
}

TEST(SamplerTest, MinPDropsTokensBelowAFractionOfTheBest) {
  SamplingParams p = Params(1);
  p.min_p = 0.5f;  // keeps p >= 0.5 * 0.4 = 0.2: tokens 1, 2, 3
  auto h = Histogram(p, {0.0f, std::log(2.0f), std::log(3.0f), std::log(4.0f)}, 3000);
  EXPECT_EQ(h.count(0), 0u);
  EXPECT_GT(h[1], 0);
}

TEST(SamplerTest, RepetitionPenaltyDividesPositiveAndMultipliesNegativeLogits) {
  SamplingParams p = Params(0);
  p.repetition_penalty = 2.0f;
  const std::vector<int32_t> prompt = {0, 1};
  RequestSampler s(p, 1, prompt, 4);
  auto x = s.Penalized(std::vector<float>{4.0f, -1.0f, 3.0f, -1.0f});
  EXPECT_EQ(x, (std::vector<float>{2.0f, -2.0f, 3.0f, -1.0f}));
  EXPECT_EQ(s.Sample(std::vector<float>{4.0f, -1.0f, 3.0f, -1.0f}, 0, nullptr), 2);
  // The generated token is penalized from now on.
  x = s.Penalized(std::vector<float>{4.0f, -1.0f, 3.0f, -1.0f});
  EXPECT_EQ(x[2], 1.5f);
}

TEST(SamplerTest, ExtremePenaltiesNeverProduceNonFiniteValues) {
  SamplingParams p = Params(1);
  p.repetition_penalty = 1e-39f;  // 3 / 1e-39 overflows float
  const std::vector<int32_t> prompt = {0, 1};
  RequestSampler s(p, 1, prompt, 3);
  const std::vector<float> logits = {3.0f, -3.0f, 1.0f};
  for (float v : s.Penalized(logits)) EXPECT_TRUE(std::isfinite(v));
  EXPECT_EQ(s.Sample(logits, 0, nullptr), 0);
}

TEST(SamplerTest, FrequencyAndPresencePenalizeGeneratedTokensOnly) {
  SamplingParams p = Params(0);
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 0.25f;
  const std::vector<int32_t> prompt = {2};
  RequestSampler s(p, 1, prompt, 3);
  const std::vector<float> logits = {1.0f, 5.0f, 2.0f};
  EXPECT_EQ(s.Sample(logits, 0, nullptr), 1);
  EXPECT_EQ(s.Sample(logits, 1, nullptr), 1);
  auto x = s.Penalized(logits);
  EXPECT_FLOAT_EQ(x[1], 5.0f - 2 * 0.5f - 0.25f);
  EXPECT_FLOAT_EQ(x[2], 2.0f);  // prompt tokens are not penalized by these two
}

TEST(SamplerTest, LogitBiasShiftsTheRawLogitsAndCanForceOrBanATokenGreedyOrSampled) {
  SamplingParams p = Params(0);
  p.logit_bias = {{2, 10.0f}, {1, -100.0f}};
  const std::vector<int32_t> prompt = {0};
  RequestSampler s(p, 1, prompt, 3);
  const std::vector<float> logits = {1.0f, 5.0f, 2.0f};
  EXPECT_EQ(s.Penalized(logits), (std::vector<float>{1.0f, -95.0f, 12.0f}));
  EXPECT_EQ(s.Sample(logits, 0, nullptr), 2);
  p.temperature = 1.0f;
  p.logit_bias = {{1, -100.0f}};
  RequestSampler t(p, 7, prompt, 3);
  for (int64_t step = 0; step < 50; ++step) EXPECT_NE(t.Sample(logits, step, nullptr), 1);
}

TEST(SamplerTest, MinTokensSuppressesTheStopIdsForTheFirstSteps) {
  SamplingParams p = Params(0);
  p.min_tokens = 2;
  const std::vector<int32_t> prompt = {0};
  RequestSampler s(p, 1, prompt, 3);
  s.SuppressUntilMinTokens({1});
  const std::vector<float> logits = {1.0f, 5.0f, 2.0f};  // 1 (the "EOS") is the argmax
  EXPECT_EQ(s.Sample(logits, 0, nullptr), 2);
  EXPECT_EQ(s.Sample(logits, 1, nullptr), 2);
  EXPECT_EQ(s.Sample(logits, 2, nullptr), 1);  // min_tokens reached
}

TEST(SamplerTest, LogprobsAreTheRawDistributionBeforePenaltiesAndTemperature) {
  SamplingParams p = Params(0.5f);
  p.logprobs = 2;
  p.repetition_penalty = 3.0f;
  const std::vector<float> logits = {0.0f, std::log(3.0f), std::log(6.0f)};
  const std::vector<int32_t> prompt = {2};
  RequestSampler s(p, 3, prompt, 3);
  TokenLogprob lp;
  const int32_t t = s.Sample(logits, 0, &lp);
  EXPECT_EQ(lp.token, t);
  const double expect[] = {std::log(0.1), std::log(0.3), std::log(0.6)};
  EXPECT_NEAR(lp.logprob, expect[t], 1e-5);
  ASSERT_EQ(lp.top.size(), 2u);
  EXPECT_EQ(lp.top[0].first, 2);
  EXPECT_NEAR(lp.top[0].second, expect[2], 1e-5);
  EXPECT_EQ(lp.top[1].first, 1);
}

TEST(SamplerTest, OutputDoesNotDependOnWhenTheRowIsSampled) {
  // The draw for output token n depends on (seed, n) only: two samplers fed the same rows in the
  // same order agree no matter how other requests are interleaved between the calls.
  const std::vector<float> logits = {0.3f, 0.1f, 0.9f, 0.4f};
  RequestSampler a(Params(1), 99, {}, 4), b(Params(1), 99, {}, 4), noise(Params(1), 5, {}, 4);
  for (int i = 0; i < 32; ++i) {
    (void)noise.Sample(logits, i, nullptr);
    EXPECT_EQ(a.Sample(logits, i, nullptr), b.Sample(logits, i, nullptr));
  }
}

}  // namespace
}  // namespace lucid
