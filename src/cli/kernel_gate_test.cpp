// The self-test gate: which record a start uses (kept for this binary and compute capability, or
// measured now through the runner and kept), which of its rows are the plan's kernels, and that a
// failed or never-run kernel refuses the start unless forced, with a warning per kernel then.
#include "cli/kernel_gate.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "config/resolver.h"
#include "config/settings.h"

namespace lucid::cli {
namespace {

std::string TempDir(const std::string& tag) {
  auto p = std::filesystem::temp_directory_path() /
           ("lucid_kernel_gate_" + tag + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(p);
  return p.string();
}

SelfTestRecord Measured(bool nvfp4_passes) {
  SelfTestRecord r;
  r.device = "cuda:0 Fake GPU (sm_90)";
  const std::string ref = "cuda-reference", act = "cuda-bf16act";
  r.kernels = {
      {ref, "RmsNorm", "-", 4, 0.1, true, ""},
      {ref, "Linear", "f32", 6, 0.2, true, ""},
      {ref, "Linear", "bf16", 6, 0.3, true, ""},
      {ref, "Linear", "nvfp4", 6, 3.5, nvfp4_passes, nvfp4_passes ? "" : "T=129 N=33 K=300 nan"},
      {ref, "MlaAttention", "kv:bf16", 8, 0.4, true, ""},
      {ref, "MlaAttention", "kv:fp8_e4m3", 8, 0.4, true, ""},
      // The other set: its NVFP4 row passes; it never ran an FP8 KV cache.
      {act, "RmsNorm", "-", 4, 0.1, true, ""},
      {act, "Linear", "f32", 6, 0.2, true, ""},
      {act, "Linear", "nvfp4", 6, 0.5, true, ""},
      {act, "MlaAttention", "kv:bf16", 8, 0.4, true, ""}};
  return r;
}

GateInputs Inputs(const std::string& dir, std::vector<std::string> formats) {
  GateInputs in;
  in.dir = dir;
  in.build = "xxh3:00000000000000aa";
  in.device = "cuda:0 Fake GPU (sm_90)";
  in.sm = 90;
  in.set = "cuda-reference";
  in.formats = std::move(formats);
  return in;
}

TEST(KernelGateTest, RunsOnceKeepsTheRecordAndRunsAgainForAnotherBinaryOrDevice) {
  const std::string dir = TempDir("keep");
  int runs = 0;
  const SelfTestRunner run = [&runs]() -> StatusOr<SelfTestRecord> {
    ++runs;
    return Measured(true);
  };
  const GateInputs in = Inputs(dir, {"-", "f32", "bf16", "kv:bf16"});
  StatusOr<GateOutcome> first = VerifyKernels(in, run);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_TRUE(first->ran_now);
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(first->record_path, RecordPath(dir, 90, in.build));
  EXPECT_TRUE(std::filesystem::exists(first->record_path));
  EXPECT_TRUE(first->warnings.empty());

  StatusOr<GateOutcome> second = VerifyKernels(in, run);
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_FALSE(second->ran_now);
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(second->record.kernels.size(), 10u);
  EXPECT_EQ(second->record.build, in.build);
  EXPECT_NE(second->notes.back().find("4 of the plan's 4 cuda-reference kernels passed"),
            std::string::npos)
      << second->notes.back();

  GateInputs rebuilt = in;
  rebuilt.build = "xxh3:00000000000000bb";
  ASSERT_TRUE(VerifyKernels(rebuilt, run).ok());
  EXPECT_EQ(runs, 2);
  GateInputs blackwell = in;
  blackwell.sm = 120;
  ASSERT_TRUE(VerifyKernels(blackwell, run).ok());
  EXPECT_EQ(runs, 3);
  ASSERT_TRUE(VerifyKernels(in, run).ok());  // each record is kept beside the others
  EXPECT_EQ(runs, 3);
  std::filesystem::remove_all(dir);
}

TEST(KernelGateTest, AFailedKernelOfThePlanRefusesTheStartUnlessForced) {
  const std::string dir = TempDir("fail");
  const SelfTestRunner run = [] { return StatusOr<SelfTestRecord>(Measured(false)); };
  // The failing row is NVFP4: a bf16 plan does not use it and starts.
  ASSERT_TRUE(VerifyKernels(Inputs(dir, {"-", "f32", "bf16", "kv:bf16"}), run).ok());
  GateInputs nvfp4 = Inputs(dir, {"-", "f32", "nvfp4", "kv:bf16"});
  StatusOr<GateOutcome> refused = VerifyKernels(nvfp4, run);
  ASSERT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  const std::string& m = refused.status().message();
  EXPECT_NE(m.find("cuda-reference Linear nvfp4 failed (worst error/tolerance 3.5; T=129 N=33 "
                   "K=300 nan)"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("--allow-unverified-kernels"), std::string::npos) << m;
  EXPECT_NE(m.find("Fake GPU"), std::string::npos) << m;
  nvfp4.allow_unverified = true;
  StatusOr<GateOutcome> forced = VerifyKernels(nvfp4, run);
  ASSERT_TRUE(forced.ok()) << forced.status().ToString();
  ASSERT_EQ(forced->warnings.size(), 1u);
  EXPECT_NE(forced->warnings[0].find("Linear nvfp4 failed"), std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(KernelGateTest, AFormatNoKernelRanWithIsNeverRunAndRefused) {
  const std::string dir = TempDir("never");
  const SelfTestRunner run = [] {
    SelfTestRecord r = Measured(true);
    r.not_implemented = {"GqaAttention"};
    return StatusOr<SelfTestRecord>(r);
  };
  StatusOr<GateOutcome> g = VerifyKernels(Inputs(dir, {"-", "f32", "fp8", "kv:bf16"}), run);
  ASSERT_EQ(g.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(g.status().message().find("no cuda-reference kernel with format fp8 was run on sm_90"),
            std::string::npos)
      << g.status().message();
  EXPECT_NE(g.status().message().find("GqaAttention has no kernel on this backend"),
            std::string::npos)
      << g.status().message();
  std::filesystem::remove_all(dir);
}

// The plan's op set decides which rows gate it: another set's failure does not refuse it, and a
// format only another set ran is never run for it.
TEST(KernelGateTest, OnlyTheRowsOfThePlansOpSetGateIt) {
  const std::string dir = TempDir("set");
  const SelfTestRunner run = [] { return StatusOr<SelfTestRecord>(Measured(false)); };
  GateInputs act = Inputs(dir, {"-", "f32", "nvfp4", "kv:bf16"});
  act.set = "cuda-bf16act";
  StatusOr<GateOutcome> g = VerifyKernels(act, run);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_NE(g->notes.back().find("4 of the plan's 4 cuda-bf16act kernels passed"),
            std::string::npos)
      << g->notes.back();
  GateInputs reference = act;
  reference.set = "cuda-reference";
  EXPECT_EQ(VerifyKernels(reference, run).status().code(), StatusCode::kFailedPrecondition);
  act.formats = {"-", "f32", "kv:fp8_e4m3"};
  StatusOr<GateOutcome> fp8_kv = VerifyKernels(act, run);
  ASSERT_EQ(fp8_kv.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(fp8_kv.status().message().find(
                "no cuda-bf16act kernel with format kv:fp8_e4m3 was run on sm_90"),
            std::string::npos)
      << fp8_kv.status().message();
  std::filesystem::remove_all(dir);
}

TEST(KernelGateTest, AnUnreadableRecordIsMeasuredAgainAndReplaced) {
  const std::string dir = TempDir("bad");
  const GateInputs in = Inputs(dir, {"-", "f32", "bf16", "kv:bf16"});
  std::filesystem::create_directories(dir);
  { std::ofstream(RecordPath(dir, 90, in.build)) << "{ not json"; }
  int runs = 0;
  const SelfTestRunner run = [&runs] {
    ++runs;
    return StatusOr<SelfTestRecord>(Measured(true));
  };
  StatusOr<GateOutcome> g = VerifyKernels(in, run);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(runs, 1);
  EXPECT_NE(g->notes[0].find("is not JSON"), std::string::npos) << g->notes[0];
  ASSERT_TRUE(VerifyKernels(in, run).ok());
  EXPECT_EQ(runs, 1);  // the replacement is read back
  // A runner's error (no device) is the start's error.
  const SelfTestRunner none = [] {
    return StatusOr<SelfTestRecord>(FailedPrecondition("no CUDA device: none"));
  };
  GateInputs other = in;
  other.sm = 100;
  EXPECT_EQ(VerifyKernels(other, none).status().message(), "no CUDA device: none");
  std::filesystem::remove_all(dir);
}

TEST(KernelGateTest, ARecordThatCannotBeKeptStillGatesAndSaysSo) {
  const std::string file = TempDir("file");
  { std::ofstream(file) << "x"; }  // the directory's path is a file: nothing can be written
  const SelfTestRunner run = [] { return StatusOr<SelfTestRecord>(Measured(false)); };
  StatusOr<GateOutcome> g = VerifyKernels(Inputs(file, {"-", "f32", "bf16", "kv:bf16"}), run);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  ASSERT_EQ(g->warnings.size(), 1u);
  EXPECT_NE(g->warnings[0].find("not kept"), std::string::npos);
  EXPECT_TRUE(g->record_path.empty());
  EXPECT_EQ(VerifyKernels(Inputs(file, {"-", "nvfp4"}), run).status().code(),
            StatusCode::kFailedPrecondition);
  std::filesystem::remove(file);
}

TEST(KernelGateTest, RecordsRoundTripAndMalformedOnesAreNamed) {
  SelfTestRecord r = Measured(false);
  r.build = "xxh3:0123456789abcdef";
  r.sm = 90;
  r.ran_at = 1733350000;
  r.not_implemented = {"TopKRows"};
  StatusOr<SelfTestRecord> back = RecordFromJson(RecordToJson(r));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(RecordToJson(*back), RecordToJson(r));
  nlohmann::json j = RecordToJson(r);
  j.erase("sm");
  EXPECT_NE(RecordFromJson(j).status().message().find("\"sm\""), std::string::npos);
  j = RecordToJson(r);
  j["kernels"][0].erase("passed");
  EXPECT_EQ(RecordFromJson(j).status().code(), StatusCode::kInvalidArgument);
  j = RecordToJson(r);
  j["kernels"][1].erase("set");
  EXPECT_NE(RecordFromJson(j).status().message().find("lacks set, op, format or passed"),
            std::string::npos);
  EXPECT_EQ(RecordFromJson(nlohmann::json::array()).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(RecordPath("/d", 90, r.build), "/d/self-test-sm90-0123456789abcdef.json");
}

TEST(KernelGateTest, TheBinaryIdentityIsStableAndNamesItsHash) {
  StatusOr<std::string> a = BinaryIdentity(), b = BinaryIdentity();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
  EXPECT_EQ(a->rfind("xxh3:", 0), 0u);
  EXPECT_EQ(a->size(), 5u + 16u);
  EXPECT_EQ(SelfTestDir("/given"), "/given");
}

// The formats come from the resolved plan's own situations: a bf16 checkpoint with FP8 KV, and
// an FP8 block checkpoint (config.json with its quantization_config, no weights), on a GPU target.
StatusOr<config::ResolvedConfig> ResolveForGpu(const std::string& model, const char* kv) {
  config::ExplicitSettings s;
  const std::pair<std::string, std::string> flags[] = {{"model-path", model},
                                                       {"target", "cuda:sm_90"},
                                                       {"gpu-memory", "80GiB"},
                                                       {"max-total-tokens", "4096"},
                                                       {"kv-cache-dtype", kv}};
  for (const auto& [k, v] : flags)
    if (Status st = s.Set(k, v, config::Source::kCli, "--" + k); !st.ok()) return st;
  return config::Resolve(s);
}

TEST(KernelGateTest, RequiredFormatsAreThePlansWeightAndKvFormats) {
  const std::string fixtures = std::string(LUCID_SOURCE_DIR) + "/tests/fixtures/models/";
  StatusOr<config::ResolvedConfig> bf16 = ResolveForGpu(fixtures + "tiny_glm_moe_dsa", "fp8_e4m3");
  ASSERT_TRUE(bf16.ok()) << bf16.status().ToString();
  EXPECT_EQ(RequiredFormats(bf16->kernels(), bf16->kv_cache_dtype()),
            (std::vector<std::string>{"-", "f32", "bf16", "kv:fp8_e4m3"}));

  const std::string dir = TempDir("fp8");
  std::filesystem::create_directories(dir);
  nlohmann::json c =
      nlohmann::json::parse(std::ifstream(fixtures + "tiny_deepseek_v3/config.json"));
  c["quantization_config"] = {
      {"quant_method", "fp8"}, {"fmt", "e4m3"}, {"weight_block_size", {128, 128}}};
  { std::ofstream(dir + "/config.json") << c.dump(); }
  StatusOr<config::ResolvedConfig> fp8 = ResolveForGpu(dir, "bf16");
  ASSERT_TRUE(fp8.ok()) << fp8.status().ToString();
  EXPECT_EQ(RequiredFormats(fp8->kernels(), fp8->kv_cache_dtype()),
            (std::vector<std::string>{"-", "f32", "bf16", "fp8", "fp8-ue8m0", "kv:bf16"}));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace lucid::cli
