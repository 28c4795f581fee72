// The engine's side of structured output (SamplingParams::constraint), with hand-written
// constraints over the tiny model (EOS id 1): the mask decides what is sampled, Accept sees each
// sampled token, a terminated matcher finishes the request with "stop", and a refused token fails
// only its own request.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "runtime/engine_test_util.h"

namespace lucid {
namespace {

using namespace testing_util;

constexpr int32_t kEos = 1;  // tests/fixtures/models/tiny_glm_moe_dsa/config.json

// Allows exactly `script`, then EOS; terminates when EOS is accepted.
class ScriptConstraint : public TokenConstraint {
 public:
  explicit ScriptConstraint(std::vector<int32_t> script) : script_(std::move(script)) {}
  std::unique_ptr<TokenMatcher> NewMatcher() const override {
    return std::make_unique<Matcher>(script_);
  }

 private:
  class Matcher : public TokenMatcher {
   public:
    explicit Matcher(std::vector<int32_t> s) : script_(std::move(s)) {}
    void MaskLogits(std::span<float> logits) override {
      const int32_t next = pos_ < script_.size() ? script_[pos_] : kEos;
      for (size_t i = 0; i < logits.size(); ++i)
        if (static_cast<int32_t>(i) != next) logits[i] = -std::numeric_limits<float>::infinity();
    }
    bool Accept(int32_t t) override {
      const int32_t next = pos_ < script_.size() ? script_[pos_] : kEos;
      if (t != next || done_) return false;
      if (pos_ < script_.size())
        ++pos_;
      else
        done_ = true;
      return true;
    }
    bool IsTerminated() const override { return done_; }

   private:
    std::vector<int32_t> script_;
    size_t pos_ = 0;
    bool done_ = false;
  };
  std::vector<int32_t> script_;
};

// Allows a fixed set of tokens forever (never terminates); records what it accepted.
class SetConstraint : public TokenConstraint {
 public:
  explicit SetConstraint(std::set<int32_t> allowed, bool refuse_all = false)
      : allowed_(std::move(allowed)), refuse_all_(refuse_all) {}
  std::unique_ptr<TokenMatcher> NewMatcher() const override {
    return std::make_unique<Matcher>(this);
  }
  mutable std::vector<int32_t> accepted;  // single-threaded tests only

 private:
  class Matcher : public TokenMatcher {
   public:
    explicit Matcher(const SetConstraint* c) : c_(c) {}
    void MaskLogits(std::span<float> logits) override {
      for (size_t i = 0; i < logits.size(); ++i)
        if (!c_->allowed_.count(static_cast<int32_t>(i)))
          logits[i] = -std::numeric_limits<float>::infinity();
    }
    bool Accept(int32_t t) override {
      if (c_->refuse_all_ || !c_->allowed_.count(t)) return false;
      c_->accepted.push_back(t);
      return true;
    }
    bool IsTerminated() const override { return false; }

   private:
    const SetConstraint* c_;
  };
  std::set<int32_t> allowed_;
  bool refuse_all_;
};

EngineOptions Options() {
  EngineOptions o;
  o.page_size = 16;
  o.num_pages = 64;
  o.max_running_requests = 8;
  return o;
}

GenerationRequest Sampled(std::vector<int32_t> prompt, int64_t max_tokens, uint64_t seed) {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.sampling.temperature = 1.0f;
  r.sampling.seed = seed;
  r.sampling.max_tokens = max_tokens;
  return r;
}

TEST(EngineConstraintTest, AScriptIsFollowedAndItsEosFinishesWithStop) {
  auto core = MakeCore(LoadTiny("tiny_glm_moe_dsa"), Options());
  const std::vector<int32_t> script = {5, 9, 200, 77};
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < 3; ++i) {
    GenerationRequest r = Sampled({3, 4, 5 + i}, 32, 100 + i);
    r.sampling.constraint = std::make_shared<ScriptConstraint>(script);
    r.sampling.logprobs = 0;
    reqs.push_back(std::move(r));
  }
  reqs.push_back(Greedy({3, 4, 5}, 6));  // unconstrained, batched with them
  auto got = RunToCompletion(*core, reqs);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  for (int i = 0; i < 3; ++i) {
    std::vector<int32_t> want = script;
    want.push_back(kEos);
    EXPECT_EQ((*got)[i].tokens, want);
    EXPECT_EQ((*got)[i].finish_reason, "stop");
    // One allowed token: probability 1 under the masked distribution.
    ASSERT_EQ((*got)[i].logprobs.size(), want.size());
    for (const TokenLogprob& lp : (*got)[i].logprobs) EXPECT_FLOAT_EQ(lp.logprob, 0.0f);
  }
  EXPECT_EQ((*got)[3].tokens, Alone(*LoadTiny("tiny_glm_moe_dsa"), {3, 4, 5}, 6));
}

TEST(EngineConstraintTest, TheStopTokenEndsTheRequestEvenWithIgnoreEos) {
  auto core = MakeCore(LoadTiny("tiny_glm_moe_dsa"), Options());
  GenerationRequest r = Greedy({7, 8}, 16);  // ignore_eos: only the grammar can end it early
  r.sampling.constraint = std::make_shared<ScriptConstraint>(std::vector<int32_t>{42});
  auto got = RunToCompletion(*core, {r});
  ASSERT_TRUE(got.ok());
  EXPECT_EQ((*got)[0].tokens, (std::vector<int32_t>{42, kEos}));
  EXPECT_EQ((*got)[0].finish_reason, "stop");
}

TEST(EngineConstraintTest, SampledTokensStayInTheAllowedSetAndEachIsAccepted) {
  auto core = MakeCore(LoadTiny("tiny_glm_moe_dsa"), Options());
  auto c = std::make_shared<SetConstraint>(std::set<int32_t>{2, 30, 31, 250});
  GenerationRequest r = Sampled({9, 10, 11}, 40, 7);
  r.sampling.top_k = 3;
  r.sampling.repetition_penalty = 1.3f;  // penalties see -inf logits and must keep them out
  r.sampling.constraint = c;
  auto got = RunToCompletion(*core, {r});
  ASSERT_TRUE(got.ok());
  EXPECT_EQ((*got)[0].finish_reason, "length");
  ASSERT_EQ((*got)[0].tokens.size(), 40u);
  for (int32_t t : (*got)[0].tokens) EXPECT_TRUE(t == 2 || t == 30 || t == 31 || t == 250) << t;
  EXPECT_EQ(c->accepted, (*got)[0].tokens);
  EXPECT_GT(std::set<int32_t>((*got)[0].tokens.begin(), (*got)[0].tokens.end()).size(), 1u)
      << "temperature 1 over four allowed tokens should pick more than one of them";
}

TEST(EngineConstraintTest, ARefusedTokenFailsOnlyThatRequest) {
  auto core = MakeCore(LoadTiny("tiny_glm_moe_dsa"), Options());
  GenerationRequest bad = Greedy({5, 6}, 8);
  bad.sampling.constraint = std::make_shared<SetConstraint>(std::set<int32_t>{3}, true);
  auto got = RunToCompletion(*core, {bad, Greedy({5, 6}, 8)});
  ASSERT_TRUE(got.ok());
  EXPECT_EQ((*got)[0].finish_reason, "error");
  EXPECT_NE((*got)[0].error.message().find("grammar refused token 3"), std::string::npos)
      << (*got)[0].error.ToString();
  EXPECT_EQ((*got)[1].finish_reason, "length");
  EXPECT_EQ((*got)[1].tokens.size(), 8u);
  EXPECT_EQ(core->Stats().pages_used, 0);
}

}  // namespace
}  // namespace lucid
