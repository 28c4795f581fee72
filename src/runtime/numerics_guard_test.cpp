// The NaN guard end to end: a test-only Ops decorator poisons the rows of one request inside the
// model; that request fails with an error that says where, every other request completes with
// exactly the tokens it gives alone, and no page leaks. The poison lives only in this file: no
// request field, option or endpoint can trigger it.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "runtime/engine_test_util.h"

namespace lucid {
namespace {

using namespace testing_util;

constexpr int32_t kPoison = 251;  // RandomPrompts draws ids below 250

// Forwards every op to CpuOps; writes NaN into the output rows of the first MoeExperts call (layer
// 1 of the GLM fixture) for the rows whose token id is kPoison in the current forward.
class PoisonOps final : public Ops {
 public:
  const char* name() const override { return "poison"; }
  void Embedding(const Weight& t, std::span<const int32_t> ids, Tensor& out) const override {
    rows_.clear();
    for (size_t i = 0; i < ids.size(); ++i)
      if (ids[i] == kPoison) rows_.push_back(static_cast<int64_t>(i));
    moe_calls_ = 0;
    cpu_.Embedding(t, ids, out);
  }
  void MoeExperts(const Tensor& x, std::span<const ExpertWeights> e, const Tensor& idx,
                  const Tensor& w, Tensor& out) const override {
    cpu_.MoeExperts(x, e, idx, w, out);
    if (moe_calls_++ != 0) return;
    for (int64_t r : rows_)
      out.data<float>()[r * out.size(1)] = std::numeric_limits<float>::quiet_NaN();
  }
  void Linear(const Tensor& x, const Weight& w, Tensor& y) const override { cpu_.Linear(x, w, y); }
  void Accumulate(Tensor& x, const Tensor& y) const override { cpu_.Accumulate(x, y); }
  void Scale(Tensor& x, float f) const override { cpu_.Scale(x, f); }
  void CopyColumns(const Tensor& x, int64_t g, int64_t gs, int64_t off, int64_t w,
                   Tensor& out) const override {
    cpu_.CopyColumns(x, g, gs, off, w, out);
  }
  void GatherRows(const Tensor& x, std::span<const int64_t> r, Tensor& out) const override {
    cpu_.GatherRows(x, r, out);
  }
  void WriteKvRows(std::span<const Tensor* const> p, const KvRowsOut& o,
                   std::span<const int64_t> r) const override {
    cpu_.WriteKvRows(p, o, r);
  }
  void TopKRows(const Tensor& s, std::span<const int64_t> n, int64_t k, int32_t off,
                Tensor& out) const override {
    cpu_.TopKRows(s, n, k, off, out);
  }
  void NonFiniteRows(const Tensor& x, Tensor& f) const override { cpu_.NonFiniteRows(x, f); }
  void LinearTransposed(const Tensor& x, const Weight& w, Tensor& y) const override {
    cpu_.LinearTransposed(x, w, y);
  }
  void RmsNorm(const Tensor& x, const Tensor& w, float eps, Tensor& y) const override {
    cpu_.RmsNorm(x, w, eps, y);
  }
  void LayerNorm(const Tensor& x, const Tensor& w, const Tensor& b, float eps,
                 Tensor& y) const override {
    cpu_.LayerNorm(x, w, b, eps, y);
  }
  void Rope(Tensor& x, int64_t heads, int64_t stride, int64_t offset, const RopeTable& t,
            std::span<const int64_t> pos, RopeStyle style) const override {
    cpu_.Rope(x, heads, stride, offset, t, pos, style);
  }
  void SwiGlu(const Tensor& g, const Tensor& u, Tensor& out) const override {
    cpu_.SwiGlu(g, u, out);
  }
  void MlaAttention(const MlaAttentionArgs& a) const override { cpu_.MlaAttention(a); }
  void IndexerScores(const IndexerArgs& a) const override { cpu_.IndexerScores(a); }
  void TopK(const float* s, int64_t n, int64_t k, int32_t* out) const override {
    cpu_.TopK(s, n, k, out);
  }
  void MoeRoute(const Tensor& l, const Tensor& b, int64_t ng, int64_t tg, int64_t k, bool norm,
                float scale, Tensor& idx, Tensor& w) const override {
    cpu_.MoeRoute(l, b, ng, tg, k, norm, scale, idx, w);
  }

 private:
  CpuOps cpu_;
  mutable std::vector<int64_t> rows_;
  mutable int moe_calls_ = 0;
};

const PoisonOps& Poison() {
  static const PoisonOps ops;
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
  bad[10] = kPoison;
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
  EngineOptions o;
  o.page_size = 16;
  o.num_pages = 128;
  o.chunked_prefill_size = 48;
  o.nan_check = GetParam().mode;
  auto core = MakeCore(LoadTiny("tiny_glm_moe_dsa", Poison()), o);
  auto prompts = RandomPrompts(9, 5, 60, 31);
  prompts[4][prompts[4].size() - 1] = kPoison;  // in its last prefill chunk: sampled in every mode
  std::vector<GenerationRequest> reqs;
  for (auto& p : prompts) reqs.push_back(Greedy(p, 10));
  auto got = RunToCompletion(*core, reqs);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  for (size_t i = 0; i < prompts.size(); ++i) {
    const GenerationResult& r = (*got)[i];
    if (i == 4) {
      EXPECT_EQ(r.finish_reason, "error");
      EXPECT_EQ(r.error.code(), StatusCode::kInternal);
      EXPECT_NE(r.error.message().find("request 5"), std::string::npos) << r.error.message();
      EXPECT_NE(r.error.message().find("prefill"), std::string::npos) << r.error.message();
      EXPECT_NE(r.error.message().find(GetParam().expect), std::string::npos) << r.error.message();
      EXPECT_TRUE(r.tokens.empty());
      std::printf("  error: %s\n", r.error.ToString().c_str());
      continue;
    }
    EXPECT_EQ(r.finish_reason, "length") << "request " << i << ": " << r.error.ToString();
    EXPECT_EQ(r.tokens, Alone(*ref, prompts[i], 10)) << "request " << i;
  }
  EngineStats st = core->Stats();
  EXPECT_EQ(st.requests_error, 1);
  EXPECT_EQ(st.requests_numeric_error, 1);
  EXPECT_EQ(st.requests_ok, 8);
  EXPECT_EQ(st.pages_used, 0);
  // The poisoned KV never entered the prefix cache: the same prompt without the poison token
  // shares no page with it, and the poisoned prompt itself fails again the same way.
  auto again = RunToCompletion(*core, {reqs[4]});
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)[0].finish_reason, "error");
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
  p[2] = kPoison;
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
