// The NaN guard end to end: a test-only Ops decorator (runtime/poison_ops_for_test.h) poisons the
// rows of one request inside the model; that request fails with an error that says where, every
// other request completes with exactly the tokens it gives alone, and no page leaks.
#include <gtest/gtest.h>

#include <cmath>

#include "runtime/engine_test_util.h"
#include "runtime/poison_ops_for_test.h"

namespace lucid {
namespace {

using namespace testing_util;

const PoisonOps& Poison() {
  static const PoisonOps ops(RefOps());
  return ops;
}

bool AllFinite(const float* v, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(v[i])) return false;
  return true;
}

TEST(NumericsGuardTest, ModelReportsTheFirstOpPerSequenceAndRowsStayIndependent) {
  auto m = LoadTiny("tiny_glm_moe_dsa", Poison());
  ASSERT_TRUE(m->SetNumericsCheck(true));
  auto clean = RandomPrompts(1, 20, 20, 1)[0];
  auto bad = RandomPrompts(1, 30, 30, 2)[0];
  bad[10] = kPoisonToken;
  KvStorage kv(m->kv_spec(), 16, 8, KvDtype::kF32);
  TestPages pages(8);
  SequenceKv a = pages.New(20), b = pages.New(30), alone = pages.New(20);
  const TestChunk batch[] = {{&a, clean}, {&b, bad}};
  Tensor logits, ref;
  ASSERT_TRUE(ForwardChunks(*m, kv, batch, ChunkRows::kAll, &logits).ok());
  auto sites = m->LastNonFiniteSites();
  ASSERT_EQ(sites.size(), 2u);
  EXPECT_FALSE(sites[0].has_value());
  ASSERT_TRUE(sites[1].has_value());
  EXPECT_EQ(sites[1]->layer, 1);
  EXPECT_EQ(sites[1]->op, "L1.moe");
  const int64_t V = m->config().vocab_size;
  EXPECT_TRUE(AllFinite(logits.data<float>(), 20 * V));
  EXPECT_FALSE(AllFinite(logits.data<float>() + 20 * V, 30 * V));
  // The clean sequence's logits are exactly what it gets alone.
  ASSERT_TRUE(ForwardChunk(*m, kv, alone, clean, ChunkRows::kAll, &ref).ok());
  for (int64_t i = 0; i < 20 * V; ++i) ASSERT_EQ(logits.data<float>()[i], ref.data<float>()[i]);
  // Checking off: nothing recorded.
  ASSERT_TRUE(m->SetNumericsCheck(false));
  SequenceKv c = pages.New(20);
  ASSERT_TRUE(ForwardChunk(*m, kv, c, clean, ChunkRows::kAll, &ref).ok());
  EXPECT_TRUE(m->LastNonFiniteSites().empty());
}

struct GuardCase {
  EngineOptions::NanCheck mode;
  const char* expect;  // in the error message
};

class NumericsGuardEngineTest : public ::testing::TestWithParam<GuardCase> {};

TEST_P(NumericsGuardEngineTest, OnlyThePoisonedRequestFailsAndSaysWhere) {
  auto ref = LoadTiny("tiny_glm_moe_dsa");
  ExpectOnlyThePoisonedRequestFails(LoadTiny("tiny_glm_moe_dsa", Poison()), *ref, GetParam().mode,
                                    GetParam().expect);
}

INSTANTIATE_TEST_SUITE_P(
    Modes, NumericsGuardEngineTest,
    ::testing::Values(GuardCase{EngineOptions::NanCheck::kOff, "non-finite logits"},
                      GuardCase{EngineOptions::NanCheck::kLogits, "--nan-check layers"},
                      GuardCase{EngineOptions::NanCheck::kLayers, "layer 1, op L1.moe"}));

TEST(NumericsGuardTest, LogitsModeCatchesAPoisonedEarlierChunk) {
  // The poison is in the first prefill chunk, whose logits are not sampled: kLogits still checks
  // them and fails the request at that chunk, before any more work is spent on it.
  EngineOptions o;
  o.page_size = 16;
  o.num_pages = 64;
  o.chunked_prefill_size = 16;
  o.nan_check = EngineOptions::NanCheck::kLogits;
  auto core = MakeCore(LoadTiny("tiny_glm_moe_dsa", Poison()), o);
  auto p = RandomPrompts(1, 40, 40, 3)[0];
  p[2] = kPoisonToken;
  auto got = RunToCompletion(*core, {Greedy(p, 4)});
  ASSERT_TRUE(got.ok());
  EXPECT_EQ((*got)[0].finish_reason, "error");
  EXPECT_NE((*got)[0].error.message().find("positions [0, 16)"), std::string::npos)
      << (*got)[0].error.message();
}

TEST(NumericsGuardTest, LayersModeNeedsAModelWithTheCheck) {
  class NoCheck final : public Model {
   public:
    explicit NoCheck(std::unique_ptr<Model> m) : m_(std::move(m)) {}
    const ModelConfig& config() const override { return m_->config(); }
    const KvCacheSpec& kv_spec() const override { return m_->kv_spec(); }
    uint64_t weight_bytes() const override { return m_->weight_bytes(); }
    Status Forward(const StepInput& in, KvStorage& kv, StepOutput* out) override {
      return m_->Forward(in, kv, out);
    }

   private:
    std::unique_ptr<Model> m_;
  };
  EngineOptions o;
  o.num_pages = 16;
  o.nan_check = EngineOptions::NanCheck::kLayers;
  auto core =
      EngineCore::Create(std::make_unique<NoCheck>(LoadTiny("tiny_deepseek_v3")), nullptr, o);
  EXPECT_EQ(core.status().code(), StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace lucid
