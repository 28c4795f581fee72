// The tiny DeepSeek-family fixtures converted to GGUF by llama.cpp's own converter
// (tests/fixtures/gguf/tiny_*.f32.gguf, written by tools/reference/gguf/convert_tiny_deepseek.py)
// load as the same model as the safetensors originals: the config the metadata maps to equals
// config.json's on every field the engine reads, and the logits over a prompt (48 + 16 tokens, so
// the DSA indexer's top-k selection matters) are bit-identical with the reference kernels.
// The transformers golden bounds both (the family test's tolerance).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>

#include "backends/cpu/cpu_ops.h"
#include "formats/gguf.h"
#include "formats/gguf_config.h"
#include "formats/safetensors.h"
#include "models/registry.h"
#include "models/step_test_util.h"

namespace lucid {
namespace {

const CpuOps kOps;

std::string Dir() { return std::string(LUCID_SOURCE_DIR) + "/tests/fixtures/"; }
std::string Gguf(const std::string& name) { return Dir() + "gguf/" + name + ".f32.gguf"; }

std::vector<int32_t> GoldenTokens(const std::string& name, Tensor* full_logits) {
  auto f = SafetensorsFile::Open(Dir() + "golden/" + name + ".safetensors");
  LUCID_CHECK(f.ok(), f.status().ToString());
  std::vector<int32_t> v;
  for (const char* t : {"prompt_ids", "continuation"}) {
    Tensor x = (*f)->Get(t).value();
    for (int64_t i = 0; i < x.numel(); ++i) v.push_back(static_cast<int32_t>(x.data<int64_t>()[i]));
  }
  *full_logits = (*f)->Get("full_logits").value();
  return v;
}

std::vector<float> Logits(Model& m, const std::vector<int32_t>& tokens) {
  KvStorage kv(m.kv_spec(), 16, 16, KvDtype::kF32);
  SequenceKv seq = TestPages(16).New(static_cast<int64_t>(tokens.size()));
  Tensor logits;
  Status s = ForwardChunk(m, kv, seq, tokens, ChunkRows::kAll, &logits);
  EXPECT_TRUE(s.ok()) << s.ToString();
  if (!s.ok()) return {};
  return std::vector<float>(logits.data<float>(), logits.data<float>() + logits.numel());
}

class DeepseekGgufTest : public ::testing::TestWithParam<std::string> {};

TEST_P(DeepseekGgufTest, MetadataMapsToTheSafetensorsConfig) {
  auto st = LoadModelConfig(Dir() + "models/" + GetParam());
  auto gg = LoadModelConfig(Gguf(GetParam()));
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  ASSERT_TRUE(gg.ok()) << gg.status().ToString();
  const ModelConfig &a = *st, &b = *gg;
  EXPECT_EQ(b.architecture, a.architecture);
  EXPECT_EQ(b.model_type, a.model_type);
  for (auto [x, y] : std::vector<std::pair<int64_t, int64_t>>{
           {a.vocab_size, b.vocab_size},
           {a.hidden_size, b.hidden_size},
           {a.intermediate_size, b.intermediate_size},
           {a.moe_intermediate_size, b.moe_intermediate_size},
           {a.num_hidden_layers, b.num_hidden_layers},
           {a.num_attention_heads, b.num_attention_heads},
           {a.num_key_value_heads, b.num_key_value_heads},
           {a.q_lora_rank, b.q_lora_rank},
           {a.kv_lora_rank, b.kv_lora_rank},
           {a.qk_nope_head_dim, b.qk_nope_head_dim},
           {a.qk_rope_head_dim, b.qk_rope_head_dim},
           {a.v_head_dim, b.v_head_dim},
           {a.n_routed_experts, b.n_routed_experts},
           {a.n_shared_experts, b.n_shared_experts},
           {a.num_experts_per_tok, b.num_experts_per_tok},
           {a.n_group, b.n_group},
           {a.topk_group, b.topk_group},
           {a.first_k_dense_replace, b.first_k_dense_replace},
           {a.max_position_embeddings, b.max_position_embeddings},
           {a.index_n_heads, b.index_n_heads},
           {a.index_head_dim, b.index_head_dim},
           {a.index_topk, b.index_topk},
           {a.rope.original_max_position_embeddings, b.rope.original_max_position_embeddings}})
    EXPECT_EQ(y, x);
  EXPECT_EQ(b.routed_scaling_factor, a.routed_scaling_factor);
  EXPECT_EQ(b.norm_topk_prob, a.norm_topk_prob);
  EXPECT_EQ(b.scoring_func, a.scoring_func);
  // The file stores eps in f32; the engine runs it in f32.
  EXPECT_EQ(static_cast<float>(b.rms_norm_eps), static_cast<float>(a.rms_norm_eps));
  EXPECT_EQ(b.tie_word_embeddings, a.tie_word_embeddings);
  EXPECT_EQ(b.rope.type, a.rope.type);
  EXPECT_EQ(b.rope.theta, a.rope.theta);
  EXPECT_EQ(b.rope.factor, a.rope.factor);
  EXPECT_EQ(b.rope.beta_fast, a.rope.beta_fast);
  EXPECT_EQ(b.rope.beta_slow, a.rope.beta_slow);
  EXPECT_EQ(b.rope.mscale_all_dim, a.rope.mscale_all_dim);
  EXPECT_EQ(b.AttentionScale(), a.AttentionScale());
  EXPECT_EQ(b.mla_rope_layout, a.mla_rope_layout);
  EXPECT_EQ(b.has_indexer, a.has_indexer);
  EXPECT_EQ(b.indexer_rope_layout, a.indexer_rope_layout);
  EXPECT_EQ(b.layer_is_moe, a.layer_is_moe);
  EXPECT_EQ(b.layer_runs_indexer, a.layer_runs_indexer);
  EXPECT_EQ(b.bos_token_id, a.bos_token_id);
  EXPECT_EQ(b.eos_token_ids, a.eos_token_ids);
}

TEST_P(DeepseekGgufTest, LogitsEqualTheSafetensorsOriginal) {
  Tensor golden;
  const std::vector<int32_t> tokens = GoldenTokens(GetParam(), &golden);
  auto st = LoadModel(Dir() + "models/" + GetParam(), kOps);
  auto gg = LoadModel(Gguf(GetParam()), kOps);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  ASSERT_TRUE(gg.ok()) << gg.status().ToString();
  const std::vector<float> a = Logits(**st, tokens), b = Logits(**gg, tokens);
  ASSERT_EQ(a.size(), b.size());
  ASSERT_EQ(static_cast<int64_t>(a.size()), golden.numel());
  int64_t differ = 0;
  for (size_t i = 0; i < a.size(); ++i) differ += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  EXPECT_EQ(differ, 0) << "logits that are not bit-identical, of " << a.size();
  double err = 0, scale = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    err = std::max(err, double(std::abs(b[i] - golden.data<float>()[i])));
    scale = std::max(scale, double(std::abs(golden.data<float>()[i])));
  }
  EXPECT_LE(err / scale, 1e-4) << "GGUF logits vs transformers' golden";
}

INSTANTIATE_TEST_SUITE_P(Fixtures, DeepseekGgufTest,
                         ::testing::Values("tiny_glm_moe_dsa", "tiny_deepseek_v32",
                                           "tiny_deepseek_v3"));

// Block-quantized experts (Q4_0 gate / up, Q4_1 down, sliced per expert out of the stacked
// tensors), a Q8_0 attn_v_b and an F16 attn_k_b (decoded into kv_b_proj): the model equals the one
// of the same values decoded to F32 by the gguf package (tools/reference/gguf/
// quantize_tiny_deepseek.py), up to the kernels' summation order.
TEST(DeepseekGgufQuant, BlockTypesEqualTheirDecodedValues) {
  Tensor golden;
  const std::vector<int32_t> tokens = GoldenTokens("tiny_deepseek_v3", &golden);
  auto q = LoadModel(Dir() + "gguf/tiny_deepseek_v3.quant.gguf", kOps);
  auto d = LoadModel(Dir() + "gguf/tiny_deepseek_v3.dequant.gguf", kOps);
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_LT((*q)->weight_bytes(), (*d)->weight_bytes());  // the experts stay packed
  const std::vector<float> a = Logits(**q, tokens), b = Logits(**d, tokens);
  ASSERT_EQ(a.size(), b.size());
  double err = 0, scale = 0, moved = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    err = std::max(err, double(std::abs(a[i] - b[i])));
    scale = std::max(scale, double(std::abs(b[i])));
    moved = std::max(moved, double(std::abs(b[i] - golden.data<float>()[i])));
  }
  EXPECT_LE(err / scale, 1e-6) << "quantized vs decoded-to-f32 GGUF";
  // And quantization did change the model (the test would not see a wrong expert slice otherwise).
  EXPECT_GE(moved / scale, 1e-4);
}

// A copy of the deepseek2 fixture with every occurrence of `from` in its bytes replaced by `to`
// (same length: a key or tensor name renamed, the file otherwise valid).
std::string Patched(const std::string& from, const std::string& to) {
  std::ifstream in(Gguf("tiny_deepseek_v3"), std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string bytes = ss.str();
  EXPECT_EQ(from.size(), to.size());
  size_t n = 0;
  for (size_t at = bytes.find(from); at != std::string::npos; at = bytes.find(from, at + 1), ++n)
    bytes.replace(at, from.size(), to);
  EXPECT_GT(n, 0u) << from;
  const std::string path = ::testing::TempDir() + "/patched_" + std::to_string(getpid()) + "_" +
                           std::to_string(std::hash<std::string>()(from)) + ".gguf";
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

TEST(DeepseekGgufErrors, MissingKeysTensorsAndSoftmaxRoutersAreRefusedByName) {
  auto no_rank = LoadModel(Patched("attention.kv_lora_rank", "attention.kv_lora_ranX"), kOps);
  ASSERT_FALSE(no_rank.ok());
  EXPECT_EQ(no_rank.status().code(), StatusCode::kNotFound);
  EXPECT_NE(no_rank.status().message().find("deepseek2.attention.kv_lora_rank"), std::string::npos)
      << no_rank.status().ToString();
  auto no_kb = LoadModel(Patched("blk.1.attn_k_b", "blk.1.attn_k_X"), kOps);
  ASSERT_FALSE(no_kb.ok());
  EXPECT_NE(no_kb.status().message().find("blk.1.attn_k_b.weight"), std::string::npos)
      << no_kb.status().ToString();
  // No expert_gating_func and no exp_probs_b: a DeepSeek-V2-style softmax router.
  auto softmax = LoadModel(Patched("exp_probs_b", "exp_probs_X"), kOps);
  ASSERT_FALSE(softmax.ok());
  EXPECT_NE(softmax.status().message().find("softmax"), std::string::npos)
      << softmax.status().ToString();
}

TEST(DeepseekGgufNames, ConverterNamesMapToHuggingFaceNames) {
  // Names as gguf-py's TensorNameMap writes them for deepseek2 / glm-dsa.
  EXPECT_EQ(DeepseekHfTensorName("blk.3.attn_kv_a_mqa.weight"),
            "model.layers.3.self_attn.kv_a_proj_with_mqa.weight");
  EXPECT_EQ(DeepseekHfTensorName("blk.1.exp_probs_b.bias"),
            "model.layers.1.mlp.gate.e_score_correction_bias");
  EXPECT_EQ(DeepseekHfTensorName("blk.0.indexer.k_norm.bias"),
            "model.layers.0.self_attn.indexer.k_norm.bias");
  EXPECT_EQ(DeepseekHfTensorName("blk.0.indexer.proj.weight"),
            "model.layers.0.self_attn.indexer.weights_proj.weight");
  EXPECT_EQ(DeepseekHfTensorName("blk.2.ffn_up_shexp.weight"),
            "model.layers.2.mlp.shared_experts.up_proj.weight");
  EXPECT_EQ(DeepseekHfTensorName("output.weight"), "lm_head.weight");
  EXPECT_EQ(DeepseekHfTensorName("blk.1.attn_k_b.weight"), std::nullopt);  // rebuilt, not renamed
  EXPECT_EQ(DeepseekHfTensorName("blk.1.ffn_gate_exps.weight"), std::nullopt);
}

}  // namespace
}  // namespace lucid
