// The FP8 block scale decision: what each kernel reads per target, the conversion the load does,
// and the line `explain` / serve's start-up print for it.
#include "config/fp8_scale_plan.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "config/resolve_test_util.h"
#include "config/resolver.h"

namespace lucid::config {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

KernelDecl Decl(std::string name, Device device, bool ue8m0_on_sm100) {
  KernelDecl d;
  d.name = std::move(name);
  d.family = KernelFamily::kMatmul;
  d.device = device;
  d.requires_ue8m0_on_sm100 = ue8m0_on_sm100;
  return d;
}

TEST(Fp8ScalePlanTest, WhatEachKernelReads) {
  EXPECT_EQ(KernelScaleRead(Decl("cpu", Device::kCpu, false), 0), ScaleRead::kAsStored);
  EXPECT_EQ(KernelScaleRead(Decl("cuda-reference", Device::kCuda, false), 90),
            ScaleRead::kAsStored);
  EXPECT_EQ(KernelScaleRead(Decl("cuda-reference", Device::kCuda, false), 100),
            ScaleRead::kAsStored);
  EXPECT_EQ(KernelScaleRead(Decl("cutlass", Device::kCuda, false), 90), ScaleRead::kF32);
  EXPECT_EQ(KernelScaleRead(Decl("cutlass", Device::kCuda, false), 100), ScaleRead::kF32);
  EXPECT_EQ(KernelScaleRead(Decl("deep_gemm", Device::kCuda, true), 90), ScaleRead::kF32);
  EXPECT_EQ(KernelScaleRead(Decl("deep_gemm", Device::kCuda, true), 100), ScaleRead::kUe8m0);
}

TEST(Fp8ScalePlanTest, ConversionsPerReaderAndCheckpoint) {
  const KernelDecl cpu = Decl("cpu", Device::kCpu, false);
  const KernelDecl lt = Decl("cublaslt", Device::kCuda, false);
  const KernelDecl dg = Decl("deep_gemm", Device::kCuda, true);
  struct Case {
    const KernelDecl* d;
    int sm;
    bool declared, stored;
    const char* conversion;
    bool refused;
  } cases[] = {
      {&cpu, 0, false, false, "none, read as stored (exact)", false},
      {&cpu, 0, true, true, "none, read as stored (exact)", false},
      {&lt, 90, false, false, "none, read as stored (exact)", false},
      {&lt, 90, true, true, "ue8m0 -> f32 once at load (exact: 2^(e-127), 255 -> NaN)", false},
      {&dg, 90, true, false, "none, read as stored (exact)", false},
      {&dg, 100, true, true, "none, read as stored (exact)", false},
      {&dg, 100, true, false, "f32 -> ue8m0 once at load (exact: every scale is a power of two)",
       false},
      {&dg, 100, false, false, "refused: f32 -> ue8m0 would round", true},
  };
  for (const Case& c : cases) {
    Fp8ScaleDecision d = DecideFp8Scales(*c.d, c.sm, c.declared, c.stored);
    EXPECT_THAT(d.conversion, HasSubstr(c.conversion)) << c.d->name << " sm " << c.sm;
    EXPECT_EQ(d.refused, c.refused) << c.d->name;
    EXPECT_EQ(d.exact, !c.refused) << c.d->name;
  }
  EXPECT_EQ(DecideFp8Scales(dg, 100, true, false).Line(),
            "matmul deep_gemm reads ue8m0 scales; checkpoint f32, scale_fmt ue8m0 (powers of two, "
            "checked at load): f32 -> ue8m0 once at load (exact: every scale is a power of two)");
  EXPECT_EQ(DecideFp8Scales(cpu, 0, false, false).Line(),
            "matmul cpu reads either scale format (dequantized as stored); checkpoint f32 "
            "(weight_scale_inv): none, read as stored (exact)");
  const KernelDecl& fp8act = *FindKernels(KernelFamily::kMatmul, "cuda-fp8act").front();
  EXPECT_EQ(DecideFp8Scales(fp8act, 90, true, true).Line(),
            "matmul cuda-fp8act reads either scale format (laid out as f32 for cuBLASLt per call, "
            "exactly); checkpoint ue8m0 bytes: none, read as stored (exact)");
}

using testing_util::Flags;

StatusOr<ResolvedConfig> ResolveFixture(const std::string& model, const Flags& flags) {
  Flags all = {{"model-path", std::string(LUCID_SOURCE_DIR) + "/tests/fixtures/configs/" + model}};
  all.insert(all.end(), flags.begin(), flags.end());
  if (flags[0].second != "cpu") all.insert(all.end(), {{"gpu-count", "8"}, {"tp-size", "8"}});
  return testing_util::ResolveFlags(all);
}

TEST(Fp8ScalePlanTest, ExplainStatesTheDecisionForSm90) {
  auto r = ResolveFixture("DeepSeek-V3-FP8", {{"target", "cuda:sm_90"}, {"gpu-memory", "141GiB"}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const std::vector<std::string>& lines = r->data().fp8_scales;
  ASSERT_FALSE(lines.empty());
  // lucid's CUDA kernel (cuda-bf16act: the checkpoint's bfloat16) dequantizes the block scales as
  // stored, in the linear layers and the experts; so does cuda-reference for --dtype float32.
  const std::string as_stored =
      " reads either scale format (dequantized as stored); checkpoint f32 (weight_scale_inv): "
      "none, read as stored (exact)";
  EXPECT_EQ(lines, (std::vector<std::string>{"matmul cuda-bf16act" + as_stored,
                                             "moe cuda-bf16act" + as_stored}));
  EXPECT_THAT(r->ToText(), HasSubstr("  fp8 block scales: " + lines[0] + "\n"));
  EXPECT_EQ(r->ToJson()["fp8_scales"].size(), lines.size());
  auto f32 =
      ResolveFixture("DeepSeek-V3-FP8",
                     {{"target", "cuda:sm_90"}, {"gpu-memory", "141GiB"}, {"dtype", "float32"}});
  ASSERT_TRUE(f32.ok()) << f32.status().ToString();
  EXPECT_EQ(f32->data().fp8_scales, (std::vector<std::string>{"matmul cuda-reference" + as_stored,
                                                              "moe cuda-reference" + as_stored}));
}

// DeepGEMM is not lucid's (refused by name); its declaration in the foreign catalog still says
// what it would read, for the day a kernel that reads ue8m0 is lucid's.
TEST(Fp8ScalePlanTest, DeepGemmOnSm100ReadsUe8m0FromAScaleFmtCheckpoint) {
  const std::vector<const KernelDecl*> dg = FindForeignKernels(KernelFamily::kMatmul, "deep_gemm");
  ASSERT_EQ(dg.size(), 1u);
  const Fp8ScaleDecision d = DecideFp8Scales(*dg[0], 100, true, false);
  EXPECT_THAT(d.Line(), HasSubstr("matmul deep_gemm reads ue8m0 scales; checkpoint f32, "
                                  "scale_fmt ue8m0"));
  EXPECT_THAT(d.Line(), HasSubstr("f32 -> ue8m0 once at load (exact"));
  auto r = ResolveFixture(
      "DeepSeek-V3.2-FP8",
      {{"target", "cuda:sm_100"}, {"gpu-memory", "180GiB"}, {"fp8-gemm-backend", "deep_gemm"}});
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("deep_gemm: not implemented by lucid"));
  // Left on auto: lucid's kernel, which reads the ue8m0-declared f32 scales as stored.
  auto a =
      ResolveFixture("DeepSeek-V3.2-FP8", {{"target", "cuda:sm_100"}, {"gpu-memory", "180GiB"}});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_THAT(a->ToText(), HasSubstr("fp8 block scales: matmul cuda-bf16act reads either scale "
                                     "format (dequantized as stored); checkpoint f32, scale_fmt "
                                     "ue8m0 (powers of two, checked at load): none, read as "
                                     "stored (exact)"));
}

TEST(Fp8ScalePlanTest, TheLossyPathIsNeverPlanned) {
  // DeepSeek-V3's f32 scales are not declared powers of two: the foreign catalog refuses DeepGEMM
  // on sm_100 for it (were it lucid's, it would never be planned).
  const std::vector<const KernelDecl*> dg = FindForeignKernels(KernelFamily::kMatmul, "deep_gemm");
  ASSERT_EQ(dg.size(), 1u);
  Situation s;
  s.device = Device::kCuda;
  s.sm = 100;
  s.family = KernelFamily::kMatmul;
  s.weight_format = WeightFormat::kFp8Block;
  s.ue8m0_scales = false;
  const std::optional<std::string> why = Refusal(*dg[0], s);
  ASSERT_TRUE(why.has_value());
  EXPECT_THAT(*why, HasSubstr("needs ue8m0 (power-of-two) block scales"));
  s.ue8m0_scales = true;
  EXPECT_FALSE(Refusal(*dg[0], s).has_value());
  // Planned: lucid's kernel, no conversion, nothing refused.
  auto a = ResolveFixture("DeepSeek-V3-FP8", {{"target", "cuda:sm_100"}, {"gpu-memory", "180GiB"}});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_FALSE(a->data().fp8_scales.empty());
  for (const std::string& l : a->data().fp8_scales) {
    EXPECT_THAT(l, Not(HasSubstr("refused"))) << l;
    EXPECT_THAT(l, HasSubstr(" cuda-bf16act reads either scale format")) << l;
  }
}

TEST(Fp8ScalePlanTest, CpuTargetsReadScalesAsStored) {
  auto r = ResolveFixture("DeepSeek-V3.2-FP8", {{"target", "cpu"}, {"cpu-memory", "1TiB"}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_FALSE(r->data().fp8_scales.empty());
  EXPECT_THAT(r->data().fp8_scales[0], HasSubstr("reads either scale format"));
  // A model without FP8 block weights has no line.
  auto g = ResolveFixture("GLM-5-NVFP4", {{"target", "cpu"}, {"cpu-memory", "1TiB"}});
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  for (const std::string& l : g->data().fp8_scales) ADD_FAILURE() << l;
}

}  // namespace
}  // namespace lucid::config
