// lucid synth's tiny preset: loads as a model for every architecture, keeps the real per-head
// dimensions, is deterministic in the seed, and CpuFastOps generates the same tokens as CpuOps
// on it with a context longer than index_topk (so the DSA selection is live).
#include "bench/synth.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "backends/cpu/cpu_fast_ops.h"
#include "formats/safetensors.h"
#include "models/registry.h"
#include "runtime/engine_driver.h"

namespace lucid {
namespace {

std::string TempDir(const std::string& tag) {
  auto p = std::filesystem::temp_directory_path() /
           ("lucid_synth_test_" + tag + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(p);
  return p.string();
}

class SynthTest : public ::testing::TestWithParam<std::string> {};

TEST_P(SynthTest, TinyLoadsAndFastOpsMatchReference) {
  SynthOptions o;
  o.arch = GetParam();
  o.preset = "tiny";
  o.out_dir = TempDir(o.arch);
  auto s = Synthesize(o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_GT(s->params, 1'000'000);
  const CpuOps ref;
  const CpuFastOps fast;
  auto mr = LoadModel(o.out_dir, ref);
  ASSERT_TRUE(mr.ok()) << mr.status().ToString();
  const ModelConfig& c = (*mr)->config();
  EXPECT_EQ(c.kv_lora_rank, 512);
  EXPECT_EQ(c.qk_rope_head_dim, 64);
  EXPECT_EQ(c.qk_nope_head_dim, o.arch == "glm_moe_dsa" ? 192 : 128);
  EXPECT_EQ(c.v_head_dim, o.arch == "glm_moe_dsa" ? 256 : 128);
  if (c.has_indexer) {
    EXPECT_EQ(c.index_head_dim, 128);
  }
  auto mf = LoadModel(o.out_dir, fast);
  ASSERT_TRUE(mf.ok()) << mf.status().ToString();
  std::vector<int32_t> prompt;
  for (int i = 0; i < 24; ++i) prompt.push_back(2 + (i * 37) % 500);
  ASSERT_GT(static_cast<int64_t>(prompt.size()), c.index_topk);
  Tensor lr, lf;
  auto a = GreedyGenerate(**mr, prompt, 3, &lr);
  auto b = GreedyGenerate(**mf, prompt, 3, &lf);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
  double e = 0, m = 0;
  for (int64_t i = 0; i < lr.numel(); ++i) {
    e = std::max(e, double(std::abs(lr.data<float>()[i] - lf.data<float>()[i])));
    m = std::max(m, double(std::abs(lr.data<float>()[i])));
  }
  EXPECT_LE(e / m, 1e-4);
  std::filesystem::remove_all(o.out_dir);
}

INSTANTIATE_TEST_SUITE_P(Archs, SynthTest,
                         ::testing::Values("glm_moe_dsa", "deepseek_v32", "deepseek_v3"));

TEST(Synth, DeterministicInTheSeedAndRefusesUnknownNames) {
  SynthOptions o;
  o.out_dir = TempDir("seed_a");
  ASSERT_TRUE(Synthesize(o).ok());
  SynthOptions p = o;
  p.out_dir = TempDir("seed_b");
  ASSERT_TRUE(Synthesize(p).ok());
  auto ca = Checkpoint::Open(o.out_dir), cb = Checkpoint::Open(p.out_dir);
  ASSERT_TRUE(ca.ok() && cb.ok());
  Tensor ta = ca->Get("model.layers.1.self_attn.kv_b_proj.weight").value();
  Tensor tb = cb->Get("model.layers.1.self_attn.kv_b_proj.weight").value();
  ASSERT_EQ(ta.nbytes(), tb.nbytes());
  EXPECT_EQ(0, std::memcmp(ta.raw(), tb.raw(), ta.nbytes()));
  std::filesystem::remove_all(o.out_dir);
  std::filesystem::remove_all(p.out_dir);
  SynthOptions bad;
  bad.out_dir = TempDir("bad");
  bad.preset = "huge";
  EXPECT_EQ(Synthesize(bad).status().code(), StatusCode::kInvalidArgument);
  bad.preset = "tiny";
  bad.arch = "llama";
  EXPECT_EQ(Synthesize(bad).status().code(), StatusCode::kInvalidArgument);
}

// Every preset is the size its comment in synth.h promises, for every architecture, and the tiny
// one's computed size is what Synthesize writes.
TEST(Synth, PresetSizesAreWhatTheyPromise) {
  struct Range {
    const char* preset;
    double lo_gb, hi_gb;
  };
  for (const std::string& arch : SynthArchNames()) {
    for (const Range& r :
         {Range{"1g", 0.9, 1.4}, Range{"4g", 3.6, 4.8}, Range{"16g", 14.0, 18.0}}) {
      auto s = SynthSize(arch, r.preset);
      ASSERT_TRUE(s.ok()) << s.status().ToString();
      EXPECT_GE(s->bytes / 1e9, r.lo_gb) << arch << " " << r.preset;
      EXPECT_LE(s->bytes / 1e9, r.hi_gb) << arch << " " << r.preset;
    }
  }
  SynthOptions o;
  o.out_dir = TempDir("size");
  auto w = Synthesize(o);
  auto c = SynthSize(o.arch, o.preset);
  ASSERT_TRUE(w.ok() && c.ok());
  EXPECT_EQ(w->bytes, c->bytes);
  EXPECT_EQ(w->params, c->params);
  EXPECT_EQ(w->tensors, c->tensors);
  std::filesystem::remove_all(o.out_dir);
  EXPECT_EQ(SynthSize("glm_moe_dsa", "huge").status().code(), StatusCode::kInvalidArgument);
}

// --quant writes a packed checkpoint (via lucid quantize's code) that loads in that format, is
// smaller than bf16, and leaves no temporary directory behind.
TEST(Synth, QuantizedPresetsLoadPacked) {
  SynthOptions b;
  b.arch = "deepseek_v32";
  b.out_dir = TempDir("bf16");
  auto sb = Synthesize(b);
  ASSERT_TRUE(sb.ok()) << sb.status().ToString();
  for (const char* quant : {"nvfp4", "fp8-block"}) {
    SynthOptions q = b;
    q.quant = quant;
    q.out_dir = TempDir(quant);
    auto sq = Synthesize(q);
    ASSERT_TRUE(sq.ok()) << quant << ": " << sq.status().ToString();
    EXPECT_FALSE(std::filesystem::exists(q.out_dir + ".bf16-tmp"));
    EXPECT_LT(sq->bytes, sb->bytes * 3 / 4) << quant;
    auto ck = Checkpoint::Open(q.out_dir);
    ASSERT_TRUE(ck.ok());
    auto w = ck->Info("model.layers.1.self_attn.kv_b_proj.weight");
    ASSERT_TRUE(w.ok());
    EXPECT_EQ(w->dtype, std::string(quant) == "nvfp4" ? DType::kU8 : DType::kF8E4M3) << quant;
    const CpuOps ops;
    auto m = LoadModel(q.out_dir, ops);
    ASSERT_TRUE(m.ok()) << quant << ": " << m.status().ToString();
    std::vector<int32_t> prompt = {3, 14, 15, 92, 65};
    auto out = GreedyGenerate(**m, prompt, 2, nullptr);
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    std::filesystem::remove_all(q.out_dir);
  }
  std::filesystem::remove_all(b.out_dir);
}

}  // namespace
}  // namespace lucid
