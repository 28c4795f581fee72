// The NaN guard against NaN entering at the attention, the indexer and the norms, with the
// reference kernels and with the default fast ones: a test-only Ops decorator forwards every op to
// the kernels under test and writes NaN into one op's output rows for the token kPoison.
// - rope: the MLA query's rotary part (the first Rope call of layer 0, what NaN rotary frequencies
//   make), so the NaN reaches the attention kernel through its q_rope input; it must come out of
//   the attention (softmax over a NaN score), so that even the default guard (non-finite logits)
//   fails the request: the fast kernels once turned it into finite numbers.
// - norm: the first RmsNorm output (layer 0's attn_norm), into every projection.
// - indexer: the indexer key norm (the LayerNorm of layer 0): `--nan-check layers` names
//   L0.indexer_k. (An indexer-only NaN changes which tokens are selected, never a number the
//   logits are made of, so the logits guard cannot see it; the layers check can.)
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <string>

#include "backends/cpu/cpu_fast_ops.h"
#include "runtime/engine_test_util.h"

namespace lucid {
namespace {

using namespace testing_util;

constexpr int32_t kPoison = 251;  // RandomPrompts draws ids below 250

enum class Where { kRope, kNorm, kIndexer };

class PoisonAt final : public Ops {
 public:
  PoisonAt(const Ops& inner, Where where) : in_(inner), where_(where) {}
  const char* name() const override { return "poison"; }
  void Embedding(const Weight& t, std::span<const int32_t> ids, Tensor& out) const override {
    rows_.clear();
    for (size_t i = 0; i < ids.size(); ++i)
      if (ids[i] == kPoison) rows_.push_back(static_cast<int64_t>(i));
    rope_calls_ = norm_calls_ = layer_norm_calls_ = 0;
    in_.Embedding(t, ids, out);
  }
  void Rope(Tensor& x, int64_t heads, int64_t stride, int64_t offset, const RopeTable& t,
            std::span<const int64_t> pos, RopeStyle style) const override {
    in_.Rope(x, heads, stride, offset, t, pos, style);
    if (where_ != Where::kRope || rope_calls_++ != 0) return;
    for (int64_t r : rows_)
      for (int64_t h = 0; h < heads; ++h)
        x.data<float>()[(r * heads + h) * stride + offset] =
            std::numeric_limits<float>::quiet_NaN();
  }
  void RmsNorm(const Tensor& x, const Tensor& w, float eps, Tensor& y) const override {
    in_.RmsNorm(x, w, eps, y);
    if (where_ == Where::kNorm && norm_calls_++ == 0) PoisonRows(y);
  }
  void LayerNorm(const Tensor& x, const Tensor& w, const Tensor& b, float eps,
                 Tensor& y) const override {
    in_.LayerNorm(x, w, b, eps, y);
    if (where_ == Where::kIndexer && layer_norm_calls_++ == 0) PoisonRows(y);
  }
  void Linear(const Tensor& x, const Weight& w, Tensor& y) const override { in_.Linear(x, w, y); }
  void LinearMany(const Tensor& x, std::span<const Weight* const> ws,
                  std::span<Tensor* const> ys) const override {
    in_.LinearMany(x, ws, ys);
  }
  void LinearTransposed(const Tensor& x, const Weight& w, Tensor& y) const override {
    in_.LinearTransposed(x, w, y);
  }
  void SwiGlu(const Tensor& g, const Tensor& u, Tensor& out) const override {
    in_.SwiGlu(g, u, out);
  }
  void MlaAttention(const MlaAttentionArgs& a) const override { in_.MlaAttention(a); }
  void Accumulate(Tensor& x, const Tensor& y) const override { in_.Accumulate(x, y); }
  void Scale(Tensor& x, float f) const override { in_.Scale(x, f); }
  void CopyColumns(const Tensor& x, int64_t g, int64_t gs, int64_t off, int64_t w,
                   Tensor& out) const override {
    in_.CopyColumns(x, g, gs, off, w, out);
  }
  void GatherRows(const Tensor& x, std::span<const int64_t> r, Tensor& out) const override {
    in_.GatherRows(x, r, out);
  }
  void WriteKvRows(std::span<const Tensor* const> p, const KvRowsOut& o,
                   std::span<const int64_t> r) const override {
    in_.WriteKvRows(p, o, r);
  }
  void TopKRows(const Tensor& s, std::span<const int64_t> n, int64_t k, int32_t off,
                Tensor& out) const override {
    in_.TopKRows(s, n, k, off, out);
  }
  void NonFiniteRows(const Tensor& x, Tensor& f) const override { in_.NonFiniteRows(x, f); }
  void IndexerScores(const IndexerArgs& a) const override { in_.IndexerScores(a); }
  void TopK(const float* s, int64_t n, int64_t k, int32_t* out) const override {
    in_.TopK(s, n, k, out);
  }
  void MoeRoute(const Tensor& l, const Tensor& b, int64_t ng, int64_t tg, int64_t k, bool norm,
                float scale, Tensor& idx, Tensor& w) const override {
    in_.MoeRoute(l, b, ng, tg, k, norm, scale, idx, w);
  }
  void MoeExperts(const Tensor& x, std::span<const ExpertWeights> e, const Tensor& idx,
                  const Tensor& w, Tensor& out) const override {
    in_.MoeExperts(x, e, idx, w, out);
  }
  void MlaAbsorbQuery(const Tensor& q, int64_t heads, int64_t q_stride, int64_t nope_dim,
                      int64_t v_dim, const Weight& kv_b, Tensor& q_latent) const override {
    in_.MlaAbsorbQuery(q, heads, q_stride, nope_dim, v_dim, kv_b, q_latent);
  }
  void MlaProjectOutput(const Tensor& latent, int64_t heads, int64_t nope_dim, int64_t v_dim,
                        const Weight& kv_b, Tensor& out) const override {
    in_.MlaProjectOutput(latent, heads, nope_dim, v_dim, kv_b, out);
  }

 private:
  void PoisonRows(Tensor& y) const {
    for (int64_t r : rows_)
      y.data<float>()[r * y.size(-1) + 1] = std::numeric_limits<float>::quiet_NaN();
  }
  const Ops& in_;
  Where where_;
  mutable std::vector<int64_t> rows_;
  mutable int rope_calls_ = 0, norm_calls_ = 0, layer_norm_calls_ = 0;
};

struct SiteCase {
  const char* kernels;  // reference | fast
  Where where;
  EngineOptions::NanCheck mode;
  const char* expect;  // in the error message
};

class NumericsGuardSitesTest : public ::testing::TestWithParam<SiteCase> {};

TEST_P(NumericsGuardSitesTest, ThePoisonedRequestFailsAndTheOtherCompletes) {
  const SiteCase& c = GetParam();
  const CpuFastOps fast;
  const Ops& kernels = std::string(c.kernels) == "fast" ? static_cast<const Ops&>(fast) : RefOps();
  const PoisonAt poison(kernels, c.where);
  EngineOptions o;
  o.page_size = 16;
  o.num_pages = 64;
  o.chunked_prefill_size = 64;
  o.nan_check = c.mode;
  auto core = MakeCore(LoadTiny("tiny_glm_moe_dsa", poison), o);
  auto prompts = RandomPrompts(2, 20, 30, 7);
  prompts[1][prompts[1].size() - 1] = kPoison;  // in the last prefill chunk
  auto got = RunToCompletion(*core, {Greedy(prompts[0], 4), Greedy(prompts[1], 4)});
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ((*got)[0].finish_reason, "length") << (*got)[0].error.ToString();
  const GenerationResult& bad = (*got)[1];
  EXPECT_EQ(bad.finish_reason, "error") << "tokens: " << bad.tokens.size();
  EXPECT_EQ(bad.error.code(), StatusCode::kInternal);
  EXPECT_NE(bad.error.message().find(c.expect), std::string::npos) << bad.error.message();
  EXPECT_TRUE(bad.tokens.empty());
  if (std::string(c.kernels) == "reference") {  // batch-invariant: the clean one as alone
    auto ref = LoadTiny("tiny_glm_moe_dsa");
    EXPECT_EQ((*got)[0].tokens, Alone(*ref, prompts[0], 4));
  }
}

std::string CaseName(const ::testing::TestParamInfo<SiteCase>& info) {
  static const char* const kWhere[] = {"rope", "norm", "indexer"};
  static const char* const kMode[] = {"off", "logits", "layers"};
  return std::string(info.param.kernels) + "_" + kWhere[static_cast<int>(info.param.where)] + "_" +
         kMode[static_cast<int>(info.param.mode)];
}

using M = EngineOptions::NanCheck;
INSTANTIATE_TEST_SUITE_P(
    Sites, NumericsGuardSitesTest,
    ::testing::Values(SiteCase{"fast", Where::kRope, M::kLogits, "non-finite hidden state"},
                      SiteCase{"fast", Where::kRope, M::kOff, "non-finite logits"},
                      SiteCase{"fast", Where::kRope, M::kLayers, "layer 0, op L0.q_proj"},
                      SiteCase{"reference", Where::kRope, M::kLogits, "non-finite hidden state"},
                      SiteCase{"fast", Where::kNorm, M::kLogits, "non-finite hidden state"},
                      SiteCase{"fast", Where::kNorm, M::kLayers, "layer 0, op L0.attn_norm"},
                      SiteCase{"reference", Where::kNorm, M::kLogits, "non-finite hidden state"},
                      SiteCase{"fast", Where::kIndexer, M::kLayers, "layer 0, op L0.indexer_k"},
                      SiteCase{"reference", Where::kIndexer, M::kLayers,
                               "layer 0, op L0.indexer_k"}),
    CaseName);

}  // namespace
}  // namespace lucid
