// The engine over a model whose backend memory the host cannot touch (GuardedDeviceBackend, the
// stand-in for a GPU): batched, chunked and prefix-cached requests, sampled ones with logprobs
// and prompt logprobs, give what the same requests give on the CPU backend, token for token and
// logprob for logprob, and no op was handed host memory where it wants device memory; a poisoned
// request fails alone, as on the CPU.
#include <gtest/gtest.h>

#include "backends/cpu/guarded_device.h"
#include "runtime/engine_test_util.h"
#include "runtime/poison_ops_for_test.h"

namespace lucid {
namespace {

using testing_util::Greedy;
using testing_util::LoadTiny;
using testing_util::MakeCore;
using testing_util::ModelDir;
using testing_util::RandomPrompts;
using testing_util::RefOps;

EngineOptions Options() {
  EngineOptions o;
  o.page_size = 16;
  o.num_pages = 64;
  o.max_running_requests = 4;
  o.chunked_prefill_size = 24;  // long prompts take several steps
  return o;
}

std::vector<GenerationRequest> Requests() {
  std::vector<GenerationRequest> reqs;
  const auto prompts = RandomPrompts(6, 3, 60, 41);
  for (size_t i = 0; i < prompts.size(); ++i) {
    GenerationRequest r = Greedy(prompts[i], 6);
    if (i % 2 == 1) {  // sampled, seeded, with logprobs and prompt logprobs
      r.sampling.temperature = 0.8f;
      r.sampling.seed = 7 + i;
      r.sampling.logprobs = 2;
      r.prompt_logprobs = 1;
    }
    reqs.push_back(std::move(r));
  }
  reqs.push_back(Greedy(prompts[0], 6));  // its prompt is in the prefix cache by now
  return reqs;
}

class EngineDevice : public ::testing::TestWithParam<const char*> {};

TEST_P(EngineDevice, RequestsOnGuardedDeviceMemoryGiveTheCpuBackendsTokensAndLogprobs) {
  GuardedDeviceBackend dev(RefOps());
  auto model = LoadModel(ModelDir(GetParam()), dev);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  auto on_dev = MakeCore(std::move(model).value(), Options());
  auto on_cpu = MakeCore(LoadTiny(GetParam()), Options());
  auto got = RunToCompletion(*on_dev, Requests());
  auto want = RunToCompletion(*on_cpu, Requests());
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_TRUE(want.ok()) << want.status().ToString();
  ASSERT_EQ(got->size(), want->size());
  for (size_t i = 0; i < got->size(); ++i) {
    const GenerationResult &g = (*got)[i], &w = (*want)[i];
    EXPECT_EQ(g.tokens, w.tokens) << "request " << i;
    ASSERT_EQ(g.logprobs.size(), w.logprobs.size()) << "request " << i;
    for (size_t j = 0; j < g.logprobs.size(); ++j)
      EXPECT_EQ(g.logprobs[j].logprob, w.logprobs[j].logprob) << "request " << i << " token " << j;
    ASSERT_EQ(g.prompt_logprobs.size(), w.prompt_logprobs.size()) << "request " << i;
    for (size_t j = 0; j < g.prompt_logprobs.size(); ++j)
      EXPECT_EQ(g.prompt_logprobs[j].logprob, w.prompt_logprobs[j].logprob) << "request " << i;
  }
  EXPECT_FALSE((*want)[1].prompt_logprobs.empty());  // the prompt-logprob path was exercised
  for (const std::string& v : dev.violations()) ADD_FAILURE() << v;
}

// The numerics guard on device memory: with --nan-check layers the per-layer flags are read back
// from the device, and the poisoned request alone fails naming the layer and the op.
TEST_P(EngineDevice, APoisonedRequestFailsAloneNamingTheLayerOnGuardedDeviceMemory) {
  const testing_util::PoisonOps poison(RefOps());
  GuardedDeviceBackend dev(poison);
  auto model = LoadModel(ModelDir(GetParam()), dev);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  auto clean = LoadTiny(GetParam());
  testing_util::ExpectOnlyThePoisonedRequestFails(
      std::move(model).value(), *clean, EngineOptions::NanCheck::kLayers, "layer 1, op L1.moe");
  for (const std::string& v : dev.violations()) ADD_FAILURE() << v;
}

INSTANTIATE_TEST_SUITE_P(Families, EngineDevice,
                         ::testing::Values("tiny_deepseek_v3", "tiny_deepseek_v32",
                                           "tiny_glm_moe_dsa"));

}  // namespace
}  // namespace lucid
