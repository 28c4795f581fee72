// `lucid explain` / `lucid backends` driven through their CLI11 registration (as main.cpp does):
// exit statuses, one-line errors for bad input, JSON output; and `explain` agreeing with what the
// model actually allocates (`generate` loads through the same LoadModel).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/ops_registry.h"
#include "cli/commands.h"
#include "config/cli_options.h"
#include "config/resolver.h"
#include "formats/align_checkpoint.h"
#include "models/registry.h"

namespace lucid::config {
namespace {

struct CliResult {
  int code = 0;
  std::string out, err;
};

// Runs `lucid <args>` with the explain and backends subcommands registered, mapping parse errors
// to exit status 2 exactly as src/cli/main.cpp does.
CliResult RunCli(std::vector<std::string> args) {
  CLI::App app{"lucid"};
  app.require_subcommand(1);
  UseOneLineErrors(&app);  // as main.cpp should (see the report)
  int exit_code = 0;
  cli::RegisterExplainCommand(app, &exit_code);
  cli::RegisterBackendsCommand(app, &exit_code);
  std::ostringstream out, err;
  auto* old_out = std::cout.rdbuf(out.rdbuf());
  auto* old_err = std::cerr.rdbuf(err.rdbuf());
  std::vector<std::string> rev(args.rbegin(), args.rend());
  CliResult r;
  try {
    app.parse(rev);
    r.code = exit_code;
  } catch (const CLI::ParseError& e) {
    r.code = app.exit(e, out, err) == 0 ? 0 : 2;
  }
  std::cout.rdbuf(old_out);
  std::cerr.rdbuf(old_err);
  r.out = out.str();
  r.err = err.str();
  return r;
}

std::string Src(const std::string& rel) { return std::string(LUCID_SOURCE_DIR) + "/" + rel; }
const std::string kGlm = Src("tests/fixtures/configs/GLM-5-NVFP4");

int Lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

TEST(ExplainCommandTest, ValidPlanExitsZeroAndPrintsJson) {
  CliResult r = RunCli({"explain", "--model-path", kGlm, "--target", "cuda:sm_120", "--gpu-memory",
                        "96GiB", "--gpu-count", "8", "--tp-size", "8", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["valid"], true);
  EXPECT_EQ(j["settings"]["kv-cache-dtype"]["source"], "rule:kv-fp8-dsa-blackwell");
  EXPECT_EQ(j["settings"]["tp-size"]["source"], "user:cli");
  EXPECT_GT(j["memory"]["kv_capacity_tokens"].get<int64_t>(), 0);
  EXPECT_FALSE(j["kernels"].empty());
}

// The command: `explain --target cuda:sm_90 --gpu-memory 141GiB --gpu-count 8` with TP 8,
// TP 8 + EP 8 and DP-attention 8 + EP 8 (config/parallel_plan_test.cpp checks the figures): the
// layout line and the server's KV, exit 0; DP attention under what this build cannot run; a
// --dp-size other than --tp-size refused, exit 2, one line.
TEST(ExplainCommandTest, ParallelLayoutsOnEightH200s) {
  const std::string v32 = Src("tests/fixtures/configs/DeepSeek-V3.2-FP8");
  const std::vector<std::string> gpu = {"explain",    "--model-path", v32,      "--target",
                                        "cuda:sm_90", "--gpu-memory", "141GiB", "--gpu-count",
                                        "8",          "--tp-size",    "8"};
  auto with = [&](std::vector<std::string> more) {
    std::vector<std::string> a = gpu;
    a.insert(a.end(), more.begin(), more.end());
    return RunCli(a);
  };
  CliResult tp = with({});
  ASSERT_EQ(tp.code, 0) << tp.err;
  EXPECT_NE(tp.out.find("parallel layout        TP 8 (rule:parallel-layout) --tp-size 8 without "
                        "--enable-dp-attention"),
            std::string::npos)
      << tp.out;
  EXPECT_NE(tp.out.find("(the KV is replicated on every rank: as many as one rank)"),
            std::string::npos);
  CliResult ep = with({"--ep-size", "8"});
  ASSERT_EQ(ep.code, 0) << ep.err;
  EXPECT_NE(ep.out.find("TP 8 + EP 8 (rule:parallel-layout)"), std::string::npos) << ep.out;
  EXPECT_NE(ep.out.find("32 of 256 whole experts per rank"), std::string::npos) << ep.out;
  CliResult dp = with({"--ep-size", "8", "--enable-dp-attention", "--dp-size", "8", "--json"});
  ASSERT_EQ(dp.code, 0) << dp.err;
  const nlohmann::json j = nlohmann::json::parse(dp.out);
  EXPECT_EQ(j["memory"]["parallel"]["layout"], "DP-attention 8 + EP 8");
  EXPECT_EQ(j["memory"]["parallel"]["dp"], 8);
  EXPECT_EQ(j["memory"]["server_kv_tokens"].get<int64_t>(),
            8 * j["memory"]["kv_tokens_per_rank"].get<int64_t>());
  EXPECT_EQ(j["not_runnable_here"].dump().find("data-parallel attention"), std::string::npos);
  CliResult bad = with({"--enable-dp-attention", "--dp-size", "4"});
  EXPECT_EQ(bad.code, 2);
  EXPECT_EQ(Lines(bad.err), 1) << bad.err;
  EXPECT_NE(bad.err.find("--dp-size 4 (user:cli) with --enable-dp-attention true (user:cli) needs "
                         "to equal --tp-size 8"),
            std::string::npos)
      << bad.err;
}

// `explain --target cuda:sm_90` states the FP8 scale decision and the CUDA graph reserve, and
// --disable-cuda-graph removes the reserve (config/memory_plan_test.cpp checks the figures).
TEST(ExplainCommandTest, Sm90PlanShowsTheScaleDecisionAndTheGraphReserve) {
  const std::string v3 = Src("tests/fixtures/configs/DeepSeek-V3-FP8");
  const std::vector<std::string> base = {"explain",    "--model-path", v3,       "--target",
                                         "cuda:sm_90", "--gpu-memory", "141GiB", "--gpu-count",
                                         "8",          "--tp-size",    "8"};
  CliResult r = RunCli(base);
  ASSERT_EQ(r.code, 0) << r.err;
  // lucid's CUDA kernel (cuda-bf16act: the checkpoint computes in bfloat16) dequantizes the
  // scales as stored: no conversion at load.
  EXPECT_NE(r.out.find("fp8 block scales: matmul cuda-bf16act reads either scale format "
                       "(dequantized as stored); checkpoint f32 (weight_scale_inv): none, read as "
                       "stored (exact)"),
            std::string::npos)
      << r.out;
  // Planned with lucid's kernels only, and marked not runnable here with the precise reasons.
  for (const char* sglang : {"flashmla", "deep_gemm", "cutlass", "triton", "tilelang"})
    EXPECT_EQ(r.out.find(std::string(" ") + sglang + " "), std::string::npos) << sglang << r.out;
  EXPECT_NE(r.out.find("tensor parallelism 8 on the CUDA backend: a model runs on one GPU so far"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("this build has no CUDA backend") != std::string::npos, !BuildHasCuda())
      << r.out;
  EXPECT_EQ(r.out.find("--device cuda: `lucid serve` and `lucid generate` run lucid's CUDA "
                       "kernels") != std::string::npos,
            BuildHasCuda())
      << r.out;
  EXPECT_NE(r.out.find("cuda-bf16act cannot be captured in a CUDA graph"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("CUDA graph reserve"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("batch sizes 1, 2, 4, 8, 16, 24, ..., 248, 256"), std::string::npos)
      << r.out;
  std::vector<std::string> off = base;
  off.push_back("--disable-cuda-graph");
  r = RunCli(off);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("CUDA graph reserve     none (no graphs captured"), std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("batch sizes 1,"), std::string::npos) << r.out;
}

// The CPU-contention rule of the serving engine (runtime/cpu_contention.h) is in the plan with its
// reason, and the option overrides it.
TEST(ExplainCommandTest, ShowsTheCpuContentionRuleAndItsOverride) {
  const std::string tiny = Src("tests/fixtures/models/tiny_glm_moe_dsa");
  CliResult r = RunCli({"explain", "--model-path", tiny, "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["settings"]["cpu-contention"]["value"], "leave-a-core") << j["settings"].dump();
  EXPECT_EQ(j["settings"]["cpu-contention"]["source"], "rule:contention-leave-a-core");
  r = RunCli({"explain", "--model-path", tiny});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("contention-leave-a-core"), std::string::npos) << r.out;
  r = RunCli({"explain", "--model-path", tiny, "--cpu-contention", "ignore", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["settings"]["cpu-contention"]["value"], "ignore");
  EXPECT_EQ(j["settings"]["cpu-contention"]["source"], "user:cli");
  r = RunCli({"explain", "--model-path", tiny, "--cpu-contention", "sometimes"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(Lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("valid: auto, leave-a-core, ignore"), std::string::npos) << r.err;
}

struct BadInput {
  std::vector<std::string> args;
  std::string expect;  // a substring of the one-line error
};

TEST(ExplainCommandTest, ConflictExitsTwoNamingBothSettings) {
  // The CPU kernels compute in float32 only.
  CliResult r = RunCli({"explain", "--model-path", kGlm, "--device", "cpu", "--cpu-memory",
                        "4000GiB", "--dtype", "bfloat16", "--dsa-decode-backend", "cpu"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(Lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("--nsa-decode-backend cpu (user:cli) cannot serve"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("cpu does not compute in bf16 (only f32)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--dtype bfloat16 (user:cli)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("would work (changing one setting): --dtype float32"), std::string::npos)
      << r.err;
}

// A kernel name SGLang or vLLM uses and lucid does not implement: refused by name, exit 2, one
// line naming lucid's kernels for that job; the plan is never made with another kernel instead.
TEST(ExplainCommandTest, SglangKernelNamesExitTwoNamingLucidsKernel) {
  const std::vector<std::string> gpu = {"--target",    "cuda:sm_90", "--gpu-memory", "141GiB",
                                        "--gpu-count", "8",          "--tp-size",    "8"};
  const std::vector<BadInput> cases = {
      {{"--attention-backend", "flashmla_kv"},
       "lucid explain: --attention-backend flashmla_kv: not implemented by lucid (an SGLang "
       "kernel: FlashMLA sparse decode over the FP8 (656 B) cache); lucid's sparse_attention "
       "kernels are cpu (on cpu) and cuda-bf16act, cuda-reference (on cuda)"},
      {{"--nsa-prefill-backend", "tilelang"},
       "--nsa-prefill-backend tilelang: not implemented by lucid (an SGLang kernel: TileLang "
       "sparse MLA (DeepSeek)); lucid's sparse_attention kernels are cpu (on cpu) and "
       "cuda-bf16act, cuda-reference (on cuda)"},
      {{"--fp8-gemm-backend", "deep_gemm"},
       "--fp8-gemm-backend deep_gemm: not implemented by lucid (an SGLang kernel: DeepGEMM fp8 "
       "1x128/128x128); lucid's matmul kernels are cpu (on cpu) and cuda-bf16act, cuda-reference, "
       "cuda-fp8act (on cuda)"},
      {{"--fp4-gemm-backend", "flashinfer_cutlass"},
       "--fp4-gemm-backend flashinfer_cutlass: not implemented by lucid (an SGLang kernel"},
  };
  for (const BadInput& c : cases) {
    std::vector<std::string> args = {"explain", "--model-path", kGlm};
    args.insert(args.end(), gpu.begin(), gpu.end());
    args.insert(args.end(), c.args.begin(), c.args.end());
    CliResult r = RunCli(args);
    EXPECT_EQ(r.code, 2) << c.args[1];
    EXPECT_EQ(Lines(r.err), 1) << r.err;
    EXPECT_NE(r.err.find(c.expect), std::string::npos) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
  }
  // From the environment: the same line, naming the variable.
  setenv("LUCID_NSA_DECODE_BACKEND", "flashmla_kv", 1);
  std::vector<std::string> args = {"explain", "--model-path", kGlm};
  args.insert(args.end(), gpu.begin(), gpu.end());
  CliResult r = RunCli(args);
  unsetenv("LUCID_NSA_DECODE_BACKEND");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(Lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("LUCID_NSA_DECODE_BACKEND flashmla_kv: not implemented by lucid (an SGLang "
                       "kernel: FlashMLA sparse decode"),
            std::string::npos)
      << r.err;
}

TEST(ExplainCommandTest, BadInputIsOneLineAndExitTwo) {
  const std::vector<BadInput> cases = {
      {{"--no-such-flag", "1"}, "no-such-flag"},
      {{"--attention-backend", "flashmlaa"}, "valid: auto, cpu, cuda-bf16act, cuda-reference)"},
      {{"--mem-fraction-static", "1.5"}, "out of range"},
      {{"--tp-size", "0"}, "out of range"},
      {{"--gpu-memory", "lots"}, "is not a size"},
      {{"--config", Src("tests/fixtures/configs/malformed.json")}, "malformed JSON"},
      {{"--config", Src("tests/fixtures/configs/malformed.yaml")}, "nested YAML"},
      {{"--target", "cuda:sm_xx"}, "unknown target"},
      {{"--cpu-kernels", "fastest"},
       "--cpu-kernels: unknown value \"fastest\" (valid: auto, fast, fast-bf16act, reference)"},
  };
  for (const BadInput& c : cases) {
    std::vector<std::string> args = {"explain", "--model-path", kGlm};
    args.insert(args.end(), c.args.begin(), c.args.end());
    CliResult r = RunCli(args);
    EXPECT_EQ(r.code, 2) << c.args[0];
    EXPECT_EQ(Lines(r.err), 1) << c.args[0] << ": " << r.err;
    EXPECT_NE(r.err.find(c.expect), std::string::npos) << c.args[0] << ": " << r.err;
  }
  CliResult none = RunCli({"explain", "--model-path", Src("tests/fixtures/configs/no-config")});
  EXPECT_EQ(none.code, 2);
  EXPECT_EQ(Lines(none.err), 1) << none.err;
  EXPECT_NE(none.err.find("has no config.json"), std::string::npos) << none.err;
}

TEST(ExplainCommandTest, ConfigFileAndEnvironmentFeedTheSameTable) {
  setenv("LUCID_TP_SIZE", "4", 1);  // lower precedence than the file's 8
  setenv("LUCID_PAGE_SIZE", "64", 1);
  CliResult r = RunCli({"explain", "--model-path", kGlm, "--config",
                        Src("tests/fixtures/configs/serve.yaml"), "--json"});
  unsetenv("LUCID_TP_SIZE");
  unsetenv("LUCID_PAGE_SIZE");
  ASSERT_EQ(r.code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["settings"]["tp-size"]["value"], 8);
  EXPECT_EQ(j["settings"]["tp-size"]["source"], "user:file");
  EXPECT_EQ(j["settings"]["page-size"]["source"], "user:env");
  EXPECT_EQ(j["settings"]["page-size"]["origin"], "LUCID_PAGE_SIZE");
}

TEST(BackendsCommandTest, ListsEveryBackendAndSelfTestPasses) {
  CliResult r = RunCli({"backends", "--json", "--self-test"});
  ASSERT_EQ(r.code, 0) << r.out;
  nlohmann::json j = nlohmann::json::parse(r.out);
  int cpu_usable = 0, cuda_rows = 0, foreign = 0;
  for (const auto& b : j["backends"]) {
    if (b["device"] == "cpu") cpu_usable += b["usable_here"].get<bool>();
    if (b["device"] != "cpu") {
      EXPECT_FALSE(b["usable_here"].get<bool>()) << b.dump();
    }
    const std::string why = b.value("why_not", "");
    if (b["project"] != "lucid") {
      ++foreign;
      EXPECT_EQ(why, "not implemented by lucid (" + b["project"].get<std::string>() + ")");
      EXPECT_FALSE(b["compiled_in"].get<bool>());
    } else if (b["device"] == "cuda") {
      ++cuda_rows;
      EXPECT_TRUE(b["name"] == "cuda-reference" || b["name"] == "cuda-bf16act" ||
                  b["name"] == "cuda-fp8act")
          << b.dump();
      EXPECT_EQ(b["compiled_in"].get<bool>(), BuildHasCuda());
      EXPECT_NE(why.find(BuildHasCuda() ? "`lucid bench` run a model on it"
                                        : "not compiled in (this build has no CUDA backend"),
                std::string::npos)
          << why;
    }
  }
  EXPECT_EQ(cpu_usable, 6);
  // cuda-bf16act and cuda-reference, one of each per family; cuda-fp8act for matmul and moe.
  EXPECT_EQ(cuda_rows, 14);
  EXPECT_GT(foreign, 20);
  int passed = 0;
  for (const auto& t : j["self_test"]) passed += t["passed"].get<bool>();
  // matmul, dense + sparse attention, indexer: with the fast and the reference kernels; then the
  // ops conformance suite, one line per registered set.
  EXPECT_EQ(passed, 8 + static_cast<int>(OpsRegistry().size()));
  int conformance = 0;
  for (const auto& t : j["self_test"])
    if (t["family"] == "ops conformance") {
      ++conformance;
      EXPECT_TRUE(t["passed"].get<bool>()) << t.dump();
    }
  EXPECT_EQ(conformance, static_cast<int>(OpsRegistry().size()));
}

// What explain plans for the tiny fixtures equals what the loaded model holds.
TEST(ExplainAgreesWithModel, KvBytesPerTokenAndWeightBytes) {
  for (const char* name : {"tiny_glm_moe_dsa", "tiny_deepseek_v32", "tiny_deepseek_v3"}) {
    const std::string dir = Src(std::string("tests/fixtures/models/") + name);
    ASSERT_TRUE(std::filesystem::exists(dir + "/model.safetensors")) << dir << " missing";
    ExplicitSettings s;
    ASSERT_TRUE(s.Set("model-path", dir, Source::kCli, "--model-path").ok());
    ASSERT_TRUE(s.Set("target", "cpu", Source::kCli, "--target").ok());
    ASSERT_TRUE(s.Set("cpu-memory", "8GiB", Source::kCli, "--cpu-memory").ok());
    auto r = Resolve(s);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    CpuOps ops;
    auto model = LoadModel(dir, ops);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    EXPECT_EQ(r->Value("kv-cache-dtype"), "f32") << name;
    EXPECT_EQ(r->memory().kv_bytes_per_token, (*model)->kv_spec().BytesPerToken(KvDtype::kF32))
        << name;
    EXPECT_EQ(r->memory().weights, (*model)->weight_bytes()) << name;
  }
}

// The fixtures were written by transformers (header padded to 8 bytes only): explain notes the
// bytes of weights off a 64-byte line, computed here from the raw header, and names `lucid
// align`; for the aligned copy `lucid align` writes it says nothing.
TEST(ExplainCommandTest, NotesWeightsOffACacheLineOnTheCpu) {
  const std::string dir = Src("tests/fixtures/models/tiny_glm_moe_dsa");
  std::ifstream in(dir + "/model.safetensors", std::ios::binary);
  uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), 8);
  std::string header(n, '\0');
  in.read(header.data(), static_cast<std::streamsize>(n));
  uint64_t off = 0;
  const nlohmann::json h = nlohmann::json::parse(header);
  for (auto it = h.begin(); it != h.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    const uint64_t b = it.value()["data_offsets"][0], e = it.value()["data_offsets"][1];
    if (e > b && (e - b) % 64 == 0 && (8 + n + b) % 64 != 0) off += e - b;
  }
  ASSERT_GT(off, 0u);
  char mb[32];
  std::snprintf(mb, sizeof mb, "%.1f MB", static_cast<double>(off) / 1e6);
  const std::string want = std::string(mb) + " of weights start off a 64-byte line of their files";
  auto notes = [](const CliResult& r) {
    EXPECT_EQ(r.code, 0) << r.err;
    return nlohmann::json::parse(r.out)["notes"].dump();
  };
  const std::string cpu = notes(RunCli({"explain", "--model-path", dir, "--json"}));
  EXPECT_NE(cpu.find(want), std::string::npos) << cpu;
  EXPECT_NE(cpu.find("lucid align"), std::string::npos) << cpu;

  const std::filesystem::path out =
      std::filesystem::temp_directory_path() / ("lucid_explain_align_" + std::to_string(getpid()));
  std::filesystem::remove_all(out);
  ASSERT_TRUE(AlignCheckpoint(dir, out.string()).ok());
  const std::string aligned = notes(RunCli({"explain", "--model-path", out.string(), "--json"}));
  EXPECT_EQ(aligned.find("64-byte line"), std::string::npos) << aligned;
  std::filesystem::remove_all(out);
}

}  // namespace
}  // namespace lucid::config
