// The tiny fixtures run through CpuFastOps (at every instruction-set level this machine has) give
// the same greedy continuations as CpuOps and prompt logits within 1e-4 relative of both CpuOps
// and transformers' golden.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "backends/cpu/cpu_fast_ops.h"
#include "formats/safetensors.h"
#include "models/registry.h"
#include "runtime/engine_driver.h"

namespace lucid {
namespace {

std::string Fixture(const std::string& name) {
  return std::string(LUCID_SOURCE_DIR) + "/tests/fixtures/models/" + name;
}

double RelErr(const Tensor& a, const Tensor& b) {
  double e = 0, m = 1e-30;
  for (int64_t i = 0; i < b.numel(); ++i) {
    e = std::max(e, double(std::abs(a.data<float>()[i] - b.data<float>()[i])));
    m = std::max(m, double(std::abs(b.data<float>()[i])));
  }
  return e / m;
}

struct GenRun {
  std::vector<int32_t> tokens;
  Tensor logits;
};

GenRun Generate(const std::string& name, const Ops& ops, const std::vector<int32_t>& prompt,
             int64_t n) {
  auto m = LoadModel(Fixture(name), ops);
  LUCID_CHECK(m.ok(), m.status().ToString());
  GenRun r;
  auto out = GreedyGenerate(**m, prompt, n, &r.logits);
  LUCID_CHECK(out.ok(), out.status().ToString());
  r.tokens = *out;
  return r;
}

class FastOpsModelTest : public ::testing::TestWithParam<std::tuple<std::string, CpuIsa>> {};

TEST_P(FastOpsModelTest, SameContinuationAndLogitsAsReference) {
  const auto& [name, isa] = GetParam();
  auto f = SafetensorsFile::Open(std::string(LUCID_SOURCE_DIR) + "/tests/fixtures/golden/" +
                                 name + ".safetensors");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  Tensor ids = (*f)->Get("prompt_ids").value(), cont = (*f)->Get("continuation").value();
  std::vector<int32_t> prompt;
  for (int64_t i = 0; i < ids.numel(); ++i) prompt.push_back(int32_t(ids.data<int64_t>()[i]));
  const CpuOps ref_ops;
  const CpuFastOps fast_ops(isa);
  GenRun ref = Generate(name, ref_ops, prompt, cont.numel());
  GenRun fast = Generate(name, fast_ops, prompt, cont.numel());
  EXPECT_EQ(fast.tokens, ref.tokens);
  EXPECT_LE(RelErr(fast.logits, ref.logits), 1e-4);
  EXPECT_LE(RelErr(fast.logits, (*f)->Get("logits").value()), 1e-4);
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, FastOpsModelTest,
    ::testing::Combine(::testing::Values("tiny_glm_moe_dsa", "tiny_deepseek_v32",
                                         "tiny_deepseek_v3"),
                       ::testing::Values(CpuIsa::kAvx2, CpuIsa::kAvx512Bf16)),
    [](const auto& info) {
      return std::get<0>(info.param) + "_" + CpuIsaName(std::get<1>(info.param));
    });

}  // namespace
}  // namespace lucid
