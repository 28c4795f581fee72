// GGUF metadata -> config.json and tensor names for the DeepSeek-V3 family (see gguf_config.h).
#include <array>
#include <cmath>
#include <map>
#include <regex>

#include "formats/gguf_config.h"
#include "formats/gguf_config_common.h"

namespace lucid {
namespace {

struct DeepseekArch {
  const char* gguf;
  const char* model_type;
  const char* hf_class;
};

constexpr std::array<DeepseekArch, 3> kDeepseekArchs = {{
    {"deepseek2", "deepseek_v3", "DeepseekV3ForCausalLM"},
    {"deepseek32", "deepseek_v32", "DeepseekV32ForCausalLM"},
    {"glm-dsa", "glm_moe_dsa", "GlmMoeDsaForCausalLM"},
}};

// Keys every file of the family must state (llama.cpp's loader requires them too).
constexpr std::array<const char*, 6> kRequired = {"block_count",
                                                  "embedding_length",
                                                  "attention.head_count",
                                                  "attention.kv_lora_rank",
                                                  "attention.layer_norm_rms_epsilon",
                                                  "rope.dimension_count"};

// Reads `<arch>.<suffix>` into the config when present: (key, HF field, integer?).
struct KeyRow {
  const char* suffix;
  const char* hf;
  bool integer;
};
constexpr std::array<KeyRow, 15> kKeys = {{
    {"context_length", "max_position_embeddings", true},
    {"embedding_length", "hidden_size", true},
    {"feed_forward_length", "intermediate_size", true},
    {"attention.head_count", "num_attention_heads", true},
    {"attention.layer_norm_rms_epsilon", "rms_norm_eps", false},
    {"vocab_size", "vocab_size", true},
    {"attention.kv_lora_rank", "kv_lora_rank", true},
    {"rope.dimension_count", "qk_rope_head_dim", true},
    {"expert_feed_forward_length", "moe_intermediate_size", true},
    {"expert_count", "n_routed_experts", true},
    {"expert_used_count", "num_experts_per_tok", true},
    {"expert_shared_count", "n_shared_experts", true},
    {"leading_dense_block_count", "first_k_dense_replace", true},
    {"attention.indexer.head_count", "index_n_heads", true},
    {"attention.indexer.key_length", "index_head_dim", true},
}};

// A value the converter may leave out, with the value llama.cpp's loader then uses.
StatusOr<uint64_t> UintOr(const GgufFile& f, const std::string& key, uint64_t fallback) {
  if (!f.Find(key)) return fallback;
  return f.GetUint(key);
}
StatusOr<double> FloatOr(const GgufFile& f, const std::string& key, double fallback) {
  if (!f.Find(key)) return fallback;
  return f.GetFloat(key);
}

// rope_parameters: freq_base, and for yarn the scaling keys. llama.cpp rotates with an attention
// factor of 1 (its graph cancels ggml's own yarn mscale) and scales the softmax by
// (1 + 0.1 * yarn_log_multiplier / 0.1 * ln(factor))^2: in transformers' terms mscale_all_dim =
// yarn_log_multiplier / 0.1 (computed in f32 as llama.cpp does) and attention_factor 1.
StatusOr<nlohmann::json> RopeParameters(const GgufFile& f, const std::string& a) {
  nlohmann::json r = nlohmann::json::object();
  LUCID_ASSIGN_OR_RETURN(double theta, FloatOr(f, a + ".rope.freq_base", 10000.0));
  r["rope_theta"] = theta;
  r["rope_type"] = "default";
  const std::string type_key = a + ".rope.scaling.type";
  if (!f.Find(type_key)) return r;
  LUCID_ASSIGN_OR_RETURN(std::string type, f.GetString(type_key));
  if (type == "none") return r;
  if (type != "yarn")
    return Unimplemented(f.path() + ": " + type_key + " \"" + type +
                         "\" is not supported (none, yarn)");
  r["rope_type"] = "yarn";
  LUCID_ASSIGN_OR_RETURN(double factor, f.GetFloat(a + ".rope.scaling.factor"));
  LUCID_ASSIGN_OR_RETURN(uint64_t orig, f.GetUint(a + ".rope.scaling.original_context_length"));
  LUCID_ASSIGN_OR_RETURN(double beta_fast, FloatOr(f, a + ".rope.scaling.yarn_beta_fast", 32.0));
  LUCID_ASSIGN_OR_RETURN(double beta_slow, FloatOr(f, a + ".rope.scaling.yarn_beta_slow", 1.0));
  LUCID_ASSIGN_OR_RETURN(double attn, FloatOr(f, a + ".rope.scaling.yarn_attn_factor", 1.0));
  r["factor"] = factor;
  r["original_max_position_embeddings"] = orig;
  r["beta_fast"] = beta_fast;
  r["beta_slow"] = beta_slow;
  r["attention_factor"] = attn;
  const std::string log_mul = a + ".rope.scaling.yarn_log_multiplier";
  if (f.Find(log_mul)) {
    LUCID_ASSIGN_OR_RETURN(double m, f.GetFloat(log_mul));
    const double all_dim = static_cast<double>(static_cast<float>(m) / 0.1f);
    r["mscale"] = all_dim;
    r["mscale_all_dim"] = all_dim;
  }
  return r;
}

// scoring_func from expert_gating_func (llama.cpp: 1 softmax, 2 sigmoid, 3 sqrtsoftplus). When the
// key is absent llama.cpp takes sigmoid for glm-dsa and softmax for deepseek2 (DeepSeek-V2 files);
// a file with the score-correction bias (exp_probs_b) is a V3-style sigmoid router, which is what
// transformers' DeepseekV3 / V3.2 classes always run, so lucid reads it as sigmoid.
StatusOr<std::string> ScoringFunc(const GgufFile& f, const std::string& a) {
  const std::string key = a + ".expert_gating_func";
  if (f.Find(key)) {
    LUCID_ASSIGN_OR_RETURN(uint64_t v, f.GetUint(key));
    if (v == 1) return std::string("softmax");
    if (v == 2) return std::string("sigmoid");
    if (v == 3) return std::string("sqrtsoftplus");
    return InvalidArgument(f.path() + ": " + key + " is " + std::to_string(v) +
                           "; allowed: 1 (softmax), 2 (sigmoid), 3 (sqrtsoftplus)");
  }
  if (a == "glm-dsa") return std::string("sigmoid");
  for (const auto& [name, info] : f.tensors())
    if (name.find(".exp_probs_b.") != std::string::npos) return std::string("sigmoid");
  return std::string("softmax");
}

// indexer_types for glm-dsa: the file's bool list (true: a full indexer), else llama.cpp's rule for
// files without it: every layer full below a 1M context (GLM-5, 5.1), GLM-5.2's pattern above.
StatusOr<nlohmann::json> IndexerTypes(const GgufFile& f, const std::string& a, uint64_t layers,
                                      uint64_t context) {
  nlohmann::json t = nlohmann::json::array();
  const std::string key = a + ".attention.indexer.types";
  if (const GgufValue* v = f.Find(key)) {
    if (v->type != GgufValueType::kArray || v->items.size() < layers)
      return InvalidArgument(f.path() + ": " + key + " must be an array of at least " +
                             std::to_string(layers) + " bools");
    for (uint64_t i = 0; i < layers; ++i) {
      const GgufValue& x = v->items[i];
      if (x.type != GgufValueType::kBool && !x.IsInteger())
        return InvalidArgument(f.path() + ": " + key + "[" + std::to_string(i) + "] is not a bool");
      t.push_back((x.type == GgufValueType::kBool ? x.u != 0 : x.i != 0 || x.u != 0) ? "full"
                                                                                     : "shared");
    }
    return t;
  }
  for (uint64_t i = 0; i < layers; ++i)
    t.push_back(context < 1048576 || i < 2 || (i - 2) % 4 == 0 ? "full" : "shared");
  return t;
}

Status SetKey(const GgufFile& f, const std::string& key, const KeyRow& row, nlohmann::json* c) {
  if (row.integer) {
    LUCID_ASSIGN_OR_RETURN(uint64_t v, f.GetUint(key));
    (*c)[row.hf] = v;
  } else {
    LUCID_ASSIGN_OR_RETURN(double v, f.GetFloat(key));
    (*c)[row.hf] = v;
  }
  return OkStatus();
}

// qk_nope_head_dim and v_head_dim: from key_length_mla / value_length_mla (files with kv_b split
// into k_b and v_b), else from key_length / value_length (older files that keep attn_kv_b).
Status HeadDims(const GgufFile& f, const std::string& a, uint64_t rope, nlohmann::json* c) {
  const bool mla = f.Find(a + ".attention.key_length_mla") != nullptr;
  const std::string k = a + (mla ? ".attention.key_length_mla" : ".attention.key_length");
  const std::string v = a + (mla ? ".attention.value_length_mla" : ".attention.value_length");
  LUCID_ASSIGN_OR_RETURN(uint64_t key_len, f.GetUint(k));
  LUCID_ASSIGN_OR_RETURN(uint64_t value_len, f.GetUint(v));
  if (key_len <= rope)
    return InvalidArgument(f.path() + ": " + k + " (" + std::to_string(key_len) +
                           ") must exceed rope.dimension_count (" + std::to_string(rope) + ")");
  (*c)["qk_nope_head_dim"] = key_len - rope;
  (*c)["v_head_dim"] = value_len;
  return OkStatus();
}

}  // namespace

bool IsDeepseekGgufArchitecture(const std::string& arch) {
  for (const DeepseekArch& a : kDeepseekArchs)
    if (arch == a.gguf) return true;
  return false;
}

StatusOr<nlohmann::json> DeepseekHfConfigFromGguf(const GgufFile& f) {
  LUCID_ASSIGN_OR_RETURN(std::string a, f.GetString("general.architecture"));
  const DeepseekArch* row = nullptr;
  for (const DeepseekArch& x : kDeepseekArchs)
    if (a == x.gguf) row = &x;
  if (row == nullptr) return InvalidArgument(f.path() + ": \"" + a + "\" is not a DeepSeek arch");
  for (const char* k : kRequired)
    if (!f.Find(a + "." + k)) return NotFound(f.path() + ": no metadata key " + a + "." + k);
  nlohmann::json c = nlohmann::json::object();
  c["model_type"] = row->model_type;
  c["architectures"] = {row->hf_class};
  for (const KeyRow& k : kKeys) {
    const std::string key = a + "." + k.suffix;
    if (f.Find(key)) LUCID_RETURN_IF_ERROR(SetKey(f, key, k, &c));
  }
  // block_count counts the appended NextN/MTP blocks, which lucid does not run.
  LUCID_ASSIGN_OR_RETURN(uint64_t blocks, f.GetUint(a + ".block_count"));
  LUCID_ASSIGN_OR_RETURN(uint64_t nextn, UintOr(f, a + ".nextn_predict_layers", 0));
  if (nextn >= blocks)
    return InvalidArgument(f.path() + ": " + a + ".nextn_predict_layers (" + std::to_string(nextn) +
                           ") leaves no layer of block_count (" + std::to_string(blocks) + ")");
  c["num_hidden_layers"] = blocks - nextn;
  c["num_key_value_heads"] = c["num_attention_heads"];  // MLA; the file says 1 (MQA over latents)
  if (f.Find(a + ".attention.q_lora_rank")) {
    LUCID_ASSIGN_OR_RETURN(uint64_t q, f.GetUint(a + ".attention.q_lora_rank"));
    c["q_lora_rank"] = q;
  } else {
    c["q_lora_rank"] = nullptr;
  }
  LUCID_RETURN_IF_ERROR(HeadDims(f, a, c["qk_rope_head_dim"].get<uint64_t>(), &c));
  // What the converter leaves out when it is the neutral value, stated so that the transformers
  // class defaults (ParseModelConfig's) do not fill it in.
  for (const char* k : {"n_routed_experts", "n_shared_experts", "first_k_dense_replace"})
    if (!c.contains(k)) c[k] = 0;
  LUCID_ASSIGN_OR_RETURN(double scale, FloatOr(f, a + ".expert_weights_scale", 1.0));
  c["routed_scaling_factor"] = scale;
  bool norm = false;
  if (f.Find(a + ".expert_weights_norm")) {
    LUCID_ASSIGN_OR_RETURN(norm, f.GetBool(a + ".expert_weights_norm"));
  }
  c["norm_topk_prob"] = norm;
  LUCID_ASSIGN_OR_RETURN(uint64_t groups, UintOr(f, a + ".expert_group_count", 1));
  LUCID_ASSIGN_OR_RETURN(uint64_t groups_used, UintOr(f, a + ".expert_group_used_count", 1));
  c["n_group"] = groups == 0 ? 1 : groups;
  c["topk_group"] = groups_used == 0 ? 1 : groups_used;
  LUCID_ASSIGN_OR_RETURN(c["scoring_func"], ScoringFunc(f, a));
  LUCID_ASSIGN_OR_RETURN(c["rope_parameters"], RopeParameters(f, a));
  c["rope_interleave"] = true;  // llama.cpp rotates adjacent pairs (LLAMA_ROPE_TYPE_NORM)
  if (!c.contains("max_position_embeddings")) c["max_position_embeddings"] = 4096;
  if (c.contains("index_n_heads")) {
    LUCID_ASSIGN_OR_RETURN(c["index_topk"], f.GetUint(a + ".attention.indexer.top_k"));
    if (a == "glm-dsa") {
      LUCID_ASSIGN_OR_RETURN(
          c["indexer_types"],
          IndexerTypes(f, a, blocks - nextn, c["max_position_embeddings"].get<uint64_t>()));
    }
  }
  LUCID_RETURN_IF_ERROR(gguf_config::AddTokenizerKeys(f, c));
  return c;
}

std::optional<std::string> DeepseekHfTensorName(const std::string& name) {
  static const std::map<std::string, std::string> kTop = {
      {"token_embd", "model.embed_tokens"}, {"output_norm", "model.norm"}, {"output", "lm_head"}};
  static const std::map<std::string, std::string> kLayer = {
      {"attn_norm", "input_layernorm"},
      {"ffn_norm", "post_attention_layernorm"},
      {"attn_q", "self_attn.q_proj"},
      {"attn_q_a", "self_attn.q_a_proj"},
      {"attn_q_a_norm", "self_attn.q_a_layernorm"},
      {"attn_q_b", "self_attn.q_b_proj"},
      {"attn_kv_a_mqa", "self_attn.kv_a_proj_with_mqa"},
      {"attn_kv_a_norm", "self_attn.kv_a_layernorm"},
      {"attn_kv_b", "self_attn.kv_b_proj"},
      {"attn_output", "self_attn.o_proj"},
      {"indexer.attn_q_b", "self_attn.indexer.wq_b"},
      {"indexer.attn_k", "self_attn.indexer.wk"},
      {"indexer.k_norm", "self_attn.indexer.k_norm"},
      {"indexer.proj", "self_attn.indexer.weights_proj"},
      {"ffn_gate", "mlp.gate_proj"},
      {"ffn_up", "mlp.up_proj"},
      {"ffn_down", "mlp.down_proj"},
      {"ffn_gate_inp", "mlp.gate"},
      {"ffn_gate_shexp", "mlp.shared_experts.gate_proj"},
      {"ffn_up_shexp", "mlp.shared_experts.up_proj"},
      {"ffn_down_shexp", "mlp.shared_experts.down_proj"}};
  static const std::regex kPattern(R"(^(?:blk\.(\d+)\.)?([a-z_.]+?)\.(weight|bias)$)");
  // The one name whose suffix is part of the HF name: exp_probs_b.bias is the router's bias.
  static const std::regex kRouterBias(R"(^blk\.(\d+)\.exp_probs_b\.bias$)");
  std::smatch m;
  if (std::regex_match(name, m, kRouterBias))
    return "model.layers." + m[1].str() + ".mlp.gate.e_score_correction_bias";
  return gguf_config::HfNameFromTables(name, kPattern, kTop, kLayer);
}

}  // namespace lucid
