// CUDA graph bucket planning: the captured batch sizes, the bucket a batch runs in, and the reserve
// the planner holds for the graphs (in the plan, in `explain`'s text, gone with
// --disable-cuda-graph). Expected lists are built here from SGLang's rule (1, 2, 4, then every 8
// from 8 to 256, then every 16), not read from the planner.
#include "config/memory_plan.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "config/resolve_test_util.h"
#include "config/resolver.h"

namespace lucid::config {
namespace {

using testing_util::Flags;

std::vector<int64_t> Expected(int64_t max_bs) {
  std::vector<int64_t> all = {1, 2, 4};
  for (int64_t b = 8; b <= 256; b += 8) all.push_back(b);
  for (int64_t b = 272; b <= 4096; b += 16) all.push_back(b);
  std::vector<int64_t> out;
  for (int64_t b : all)
    if (b < max_bs) out.push_back(b);
  out.push_back(max_bs);
  return out;
}

TEST(GraphBucketsTest, ListsFollowSglangAndEndAtTheMaximum) {
  EXPECT_EQ(GraphBuckets(1), (std::vector<int64_t>{1}));
  EXPECT_EQ(GraphBuckets(3), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(GraphBuckets(8), (std::vector<int64_t>{1, 2, 4, 8}));
  EXPECT_EQ(GraphBuckets(20), (std::vector<int64_t>{1, 2, 4, 8, 16, 20}));
  EXPECT_EQ(GraphBuckets(32), (std::vector<int64_t>{1, 2, 4, 8, 16, 24, 32}));
  for (int64_t max_bs : {160, 256, 300, 512, 4096})
    EXPECT_EQ(GraphBuckets(max_bs), Expected(max_bs));
  // Sizes: 3 + 32 up to 256; 300 adds 272, 288 and 300; 4096 = 256 + 240 steps of 16.
  EXPECT_EQ(GraphBuckets(256).size(), 35u);
  EXPECT_EQ(GraphBuckets(300).size(), 38u);
  EXPECT_EQ(GraphBuckets(4096).size(), 275u);
  EXPECT_EQ(GraphBuckets(4096).back(), 4096);
  EXPECT_TRUE(GraphBuckets(0).empty());
}

TEST(GraphBucketsTest, ABatchRunsPaddedToTheSmallestBucketThatHoldsIt) {
  const std::vector<int64_t> b = GraphBuckets(256);
  const std::pair<int64_t, int64_t> pad[] = {{1, 1},     {2, 2},   {3, 4},     {5, 8},
                                             {9, 16},    {17, 24}, {100, 104}, {249, 256},
                                             {256, 256}, {257, 0}, {0, 0}};
  for (auto [n, bucket] : pad) EXPECT_EQ(GraphBucketFor(b, n), bucket) << n;
  // max 20: 17..20 run in the graph of 20; 21 runs without a graph.
  EXPECT_EQ(GraphBucketFor(GraphBuckets(20), 17), 20);
  EXPECT_EQ(GraphBucketFor(GraphBuckets(20), 21), 0);
  EXPECT_EQ(GraphBucketFor({}, 1), 0);
}

TEST(GraphBucketsTest, TextShowsTheHeadAndTheTail) {
  EXPECT_EQ(GraphBucketsText(GraphBuckets(20)), "1, 2, 4, 8, 16, 20");
  EXPECT_EQ(GraphBucketsText(GraphBuckets(256)), "1, 2, 4, 8, 16, 24, ..., 248, 256");
}

StatusOr<ResolvedConfig> ResolveV3(Flags more) {
  Flags flags = {
      {"model-path", std::string(LUCID_SOURCE_DIR) + "/tests/fixtures/configs/DeepSeek-V3-FP8"},
      {"target", "cuda:sm_90"},
      {"gpu-memory", "141GiB"},
      {"gpu-count", "8"},
      {"tp-size", "8"}};
  flags.insert(flags.end(), more.begin(), more.end());
  return testing_util::ResolveFlags(flags);
}

constexpr uint64_t kLayers = 61;  // DeepSeek-V3's num_hidden_layers
constexpr uint64_t kPerGraphPerLayer = 32 * 1024;

TEST(GraphReserveTest, TheReserveIsInThePlanAndInExplainOnSm90) {
  auto r = ResolveV3({});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->Value("disable-cuda-graph"), false);
  EXPECT_EQ(r->Value("cuda-graph-max-bs"), 256);  // min(max-running-requests 256, 256)
  const MemoryPlan& m = r->memory();
  EXPECT_EQ(m.graph_buckets, Expected(256));
  EXPECT_EQ(m.graph_exec, 35 * kLayers * kPerGraphPerLayer);
  EXPECT_GT(m.graph_workspace, 0u);
  EXPECT_EQ(m.graph_reserve, m.graph_workspace + m.graph_exec);
  EXPECT_EQ(m.dynamic_need, m.activations + m.graph_reserve + m.runtime_overhead);
  const std::string text = r->ToText();
  EXPECT_NE(text.find("CUDA graph reserve"), std::string::npos) << text;
  EXPECT_NE(text.find("35 graphs x 32 KiB per layer"), std::string::npos) << text;
  EXPECT_NE(text.find("batch sizes 1, 2, 4, 8, 16, 24, ..., 248, 256"), std::string::npos) << text;
  const nlohmann::json j = r->ToJson();
  EXPECT_EQ(j["memory"]["graph_reserve_bytes"].get<uint64_t>(), m.graph_reserve);
  EXPECT_EQ(j["memory"]["graph_batch_sizes"].size(), 35u);
}

TEST(GraphReserveTest, AnExplicitMaximumSetsTheBuckets) {
  auto r = ResolveV3({{"cuda-graph-max-bs", "20"}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const MemoryPlan& m = r->memory();
  EXPECT_EQ(m.graph_buckets, (std::vector<int64_t>{1, 2, 4, 8, 16, 20}));
  EXPECT_EQ(m.graph_exec, 6 * kLayers * kPerGraphPerLayer);
  // Fewer, smaller graphs reserve less than the default 256.
  auto full = ResolveV3({});
  ASSERT_TRUE(full.ok());
  EXPECT_LT(m.graph_reserve, full->memory().graph_reserve);
}

TEST(GraphReserveTest, DisablingGraphsRemovesTheReserve) {
  auto on = ResolveV3({});
  auto off = ResolveV3({{"disable-cuda-graph", "true"}});
  ASSERT_TRUE(on.ok() && off.ok()) << off.status().ToString();
  const MemoryPlan& m = off->memory();
  EXPECT_TRUE(m.graph_buckets.empty());
  EXPECT_EQ(m.graph_reserve, 0u);
  EXPECT_EQ(off->Value("cuda-graph-max-bs"), 0);
  EXPECT_EQ(off->Field("cuda-graph-max-bs")->Provenance(), "rule:graph-bs-unused");
  // Everything else the same: the dynamic need drops by exactly the reserve.
  EXPECT_EQ(on->memory().dynamic_need - m.dynamic_need, on->memory().graph_reserve);
  EXPECT_GE(m.max_fraction, on->memory().max_fraction);
  const std::string text = off->ToText();
  EXPECT_NE(text.find("CUDA graph reserve     none (no graphs captured: disable-cuda-graph true, "
                      "user:cli)"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("batch sizes 1,"), std::string::npos) << text;
}

}  // namespace
}  // namespace lucid::config
