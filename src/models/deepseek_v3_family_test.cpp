// The DeepSeek-V3 family forward pass against transformers' fp32 goldens (tests/fixtures/golden,
// written by tools/reference/models/make_fixtures.py), plus properties that need no golden:
// incremental decode equals a full forward, chunked prefill and batching do not change results,
// DSA with index_topk >= context equals dense MLA.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "backends/cpu/cpu_ops.h"
#include "formats/safetensors.h"
#include "models/registry.h"
#include "models/step_test_util.h"
#include "runtime/engine_driver.h"

namespace lucid {
namespace {

const CpuOps kOps;

std::string Fixture(const std::string& name) {
  return std::string(LUCID_SOURCE_DIR) + "/tests/fixtures/models/" + name;
}

struct Golden {
  std::vector<int32_t> prompt, continuation;
  Tensor logits, full_logits;
};

Golden LoadGolden(const std::string& name) {
  Golden g;
  auto f = SafetensorsFile::Open(std::string(LUCID_SOURCE_DIR) + "/tests/fixtures/golden/" + name +
                                 ".safetensors");
  LUCID_CHECK(f.ok(), f.status().ToString());
  auto ids = [&](const char* t) {
    Tensor x = (*f)->Get(t).value();
    std::vector<int32_t> v;
    for (int64_t i = 0; i < x.numel(); ++i) v.push_back(static_cast<int32_t>(x.data<int64_t>()[i]));
    return v;
  };
  g.prompt = ids("prompt_ids");
  g.continuation = ids("continuation");
  g.logits = (*f)->Get("logits").value();
  g.full_logits = (*f)->Get("full_logits").value();
  return g;
}

std::unique_ptr<Model> Load(const std::string& name, ModelLoadOptions o = {}) {
  auto m = LoadModel(Fixture(name), kOps, o);
  LUCID_CHECK(m.ok(), m.status().ToString());
  return std::move(m).value();
}

float MaxAbs(const float* v, int64_t n) {
  float m = 0;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::abs(v[i]));
  return m;
}

// max |a - b| / max |b| over n values.
double RelErr(const float* a, const float* b, int64_t n) {
  double e = 0;
  for (int64_t i = 0; i < n; ++i) e = std::max(e, double(std::abs(a[i] - b[i])));
  return e / MaxAbs(b, n);
}

// Runs `tokens` as chunks of the given sizes through one sequence; returns all logits.
std::vector<float> RunChunks(Model& m, const std::vector<int32_t>& tokens,
                             const std::vector<int64_t>& sizes, int64_t page_size = 16) {
  KvStorage kv(m.kv_spec(), 16, page_size, KvDtype::kF32);
  SequenceKv seq = TestPages(page_size).New(static_cast<int64_t>(tokens.size()));
  std::vector<float> out;
  size_t at = 0;
  for (int64_t n : sizes) {
    Tensor logits;
    Status s = ForwardChunk(m, kv, seq, std::span<const int32_t>(tokens.data() + at, n),
                            ChunkRows::kAll, &logits);
    EXPECT_TRUE(s.ok()) << s.ToString();
    out.insert(out.end(), logits.data<float>(), logits.data<float>() + logits.numel());
    at += n;
  }
  EXPECT_EQ(at, tokens.size());
  return out;
}

class FamilyGoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(FamilyGoldenTest, PromptLogitsMatchTransformers) {
  Golden g = LoadGolden(GetParam());
  auto m = Load(GetParam());
  Tensor logits;
  auto out = GreedyGenerate(*m, g.prompt, 0, &logits);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  ASSERT_EQ(logits.numel(), g.logits.numel());
  const double err = RelErr(logits.data<float>(), g.logits.data<float>(), g.logits.numel());
  EXPECT_LE(err, 1e-4) << "max abs error / max |logit|";
  RecordProperty("rel_err", std::to_string(err));
  std::printf("  %s: prompt logits max abs err / max|logit| = %.3g\n", GetParam().c_str(), err);
}

TEST_P(FamilyGoldenTest, GreedyContinuationMatchesTransformers) {
  Golden g = LoadGolden(GetParam());
  auto m = Load(GetParam());
  auto out = GreedyGenerate(*m, g.prompt, static_cast<int64_t>(g.continuation.size()), nullptr);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(*out, g.continuation);
}

TEST_P(FamilyGoldenTest, IncrementalDecodeEqualsFullForward) {
  Golden g = LoadGolden(GetParam());
  auto m = Load(GetParam());
  std::vector<int32_t> all = g.prompt;
  all.insert(all.end(), g.continuation.begin(), g.continuation.end());
  const int64_t P = static_cast<int64_t>(g.prompt.size()), N = static_cast<int64_t>(all.size());
  const int64_t V = m->config().vocab_size;
  std::vector<int64_t> steps = {P};
  for (int64_t i = P; i < N; ++i) steps.push_back(1);
  auto incremental = RunChunks(*m, all, steps);
  auto full = RunChunks(*m, all, {N});
  EXPECT_LE(RelErr(incremental.data(), full.data(), N * V), 1e-5);
  // And both agree with transformers' forward over the whole sequence.
  EXPECT_LE(RelErr(incremental.data(), g.full_logits.data<float>(), N * V), 1e-4);
}

TEST_P(FamilyGoldenTest, ChunkedPrefillAcrossPagesEqualsOneChunk) {
  Golden g = LoadGolden(GetParam());
  auto m = Load(GetParam());
  const int64_t P = static_cast<int64_t>(g.prompt.size()), V = m->config().vocab_size;
  auto one = RunChunks(*m, g.prompt, {P});
  auto chunked = RunChunks(*m, g.prompt, {5, 11, 1, P - 17}, /*page_size=*/4);
  EXPECT_LE(RelErr(chunked.data(), one.data(), P * V), 1e-5);
}

TEST_P(FamilyGoldenTest, BatchedSequencesDoNotInfluenceEachOther) {
  Golden g = LoadGolden(GetParam());
  auto m = Load(GetParam());
  const int64_t V = m->config().vocab_size;
  std::vector<int32_t> a(g.prompt.begin(), g.prompt.begin() + 20);
  std::vector<int32_t> b(g.prompt.rbegin(), g.prompt.rbegin() + 33);
  auto alone_a = RunChunks(*m, a, {20});
  auto alone_b = RunChunks(*m, b, {33});
  KvStorage kv(m->kv_spec(), 16, 8, KvDtype::kF32);
  TestPages pages(8);
  SequenceKv sa = pages.New(20), sb = pages.New(33);
  const TestChunk batch[] = {{&sa, a}, {&sb, b}};
  Tensor logits;
  ASSERT_TRUE(ForwardChunks(*m, kv, batch, ChunkRows::kAll, &logits).ok());
  EXPECT_LE(RelErr(logits.data<float>(), alone_a.data(), 20 * V), 1e-5);
  EXPECT_LE(RelErr(logits.data<float>() + 20 * V, alone_b.data(), 33 * V), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, FamilyGoldenTest,
                         ::testing::Values("tiny_glm_moe_dsa", "tiny_deepseek_v32",
                                           "tiny_deepseek_v3"));

class SparseAttentionTest : public ::testing::TestWithParam<std::string> {};

TEST_P(SparseAttentionTest, TopkCoveringContextEqualsDenseAndSmallTopkDiffers) {
  Golden g = LoadGolden(GetParam());
  const int64_t P = static_cast<int64_t>(g.prompt.size());
  auto sparse = Load(GetParam());
  ASSERT_LT(sparse->config().index_topk, P) << "fixture must make selection matter";
  ModelLoadOptions wide;
  wide.index_topk_override = P;
  ModelLoadOptions dense;
  dense.force_dense_attention = true;
  auto a = RunChunks(*Load(GetParam(), wide), g.prompt, {P});
  auto d = RunChunks(*Load(GetParam(), dense), g.prompt, {P});
  auto s = RunChunks(*sparse, g.prompt, {P});
  const int64_t n = P * sparse->config().vocab_size;
  EXPECT_LE(RelErr(a.data(), d.data(), n), 1e-5) << "index_topk >= context must equal dense MLA";
  EXPECT_GE(RelErr(s.data(), d.data(), n), 1e-2) << "small index_topk must change the result";
  // The sparse result is the one transformers computes.
  EXPECT_LE(RelErr(s.data(), g.logits.data<float>(), n), 1e-4);
}

INSTANTIATE_TEST_SUITE_P(DsaFixtures, SparseAttentionTest,
                         ::testing::Values("tiny_glm_moe_dsa", "tiny_deepseek_v32"));

}  // namespace
}  // namespace lucid
