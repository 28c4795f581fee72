#include "config/model_facts.h"

#include <fnmatch.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "core/dtype.h"
#include "formats/align_checkpoint.h"
#include "models/registry.h"

namespace lucid::config {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

struct QuantInfo {
  std::string method = "none";
  std::string algo;
  bool ue8m0 = false;
  std::string kv_algo;
  std::vector<std::string> exclude;  // module-name patterns left unquantized
};

std::vector<std::string> StringList(const json& j, const char* key) {
  std::vector<std::string> out;
  if (j.is_object() && j.contains(key) && j[key].is_array())
    for (const json& v : j[key])
      if (v.is_string()) out.push_back(v.get<std::string>());
  return out;
}

std::string Str(const json& j, const char* key) {
  return j.is_object() && j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : "";
}

StatusOr<QuantInfo> ParseQuant(const json& config, const json& hf_quant) {
  QuantInfo q;
  const json qc = config.contains("quantization_config") ? config["quantization_config"] : json();
  json modelopt;
  if (hf_quant.is_object() && hf_quant.contains("quantization")) {
    modelopt = hf_quant["quantization"];
  } else if (Str(qc, "quant_method") == "modelopt") {
    modelopt = qc;
  }
  if (modelopt.is_object()) {
    q.method = "modelopt";
    q.algo = Str(modelopt, "quant_algo");
    q.kv_algo = Str(modelopt, "kv_cache_quant_algo");
    q.exclude = StringList(modelopt, "exclude_modules");
    for (const std::string& s : StringList(modelopt, "ignore")) q.exclude.push_back(s);
    if (q.algo != "NVFP4")
      return Unimplemented("quantization: ModelOpt quant_algo \"" + q.algo +
                           "\" is not supported (supported: NVFP4)");
    return q;
  }
  if (qc.is_null()) return q;
  const std::string method = Str(qc, "quant_method");
  if (method == "fp8") {
    const json& bs = qc.contains("weight_block_size") ? qc["weight_block_size"] : json();
    if (bs != json::array({128, 128}))
      return Unimplemented("quantization: fp8 needs weight_block_size [128, 128], found " +
                           bs.dump());
    q.method = "fp8";
    q.algo = "FP8_BLOCK_128";
    q.ue8m0 = Str(qc, "scale_fmt") == "ue8m0";
    q.exclude = StringList(qc, "modules_to_not_convert");
    return q;
  }
  return Unimplemented("config.json: quantization_config.quant_method \"" + method +
                       "\" is not supported (supported: fp8 with 128x128 blocks, modelopt NVFP4)");
}

// What a tensor is, from its name alone.
struct Role {
  std::string module;  // name without the last component
  int64_t layer = -1;  // -1 for global tensors
  bool linear = false, split = false, expert = false, quantizable = false;
};

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

Role Classify(const std::string& name) {
  Role r;
  r.module = name.substr(0, name.rfind('.'));
  const std::string m = r.module;
  const std::string lp = "model.layers.";
  std::string rest = m;
  if (m.rfind(lp, 0) == 0) {
    size_t dot = m.find('.', lp.size());
    r.layer = std::stoll(m.substr(lp.size(), dot - lp.size()));
    rest = dot == std::string::npos ? "" : m.substr(dot + 1);
  }
  auto is = [&](const char* s) { return rest == s; };
  if (rest.find("norm") != std::string::npos || EndsWith(rest, "mlp.gate") ||
      rest.rfind("mlp.gate.", 0) == 0)
    return r;  // norms, router and its bias: replicated
  if (is("model.embed_tokens")) {
    r.split = true;  // vocabulary-parallel
    return r;
  }
  if (is("lm_head")) {
    r.linear = r.split = true;  // never quantized (ModelOpt, DeepSeek)
    return r;
  }
  if (r.layer < 0) return r;
  r.linear = true;
  r.quantizable = true;
  if (is("self_attn.q_a_proj") || is("self_attn.kv_a_proj_with_mqa") ||
      rest.rfind("self_attn.indexer.", 0) == 0) {
    if (is("self_attn.indexer.weights_proj")) r.quantizable = false;
    return r;  // replicated low-rank / indexer projections
  }
  r.split = true;  // heads (q_b, kv_b, o, q_proj) and MLP widths
  r.expert = rest.rfind("mlp.experts.", 0) == 0;
  return r;
}

bool Excluded(const QuantInfo& q, const std::string& module) {
  for (const std::string& p : q.exclude)
    if (fnmatch(p.c_str(), module.c_str(), 0) == 0 || module == p) return true;
  return false;
}

WeightFormat FormatFor(const QuantInfo& q, const Role& r, WeightFormat plain) {
  if (!r.linear || !r.quantizable || q.method == "none" || Excluded(q, r.module)) return plain;
  return q.method == "fp8" ? WeightFormat::kFp8Block : WeightFormat::kNvfp4;
}

uint64_t LinearBytes(WeightFormat f, int64_t out, int64_t in, int plain_bytes) {
  const uint64_t o = out, i = in;
  switch (f) {
    case WeightFormat::kFp8Block:
      return o * i + ((o + 127) / 128) * ((i + 127) / 128) * 4;
    case WeightFormat::kNvfp4:
      return o * i / 2 + o * ((i + 15) / 16) + 4 + 4;
    case WeightFormat::kF32:
      return o * i * 4;
    case WeightFormat::kBF16:
      return o * i * plain_bytes;
    case WeightFormat::kGgml:  // no config-driven model stores GGUF blocks yet
      return o * i * plain_bytes;
  }
  return o * i * plain_bytes;
}

// The tensors the model loads, from the config alone (MODEL-GLM-DSA.md section 3).
std::vector<TensorEntry> Inventory(const ModelConfig& c, const QuantInfo& q, int plain_bytes,
                                   WeightFormat plain) {
  std::vector<TensorEntry> t;
  auto vec = [&](const std::string& name, int64_t n, int bytes) {
    Role r = Classify(name + ".weight");
    t.push_back({name, static_cast<uint64_t>(n) * bytes, r.split, false, false, plain});
  };
  auto lin = [&](const std::string& module, int64_t out, int64_t in) {
    Role r = Classify(module + ".weight");
    WeightFormat f = FormatFor(q, r, plain);
    t.push_back({module, LinearBytes(f, out, in, plain_bytes), r.split, r.expert, true, f});
  };
  const int64_t D = c.hidden_size, H = c.num_attention_heads;
  vec("model.embed_tokens", c.vocab_size * D, plain_bytes);
  vec("model.norm", D, plain_bytes);
  lin("lm_head", c.vocab_size, D);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    vec(p + "input_layernorm", D, plain_bytes);
    vec(p + "post_attention_layernorm", D, plain_bytes);
    if (c.q_lora_rank > 0) {
      lin(p + "self_attn.q_a_proj", c.q_lora_rank, D);
      vec(p + "self_attn.q_a_layernorm", c.q_lora_rank, plain_bytes);
      lin(p + "self_attn.q_b_proj", H * c.qk_head_dim(), c.q_lora_rank);
    } else {
      lin(p + "self_attn.q_proj", H * c.qk_head_dim(), D);
    }
    lin(p + "self_attn.kv_a_proj_with_mqa", c.kv_lora_rank + c.qk_rope_head_dim, D);
    vec(p + "self_attn.kv_a_layernorm", c.kv_lora_rank, plain_bytes);
    lin(p + "self_attn.kv_b_proj", H * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank);
    lin(p + "self_attn.o_proj", D, H * c.v_head_dim);
    if (c.has_indexer && l < static_cast<int64_t>(c.layer_runs_indexer.size()) &&
        c.layer_runs_indexer[l]) {
      const int64_t nI = c.index_n_heads, dI = c.index_head_dim;
      lin(p + "self_attn.indexer.wq_b", nI * dI, c.q_lora_rank);
      lin(p + "self_attn.indexer.wk", dI, D);
      vec(p + "self_attn.indexer.k_norm", 2 * dI, plain_bytes);
      lin(p + "self_attn.indexer.weights_proj", nI, D);
    }
    const bool moe = l < static_cast<int64_t>(c.layer_is_moe.size()) && c.layer_is_moe[l];
    if (!moe) {
      lin(p + "mlp.gate_proj", c.intermediate_size, D);
      lin(p + "mlp.up_proj", c.intermediate_size, D);
      lin(p + "mlp.down_proj", D, c.intermediate_size);
      continue;
    }
    const int64_t I = c.moe_intermediate_size, E = c.n_routed_experts;
    vec(p + "mlp.gate", E * D, plain_bytes);
    vec(p + "mlp.gate.e_score_correction_bias", E, 4);
    for (int64_t e = 0; e < E; ++e) {
      const std::string ep = p + "mlp.experts." + std::to_string(e) + ".";
      lin(ep + "gate_proj", I, D);
      lin(ep + "up_proj", I, D);
      lin(ep + "down_proj", D, I);
    }
    if (c.n_shared_experts > 0) {
      const int64_t S = I * c.n_shared_experts;
      lin(p + "mlp.shared_experts.gate_proj", S, D);
      lin(p + "mlp.shared_experts.up_proj", S, D);
      lin(p + "mlp.shared_experts.down_proj", D, S);
    }
  }
  return t;
}

// The tensors of a checkpoint, from its headers; formats from the dtypes actually stored.
StatusOr<std::vector<TensorEntry>> FromCheckpoint(const Checkpoint& ck, const ModelConfig& c) {
  std::vector<TensorEntry> t;
  const std::vector<std::string> names = ck.Names();
  std::set<std::string> names_set(names.begin(), names.end());
  for (const std::string& n : names) {
    Role r = Classify(n);
    if (r.layer >= c.num_hidden_layers) continue;  // MTP layer: not loaded
    LUCID_ASSIGN_OR_RETURN(TensorInfo info, ck.Info(n));
    TensorEntry e{
        n, info.data_end - info.data_begin, r.split, r.expert, r.linear, WeightFormat::kBF16};
    if (r.linear) {
      const std::string w = r.module + ".weight";
      StatusOr<TensorInfo> wi = ck.Info(w);
      if (wi.ok()) {
        if (wi->dtype == DType::kF8E4M3 && names_set.count(r.module + ".weight_scale_inv"))
          e.format = WeightFormat::kFp8Block;
        else if (wi->dtype == DType::kU8 && names_set.count(r.module + ".weight_scale"))
          e.format = WeightFormat::kNvfp4;
        else if (wi->dtype == DType::kF32)
          e.format = WeightFormat::kF32;
        else if (wi->dtype == DType::kBF16 || wi->dtype == DType::kF16)
          e.format = WeightFormat::kBF16;
        else
          return Unimplemented(w + ": weight dtype " + DTypeName(wi->dtype) +
                               " is not a supported weight format");
      }
    }
    t.push_back(std::move(e));
  }
  return t;
}

bool HasSafetensors(const std::string& dir) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".safetensors" ||
        e.path().filename() == "model.safetensors.index.json")
      return true;
  return false;
}

}  // namespace

uint64_t ModelFacts::TotalBytes() const {
  uint64_t s = 0;
  for (const TensorEntry& t : tensors) s += t.bytes;
  return s;
}

uint64_t ModelFacts::BytesPerDevice(int64_t tp) const {
  uint64_t s = 0;
  const uint64_t d = static_cast<uint64_t>(std::max<int64_t>(tp, 1));
  for (const TensorEntry& t : tensors) s += t.split ? (t.bytes + d - 1) / d : t.bytes;
  return s;
}

std::string ModelFacts::QuantDescription() const {
  std::string s = quant_method == "none" ? "unquantized" : quant_algo + " (" + quant_method + ")";
  if (ue8m0_scales) s += ", ue8m0 scales";
  s += "; linear layers: ";
  for (size_t i = 0; i < linear_formats.size(); ++i)
    s += (i ? "+" : "") + std::string(WeightFormatName(linear_formats[i]));
  if (expert_format) s += std::string("; experts: ") + WeightFormatName(*expert_format);
  return s;
}

StatusOr<ModelFacts> BuildModelFacts(const json& config_json, const json& hf_quant,
                                     const Checkpoint* ckpt, const std::string& dir) {
  ModelFacts f;
  f.dir = dir;
  StatusOr<ModelConfig> cfg = ParseModelConfig(config_json);
  if (!cfg.ok())
    return cfg.status().WithContext(dir.empty() ? "config.json" : dir + "/config.json");
  f.config = std::move(cfg).value();
  LUCID_ASSIGN_OR_RETURN(const ArchitectureInfo* arch, FindArchitecture(f.config));
  f.sparse_attention = arch->sparse_attention;
  f.max_tensor_parallel = arch->max_tensor_parallel;
  LUCID_ASSIGN_OR_RETURN(QuantInfo q, ParseQuant(config_json, hf_quant));
  f.quant_method = q.method;
  f.quant_algo = q.algo;
  f.ue8m0_scales = q.ue8m0;
  f.kv_cache_quant_algo = q.kv_algo;
  const bool f32 = f.config.torch_dtype == "float32";
  const WeightFormat plain = f32 ? WeightFormat::kF32 : WeightFormat::kBF16;
  if (ckpt != nullptr) {
    LUCID_ASSIGN_OR_RETURN(f.tensors, FromCheckpoint(*ckpt, f.config));
    f.sizes_from_checkpoint = true;
    f.misaligned_weight_bytes = MisalignedWeightBytes(*ckpt);
  } else {
    f.tensors = Inventory(f.config, q, f32 ? 4 : 2, plain);
  }
  for (const TensorEntry& t : f.tensors) {
    if (!t.linear) continue;
    if (t.expert) {
      f.expert_format = t.format;  // a mixed-format expert set would need per-layer runners
    } else if (std::find(f.linear_formats.begin(), f.linear_formats.end(), t.format) ==
               f.linear_formats.end()) {
      f.linear_formats.push_back(t.format);
    }
  }
  return f;
}

StatusOr<ModelFacts> LoadModelFacts(const std::string& dir) {
  const std::string config_path = (fs::path(dir) / "config.json").string();
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return NotFound("model directory " + dir + " not found");
  if (!fs::is_regular_file(config_path, ec))
    return NotFound("model directory " + dir + " has no config.json");
  LUCID_ASSIGN_OR_RETURN(json config, ReadJsonFile(config_path));
  json hf_quant;
  const std::string hq = (fs::path(dir) / "hf_quant_config.json").string();
  if (fs::is_regular_file(hq, ec)) {
    LUCID_ASSIGN_OR_RETURN(hf_quant, ReadJsonFile(hq));
  }
  if (!HasSafetensors(dir)) return BuildModelFacts(config, hf_quant, nullptr, dir);
  LUCID_ASSIGN_OR_RETURN(Checkpoint ck, Checkpoint::Open(dir));
  return BuildModelFacts(config, hf_quant, &ck, dir);
}

}  // namespace lucid::config
