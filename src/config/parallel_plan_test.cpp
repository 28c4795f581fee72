// Per-rank memory under the three multi-GPU layouts (issue 23): TP 8, TP 8 + EP 8 and
// DP-attention 8 + EP 8, on 8 x 141 GiB sm_90 GPUs, for the GLM-5-NVFP4 and DeepSeek-V3.2-FP8
// configs. The expected bytes are summed here from the facts' tensor list (names and sizes, with
// attention picked out by name), not from the planner: under TP every split tensor is divided by 8
// (rounded up per tensor) and replicated ones are whole; under EP the routed experts' total is
// divided by 8 (whole experts per rank); under DP attention the self_attn.* tensors are whole on
// every rank. KV tokens are floor((static budget - weights) / (bytes per token x page)) x page;
// the latent KV is replicated under plain TP (server total = one rank's), not under DP attention
// (server total = 8 x one rank's).
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "config/memory_plan.h"
#include "config/model_facts.h"
#include "config/resolve_test_util.h"
#include "config/resolver.h"

namespace lucid::config {
namespace {

using testing_util::Flags;

std::string Src(const std::string& rel) { return std::string(LUCID_SOURCE_DIR) + "/" + rel; }

StatusOr<ResolvedConfig> Plan(const std::string& dir, Flags more) {
  Flags flags = {{"model-path", dir},
                 {"target", "cuda:sm_90"},
                 {"gpu-memory", "141GiB"},
                 {"gpu-count", "8"},
                 {"tp-size", "8"}};
  flags.insert(flags.end(), more.begin(), more.end());
  return testing_util::ResolveFlags(flags);
}

enum class Layout { kTp, kTpEp, kDpEp };

// What one of 8 ranks holds, summed from the tensor list.
uint64_t ExpectedWeights(const ModelFacts& f, Layout l) {
  const uint64_t n = 8;
  uint64_t s = 0, experts = 0;
  for (const TensorEntry& t : f.tensors) {
    const bool attention = t.name.find(".self_attn.") != std::string::npos;
    if (t.expert && l != Layout::kTp)
      experts += t.bytes;
    else if (attention && l == Layout::kDpEp)
      s += t.bytes;
    else
      s += t.split ? (t.bytes + n - 1) / n : t.bytes;
  }
  return s + (experts + n - 1) / n;
}

struct Case {
  const char* fixture;
  int64_t experts;
};

class ParallelPlanTest : public ::testing::TestWithParam<Case> {};

TEST_P(ParallelPlanTest, PerRankWeightsAndKvTokensForTpEpAndDpAttention) {
  const std::string dir = Src(std::string("tests/fixtures/configs/") + GetParam().fixture);
  StatusOr<ModelFacts> facts = LoadModelFacts(dir);
  ASSERT_TRUE(facts.ok()) << facts.status().ToString();
  ASSERT_EQ(facts->config.n_routed_experts, GetParam().experts);
  const std::pair<Layout, Flags> layouts[] = {
      {Layout::kTp, {}},
      {Layout::kTpEp, {{"ep-size", "8"}}},
      {Layout::kDpEp, {{"ep-size", "8"}, {"enable-dp-attention", "true"}, {"dp-size", "8"}}}};
  std::vector<MemoryPlan> plans;
  for (const auto& [layout, flags] : layouts) {
    StatusOr<ResolvedConfig> r = Plan(dir, flags);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    const MemoryPlan& m = r->memory();
    SCOPED_TRACE(m.layout);
    EXPECT_EQ(m.weights, ExpectedWeights(*facts, layout));
    EXPECT_EQ(m.weights, m.weight_parts.attention + m.weight_parts.experts + m.weight_parts.other);
    const int64_t page = r->Int("page-size");
    const int64_t page_bytes = m.kv_bytes_per_token * page;
    const int64_t tokens =
        (static_cast<int64_t>(m.static_budget) - static_cast<int64_t>(m.weights)) / page_bytes *
        page;
    ASSERT_GT(tokens, 0);
    EXPECT_EQ(m.kv_capacity_tokens, tokens);
    EXPECT_EQ(m.max_total_tokens, tokens);
    EXPECT_EQ(r->Int("max-total-tokens"), tokens);
    const nlohmann::json j = r->ToJson()["memory"];
    EXPECT_EQ(j["kv_tokens_per_rank"].get<int64_t>(), tokens);
    EXPECT_EQ(j["weights_bytes_per_device"].get<uint64_t>(), m.weights);
    const std::string text = r->ToText();
    EXPECT_NE(text.find("parallel layout        " + m.layout + " (rule:parallel-layout) "),
              std::string::npos)
        << text;
    if (layout == Layout::kDpEp) {
      // Each rank holds only its own requests' KV: the server holds 8 ranks' worth.
      EXPECT_EQ(m.layout, "DP-attention 8 + EP 8");
      EXPECT_EQ(m.server_kv_tokens, 8 * tokens);
      EXPECT_FALSE(j["parallel"]["kv_replicated"].get<bool>());
      EXPECT_NE(text.find("server KV tokens       " + std::to_string(8 * tokens) + " (8 ranks x " +
                          std::to_string(tokens)),
                std::string::npos)
          << text;
      // Data-parallel attention is built (serve and generate run it): not a gap of the plan.
      for (const std::string& n : r->data().not_runnable_here)
        EXPECT_EQ(n.find("data-parallel attention"), std::string::npos) << n;
    } else {
      // Every rank holds every request's latent KV: the server holds as many tokens as one rank.
      EXPECT_EQ(m.layout, layout == Layout::kTp ? "TP 8" : "TP 8 + EP 8");
      EXPECT_EQ(m.server_kv_tokens, tokens);
      EXPECT_TRUE(j["parallel"]["kv_replicated"].get<bool>());
      EXPECT_NE(text.find("server KV tokens       " + std::to_string(tokens) +
                          " (the KV is replicated on every rank"),
                std::string::npos)
          << text;
    }
    EXPECT_EQ(j["server_kv_tokens"].get<int64_t>(), m.server_kv_tokens);
    plans.push_back(m);
  }
  // The latent is whole on every rank in every layout: the bytes per token do not change.
  EXPECT_EQ(plans[0].kv_bytes_per_token, plans[1].kv_bytes_per_token);
  EXPECT_EQ(plans[0].kv_bytes_per_token, plans[2].kv_bytes_per_token);
  // TP and EP hold the same share of the experts (1/8), EP without the per-tensor rounding.
  EXPECT_EQ(plans[0].weight_parts.attention, plans[1].weight_parts.attention);
  EXPECT_GE(plans[0].weight_parts.experts, plans[1].weight_parts.experts);
  // DP attention holds the split attention tensors whole (the replicated ones, q_a, kv_a, the
  // indexer and norms, are whole in every layout): the growth is exactly their other 7/8.
  uint64_t split_whole = 0, split_shard = 0;
  for (const TensorEntry& t : facts->tensors)
    if (t.split && t.name.find(".self_attn.") != std::string::npos) {
      split_whole += t.bytes;
      split_shard += (t.bytes + 7) / 8;
    }
  ASSERT_GT(split_whole, 0u);
  EXPECT_EQ(plans[2].weight_parts.attention - plans[1].weight_parts.attention,
            split_whole - split_shard);
  EXPECT_LT(plans[2].max_total_tokens, plans[1].max_total_tokens);
  EXPECT_GT(plans[2].server_kv_tokens, plans[1].server_kv_tokens);
  EXPECT_EQ(plans[2].weight_parts.experts, plans[1].weight_parts.experts);
  EXPECT_EQ(plans[2].weight_parts.other, plans[1].weight_parts.other);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ParallelPlanTest,
                         ::testing::Values(Case{"GLM-5-NVFP4", 256},
                                           Case{"DeepSeek-V3.2-FP8", 256}),
                         [](const auto& info) {
                           std::string n = info.param.fixture;
                           for (char& c : n)
                             if (!isalnum(static_cast<unsigned char>(c))) c = '_';
                           return n;
                         });

TEST(ParallelPlanRefusals, DpSizeMustEqualTpSizeAndNeedsDpAttention) {
  const std::string dir = Src("tests/fixtures/configs/DeepSeek-V3.2-FP8");
  StatusOr<ResolvedConfig> r = Plan(dir, {{"enable-dp-attention", "true"}, {"dp-size", "4"}});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("--dp-size 4 (user:cli)"), std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("would work: --dp-size 8"), std::string::npos);
  r = Plan(dir, {{"dp-size", "8"}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("needs --enable-dp-attention"), std::string::npos)
      << r.status().message();
  // The default: no DP attention, dp-size 1, nothing about it in what this build cannot run.
  r = Plan(dir, {});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->Int("dp-size"), 1);
  EXPECT_FALSE(r->Bool("enable-dp-attention"));
  for (const std::string& n : r->data().not_runnable_here)
    EXPECT_EQ(n.find("data-parallel attention"), std::string::npos) << n;
}

}  // namespace
}  // namespace lucid::config
