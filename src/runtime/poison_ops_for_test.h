// PoisonOps: a test-only Ops decorator that makes one request's rows non-finite inside the model,
// on any backend. It forwards every op to its base; in each forward it notes the rows whose token
// id is kPoisonToken (Embedding) and, after the first MoeExperts call (layer 1 of the GLM and
// DeepSeek fixtures, whose layer 0 is dense), writes a NaN into the first element of those
// rows of its output through the base's CopyFromHost, so that device memory is written as the
// device writes it. The poison lives only in tests: no request field, option or endpoint can
// trigger it. ExpectOnlyThePoisonedRequestFails is the engine scenario the numerics guard tests
// run on the CPU, on the guarded stand-in for a device, and on a GPU.
// Thread-safety: one model's engine thread (it keeps per-forward state).
#pragma once

#include <gtest/gtest.h>

#include <limits>
#include <memory>
#include <vector>

#include "ops/forwarding_ops.h"
#include "runtime/engine_test_util.h"

namespace lucid::testing_util {

inline constexpr int32_t kPoisonToken = 251;  // RandomPrompts draws ids below 250

class PoisonOps final : public ForwardingOps {
 public:
  using ForwardingOps::ForwardingOps;
  const char* name() const override { return "poison"; }
  void Embedding(const Weight& t, std::span<const int32_t> ids, Tensor& out) const override {
    rows_.clear();
    for (size_t i = 0; i < ids.size(); ++i)
      if (ids[i] == kPoisonToken) rows_.push_back(static_cast<int64_t>(i));
    moe_calls_ = 0;
    base().Embedding(t, ids, out);
  }
  void MoeExperts(const Tensor& x, std::span<const ExpertWeights> e, const Tensor& idx,
                  const Tensor& w, Tensor& out) const override {
    base().MoeExperts(x, e, idx, w, out);
    if (moe_calls_++ != 0) return;
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (int64_t r : rows_)
      base().CopyFromHost(&nan, static_cast<float*>(out.raw()) + r * out.size(1), sizeof nan);
  }

 private:
  mutable std::vector<int64_t> rows_;
  mutable int moe_calls_ = 0;
};

// What the requests beside the poisoned one must give: the tokens each gives alone on the clean
// model (kernels whose rows do not depend on the batch: the CPU sets), or all their tokens
// (cuBLAS may pick another algorithm for another batch size, so a near tie may part).
enum class OthersGive { kTheirTokensAlone, kAllTheirTokens };

// Nine greedy requests through an engine over `poisoned` (a model loaded on PoisonOps) with
// NaN check `mode`; the fifth carries the poison in its last prefill chunk, so it is sampled in
// every mode. Expects: that request fails (Internal, naming "request 5", "prefill" and
// `expect`) with no tokens; every other one finishes as `others` says; no page is left in use;
// the poisoned KV never entered the prefix cache (the same request fails again).
inline void ExpectOnlyThePoisonedRequestFails(std::unique_ptr<Model> poisoned, Model& clean,
                                              EngineOptions::NanCheck mode, const char* expect,
                                              OthersGive others = OthersGive::kTheirTokensAlone) {
  EngineOptions o;
  o.page_size = 16;
  o.num_pages = 128;
  o.chunked_prefill_size = 48;
  o.nan_check = mode;
  auto core = MakeCore(std::move(poisoned), o);
  auto prompts = RandomPrompts(9, 5, 60, 31);
  prompts[4][prompts[4].size() - 1] = kPoisonToken;
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
      EXPECT_NE(r.error.message().find(expect), std::string::npos) << r.error.message();
      EXPECT_TRUE(r.tokens.empty());
      std::printf("  error: %s\n", r.error.ToString().c_str());
      continue;
    }
    EXPECT_EQ(r.finish_reason, "length") << "request " << i << ": " << r.error.ToString();
    EXPECT_EQ(r.tokens.size(), 10u) << "request " << i;
    const std::vector<int32_t> alone = Alone(clean, prompts[i], 10);
    if (others == OthersGive::kTheirTokensAlone)
      EXPECT_EQ(r.tokens, alone) << "request " << i;
    else if (r.tokens != alone)
      std::printf("  request %zu: its tokens differ from alone (a near tie)\n", i);
  }
  EngineStats st = core->Stats();
  EXPECT_EQ(st.requests_error, 1);
  EXPECT_EQ(st.requests_numeric_error, 1);
  EXPECT_EQ(st.requests_ok, 8);
  EXPECT_EQ(st.pages_used, 0);
  auto again = RunToCompletion(*core, {reqs[4]});
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)[0].finish_reason, "error");
}

}  // namespace lucid::testing_util
