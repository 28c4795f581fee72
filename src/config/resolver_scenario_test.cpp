// Scenario tests on config-only fixtures of the published GLM-5-NVFP4 and DeepSeek-V3.2-FP8
// (tests/fixtures/configs): the deployment story of docs/WHY.md, decided before any weight loads.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "config/option_table.h"
#include "config/resolver.h"

namespace lucid::config {
namespace {

using Flags = std::vector<std::pair<std::string, std::string>>;

std::string Fixture(const std::string& name) {
  return std::string(LUCID_SOURCE_DIR) + "/tests/fixtures/configs/" + name;
}

StatusOr<ResolvedConfig> ResolveFixture(const std::string& model, Flags flags) {
  ExplicitSettings s;
  flags.insert(flags.begin(), {"model-path", Fixture(model)});
  for (const auto& [k, v] : flags) {
    Status st = s.Set(k, v, Source::kCli, "--" + k);
    if (!st.ok()) return st;
  }
  return Resolve(s);
}

const Flags kRtxPro8 = {{"target", "cuda:sm_120"}, {"gpu-memory", "96GiB"}, {"gpu-count", "8"},
                        {"tp-size", "8"}};

Flags With(Flags base, const Flags& more) {
  base.insert(base.end(), more.begin(), more.end());
  return base;
}

TEST(ScenarioTest, Glm5Sm120ExplicitFp8KvWithSparseBackendThatCannotNamesBoth) {
  auto r = ResolveFixture("GLM-5-NVFP4", With(kRtxPro8, {{"kv-cache-dtype", "fp8_e4m3"},
                                              {"nsa-decode-backend", "tilelang"}}));
  ASSERT_FALSE(r.ok());
  const std::string m = r.status().message();
  EXPECT_NE(m.find("--nsa-decode-backend tilelang (user:cli)"), std::string::npos) << m;
  EXPECT_NE(m.find("--kv-cache-dtype fp8_e4m3 (user:cli)"), std::string::npos) << m;
  EXPECT_NE(m.find("cannot use a fp8_e4m3 KV cache"), std::string::npos) << m;
  // Working choices come from the catalog: bf16 KV keeps tilelang.
  EXPECT_NE(m.find("--kv-cache-dtype bf16"), std::string::npos) << m;
}

TEST(ScenarioTest, Glm5Sm120AttentionBackendWithoutSparseKernelIsRefused) {
  auto r = ResolveFixture("GLM-5-NVFP4", With(kRtxPro8, {{"kv-cache-dtype", "fp8_e4m3"},
                                              {"attention-backend", "triton"}}));
  ASSERT_FALSE(r.ok());
  const std::string m = r.status().message();
  EXPECT_NE(m.find("--attention-backend triton (user:cli)"), std::string::npos) << m;
  EXPECT_NE(m.find("has no sparse_attention kernel"), std::string::npos) << m;
  EXPECT_NE(m.find("--kv-cache-dtype fp8_e4m3 (user:cli)"), std::string::npos) << m;
}

TEST(ScenarioTest, Glm5Sm120FlashMlaIsRefusedForTheGpu) {
  auto r = ResolveFixture("GLM-5-NVFP4", With(kRtxPro8, {{"nsa-decode-backend", "flashmla_kv"}}));
  ASSERT_FALSE(r.ok());
  const std::string m = r.status().message();
  EXPECT_NE(m.find("needs compute capability 9.0-10.3, target has 12.0"), std::string::npos) << m;
  EXPECT_NE(m.find("--nsa-decode-backend auto | tilelang"), std::string::npos) << m;
}

TEST(ScenarioTest, Glm5Sm120KvLeftUnsetShowsItsRule) {
  auto r = ResolveFixture("GLM-5-NVFP4", kRtxPro8);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const ResolvedField* kv = r->Field("kv-cache-dtype");
  // The DSA-on-Blackwell rule prefers fp8, but no sparse decode kernel for sm_120 reads it: the
  // rule says so, and bf16 is chosen.
  EXPECT_EQ(kv->value, "bf16");
  EXPECT_EQ(kv->Provenance(), "rule:kv-fp8-dsa-blackwell");
  EXPECT_NE(kv->reason.find("fp8_e4m3 is not possible"), std::string::npos) << kv->reason;
  EXPECT_EQ(r->Value("nsa-decode-backend"), "tilelang");
  EXPECT_EQ(r->Field("nsa-decode-backend")->Provenance(), "rule:kernel-priority");
  EXPECT_EQ(r->Value("page-size"), 64);
}

TEST(ScenarioTest, Glm5Sm100ChoosesFp8KvByRule) {
  auto r = ResolveFixture("GLM-5-NVFP4", {{"target", "cuda:sm_100"}, {"gpu-memory", "180GiB"},
                               {"gpu-count", "8"}, {"tp-size", "8"}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->Value("kv-cache-dtype"), "fp8_e4m3");
  EXPECT_EQ(r->Field("kv-cache-dtype")->Provenance(), "rule:kv-fp8-dsa-blackwell");
  EXPECT_EQ(r->Value("nsa-decode-backend"), "flashmla_kv");
}

TEST(ScenarioTest, Glm5MemFractionHighIsPlannedOrRefusedWithTheValueThatFits) {
  // Automatic graph size: 0.95 is planned honestly by capturing smaller graphs, and says why.
  auto r = ResolveFixture("GLM-5-NVFP4", With(kRtxPro8, {{"mem-fraction-static", "0.95"}}));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->Value("mem-fraction-static"), 0.95);
  EXPECT_EQ(r->Field("cuda-graph-max-bs")->Provenance(), "rule:graph-bs-fits-memory");
  EXPECT_LT(r->Value("cuda-graph-max-bs").get<int64_t>(), 256);
  // Explicit graph size too: refused, naming both, with the largest fraction that fits.
  auto bad = ResolveFixture("GLM-5-NVFP4", With(kRtxPro8, {{"mem-fraction-static", "0.95"},
                                                {"cuda-graph-max-bs", "256"}}));
  ASSERT_FALSE(bad.ok());
  const std::string m = bad.status().message();
  EXPECT_NE(m.find("--mem-fraction-static 0.95 (user:cli)"), std::string::npos) << m;
  EXPECT_NE(m.find("--cuda-graph-max-bs 256 (user:cli)"), std::string::npos) << m;
  EXPECT_NE(m.find("would work: --mem-fraction-static <= 0."), std::string::npos) << m;
  const double fits = r->memory().max_fraction;
  (void)fits;
}

TEST(ScenarioTest, NoExplicitValueIsChanged) {
  auto r = ResolveFixture("DeepSeek-V3.2-FP8", {{"target", "cuda:sm_90"}, {"gpu-memory", "141GB"},
                                     {"gpu-count", "8"}, {"tp-size", "8"},
                                     {"kv-cache-dtype", "bf16"}, {"page-size", "64"},
                                     {"mem-fraction-static", "0.85"}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->Value("kv-cache-dtype"), "bf16");
  EXPECT_EQ(r->Field("kv-cache-dtype")->Provenance(), "user:cli");
  EXPECT_EQ(r->Value("mem-fraction-static"), 0.85);
  EXPECT_EQ(r->Value("tp-size"), 8);
}

}  // namespace
}  // namespace lucid::config
