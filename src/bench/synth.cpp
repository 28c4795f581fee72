#include "bench/synth.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include "core/dtype.h"
#include "core/parallel.h"
#include "core/tensor.h"
#include "formats/deepseek_v3_tensors.h"
#include "formats/model_config.h"
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
    {"16g", 6144, 6, 1, 12288, 64, 2048, 64, 8, 1024, 32, 2048, 65536},
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
  const float a =
      s.init == Init::kSmall ? 0.01f : std::sqrt(3.0f / static_cast<float>(s.shape.back()));
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

// Tensors of layer l (or, for l < 0, the embeddings/final norm/lm_head shard): the family's
// tensor table (formats/deepseek_v3_tensors.h), in bf16 but for the router's score-correction
// bias and the indexer's head weights (f32, as DeepSeek's checkpoints store them); norms start
// at one, their biases at zero.
std::vector<Spec> LayerSpecs(const ModelConfig& c, int64_t l) {
  const std::string weights_proj = ".indexer.weights_proj.weight";
  std::vector<Spec> s;
  for (const TensorSpec& t : DeepseekV3LayerTensors(c, l)) {
    Spec x{t.name, t.shape, DType::kBF16, Init::kUniform};
    if (t.row->kind == TensorKind::kNormWeight) x.init = Init::kOnes;
    if (t.row->kind == TensorKind::kNormBias) x.init = Init::kZeros;
    if (t.row->kind == TensorKind::kRouterBias) {
      x.dtype = DType::kF32;
      x.init = Init::kSmall;
    }
    if (t.name.size() > weights_proj.size() &&
        t.name.compare(t.name.size() - weights_proj.size(), weights_proj.size(), weights_proj) == 0)
      x.dtype = DType::kF32;
    s.push_back(std::move(x));
  }
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
  if (p == nullptr)
    return InvalidArgument("synth: unknown --preset \"" + preset + "\" (tiny, 1g, 4g, 16g)");
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
    c["rope_parameters"] = {{"rope_theta", 10000.0}, {"rope_type", "yarn"},
                            {"factor", 40.0},        {"original_max_position_embeddings", 4096},
                            {"beta_fast", 32.0},     {"beta_slow", 1.0},
                            {"mscale", 1.0},         {"mscale_all_dim", 1.0}};
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
  LUCID_ASSIGN_OR_RETURN(ModelConfig mc, ParseModelConfig(c));
  const int64_t L = mc.num_hidden_layers;
  SynthSummary sum;
  sum.shards = L + 1;
  nlohmann::json weight_map = nlohmann::json::object();
  char name[64];
  for (int64_t l = -1; l < L; ++l) {
    std::snprintf(name, sizeof(name), "model-%05lld-of-%05lld.safetensors",
                  static_cast<long long>(l + 2), static_cast<long long>(L + 1));
    std::vector<std::pair<std::string, Tensor>> tensors;
    for (const Spec& s : LayerSpecs(mc, l)) {
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

StatusOr<SynthSummary> SynthSize(const std::string& arch, const std::string& preset) {
  LUCID_ASSIGN_OR_RETURN(nlohmann::json c, SynthConfig(arch, preset));
  LUCID_ASSIGN_OR_RETURN(ModelConfig mc, ParseModelConfig(c));
  SynthSummary sum;
  sum.shards = mc.num_hidden_layers + 1;
  for (int64_t l = -1; l < mc.num_hidden_layers; ++l)
    for (const Spec& s : LayerSpecs(mc, l)) {
      const int64_t n = NumElements(s.shape);
      sum.params += n;
      sum.bytes += static_cast<uint64_t>(n) * DTypeBits(s.dtype) / 8;
      ++sum.tensors;
    }
  return sum;
}

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
