// Runs build/lucid as a user would and checks its output against the transformers goldens.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "e2e_util.h"
#include "formats/npy.h"
#include "formats/safetensors.h"
#include "tokenizer/tokenizer.h"

namespace lucid {
namespace {

using e2e::Result;
using e2e::Src;

Result RunLucid(const std::string& args) { return e2e::Shell(e2e::Lucid() + " " + args); }

TEST(CliTest, GenerateJsonAndDumpedLogitsMatchGolden) {
  auto g = SafetensorsFile::Open(Src("tests/fixtures/golden/tiny_deepseek_v32.safetensors"));
  ASSERT_TRUE(g.ok());
  const Tensor prompt = (*g)->Get("prompt_ids").value();
  const Tensor cont = (*g)->Get("continuation").value();
  const Tensor want = (*g)->Get("logits").value();
  const std::string npy = ::testing::TempDir() + "/lucid_cli_logits.npy";
  Result r = RunLucid("generate --model-path " + Src("tests/fixtures/models/tiny_deepseek_v32") +
                      " --prompt-ids " + e2e::JoinIds(prompt) + " --max-new-tokens " +
                      std::to_string(cont.numel()) + " --output json --dump-logits " + npy);
  ASSERT_EQ(r.code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  std::vector<int64_t> got = j["token_ids"];
  ASSERT_EQ(static_cast<int64_t>(got.size()), cont.numel());
  for (int64_t i = 0; i < cont.numel(); ++i) EXPECT_EQ(got[i], cont.data<int64_t>()[i]);
  auto logits = ReadNpy(npy);
  ASSERT_TRUE(logits.ok()) << logits.status().ToString();
  ASSERT_EQ(logits->shape(), want.shape());
  float err = 0, mx = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    err = std::max(err, std::abs(logits->data<float>()[i] - want.data<float>()[i]));
    mx = std::max(mx, std::abs(want.data<float>()[i]));
  }
  EXPECT_LE(err, 1e-4f * mx);
  std::filesystem::remove(npy);
}

// A text prompt is the tokenizer's ids of it: the same continuation as --prompt-ids with those ids,
// printed as the tokenizer's text of the new ids; --chat renders the chat template first.
TEST(CliTest, GenerateFromTextAndChatPrompts) {
  // The tiny GLM-5 with the byte-level tokenizer and chat template scripts/serve.sh pairs it with.
  const std::string root = ::testing::TempDir() + "/lucid_cli_text_model";
  Result made = e2e::Shell("python3 -c 'import sys; sys.path.insert(0, \"" + Src("tests/e2e") +
                           "\"); import lucid_server as ls; print(ls.make_model_dir(\"" + root +
                           "\"), end=\"\")'");
  ASSERT_EQ(made.code, 0) << made.out;
  const std::string model = made.out;
  auto tok = tok::Tokenizer::FromFile(model + "/tokenizer.json");
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  Result r = RunLucid("generate --model-path " + model +
                      " --prompt 'Hello there' --max-new-tokens 5 --output json");
  ASSERT_EQ(r.code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  const std::vector<int32_t> prompt = j["prompt_ids"];
  EXPECT_EQ(prompt, *(*tok)->Encode("Hello there", /*add_special_tokens=*/true));
  const std::vector<int32_t> out = j["token_ids"];
  ASSERT_EQ(out.size(), 5u);
  std::string ids;
  for (int32_t id : prompt) ids += (ids.empty() ? "" : ",") + std::to_string(id);
  Result by_ids = RunLucid("generate --model-path " + model + " --prompt-ids " + ids +
                           " --max-new-tokens 5 --output json");
  ASSERT_EQ(by_ids.code, 0) << by_ids.out;
  EXPECT_EQ(nlohmann::json::parse(by_ids.out)["token_ids"], j["token_ids"]);
  EXPECT_EQ(j["text"].get<std::string>(), (*tok)->Decode(out, /*skip_special_tokens=*/true));
  Result chat = RunLucid("generate --model-path " + model +
                         " --prompt 'Hello there' --chat --max-new-tokens 2 --output json");
  ASSERT_EQ(chat.code, 0) << chat.out;
  const std::vector<int32_t> chat_ids = nlohmann::json::parse(chat.out)["prompt_ids"];
  EXPECT_GT(chat_ids.size(), prompt.size());  // the template's turn markers around the text
  // Both prompt forms at once, --chat without text, and text without a tokenizer are refused.
  EXPECT_EQ(RunLucid("generate --model-path " + model + " --prompt a --prompt-ids 1").code, 2);
  EXPECT_EQ(RunLucid("generate --model-path " + model + " --chat --prompt-ids 1").code, 2);
  Result no_tok = RunLucid("generate --model-path " +
                           Src("tests/fixtures/models/tiny_deepseek_v3") + " --prompt hi");
  EXPECT_EQ(no_tok.code, 2) << no_tok.out;
  EXPECT_NE(no_tok.out.find("no tokenizer"), std::string::npos) << no_tok.out;
}

TEST(CliTest, VersionHelpAndBadFlags) {
  Result v = RunLucid("--version");
  EXPECT_EQ(v.code, 0);
  EXPECT_NE(v.out.find("lucid 0."), std::string::npos) << v.out;
  Result h = RunLucid("generate --help");
  EXPECT_EQ(h.code, 0);
  EXPECT_NE(h.out.find("--prompt-ids"), std::string::npos);
  Result u = RunLucid("generate --model-path x --prompt-ids 1 --no-such-flag");
  EXPECT_EQ(u.code, 2) << u.out;
  EXPECT_NE(u.out.find("--no-such-flag"), std::string::npos) << u.out;
  Result ids = RunLucid("generate --model-path " + Src("tests/fixtures/models/tiny_deepseek_v3") +
                        " --prompt-ids 1,x,3");
  EXPECT_EQ(ids.code, 2);
  EXPECT_NE(ids.out.find("\"x\" is not a token id"), std::string::npos) << ids.out;
  Result range = RunLucid("generate --model-path " + Src("tests/fixtures/models/tiny_deepseek_v3") +
                          " --prompt-ids 1,99999");
  EXPECT_EQ(range.code, 2);
  EXPECT_NE(range.out.find("99999"), std::string::npos) << range.out;
}

// With no --cpu-kernels, a checkpoint whose torch_dtype is bfloat16 runs the set with bf16 matmul
// inputs: generate's prompt logits are those of --cpu-kernels fast-bf16act bit for bit, and not
// those of fast (the hi/lo split), which they differ from by about the rounding.
TEST(CliTest, GenerateTakesTheBf16SetForABf16Checkpoint) {
  const std::string model = Src("tests/fixtures/models/tiny_glm_moe_dsa");
  std::map<std::string, Tensor> logits;
  for (const char* set : {"", "fast-bf16act", "fast"}) {
    const std::string npy = ::testing::TempDir() + "/lucid_auto_" + set + ".npy";
    Result r = RunLucid("generate --model-path " + model +
                        " --prompt-ids 3,14,15,92,65,35 --max-new-tokens 1 --dump-logits " + npy +
                        (*set ? std::string(" --cpu-kernels ") + set : std::string()));
    ASSERT_EQ(r.code, 0) << set << ": " << r.out;
    auto t = ReadNpy(npy);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    logits.emplace(set, std::move(*t));
    std::filesystem::remove(npy);
  }
  const Tensor &def = logits.at(""), &bf16 = logits.at("fast-bf16act"), &f32 = logits.at("fast");
  ASSERT_EQ(def.numel(), bf16.numel());
  ASSERT_EQ(def.numel(), f32.numel());
  float same = 0, apart = 0, mx = 0;
  for (int64_t i = 0; i < def.numel(); ++i) {
    same = std::max(same, std::abs(def.data<float>()[i] - bf16.data<float>()[i]));
    apart = std::max(apart, std::abs(def.data<float>()[i] - f32.data<float>()[i]));
    mx = std::max(mx, std::abs(f32.data<float>()[i]));
  }
  EXPECT_EQ(same, 0.0f);
  EXPECT_GT(apart, 1e-5f * mx);  // rounded inputs: a different computation
  EXPECT_LT(apart, 0.05f * mx);  // but the same model
}

TEST(CliTest, GenerateAndBenchTakeTheCpuKernelSet) {
  // Both kernel sets give the golden continuation; an unknown set is the table's one-line error.
  auto g = SafetensorsFile::Open(Src("tests/fixtures/golden/tiny_deepseek_v3.safetensors"));
  ASSERT_TRUE(g.ok());
  const Tensor prompt = (*g)->Get("prompt_ids").value();
  const Tensor cont = (*g)->Get("continuation").value();
  const std::string base =
      "generate --model-path " + Src("tests/fixtures/models/tiny_deepseek_v3") + " --prompt-ids " +
      e2e::JoinIds(prompt) + " --max-new-tokens " + std::to_string(cont.numel());
  // (No flag: auto, which is fast for this float32 checkpoint.)
  for (const char* set : {"fast", "reference", "auto", ""}) {
    Result r = RunLucid(base + (*set ? std::string(" --cpu-kernels ") + set : std::string()));
    ASSERT_EQ(r.code, 0) << set << ": " << r.out;
    EXPECT_EQ(r.out, e2e::JoinIds(cont) + "\n") << set;
  }
  Result bad = RunLucid(base + " --cpu-kernels slow");
  EXPECT_EQ(bad.code, 2) << bad.out;
  EXPECT_NE(
      bad.out.find(
          "--cpu-kernels: unknown value \"slow\" (valid: auto, fast, fast-bf16act, reference)"),
      std::string::npos)
      << bad.out;
  // fast-bf16act is a different computation (activations rounded to bf16): generate takes it (its
  // continuation is not compared: on the tiny random models a router's top-k can flip), and
  // bench runs the ops it names.
  Result gen_bf16 = RunLucid(base + " --cpu-kernels fast-bf16act");
  EXPECT_EQ(gen_bf16.code, 0) << gen_bf16.out;
  // Its matmuls are held to the vdpbf16ps peak where the machine has one (probed beside the FMA
  // peak), else to the FMA peak. Both probes are timings, so only their presence is asserted (a
  // busy machine can slow either one more than the other).
  const Result bench_bf16 = e2e::Shell(
      e2e::Lucid() + " bench --model-path " + Src("tests/fixtures/models/tiny_deepseek_v3") +
          " --batch 1 --prompt-len 4 --gen-len 1 --repeats 1 --cpu-kernels fast-bf16act"
          " --json 2>/dev/null",
      /*merge_stderr=*/false);
  ASSERT_EQ(bench_bf16.code, 0) << bench_bf16.out;
  const nlohmann::json jb = nlohmann::json::parse(bench_bf16.out);
  const std::string ops = jb["model"]["ops"];
  EXPECT_EQ(ops.substr(ops.size() - 8), "-bf16act") << ops;
  EXPECT_EQ(jb["model"]["cpu_kernels"], "fast-bf16act");
  EXPECT_EQ(jb["model"]["cpu_kernels_reason"], "given");
  const nlohmann::json& mach = jb["machine"];
  const double dot = mach["dot_bf16_gflops"], fma = mach["fma_gflops"];
  if (mach["isa"] == "avx512bf16") {
    EXPECT_GT(dot, 0.0);
    EXPECT_GT(fma, 0.0);
    EXPECT_EQ(jb["prefill"]["matmul_peak_gflops"].get<double>(), dot);
  } else {
    EXPECT_EQ(dot, 0.0);
    EXPECT_EQ(jb["prefill"]["matmul_peak_gflops"].get<double>(), fma);
  }
  const std::string bench = "bench --model-path " + Src("tests/fixtures/models/tiny_deepseek_v3");
  Result bb = RunLucid(bench + " --cpu-kernels turbo");
  EXPECT_EQ(bb.code, 2) << bb.out;
  EXPECT_NE(bb.out.find("--cpu-kernels: unknown value \"turbo\""), std::string::npos) << bb.out;
}

// Every command reads its flags from the one option table: generate's and bench's KV dtype and
// kernel set are refused with the same one-line error as serve's, and a flag of another command
// is not accepted.
TEST(CliTest, GenerateAndBenchRefuseFlagsAsServeDoes) {
  const std::string model = Src("tests/fixtures/models/tiny_deepseek_v3");
  const std::string table_error =
      "--kv-cache-dtype: unknown value \"fp8\" (valid: auto, f32, bf16, fp8_e4m3)";
  for (const std::string cmd : {"generate --prompt-ids 1 --model-path ", "bench --model-path ",
                                "serve --model-path ", "explain --model-path "}) {
    Result r = RunLucid(cmd + model + " --kv-cache-dtype fp8");
    EXPECT_EQ(r.code, 2) << cmd << r.out;
    EXPECT_NE(r.out.find(table_error), std::string::npos) << cmd << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << cmd << r.out;
  }
  Result env = e2e::Shell("LUCID_KV_CACHE_DTYPE=fp8 " + e2e::Lucid() + " generate --prompt-ids 1 " +
                          "--model-path " + model);
  EXPECT_EQ(env.code, 2) << env.out;
  EXPECT_NE(env.out.find("LUCID_KV_CACHE_DTYPE: unknown value \"fp8\""), std::string::npos)
      << env.out;
  Result old_alias = RunLucid("bench --model-path " + model + " --reference-ops");
  EXPECT_EQ(old_alias.code, 2) << old_alias.out;
  Result serve_flag = RunLucid("generate --prompt-ids 1 --model-path " + model + " --port 1");
  EXPECT_EQ(serve_flag.code, 2) << serve_flag.out;
  EXPECT_NE(serve_flag.out.find("--port"), std::string::npos) << serve_flag.out;
  // bf16 and fp8_e4m3 are accepted by generate as by serve (the same parser).
  for (const char* kv : {"bf16", "fp8_e4m3", "auto"}) {
    Result ok = RunLucid("generate --prompt-ids 1,2 --max-new-tokens 1 --model-path " + model +
                         " --kv-cache-dtype " + kv);
    EXPECT_EQ(ok.code, 0) << kv << ": " << ok.out;
  }
}

// `lucid bench --json` on the tiny GLM-5 fixture (8 experts, top-2, 2 MoE layers, index_topk 8):
// the figures it prints are consistent with each other and with the model's shape: a step's bytes
// are the sum of its op kinds', tokens per second follow from the step time, the uniform expert
// model is the closed form, one token touches exactly top-k experts per MoE layer, every step has
// a paired bandwidth probe, the roofline is never under the bytes model, and at context 64 DSA
// attention reads index_topk rows per layer where dense attention reads all of them (8x the bytes
// and a little more).
TEST(CliTest, BenchFiguresAreConsistent) {
  const Result r = e2e::Shell("OMP_NUM_THREADS=2 " + e2e::Lucid() + " bench --model-path " +
                                  Src("tests/fixtures/models/tiny_glm_moe_dsa") +
                                  " --batch 1,4 --prompt-len 16 --gen-len 3 --repeats 1 "
                                  "--context 64 --json 2>/dev/null",
                              /*merge_stderr=*/false);
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string& out = r.out;
  const nlohmann::json j = nlohmann::json::parse(out);
  EXPECT_GT(j["machine"]["read_gbs"].get<double>(), 0.0);
  EXPECT_GT(j["machine"]["fma_gflops"].get<double>(), 0.0);
  // The fixture's torch_dtype is bfloat16, so the default set takes bf16 matmul inputs and says
  // why; its matmuls are held to the vdpbf16ps peak where there is one, else to the FMA peak.
  EXPECT_EQ(j["model"]["cpu_kernels"], "fast-bf16act");
  EXPECT_NE(j["model"]["cpu_kernels_reason"].get<std::string>().find("auto: the checkpoint's "
                                                                     "torch_dtype is bfloat16"),
            std::string::npos)
      << j["model"].dump();
  EXPECT_EQ(j["prefill"]["matmul_peak_gflops"], j["machine"]["isa"] == "avx512bf16"
                                                    ? j["machine"]["dot_bf16_gflops"]
                                                    : j["machine"]["fma_gflops"]);
  ASSERT_EQ(j["decode"].size(), 2u);
  const double E = 8, K = 2, moe_layers = 2;
  for (const auto& d : j["decode"]) {
    const double B = d["batch"].get<double>();
    SCOPED_TRACE("batch " + std::to_string(B));
    double sum = 0;
    for (const auto& [name, c] : d["breakdown"].items()) sum += c["bytes"].get<double>();
    EXPECT_NEAR(d["bytes_per_step"].get<double>(), sum, 1e-6 * sum);
    EXPECT_NEAR(d["tok_s"].get<double>(), B * 1e3 / d["step_ms"].get<double>(),
                1e-6 * d["tok_s"].get<double>());
    EXPECT_NEAR(d["experts_expected_uniform"].get<double>(),
                moe_layers * E * (1 - std::pow(1 - K / E, B)), 1e-9);
    const double touched = d["experts_touched"].get<double>();
    EXPECT_GE(touched, moe_layers * K);
    EXPECT_LE(touched, moe_layers * std::min(E, B * K));
    if (B == 1) {
      EXPECT_EQ(touched, moe_layers * K);
    }
    EXPECT_GT(d["paired_probe_gbs"].get<double>(), 0.0);
    EXPECT_GT(d["pct_bandwidth_paired"].get<double>(), 0.0);
    // The roofline takes, per op kind, the larger of bytes and FLOPs time: never below the bytes
    // model, and their ratio is what the text output quotes when it is compute-bound.
    const double roof = d["roofline_step_ms_paired"].get<double>();
    const double model = d["model_step_ms_paired"].get<double>();
    EXPECT_GE(roof, model * (1 - 1e-9));
    EXPECT_NEAR(d["roofline_over_model_paired"].get<double>(), roof / model, 1e-9 * roof / model);
    // The matmuls per weight: every layer's copy under one name, slowest first, summing to the
    // matmul kind. 3 layers, all with attention (q_a_proj and kv_b_proj's two shares in each).
    double mm_bytes = 0, mm_ms = 0, prev_ms = 1e30;
    std::map<std::string, int64_t> calls;
    for (const auto& w : d["matmul_by_weight"]) {
      const std::string name = w["weight"];
      EXPECT_EQ(name.find("layers.0"), std::string::npos) << name;
      mm_bytes += w["bytes"].get<double>();
      mm_ms += w["ms"].get<double>();
      EXPECT_LE(w["ms"].get<double>(), prev_ms) << name;
      prev_ms = w["ms"].get<double>();
      calls[name] = w["calls"].get<int64_t>();
    }
    const auto& mm = d["breakdown"]["matmul"];
    EXPECT_NEAR(mm_bytes, mm["bytes"].get<double>(), 1e-9 * mm_bytes);
    EXPECT_NEAR(mm_ms, mm["ms"].get<double>(), 1e-6 * mm_ms);
    EXPECT_EQ(calls["lm_head.weight"], 1);
    EXPECT_EQ(calls["model.layers.*.self_attn.q_a_proj.weight"], 3);
    EXPECT_EQ(calls["model.layers.*.self_attn.kv_b_proj.weight (W_uk)"], 3);
    EXPECT_EQ(calls["model.layers.*.self_attn.kv_b_proj.weight (W_uv)"], 3);
  }
  double dsa_attn = 0, dense_attn = 0;
  for (const auto& c : j["context_sweep"]) {
    ASSERT_EQ(c["context"].get<int>(), 64);
    (c["mode"] == "dsa" ? dsa_attn : dense_attn) = c["breakdown"]["attention"]["bytes"];
  }
  // Dense reads every cached row (64, and one more per decoded step: the median step of 3 sees
  // 64-67), DSA the 8 selected.
  ASSERT_GT(dsa_attn, 0.0);
  EXPECT_GE(dense_attn / dsa_attn, 64.0 / 8);
  EXPECT_LE(dense_attn / dsa_attn, 68.0 / 8);
}

TEST(CliTest, MissingModelDirectoryIsAClearError) {
  Result r = RunLucid("generate --model-path /nonexistent-lucid-model --prompt-ids 1");
  EXPECT_EQ(r.code, 2) << r.out;  // a refusal of the user's input
  EXPECT_NE(r.out.find("model directory /nonexistent-lucid-model not found"), std::string::npos)
      << r.out;
}

}  // namespace
}  // namespace lucid
