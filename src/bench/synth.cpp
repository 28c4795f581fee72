#include "bench/synth.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include "core/dtype.h"
#include "core/parallel.h"
#include "core/tensor.h"
#include "formats/quantize_checkpoint.h"
#include "formats/safetensors.h"

namespace lucid {
namespace {

struct Preset {
  const char* name;
  int64_t hidden, layers, first_dense, dense_inter, heads, q_lora, experts, topk, moe_inter;
  int64_t index_heads, index_topk, vocab;
};

constexpr Preset kPresets[] = {
    {"tiny", 256, 3, 1, 512, 2, 128, 8, 2, 64, 2, 16, 512},
    {"1g", 2048, 4, 1, 5632, 16, 768, 32, 4, 512, 16, 2048, 32768},
    {"4g", 3072, 7, 1, 8192, 32, 1536, 32, 6, 768, 32, 2048, 32768},
};

const Preset* FindPreset(const std::string& n) {
  for (const auto& p : kPresets)
    if (n == p.name) return &p;
  return nullptr;
}

uint64_t SplitMix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint64_t Fnv(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

enum class Init { kUniform, kOnes, kZeros, kSmall };

struct Spec {
  std::string name;
  Shape shape;
  DType dtype;
  Init init;
};

Tensor Make(const Spec& s, uint64_t seed) {
  Tensor t = Tensor::Empty(s.dtype, s.shape);
  const int64_t n = t.numel();
  const float a = s.init == Init::kSmall ? 0.01f
                                         : std::sqrt(3.0f / static_cast<float>(s.shape.back()));
  const uint64_t base = SplitMix(seed ^ Fnv(s.name));
  ParallelFor(n, 1 << 16, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      float v = s.init == Init::kOnes ? 1.0f : 0.0f;
      if (s.init == Init::kUniform || s.init == Init::kSmall) {
        const uint64_t r = SplitMix(base + static_cast<uint64_t>(i));
        v = a * (static_cast<float>(r >> 40) * (2.0f / 16777216.0f) - 1.0f);
      }
      if (s.dtype == DType::kBF16)
        t.data<uint16_t>()[i] = F32ToBf16(v);
      else
        t.data<float>()[i] = v;
    }
  });
  return t;
}

struct ArchDims {
  const char* architecture;
  int64_t nope, v;
  bool indexer;
};

StatusOr<ArchDims> DimsOf(const std::string& arch) {
  if (arch == "glm_moe_dsa") return ArchDims{"GlmMoeDsaForCausalLM", 192, 256, true};
  if (arch == "deepseek_v32") return ArchDims{"DeepseekV32ForCausalLM", 128, 128, true};
  if (arch == "deepseek_v3") return ArchDims{"DeepseekV3ForCausalLM", 128, 128, false};
  return InvalidArgument("synth: unknown --arch \"" + arch +
                         "\" (glm_moe_dsa, deepseek_v32, deepseek_v3)");
}

// Tensors of layer l (or, for l < 0, the embeddings/final norm/lm_head shard).
std::vector<Spec> LayerSpecs(const nlohmann::json& c, int64_t l) {
  const DType bf = DType::kBF16, f32 = DType::kF32;
  const int64_t D = c["hidden_size"], V = c["vocab_size"];
  if (l < 0)
    return {{"model.embed_tokens.weight", {V, D}, bf, Init::kUniform},
            {"model.norm.weight", {D}, bf, Init::kOnes},
            {"lm_head.weight", {V, D}, bf, Init::kUniform}};
  const int64_t H = c["num_attention_heads"], Rq = c["q_lora_rank"], R = c["kv_lora_rank"];
  const int64_t dn = c["qk_nope_head_dim"], dr = c["qk_rope_head_dim"], dv = c["v_head_dim"];
  const std::string p = "model.layers." + std::to_string(l) + ".";
  std::vector<Spec> s = {
      {p + "input_layernorm.weight", {D}, bf, Init::kOnes},
      {p + "post_attention_layernorm.weight", {D}, bf, Init::kOnes},
      {p + "self_attn.q_a_proj.weight", {Rq, D}, bf, Init::kUniform},
      {p + "self_attn.q_a_layernorm.weight", {Rq}, bf, Init::kOnes},
      {p + "self_attn.q_b_proj.weight", {H * (dn + dr), Rq}, bf, Init::kUniform},
      {p + "self_attn.kv_a_proj_with_mqa.weight", {R + dr, D}, bf, Init::kUniform},
      {p + "self_attn.kv_a_layernorm.weight", {R}, bf, Init::kOnes},
      {p + "self_attn.kv_b_proj.weight", {H * (dn + dv), R}, bf, Init::kUniform},
      {p + "self_attn.o_proj.weight", {D, H * dv}, bf, Init::kUniform},
  };
  if (c.contains("index_n_heads")) {
    const int64_t nI = c["index_n_heads"], dI = c["index_head_dim"];
    const std::string q = p + "self_attn.indexer.";
    s.push_back({q + "wq_b.weight", {nI * dI, Rq}, bf, Init::kUniform});
    s.push_back({q + "wk.weight", {dI, D}, bf, Init::kUniform});
    s.push_back({q + "k_norm.weight", {dI}, bf, Init::kOnes});
    s.push_back({q + "k_norm.bias", {dI}, bf, Init::kZeros});
    s.push_back({q + "weights_proj.weight", {nI, D}, f32, Init::kUniform});
  }
  auto mlp = [&](const std::string& m, int64_t I) {
    s.push_back({m + "gate_proj.weight", {I, D}, bf, Init::kUniform});
    s.push_back({m + "up_proj.weight", {I, D}, bf, Init::kUniform});
    s.push_back({m + "down_proj.weight", {D, I}, bf, Init::kUniform});
  };
  if (l < c["first_k_dense_replace"].get<int64_t>()) {
    mlp(p + "mlp.", c["intermediate_size"]);
    return s;
  }
  const int64_t E = c["n_routed_experts"], I = c["moe_intermediate_size"];
  s.push_back({p + "mlp.gate.weight", {E, D}, bf, Init::kUniform});
  s.push_back({p + "mlp.gate.e_score_correction_bias", {E}, f32, Init::kSmall});
  for (int64_t e = 0; e < E; ++e) mlp(p + "mlp.experts." + std::to_string(e) + ".", I);
  mlp(p + "mlp.shared_experts.", I);
  return s;
}

Status WriteText(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  if (!f) return NotFound(path + ": cannot create");
  f << text;
  f.close();
  return f ? OkStatus() : Internal(path + ": write failed");
}

}  // namespace

std::vector<std::string> SynthPresetNames() {
  std::vector<std::string> v;
  for (const auto& p : kPresets) v.push_back(p.name);
  return v;
}
std::vector<std::string> SynthArchNames() { return {"glm_moe_dsa", "deepseek_v32", "deepseek_v3"}; }

StatusOr<nlohmann::json> SynthConfig(const std::string& arch, const std::string& preset) {
  LUCID_ASSIGN_OR_RETURN(ArchDims a, DimsOf(arch));
  const Preset* p = FindPreset(preset);
  if (p == nullptr) return InvalidArgument("synth: unknown --preset \"" + preset + "\" (tiny, 1g, 4g)");
  const bool glm = arch == "glm_moe_dsa";
  nlohmann::json c = {
      {"architectures", {a.architecture}},
      {"model_type", arch},
      {"dtype", "bfloat16"},
      {"vocab_size", p->vocab},
      {"hidden_size", p->hidden},
      {"intermediate_size", p->dense_inter},
      {"moe_intermediate_size", p->moe_inter},
      {"num_hidden_layers", p->layers},
      {"num_attention_heads", p->heads},
      {"num_key_value_heads", p->heads},
      {"q_lora_rank", p->q_lora},
      {"kv_lora_rank", 512},
      {"qk_rope_head_dim", 64},
      {"qk_nope_head_dim", a.nope},
      {"v_head_dim", a.v},
      {"n_routed_experts", p->experts},
      {"n_shared_experts", 1},
      {"num_experts_per_tok", p->topk},
      {"n_group", glm ? 1 : 4},
      {"topk_group", glm ? 1 : 2},
      {"first_k_dense_replace", p->first_dense},
      {"routed_scaling_factor", 2.5},
      {"norm_topk_prob", true},
      {"scoring_func", "sigmoid"},
      {"hidden_act", "silu"},
      {"rms_norm_eps", glm ? 1e-5 : 1e-6},
      {"max_position_embeddings", 65536},
      {"tie_word_embeddings", false},
      {"attention_bias", false},
      {"bos_token_id", 0},
      {"eos_token_id", 1},
      {"lucid_synth", {{"preset", preset}, {"note", "random weights, lucid synth"}}},
  };
  if (glm) {
    c["rope_parameters"] = {{"rope_theta", 1000000.0}, {"rope_type", "default"}};
  } else {
    c["rope_parameters"] = {{"rope_theta", 10000.0}, {"rope_type", "yarn"}, {"factor", 40.0},
                            {"original_max_position_embeddings", 4096}, {"beta_fast", 32.0},
                            {"beta_slow", 1.0}, {"mscale", 1.0}, {"mscale_all_dim", 1.0}};
  }
  if (a.indexer) {
    c["index_n_heads"] = p->index_heads;
    c["index_head_dim"] = 128;
    c["index_topk"] = p->index_topk;
    if (glm) c["indexer_types"] = std::vector<std::string>(p->layers, "full");
  }
  return c;
}

namespace {

// Writes the bf16 checkpoint for config `c` into `dir`.
StatusOr<SynthSummary> WriteBf16(const nlohmann::json& c, const SynthOptions& o,
                                 const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return NotFound(dir + ": cannot create: " + ec.message());
  const int64_t L = c["num_hidden_layers"];
  SynthSummary sum;
  sum.shards = L + 1;
  nlohmann::json weight_map = nlohmann::json::object();
  char name[64];
  for (int64_t l = -1; l < L; ++l) {
    std::snprintf(name, sizeof(name), "model-%05lld-of-%05lld.safetensors",
                  static_cast<long long>(l + 2), static_cast<long long>(L + 1));
    std::vector<std::pair<std::string, Tensor>> tensors;
    for (const Spec& s : LayerSpecs(c, l)) {
      tensors.push_back({s.name, Make(s, o.seed)});
      sum.params += tensors.back().second.numel();
      sum.bytes += tensors.back().second.nbytes();
      weight_map[s.name] = name;
    }
    sum.tensors += static_cast<int64_t>(tensors.size());
    LUCID_RETURN_IF_ERROR(WriteSafetensors(dir + "/" + name, tensors, {{"format", "pt"}}));
  }
  nlohmann::json index = {{"metadata", {{"total_size", sum.bytes}}}, {"weight_map", weight_map}};
  LUCID_RETURN_IF_ERROR(WriteText(dir + "/model.safetensors.index.json", index.dump(2)));
  LUCID_RETURN_IF_ERROR(WriteText(dir + "/config.json", c.dump(2)));
  return sum;
}

}  // namespace

StatusOr<SynthSummary> Synthesize(const SynthOptions& o) {
  LUCID_ASSIGN_OR_RETURN(nlohmann::json c, SynthConfig(o.arch, o.preset));
  if (!o.quant.empty() && o.quant != "nvfp4" && o.quant != "fp8-block")
    return InvalidArgument("synth: unknown --quant \"" + o.quant + "\" (nvfp4, fp8-block)");
  if (o.out_dir.empty()) return InvalidArgument("synth: --out is required");
  if (o.quant.empty()) return WriteBf16(c, o, o.out_dir);
  // Quantized: write bf16 beside the output, quantize it with `lucid quantize`'s code, remove it.
  const std::string tmp = o.out_dir + ".bf16-tmp";
  auto sum = WriteBf16(c, o, tmp);
  Status st = sum.status();
  if (st.ok()) {
    QuantizeOptions q;
    q.scheme = o.quant == "nvfp4" ? QuantScheme::kNvfp4 : QuantScheme::kFp8Block;
    st = QuantizeCheckpoint(tmp, o.out_dir, q);
  }
  std::error_code ec;
  std::filesystem::remove_all(tmp, ec);
  LUCID_RETURN_IF_ERROR(st);
  sum->bytes = 0;  // what was written: the packed checkpoint
  for (const auto& e : std::filesystem::directory_iterator(o.out_dir, ec))
    if (e.path().extension() == ".safetensors") sum->bytes += e.file_size();
  return sum;
}

}  // namespace lucid
