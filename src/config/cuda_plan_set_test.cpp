// Which CUDA op set runs a plan: on the DeepSeek-V3.2-FP8 config fixture (FP8 block linear
// layers and experts) resolved for an H200, and on hand-made kernel lists.
#include "config/cuda_plan_set.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "config/resolver.h"

namespace lucid::config {
namespace {

using Flags = std::vector<std::pair<std::string, std::string>>;

// The fixture on 8 x H200 (tp 8, no graphs), with `more` added or replacing.
StatusOr<ResolvedConfig> ResolveDeepSeekV32(const Flags& more) {
  std::map<std::string, std::string> flags = {
      {"model-path", std::string(LUCID_SOURCE_DIR) + "/tests/fixtures/configs/DeepSeek-V3.2-FP8"},
      {"target", "cuda:sm_90"},
      {"gpu-memory", "141GB"},
      {"gpu-count", "8"},
      {"tp-size", "8"},
      {"disable-cuda-graph", "true"}};
  for (const auto& [k, v] : more) flags[k] = v;
  ExplicitSettings s;
  for (const auto& [k, v] : flags) {
    Status st = s.Set(k, v, Source::kCli, "--" + k);
    if (!st.ok()) return st;
  }
  return Resolve(s);
}

// The kernel of family `f` for the FP8 block weights.
std::string KernelFor(const ResolvedConfig& r, KernelFamily f) {
  for (const KernelChoice& k : r.kernels())
    if (k.family == f && !k.situations.empty() &&
        k.situations.front().weight_format == WeightFormat::kFp8Block)
      return k.kernel;
  return "";
}

// Whether the plan's not-runnable reasons include one that contains `text`.
bool ListsSetRefusal(const ResolvedConfig& r, const std::string& text) {
  for (const std::string& n : r.not_runnable_here())
    if (n.find(text) != std::string::npos) return true;
  return false;
}

// By default cuda-bf16act serves everything (cuda-fp8act is last in the priority list, listed
// as supported but lower); naming cuda-fp8act for the linear layers and the experts makes the
// plan the set cuda-fp8act, the attention kernels staying cuda-bf16act's.
TEST(CudaPlanSet, Fp8ActIsTakenOnlyWhenNamedForEveryFp8Matmul) {
  auto auto_plan = ResolveDeepSeekV32({});
  ASSERT_TRUE(auto_plan.ok()) << auto_plan.status().ToString();
  EXPECT_EQ(KernelFor(*auto_plan, KernelFamily::kMatmul), "cuda-bf16act");
  EXPECT_EQ(KernelFor(*auto_plan, KernelFamily::kMoe), "cuda-bf16act");
  bool listed = false;
  for (const KernelChoice& k : auto_plan->kernels())
    for (const CandidateReport& c : k.candidates)
      if (c.name == "cuda-fp8act" && k.family == KernelFamily::kMatmul &&
          k.situations.front().weight_format == WeightFormat::kFp8Block) {
        listed = true;
        EXPECT_TRUE(c.supported);
        EXPECT_EQ(c.reason, "supported, lower in the priority list than cuda-bf16act");
      }
  EXPECT_TRUE(listed);
  StatusOr<std::string> set = CudaOpsSetOfPlan(auto_plan->kernels());
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  EXPECT_EQ(*set, "cuda-bf16act");

  auto both = ResolveDeepSeekV32(
      {{"fp8-gemm-backend", "cuda-fp8act"}, {"moe-runner-backend", "cuda-fp8act"}});
  ASSERT_TRUE(both.ok()) << both.status().ToString();
  EXPECT_EQ(KernelFor(*both, KernelFamily::kMatmul), "cuda-fp8act");
  EXPECT_EQ(KernelFor(*both, KernelFamily::kMoe), "cuda-fp8act");
  set = CudaOpsSetOfPlan(both->kernels());
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  EXPECT_EQ(*set, "cuda-fp8act");

  // Only the linear layers named: the experts would run cuda-bf16act's arithmetic in a set that
  // quantizes them; refused, naming the flag.
  auto half = ResolveDeepSeekV32({{"fp8-gemm-backend", "cuda-fp8act"}});
  ASSERT_TRUE(half.ok()) << half.status().ToString();
  set = CudaOpsSetOfPlan(half->kernels());
  ASSERT_FALSE(set.ok());
  EXPECT_NE(set.status().message().find("pass --moe-runner-backend cuda-fp8act too"),
            std::string::npos)
      << set.status().message();
  // The plan says so itself (explain, serve's refusal), not only the commands that load it
  // (beside "tensor parallelism 8 on the CUDA backend").
  EXPECT_TRUE(ListsSetRefusal(*half, set.status().message()));
  EXPECT_FALSE(ListsSetRefusal(*both, "cuda-fp8act"));
  EXPECT_FALSE(ListsSetRefusal(*auto_plan, "cuda-fp8act"));
}

// lucid's CUDA sets declare compute capability 8.0 and up (the module's bf16 WMMA compiles for
// nothing older): asked for on a Turing target, cuda-bf16act is refused with its range.
TEST(CudaPlanSet, TheSetsAreRefusedBelowAmpere) {
  auto turing =
      ResolveDeepSeekV32({{"target", "cuda:sm_75"}, {"fp8-gemm-backend", "cuda-bf16act"}});
  ASSERT_FALSE(turing.ok());
  EXPECT_NE(turing.status().message().find("cuda-bf16act needs compute capability 8.0-13.0"),
            std::string::npos)
      << turing.status().message();
  EXPECT_TRUE(
      ResolveDeepSeekV32({{"target", "cuda:sm_80"}, {"fp8-gemm-backend", "cuda-bf16act"}}).ok());
}

// cuda-fp8act declares sm_90 and FP8 block weights only.
TEST(CudaPlanSet, Fp8ActIsRefusedOffHopperAndForOtherFormats) {
  auto blackwell = ResolveDeepSeekV32({{"target", "cuda:sm_100"},
                                       {"fp8-gemm-backend", "cuda-fp8act"},
                                       {"moe-runner-backend", "cuda-fp8act"}});
  ASSERT_FALSE(blackwell.ok());
  EXPECT_NE(blackwell.status().message().find("cuda-fp8act needs compute capability 9.0-9.0"),
            std::string::npos)
      << blackwell.status().message();
  // The NVFP4 flag does not offer it.
  auto fp4 = ResolveDeepSeekV32({{"fp4-gemm-backend", "cuda-fp8act"}});
  ASSERT_FALSE(fp4.ok());
  EXPECT_NE(fp4.status().message().find("cuda-fp8act"), std::string::npos)
      << fp4.status().message();
}

KernelChoice Choice(KernelFamily f, const std::string& kernel, WeightFormat wf) {
  KernelChoice k;
  k.family = f;
  k.kernel = kernel;
  k.what = "w";
  Situation s;
  s.family = f;
  s.weight_format = wf;
  k.situations = {s};
  return k;
}

TEST(CudaPlanSet, OneSetPerPlan) {
  using F = KernelFamily;
  using W = WeightFormat;
  const KernelChoice attn = Choice(F::kSparseAttention, "cuda-bf16act", W::kBF16);
  const KernelChoice ref = Choice(F::kSparseAttention, "cuda-reference", W::kBF16);
  const KernelChoice fp8_mm = Choice(F::kMatmul, "cuda-fp8act", W::kFp8Block);
  const KernelChoice bf16_mm = Choice(F::kMatmul, "cuda-bf16act", W::kBF16);
  const KernelChoice bf16_fp8_moe = Choice(F::kMoe, "cuda-bf16act", W::kFp8Block);
  EXPECT_EQ(*CudaOpsSetOfPlan({attn, bf16_mm}), "cuda-bf16act");
  EXPECT_EQ(*CudaOpsSetOfPlan({ref}), "cuda-reference");
  // bf16 linear layers beside FP8 ones: cuda-fp8act runs them as cuda-bf16act does.
  EXPECT_EQ(*CudaOpsSetOfPlan({attn, fp8_mm, bf16_mm}), "cuda-fp8act");
  EXPECT_FALSE(CudaOpsSetOfPlan({attn, fp8_mm, bf16_fp8_moe}).ok());
  StatusOr<std::string> two = CudaOpsSetOfPlan({ref, bf16_mm});
  ASSERT_FALSE(two.ok());
  EXPECT_NE(two.status().message().find("two CUDA sets (cuda-reference, cuda-bf16act)"),
            std::string::npos)
      << two.status().message();
  EXPECT_FALSE(CudaOpsSetOfPlan({ref, fp8_mm}).ok());
}

}  // namespace
}  // namespace lucid::config
