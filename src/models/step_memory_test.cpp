// A step whose tensors do not fit the backend's memory fails that step and loses nothing else. On
// GuardedDeviceBackend with a memory limit (the stand-in for a GPU that is full), a step too large
// for what is left returns the allocator's ResourceExhausted instead of ending the process, and
// the next step that fits gives what it gives on a backend with no limit, bit for bit. (The
// DeepSeek-V3 family: the Llama family computes in host memory only.)
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/guarded_device.h"
#include "models/registry.h"
#include "models/step_test_util.h"

namespace lucid {
namespace {

std::vector<float> Values(const Tensor& t) {
  return std::vector<float>(t.data<const float>(), t.data<const float>() + t.numel());
}

int64_t Held(GuardedDeviceBackend& dev) { return *dev.memory().held_bytes(); }

// One backend, its model and a KV pool with a short sequence `a` and a long one `b`.
struct ModelOnDevice {
  explicit ModelOnDevice(const Ops& ops, const std::string& fixture) : dev(ops) {
    auto m = LoadModel(TinyFixture(fixture), dev);
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    if (!m.ok()) return;
    model = std::move(*m);
    kv =
        std::make_unique<KvStorage>(model->kv_spec(), 24, 16, KvDtype::kF32, model->kv_allocator());
    a = pages.New(32);
    b = pages.New(320);
  }
  GuardedDeviceBackend dev;
  std::unique_ptr<Model> model;
  std::unique_ptr<KvStorage> kv;
  TestPages pages{16};
  SequenceKv a, b;
};

class StepMemory : public ::testing::TestWithParam<const char*> {};

TEST_P(StepMemory, AStepThatDoesNotFitFailsAloneAndTheNextStepIsExact) {
  const CpuOps ops;
  const std::vector<int32_t> prompt = TestTokens(6, 3), big = TestTokens(300, 7), next = {41};
  Tensor logits;
  // No limit: the short prompt, the long prompt, then one token after the short one.
  ModelOnDevice unlimited(ops, GetParam());
  ASSERT_NE(unlimited.model, nullptr);
  ASSERT_TRUE(
      ForwardChunk(*unlimited.model, *unlimited.kv, unlimited.a, prompt, ChunkRows::kAll, &logits)
          .ok());
  const std::vector<float> first = Values(logits);
  logits = Tensor();
  const int64_t small_held = Held(unlimited.dev);
  ASSERT_TRUE(
      ForwardChunk(*unlimited.model, *unlimited.kv, unlimited.b, big, ChunkRows::kAll, &logits)
          .ok());
  logits = Tensor();
  const int64_t big_need = Held(unlimited.dev) - small_held;  // the workspace's growth
  ASSERT_GT(big_need, 0);
  ASSERT_TRUE(
      ForwardChunk(*unlimited.model, *unlimited.kv, unlimited.a, next, ChunkRows::kLast, &logits)
          .ok());
  const std::vector<float> then = Values(logits);
  EXPECT_EQ(unlimited.dev.workspace().escaped_scopes(), 0);

  // Limited to half the long prompt's growth past the short prompt's step.
  ModelOnDevice tight(ops, GetParam());
  ASSERT_NE(tight.model, nullptr);
  ASSERT_TRUE(
      ForwardChunk(*tight.model, *tight.kv, tight.a, prompt, ChunkRows::kAll, &logits).ok());
  EXPECT_EQ(Values(logits), first);
  logits = Tensor();
  ASSERT_EQ(Held(tight.dev), small_held);
  tight.dev.memory().SetLimit(small_held + big_need / 2);
  const Status failed =
      ForwardChunk(*tight.model, *tight.kv, tight.b, big, ChunkRows::kAll, &logits);
  EXPECT_EQ(failed.code(), StatusCode::kResourceExhausted) << failed.ToString();
  EXPECT_NE(failed.message().find("step workspace ("), std::string::npos) << failed.ToString();
  EXPECT_NE(failed.message().find("GuardedMemory: cannot allocate"), std::string::npos)
      << failed.ToString();
  EXPECT_EQ(tight.b.length, 0);
  EXPECT_LE(Held(tight.dev), small_held + big_need / 2);
  // The step after the failure: the short sequence goes on as without the failed step.
  const Status s = ForwardChunk(*tight.model, *tight.kv, tight.a, next, ChunkRows::kLast, &logits);
  ASSERT_TRUE(s.ok()) << s.ToString();
  const std::vector<float> got = Values(logits);
  ASSERT_EQ(got.size(), then.size());
  EXPECT_EQ(std::memcmp(got.data(), then.data(), got.size() * sizeof(float)), 0);
  for (const std::string& v : tight.dev.violations()) ADD_FAILURE() << v;
}

// The indexer scores a chunk in blocks of query rows (each block's memory the next one's): in
// blocks of 5 rows, a batched step of a 23- and a 12-token prompt and a decode step give the
// logits of scoring each span whole, bit for bit.
TEST(IndexerRowBlocks, BlocksOfQueryRowsGiveTheWholeSpansLogits) {
  const CpuOps ops;
  for (const char* fixture : {"tiny_glm_moe_dsa", "tiny_deepseek_v32"}) {
    std::vector<std::vector<float>> results[2];
    for (int blocked = 0; blocked < 2; ++blocked) {
      GuardedDeviceBackend dev(ops);
      ModelLoadOptions o;
      o.indexer_row_block = blocked ? 5 : 0;
      o.index_topk_override = 4;  // fewer than the context: the choice matters
      auto m = LoadModel(TinyFixture(fixture), dev, o);
      ASSERT_TRUE(m.ok()) << m.status().ToString();
      KvStorage kv((*m)->kv_spec(), 8, 16, KvDtype::kF32, (*m)->kv_allocator());
      TestPages pages(16);
      SequenceKv a = pages.New(40), b = pages.New(40);
      const std::vector<int32_t> pa = TestTokens(23, 5), pb = TestTokens(12, 9), na = {17},
                                 nb = {44};
      Tensor logits;
      const TestChunk prompts[] = {{&a, pa}, {&b, pb}}, next[] = {{&a, na}, {&b, nb}};
      ASSERT_TRUE(ForwardChunks(**m, kv, prompts, ChunkRows::kAll, &logits).ok());
      results[blocked].push_back(Values(logits));
      ASSERT_TRUE(ForwardChunks(**m, kv, next, ChunkRows::kAll, &logits).ok());
      results[blocked].push_back(Values(logits));
      EXPECT_EQ(dev.workspace().escaped_scopes(), 0);
      for (const std::string& v : dev.violations()) ADD_FAILURE() << v;
    }
    EXPECT_EQ(results[0], results[1]) << fixture;
  }
}

INSTANTIATE_TEST_SUITE_P(Families, StepMemory,
                         ::testing::Values("tiny_deepseek_v3", "tiny_glm_moe_dsa"),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
}  // namespace lucid
