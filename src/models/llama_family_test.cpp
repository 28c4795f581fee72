// The Llama family from HF safetensors checkpoints against transformers' float32 logits
// (tests/fixtures/golden/<name>_logits.json, written by
// tools/reference/models/make_llama_fixtures.py): tiny_llama3 (GQA 4 / 2, llama3 rope scaling, tied
// embeddings) and tiny_qwen3 (qk-norm, head_dim 24 != hidden / heads, untied lm_head). Also
// properties without a golden: decoding token by token equals the full prompt's forward, and two
// sequences in one step equal each alone.
#include "models/llama_family.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_fast_ops.h"
#include "backends/cpu/cpu_ops.h"
#include "models/registry.h"
#include "models/step_test_util.h"
#include "runtime/engine_driver.h"

namespace lucid {
namespace {

const CpuOps kRef;

struct Golden {
  std::vector<int32_t> prompt, greedy;
  std::vector<std::vector<float>> logits;
};

Golden LoadGolden(const std::string& name) {
  auto j = ReadJsonFile(std::string(LUCID_SOURCE_DIR) + "/tests/fixtures/golden/" + name +
                        "_logits.json");
  LUCID_CHECK(j.ok(), j.status().ToString());
  Golden g;
  g.prompt = (*j)["prompt_ids"].get<std::vector<int32_t>>();
  g.greedy = (*j)["greedy_ids"].get<std::vector<int32_t>>();
  g.logits = (*j)["logits"].get<std::vector<std::vector<float>>>();
  return g;
}

std::unique_ptr<Model> Load(const std::string& name, const Ops& ops) {
  auto m = LoadModel(std::string(LUCID_SOURCE_DIR) + "/tests/fixtures/models/" + name, ops);
  LUCID_CHECK(m.ok(), m.status().ToString());
  return std::move(m).value();
}

// max over rows of max |got - want| / max |want| of the row.
double RowRelError(const Tensor& got, const std::vector<std::vector<float>>& want) {
  double worst = 0;
  const int64_t V = got.size(1);
  for (size_t r = 0; r < want.size(); ++r) {
    double mx = 0, err = 0;
    for (int64_t v = 0; v < V; ++v) {
      mx = std::max(mx, std::abs(double(want[r][v])));
      err = std::max(err, std::abs(double(got.data<float>()[r * V + v]) - want[r][v]));
    }
    worst = std::max(worst, err / mx);
  }
  return worst;
}

class LlamaFamilyGolden : public ::testing::TestWithParam<const char*> {};

TEST_P(LlamaFamilyGolden, PromptLogitsAndGreedyMatchTransformers) {
  const Golden g = LoadGolden(GetParam());
  const CpuFastOps fast;
  for (const Ops* ops : {static_cast<const Ops*>(&kRef), static_cast<const Ops*>(&fast)}) {
    auto m = Load(GetParam(), *ops);
    Tensor logits;
    auto out = GreedyGenerate(*m, g.prompt, static_cast<int64_t>(g.greedy.size()), &logits, 4);
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    ASSERT_EQ(logits.size(0), static_cast<int64_t>(g.prompt.size()));
    // Reference: float32 throughout, as transformers; the fast set reorders the f32 sums.
    EXPECT_LT(RowRelError(logits, g.logits), ops == &kRef ? 2e-5 : 1e-4) << ops->name();
    EXPECT_EQ(*out, g.greedy) << ops->name();
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, LlamaFamilyGolden,
                         ::testing::Values("tiny_llama3", "tiny_qwen3"));

TEST(LlamaFamilyTest, DecodeAndBatchingEqualTheFullForward) {
  auto m = Load("tiny_llama3", kRef);
  const Golden g = LoadGolden("tiny_llama3");
  const int64_t n = static_cast<int64_t>(g.prompt.size()), V = m->config().vocab_size;
  KvStorage kv(m->kv_spec(), 32, 4, KvDtype::kF32);
  TestPages pages(4);
  SequenceKv full = pages.New(n), step = pages.New(n);
  Tensor all;
  ASSERT_TRUE(ForwardChunk(*m, kv, full, g.prompt, ChunkRows::kAll, &all).ok());
  for (int64_t i = 0; i < n; ++i) {
    Tensor one;
    const std::span<const int32_t> tok(g.prompt.data() + i, 1);
    ASSERT_TRUE(ForwardChunk(*m, kv, step, tok, ChunkRows::kLast, &one).ok());
    for (int64_t v = 0; v < V; ++v)
      EXPECT_NEAR(one.data<float>()[v], all.data<float>()[i * V + v], 1e-4) << i;
  }
  // Two prompts in one step: each row equals its sequence alone.
  SequenceKv a = pages.New(n), b = pages.New(5);
  const std::vector<int32_t> other = {1, 17, 99, 3, 250};
  const TestChunk both[] = {{&a, g.prompt}, {&b, other}};
  Tensor batched, alone;
  ASSERT_TRUE(ForwardChunks(*m, kv, both, ChunkRows::kAll, &batched).ok());
  SequenceKv c = pages.New(5);
  ASSERT_TRUE(ForwardChunk(*m, kv, c, other, ChunkRows::kAll, &alone).ok());
  for (int64_t i = 0; i < n * V; ++i) EXPECT_EQ(batched.data<float>()[i], all.data<float>()[i]);
  for (int64_t i = 0; i < 5 * V; ++i)
    EXPECT_EQ(batched.data<float>()[n * V + i], alone.data<float>()[i]);
}

TEST(LlamaFamilyTest, KvSpecHoldsKeysAndValues) {
  auto m = Load("tiny_qwen3", kRef);
  // 2 KV heads x head_dim 24 for k, the same for v.
  EXPECT_EQ(m->kv_spec().latent_dim, 48);
  EXPECT_EQ(m->kv_spec().rope_dim, 48);
  EXPECT_EQ(m->kv_spec().indexer_dim, 0);
  EXPECT_EQ(KvSpecFor(m->config()).mla_row(), 96);
}

TEST(LlamaFamilyTest, RefusesQwen2ByName) {
  ModelConfig c;
  c.model_type = "qwen2";
  c.architecture = "Qwen2ForCausalLM";
  auto ck = Checkpoint::Open(std::string(LUCID_SOURCE_DIR) + "/tests/fixtures/models/tiny_qwen3");
  ASSERT_TRUE(ck.ok());
  auto m = CreateLlamaFamily(c, *ck, std::make_shared<CpuBackend>(kRef), {});
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("qwen2"), std::string::npos) << m.status().message();
  EXPECT_NE(m.status().message().find("bias"), std::string::npos) << m.status().message();
}

}  // namespace
}  // namespace lucid
