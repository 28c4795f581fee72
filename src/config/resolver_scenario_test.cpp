// Scenario tests on config-only fixtures of the published GLM-5-NVFP4 and DeepSeek-V3.2-FP8
// (tests/fixtures/configs): the deployment story of docs/WHY.md, decided before any weight loads.
#include <gtest/gtest.h>

#include <algorithm>
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

StatusOr<ResolvedConfig> ResolveFixture(const std::string& model, Flags flags,
                                        const LocalGpus* local_gpus = nullptr) {
  ExplicitSettings s;
  flags.insert(flags.begin(), {"model-path", Fixture(model)});
  for (const auto& [k, v] : flags) {
    Status st = s.Set(k, v, Source::kCli, "--" + k);
    if (!st.ok()) return st;
  }
  ResolveOptions options;
  options.local_gpus = local_gpus;
  return Resolve(s, options);
}

const Flags kRtxPro8 = {
    {"target", "cuda:sm_120"}, {"gpu-memory", "96GiB"}, {"gpu-count", "8"}, {"tp-size", "8"}};

Flags With(Flags base, const Flags& more) {
  base.insert(base.end(), more.begin(), more.end());
  return base;
}

TEST(ScenarioTest, Glm5Sm120ExplicitCpuKernelOnTheGpuNamesTheFlagAndWhatWorks) {
  auto r = ResolveFixture("GLM-5-NVFP4", With(kRtxPro8, {{"kv-cache-dtype", "fp8_e4m3"},
                                                         {"nsa-decode-backend", "cpu"}}));
  ASSERT_FALSE(r.ok());
  const std::string m = r.status().message();
  EXPECT_NE(m.find("--nsa-decode-backend cpu (user:cli)"), std::string::npos) << m;
  EXPECT_NE(m.find("runs on cpu, target device is cuda"), std::string::npos) << m;
  // Working choices come from the catalog: lucid's CUDA kernel, with the fp8 KV kept.
  EXPECT_NE(m.find("--nsa-decode-backend auto | cuda-bf16act | cuda-reference"), std::string::npos)
      << m;
  EXPECT_EQ(m.find("--kv-cache-dtype bf16"), std::string::npos) << m;
}

// A kernel SGLang or vLLM runs and lucid does not implement is refused by name when the flag is
// read, in one line naming lucid's kernels for the job; never swapped for another.
TEST(ScenarioTest, SglangKernelNamesAreRefusedByNameWithLucidsKernel) {
  const std::string lucid_sparse =
      "lucid's sparse_attention kernels are cpu (on cpu) and cuda-bf16act, cuda-reference (on "
      "cuda)";
  const struct {
    std::string flag, value, says;
  } cases[] = {
      {"nsa-decode-backend", "flashmla_kv",
       "--nsa-decode-backend flashmla_kv: not implemented by lucid (an SGLang kernel: FlashMLA "
       "sparse decode over the FP8 (656 B) cache); " +
           lucid_sparse},
      {"dsa-decode-backend", "tilelang",
       "--nsa-decode-backend tilelang: not implemented by lucid (an SGLang kernel: TileLang "
       "sparse MLA (DeepSeek)); " +
           lucid_sparse},
      {"attention-backend", "flashmla_sparse",
       "--attention-backend flashmla_sparse: not implemented by lucid (an SGLang kernel: FlashMLA "
       "sparse prefill"},
      {"attention-backend", "triton",
       "--attention-backend triton: not implemented by lucid (an SGLang kernel: SGLang Triton "
       "MLA); lucid's dense_attention kernels are cpu (on cpu) and cuda-bf16act, cuda-reference "
       "(on cuda)"},
      {"fp8-gemm-backend", "deep_gemm",
       "--fp8-gemm-backend deep_gemm: not implemented by lucid (an SGLang kernel: DeepGEMM fp8 "
       "1x128/128x128); lucid's matmul kernels are cpu (on cpu) and cuda-bf16act, cuda-reference, "
       "cuda-fp8act (on cuda)"},
      {"fp4-gemm-backend", "marlin",
       "--fp4-gemm-backend marlin: not implemented by lucid (a vLLM kernel: Marlin"},
      {"moe-runner-backend", "cutlass",
       "--moe-runner-backend cutlass: not implemented by lucid (an SGLang kernel: sgl-kernel "
       "CUTLASS fp8 MoE); lucid's moe kernels are cpu"},
      {"sampling-backend", "flashinfer",
       "--sampling-backend flashinfer: not implemented by lucid (an SGLang kernel: FlashInfer "
       "sampling kernels); lucid's sampling kernels are cpu"},
  };
  for (const auto& c : cases) {
    auto r = ResolveFixture("GLM-5-NVFP4", With(kRtxPro8, {{c.flag, c.value}}));
    ASSERT_FALSE(r.ok()) << c.flag;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    const std::string m = r.status().message();
    EXPECT_EQ(m.rfind(c.says, 0), 0u) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
  // Known but not plannable: no foreign name is an allowed value, lucid's are (cuda-fp8act only
  // where FP8 block weights can be).
  for (const char* flag : {"attention-backend", "nsa-decode-backend", "fp8-gemm-backend",
                           "fp4-gemm-backend", "moe-runner-backend", "sampling-backend"}) {
    const std::vector<std::string>& allowed = FindOption(flag)->allowed;
    std::vector<std::string> want = {"cpu", "cuda-bf16act", "cuda-reference"};
    if (std::string(flag) == "fp8-gemm-backend" || std::string(flag) == "moe-runner-backend")
      want.push_back("cuda-fp8act");
    EXPECT_EQ(allowed, want) << flag;
  }
  // A name nobody declares is still an unknown value.
  auto typo = ResolveFixture("GLM-5-NVFP4", With(kRtxPro8, {{"nsa-decode-backend", "flashmlaa"}}));
  ASSERT_FALSE(typo.ok());
  EXPECT_NE(typo.status().message().find("unknown value \"flashmlaa\" (valid: auto, cpu, "
                                         "cuda-bf16act, cuda-reference)"),
            std::string::npos)
      << typo.status().message();
}

TEST(ScenarioTest, Glm5Sm120KvLeftUnsetShowsItsRule) {
  auto r = ResolveFixture("GLM-5-NVFP4", kRtxPro8);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const ResolvedField* kv = r->Field("kv-cache-dtype");
  // The DSA-on-Blackwell rule prefers fp8, and lucid's CUDA kernel reads an fp8 cache.
  EXPECT_EQ(kv->value, "fp8_e4m3");
  EXPECT_EQ(kv->Provenance(), "rule:kv-fp8-dsa-blackwell");
  EXPECT_EQ(kv->reason.find("is not possible"), std::string::npos) << kv->reason;
  EXPECT_EQ(r->Value("nsa-decode-backend"), "cuda-bf16act");
  EXPECT_EQ(r->Field("nsa-decode-backend")->Provenance(), "rule:kernel-priority");
  EXPECT_EQ(r->Value("page-size"), 64);
}

// A cuda plan is planned with lucid's kernels that compute in its dtype (cuda-bf16act for the
// checkpoint's bfloat16) and says exactly why this build cannot run it.
TEST(ScenarioTest, ACudaPlanIsNotRunnableHereWithItsReasons) {
  auto r = ResolveFixture("GLM-5-NVFP4", kRtxPro8);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  for (const KernelChoice& k : r->kernels()) {
    EXPECT_EQ(k.kernel, "cuda-bf16act") << FamilyName(k.family);
    EXPECT_EQ(k.compiled_in, BuildHasCuda());
    // cuda-reference is passed over for computing in f32, not bf16; cuda-fp8act (matmul and moe
    // only) is refused on sm_120.
    const bool weights = k.family == KernelFamily::kMatmul || k.family == KernelFamily::kMoe;
    ASSERT_EQ(k.candidates.size(), weights ? 3u : 2u);
    EXPECT_EQ(k.candidates[1].name, "cuda-reference");
    EXPECT_TRUE(k.candidates[1].supported);
    EXPECT_EQ(k.candidates[1].reason, "supported, lower in the priority list than cuda-bf16act");
    if (weights) {
      EXPECT_EQ(k.candidates[2].name, "cuda-fp8act");
      EXPECT_FALSE(k.candidates[2].supported);
      EXPECT_EQ(k.candidates[2].reason, "needs compute capability 9.0-9.0, target has 12.0");
    }
  }
  const std::vector<std::string>& nr = r->not_runnable_here();
  auto has = [&](const std::string& line) {
    return std::find(nr.begin(), nr.end(), line) != nr.end();
  };
  if (BuildHasCuda()) {
    const std::vector<std::string>& notes = r->data().notes;
    EXPECT_NE(std::find(notes.begin(), notes.end(),
                        "--device cuda: `lucid serve` and `lucid generate` run lucid's CUDA "
                        "kernels (cuda-bf16act for --dtype bfloat16, or cuda-fp8act where named "
                        "for the FP8 block matmuls; cuda-reference's exact f32 for float32; no "
                        "CUDA graphs) on GPU 0, and `lucid bench` its device benchmark"),
              notes.end());
    EXPECT_FALSE(has("this build has no CUDA backend (configure with -DLUCID_CUDA=ON)"));
  } else {
    EXPECT_TRUE(has("this build has no CUDA backend (configure with -DLUCID_CUDA=ON)"));
    EXPECT_TRUE(
        has("matmul prefill+decode: kernel cuda-bf16act is not compiled into this "
            "build"));
  }
  // The deployment's decode graphs, which lucid's kernels do not do yet; its bf16 compute they do.
  EXPECT_EQ(r->Value("dtype"), "bfloat16");
  for (const std::string& line : nr) EXPECT_EQ(line.find("does not compute in"), std::string::npos);
  EXPECT_TRUE(
      has("kernel cuda-bf16act cannot be captured in a CUDA graph (sparse_attention, "
          "indexer, matmul, moe, sampling)"));
  // A dtype neither set computes in: the first of the list, with both gaps.
  auto f16 = ResolveFixture("GLM-5-NVFP4", With(kRtxPro8, {{"dtype", "float16"}}));
  ASSERT_TRUE(f16.ok()) << f16.status().ToString();
  const std::vector<std::string>& f16_nr = f16->not_runnable_here();
  EXPECT_NE(std::find(f16_nr.begin(), f16_nr.end(),
                      "kernel cuda-bf16act does not compute in f16 (only bf16) (sparse_attention, "
                      "indexer, matmul, moe, sampling)"),
            f16_nr.end());
  // float32 takes cuda-reference; cuda-bf16act is passed over for its dtype, said so.
  auto f32 = ResolveFixture("GLM-5-NVFP4", With(kRtxPro8, {{"dtype", "float32"}}));
  ASSERT_TRUE(f32.ok()) << f32.status().ToString();
  for (const KernelChoice& k : f32->kernels()) {
    EXPECT_EQ(k.kernel, "cuda-reference") << FamilyName(k.family);
    const bool weights = k.family == KernelFamily::kMatmul || k.family == KernelFamily::kMoe;
    ASSERT_EQ(k.candidates.size(), weights ? 3u : 2u);  // cuda-fp8act, refused on sm_120
    // Both lack decode graphs; the prefill rows have no graph to lack.
    const std::string why = k.candidates[0].reason;
    EXPECT_EQ(why.rfind("supported, but it does not compute in f32 (only bf16)", 0), 0u) << why;
    EXPECT_NE(why.find("(cuda-reference lacks less)"), std::string::npos) << why;
  }
  auto no_graphs = ResolveFixture(
      "GLM-5-NVFP4", With(kRtxPro8, {{"dtype", "float32"}, {"disable-cuda-graph", "true"}}));
  ASSERT_TRUE(no_graphs.ok()) << no_graphs.status().ToString();
  // float32 and no graphs: what is left is tensor parallelism on the GPUs (and the backend's
  // absence from a build without CUDA).
  for (const std::string& line : no_graphs->not_runnable_here()) {
    EXPECT_EQ(line.find("does not compute in"), std::string::npos) << line;
    EXPECT_EQ(line.find("CUDA graph"), std::string::npos) << line;
  }
  const std::vector<std::string>& left = no_graphs->not_runnable_here();
  EXPECT_NE(std::find(left.begin(), left.end(),
                      "tensor parallelism 8 on the CUDA backend: a model runs on one GPU so far"),
            left.end());
  // One GPU: a CUDA build runs it (lucid serve and generate with --device cuda).
  auto one_gpu = ResolveFixture("../models/tiny_glm_moe_dsa", {{"target", "cuda:sm_90"},
                                                               {"gpu-memory", "141GiB"},
                                                               {"dtype", "float32"},
                                                               {"disable-cuda-graph", "true"}});
  ASSERT_TRUE(one_gpu.ok()) << one_gpu.status().ToString();
  std::string why;
  for (const std::string& line : one_gpu->not_runnable_here()) why += line + "; ";
  if (BuildHasCuda())
    EXPECT_TRUE(one_gpu->not_runnable_here().empty()) << why;
  else
    EXPECT_EQ(why, "this build has no CUDA backend (configure with -DLUCID_CUDA=ON); ");
}

// `--target local` without a probe (bench, tests) is a CPU target; its description says whether
// this build has the CUDA kernels, and never that a build with them has none.
TEST(ScenarioTest, TheLocalTargetSaysWhatThisBuildHasForCuda) {
  auto r = ResolveFixture("DeepSeek-V3.2-FP8", {{"target", "local"}, {"cpu-memory", "4000GiB"}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const std::string text = r->ToText();
  const std::string with = "(this machine; GPUs not probed by this command)";
  const std::string without = "(this machine; this build has no CUDA backend, so no GPU is used)";
  EXPECT_NE(text.find(BuildHasCuda() ? with : without), std::string::npos) << text;
  EXPECT_EQ(text.find(BuildHasCuda() ? without : with), std::string::npos) << text;
  EXPECT_EQ(r->ToJson()["target"], r->data().target.Describe());
  EXPECT_EQ(r->Value("device"), "cpu");
}

// A probe that found no device: the local target is the CPU, and says why.
TEST(ScenarioTest, TheLocalTargetWithoutADeviceSaysWhy) {
  const LocalGpus none{{}, "no CUDA device: CUDA driver version is insufficient"};
  auto r = ResolveFixture("../models/tiny_glm_moe_dsa", {}, &none);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->Value("device"), "cpu");
  EXPECT_EQ(r->Value("gpu-count"), 0);
  EXPECT_NE(r->data().target.Describe().find(
                "(this machine; no GPU is used: no CUDA device: CUDA driver version is "
                "insufficient)"),
            std::string::npos)
      << r->data().target.Describe();
  auto forced = ResolveFixture("../models/tiny_glm_moe_dsa", {{"device", "cuda"}}, &none);
  ASSERT_FALSE(forced.ok());
  EXPECT_NE(forced.status().message().find("needs a GPU"), std::string::npos)
      << forced.status().message();
}

// A probe that found GPUs: the local target plans for device 0's kind (another kind is left
// out), its free memory and what lucid's CUDA kernels run (the bfloat16 checkpoint on
// cuda-bf16act, no graphs), each value by a rule.
TEST(ScenarioTest, TheLocalTargetPlansForThisMachinesGpu) {
  const int64_t gib = int64_t{1} << 30;
  const LocalGpus gpus{{{0, "NVIDIA H200", 90, 140 * gib, 139 * gib},
                        {1, "NVIDIA H200", 90, 140 * gib, 137 * gib},
                        {2, "NVIDIA RTX PRO 6000", 120, 96 * gib, 95 * gib}},
                       ""};
  auto r = ResolveFixture("../models/tiny_glm_moe_dsa", {}, &gpus);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->Value("device"), "cuda");
  EXPECT_EQ(r->Value("gpu-count"), 2);
  EXPECT_EQ(r->Field("gpu-count")->Provenance(), "rule:gpu-count-local");
  EXPECT_EQ(r->Value("gpu-memory"), 137 * gib);  // the least free of the two H200s
  EXPECT_EQ(r->Field("gpu-memory")->Provenance(), "rule:gpu-memory-local");
  EXPECT_EQ(r->Value("dtype"), "bfloat16");
  EXPECT_EQ(r->Field("dtype")->Provenance(), "rule:dtype-local-cuda");
  for (const KernelChoice& k : r->kernels()) EXPECT_EQ(k.kernel, "cuda-bf16act");
  EXPECT_EQ(r->Value("disable-cuda-graph"), true);
  EXPECT_EQ(r->Field("disable-cuda-graph")->Provenance(), "rule:graphs-off-local-cuda");
  EXPECT_EQ(r->memory().device_memory, static_cast<uint64_t>(137 * gib));
  const std::string d = r->data().target.Describe();
  EXPECT_NE(d.find("2 x cuda:sm_90"), std::string::npos) << d;
  EXPECT_NE(d.find("cuda:0 NVIDIA H200"), std::string::npos) << d;
  EXPECT_EQ(d.find("RTX PRO"), std::string::npos) << d;
  std::string why;
  for (const std::string& line : r->not_runnable_here()) why += line + "; ";
  if (BuildHasCuda())
    EXPECT_TRUE(r->not_runnable_here().empty()) << why;
  else
    EXPECT_NE(why.find("this build has no CUDA backend"), std::string::npos) << why;
  // The user's values stand: f16 on the local GPU is planned and named as what it cannot run.
  auto f16 = ResolveFixture("../models/tiny_glm_moe_dsa",
                            {{"dtype", "float16"}, {"gpu-memory", "64GiB"}}, &gpus);
  ASSERT_TRUE(f16.ok()) << f16.status().ToString();
  EXPECT_EQ(f16->Value("dtype"), "float16");
  EXPECT_EQ(f16->Value("gpu-memory"), 64 * gib);
  EXPECT_EQ(f16->Value("disable-cuda-graph"), true);
  size_t gaps = 0;  // what lucid's CUDA kernels lack, which `serve` refuses naming the flags
  for (const KernelChoice& k : f16->data().kernels) gaps += k.gaps.size();
  EXPECT_GT(gaps, 0u);
  // float32 runs on cuda-reference; the activations are planned in f32 either way.
  auto f32 = ResolveFixture("../models/tiny_glm_moe_dsa", {{"dtype", "float32"}}, &gpus);
  ASSERT_TRUE(f32.ok()) << f32.status().ToString();
  for (const KernelChoice& k : f32->kernels()) EXPECT_EQ(k.kernel, "cuda-reference");
  EXPECT_EQ(f32->memory().activations, r->memory().activations);
  // --device cpu on the GPU machine plans for the CPU.
  auto cpu = ResolveFixture("../models/tiny_glm_moe_dsa", {{"device", "cpu"}}, &gpus);
  ASSERT_TRUE(cpu.ok()) << cpu.status().ToString();
  EXPECT_EQ(cpu->Value("dtype"), "float32");
  EXPECT_EQ(cpu->Field("dtype")->Provenance(), "rule:dtype-cpu-f32");
}

TEST(ScenarioTest, Glm5Sm100ChoosesFp8KvByRule) {
  auto r = ResolveFixture(
      "GLM-5-NVFP4",
      {{"target", "cuda:sm_100"}, {"gpu-memory", "180GiB"}, {"gpu-count", "8"}, {"tp-size", "8"}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->Value("kv-cache-dtype"), "fp8_e4m3");
  EXPECT_EQ(r->Field("kv-cache-dtype")->Provenance(), "rule:kv-fp8-dsa-blackwell");
  EXPECT_EQ(r->Value("nsa-decode-backend"), "cuda-bf16act");
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
  auto r = ResolveFixture("DeepSeek-V3.2-FP8", {{"target", "cuda:sm_90"},
                                                {"gpu-memory", "141GB"},
                                                {"gpu-count", "8"},
                                                {"tp-size", "8"},
                                                {"kv-cache-dtype", "bf16"},
                                                {"page-size", "64"},
                                                {"mem-fraction-static", "0.85"}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->Value("kv-cache-dtype"), "bf16");
  EXPECT_EQ(r->Field("kv-cache-dtype")->Provenance(), "user:cli");
  EXPECT_EQ(r->Value("mem-fraction-static"), 0.85);
  EXPECT_EQ(r->Value("tp-size"), 8);
}

// KV capacity of DeepSeek-V3.2-FP8 on 8 x H200 (sm_90, 141 GB), tp 8, fp8 KV, fraction 0.85,
// pinned with the arithmetic.
TEST(ScenarioTest, DeepSeekV32KvCapacityPinned) {
  auto r = ResolveFixture("DeepSeek-V3.2-FP8", {{"target", "cuda:sm_90"},
                                                {"gpu-memory", "141GB"},
                                                {"gpu-count", "8"},
                                                {"tp-size", "8"},
                                                {"kv-cache-dtype", "fp8_e4m3"},
                                                {"mem-fraction-static", "0.85"}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  // fp8 block weight [o, i]: o*i bytes + ceil(o/128)*ceil(i/128) f32 scales.
  auto fp8 = [](uint64_t o, uint64_t i) {
    return o * i + ((o + 127) / 128) * ((i + 127) / 128) * 4;
  };
  const uint64_t D = 7168, V = 129280, tp = 8;
  // Replicated on every GPU, per layer: q_a, kv_a_proj_with_mqa, indexer wq_b and wk (fp8),
  // indexer weights_proj (bf16), norms (input, post, q_a, kv_a: bf16; indexer k_norm w+b).
  const uint64_t rep_layer = fp8(1536, D) + fp8(576, D) + fp8(64 * 128, 1536) + fp8(128, D) +
                             64 * D * 2 + (D + D + 1536 + 512 + 2 * 128) * 2;
  // Split by 8, per layer: q_b [128*192, 1536], kv_b [128*256, 512], o [D, 128*128].
  const uint64_t attn_split =
      fp8(128 * 192, 1536) / tp + fp8(128 * 256, 512) / tp + fp8(D, 128 * 128) / tp;
  // Dense MLP (layers 0-2): gate, up [18432, D] and down [D, 18432] (same size); split.
  const uint64_t dense = 3 * 3 * (fp8(18432, D) / tp);
  // MoE layer (58 of them): router [256, D] bf16 + bias [256] f32 (replicated); 256 routed + 1
  // shared expert, each gate, up [2048, D] and down [D, 2048] (same size); split.
  const uint64_t moe_layer = 256 * D * 2 + 256 * 4 + 257 * 3 * (fp8(2048, D) / tp);
  // Embedding and lm_head [V, D] bf16 (split by vocabulary), final norm [D] bf16.
  const uint64_t expected_weights =
      2 * (V * D * 2 / tp) + D * 2 + 61 * (rep_layer + attn_split) + dense + 58 * moe_layer;
  EXPECT_EQ(r->memory().weights, expected_weights);
  EXPECT_EQ(r->memory().weights, 86'019'856'256ull);
  // KV per token: 61 layers x (656 B FlashMLA fp8 MLA row + 128 B fp8 indexer key + 4 B scale).
  EXPECT_EQ(r->memory().kv_bytes_per_token, 61 * 788);
  // Static budget = floor(0.85 x 141e9) = 119,850,000,000 B; pool = budget - weights;
  // capacity = floor(pool / (48,068 B x 64 tokens)) x 64 tokens
  //          = floor(33,830,143,744 / 3,076,352) x 64 = 10,996 x 64 = 703,744 tokens.
  const uint64_t pool = 119'850'000'000ull - expected_weights;
  const int64_t capacity = static_cast<int64_t>(pool / (48'068ull * 64)) * 64;
  EXPECT_EQ(r->memory().kv_capacity_tokens, capacity);
  EXPECT_EQ(capacity, 703'744);
  EXPECT_EQ(r->Value("max-total-tokens"), capacity);
  EXPECT_EQ(r->Value("nsa-decode-backend"), "cuda-bf16act");
  EXPECT_EQ(r->Value("fp8-gemm-backend"), "cuda-bf16act");
}

}  // namespace
}  // namespace lucid::config

namespace lucid::config {
namespace {

// The cpu device runs tensor parallelism as MPI ranks: the degree must divide the heads (128),
// and --ep-size partitions the experts over those ranks, so it is 1 or --tp-size.
TEST(ScenarioTest, CpuTensorParallelDegreeMustDivideTheHeads) {
  ASSERT_TRUE(ResolveFixture("DeepSeek-V3.2-FP8",
                             {{"device", "cpu"}, {"cpu-memory", "4000GiB"}, {"tp-size", "2"}})
                  .ok());
  auto r = ResolveFixture("DeepSeek-V3.2-FP8",
                          {{"device", "cpu"}, {"cpu-memory", "4000GiB"}, {"tp-size", "3"}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("divide the model's 128 attention heads"), std::string::npos)
      << r.status().message();
}

TEST(ScenarioTest, ExpertParallelSizeIsOneOrTheTensorParallelSize) {
  ASSERT_TRUE(
      ResolveFixture(
          "DeepSeek-V3.2-FP8",
          {{"device", "cpu"}, {"cpu-memory", "4000GiB"}, {"tp-size", "2"}, {"ep-size", "2"}})
          .ok());
  auto r = ResolveFixture(
      "DeepSeek-V3.2-FP8",
      {{"device", "cpu"}, {"cpu-memory", "4000GiB"}, {"tp-size", "2"}, {"ep-size", "4"}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("1 or --tp-size (2)"), std::string::npos)
      << r.status().message();
}

}  // namespace
}  // namespace lucid::config
