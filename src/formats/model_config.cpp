#include "formats/model_config.h"

#include <cmath>
#include <fstream>
#include <sstream>

namespace lucid {
namespace {

// Defaults of transformers' config classes, per model_type (transformers 5.24).
struct FamilyDefaults {
  const char* model_type;
  int64_t vocab, hidden, inter, moe_inter, layers, heads, q_lora, kv_lora, rope, nope, v;
  int64_t experts, shared, topk, n_group, topk_group, first_dense, max_pos;
  double scaling, eps, theta;
  bool indexer;
  RopeLayout indexer_layout;
  int64_t index_heads;
};

constexpr FamilyDefaults kDefaults[] = {
    {"glm_moe_dsa", 154880, 6144, 12288, 2048, 78, 64, 2048, 512, 64, 192, 256, 256, 1, 8, 1, 1,
     3, 202752, 2.5, 1e-5, 10000.0, true, RopeLayout::kInterleaved, 32},
    {"deepseek_v32", 129280, 7168, 18432, 2048, 61, 128, 1536, 512, 64, 128, 128, 256, 1, 8, 8, 4,
     3, 163840, 2.5, 1e-6, 10000.0, true, RopeLayout::kHalfSplit, 64},
    {"deepseek_v3", 129280, 7168, 18432, 2048, 61, 128, 1536, 512, 64, 128, 128, 256, 1, 8, 8, 4,
     3, 4096, 2.5, 1e-6, 10000.0, false, RopeLayout::kInterleaved, 0},
};

// Typed field access with errors that name the field.
class Fields {
 public:
  explicit Fields(const nlohmann::json& j) : j_(j) {}

  Status Int(const char* key, int64_t* out) const {
    if (!j_.contains(key) || j_[key].is_null()) return OkStatus();
    const auto& v = j_[key];
    if (v.is_number_integer() || v.is_number_unsigned()) {
      *out = v.get<int64_t>();
      return OkStatus();
    }
    return InvalidArgument(std::string("config.json: field \"") + key +
                           "\" must be an integer, got " + v.dump());
  }
  Status NonNegInt(const char* key, int64_t* out) const {
    LUCID_RETURN_IF_ERROR(Int(key, out));
    if (*out < 0) return InvalidArgument(std::string("config.json: field \"") + key + "\" is negative");
    return OkStatus();
  }
  Status Double(const char* key, double* out) const { return DoubleIn(j_, key, out); }
  static Status DoubleIn(const nlohmann::json& j, const char* key, double* out) {
    if (!j.contains(key) || j[key].is_null()) return OkStatus();
    if (!j[key].is_number())
      return InvalidArgument(std::string("config.json: field \"") + key +
                             "\" must be a number, got " + j[key].dump());
    *out = j[key].get<double>();
    return OkStatus();
  }
  Status Bool(const char* key, bool* out) const {
    if (!j_.contains(key) || j_[key].is_null()) return OkStatus();
    if (!j_[key].is_boolean())
      return InvalidArgument(std::string("config.json: field \"") + key +
                             "\" must be true or false, got " + j_[key].dump());
    *out = j_[key].get<bool>();
    return OkStatus();
  }
  Status String(const char* key, std::string* out) const {
    if (!j_.contains(key) || j_[key].is_null()) return OkStatus();
    if (!j_[key].is_string())
      return InvalidArgument(std::string("config.json: field \"") + key +
                             "\" must be a string, got " + j_[key].dump());
    *out = j_[key].get<std::string>();
    return OkStatus();
  }

 private:
  const nlohmann::json& j_;
};

Status ParseRope(const nlohmann::json& j, ModelConfig* c) {
  // transformers 5 writes rope_parameters; older checkpoints use rope_theta + rope_scaling.
  nlohmann::json p = nlohmann::json::object();
  if (j.contains("rope_scaling") && j["rope_scaling"].is_object()) p = j["rope_scaling"];
  if (j.contains("rope_parameters") && j["rope_parameters"].is_object()) p = j["rope_parameters"];
  if (j.contains("rope_theta")) LUCID_RETURN_IF_ERROR(Fields::DoubleIn(j, "rope_theta", &c->rope.theta));
  LUCID_RETURN_IF_ERROR(Fields::DoubleIn(p, "rope_theta", &c->rope.theta));
  std::string type = "default";
  if (p.contains("rope_type") && p["rope_type"].is_string()) type = p["rope_type"];
  else if (p.contains("type") && p["type"].is_string()) type = p["type"];
  if (type != "default" && type != "yarn")
    return Unimplemented("config.json: rope type \"" + type +
                         "\" is not supported (supported: default, yarn)");
  c->rope.type = type;
  if (type == "yarn") {
    LUCID_RETURN_IF_ERROR(Fields::DoubleIn(p, "factor", &c->rope.factor));
    double omp = static_cast<double>(c->max_position_embeddings);
    if (p.contains("original_max_position_embeddings")) {
      LUCID_RETURN_IF_ERROR(Fields::DoubleIn(p, "original_max_position_embeddings", &omp));
    }
    c->rope.original_max_position_embeddings = static_cast<int64_t>(omp);
    LUCID_RETURN_IF_ERROR(Fields::DoubleIn(p, "beta_fast", &c->rope.beta_fast));
    LUCID_RETURN_IF_ERROR(Fields::DoubleIn(p, "beta_slow", &c->rope.beta_slow));
    LUCID_RETURN_IF_ERROR(Fields::DoubleIn(p, "mscale", &c->rope.mscale));
    LUCID_RETURN_IF_ERROR(Fields::DoubleIn(p, "mscale_all_dim", &c->rope.mscale_all_dim));
    LUCID_RETURN_IF_ERROR(Fields::DoubleIn(p, "attention_factor", &c->rope.attention_factor));
    if (p.contains("truncate") && p["truncate"].is_boolean()) c->rope.truncate = p["truncate"];
    if (c->rope.factor <= 0) return InvalidArgument("config.json: yarn factor must be positive");
  }
  return OkStatus();
}

Status ParseLayerTypes(const nlohmann::json& j, ModelConfig* c) {
  const int64_t L = c->num_hidden_layers;
  c->layer_is_moe.assign(L, false);
  if (j.contains("mlp_layer_types") && j["mlp_layer_types"].is_array()) {
    const auto& a = j["mlp_layer_types"];
    if (static_cast<int64_t>(a.size()) < L)
      return InvalidArgument("config.json: mlp_layer_types has fewer entries than num_hidden_layers");
    for (int64_t i = 0; i < L; ++i) c->layer_is_moe[i] = a[i] == "sparse";
  } else {
    for (int64_t i = 0; i < L; ++i) c->layer_is_moe[i] = i >= c->first_k_dense_replace;
  }
  c->layer_runs_indexer.assign(L, c->has_indexer);
  if (!c->has_indexer) return OkStatus();
  if (j.contains("indexer_types") && j["indexer_types"].is_array()) {
    const auto& a = j["indexer_types"];
    if (static_cast<int64_t>(a.size()) < L)
      return InvalidArgument("config.json: indexer_types has fewer entries than num_hidden_layers");
    for (int64_t i = 0; i < L; ++i) c->layer_runs_indexer[i] = a[i] != "shared";
  } else if (j.contains("index_topk_pattern") && j["index_topk_pattern"].is_string()) {
    std::string pat = j["index_topk_pattern"];
    if (static_cast<int64_t>(pat.size()) < L)
      return InvalidArgument("config.json: index_topk_pattern shorter than num_hidden_layers");
    for (int64_t i = 0; i < L; ++i) c->layer_runs_indexer[i] = pat[i] != 'S';
  } else if (c->model_type == "glm_moe_dsa") {
    int64_t freq = 1, offset = 2;
    Fields f(j);
    LUCID_RETURN_IF_ERROR(f.Int("index_topk_freq", &freq));
    LUCID_RETURN_IF_ERROR(f.Int("index_skip_topk_offset", &offset));
    freq = std::max<int64_t>(freq, 1);
    for (int64_t i = 0; i < L; ++i)
      c->layer_runs_indexer[i] = (std::max<int64_t>(i - offset + 1, 0) % freq) == 0;
  }
  if (!c->layer_runs_indexer.empty() && !c->layer_runs_indexer[0])
    return InvalidArgument("config.json: layer 0 is a shared-indexer layer with no earlier full layer");
  return OkStatus();
}

Status CheckDims(const ModelConfig& c) {
  auto need = [](bool ok, const std::string& what) {
    return ok ? OkStatus() : InvalidArgument("config.json: " + what);
  };
  LUCID_RETURN_IF_ERROR(need(c.vocab_size > 0 && c.hidden_size > 0 && c.num_hidden_layers > 0,
                             "vocab_size, hidden_size and num_hidden_layers must be positive"));
  LUCID_RETURN_IF_ERROR(need(c.num_attention_heads > 0 && c.kv_lora_rank > 0,
                             "num_attention_heads and kv_lora_rank must be positive"));
  LUCID_RETURN_IF_ERROR(need(c.num_key_value_heads == c.num_attention_heads,
                             "num_key_value_heads must equal num_attention_heads for MLA"));
  LUCID_RETURN_IF_ERROR(need(c.qk_rope_head_dim > 0 && c.qk_rope_head_dim % 2 == 0,
                             "qk_rope_head_dim must be positive and even"));
  LUCID_RETURN_IF_ERROR(need(c.qk_nope_head_dim > 0 && c.v_head_dim > 0,
                             "qk_nope_head_dim and v_head_dim must be positive"));
  bool any_moe = false;
  for (bool m : c.layer_is_moe) any_moe |= m;
  if (any_moe) {
    LUCID_RETURN_IF_ERROR(need(c.n_routed_experts > 0 && c.num_experts_per_tok > 0 &&
                                   c.num_experts_per_tok <= c.n_routed_experts,
                               "need 0 < num_experts_per_tok <= n_routed_experts"));
    LUCID_RETURN_IF_ERROR(need(c.n_group > 0 && c.n_routed_experts % c.n_group == 0,
                               "n_routed_experts must be divisible by n_group"));
    LUCID_RETURN_IF_ERROR(need(c.topk_group >= 1 && c.topk_group <= c.n_group,
                               "need 1 <= topk_group <= n_group"));
    LUCID_RETURN_IF_ERROR(need(c.n_group == 1 || c.n_routed_experts / c.n_group >= 2,
                               "group-limited routing needs at least 2 experts per group"));
    LUCID_RETURN_IF_ERROR(need(c.scoring_func == "sigmoid",
                               "scoring_func \"" + c.scoring_func + "\" is not supported (sigmoid)"));
  }
  if (c.has_indexer) {
    LUCID_RETURN_IF_ERROR(need(c.index_n_heads > 0 && c.index_topk > 0,
                               "index_n_heads and index_topk must be positive"));
    LUCID_RETURN_IF_ERROR(need(c.index_head_dim >= c.qk_rope_head_dim,
                               "index_head_dim must be at least qk_rope_head_dim"));
  }
  return need(c.hidden_act == "silu", "hidden_act \"" + c.hidden_act + "\" is not supported (silu)");
}

}  // namespace

const char* RopeLayoutName(RopeLayout l) {
  return l == RopeLayout::kInterleaved ? "interleaved" : "half-split";
}

double ModelConfig::AttentionScale() const {
  double scale = 1.0 / std::sqrt(static_cast<double>(qk_head_dim()));
  if (rope.type != "default" && rope.mscale_all_dim != 0.0 && rope.factor > 1.0) {
    double m = 0.1 * rope.mscale_all_dim * std::log(rope.factor) + 1.0;
    scale *= m * m;
  }
  return scale;
}

StatusOr<ModelConfig> ParseModelConfig(const nlohmann::json& j) {
  if (!j.is_object()) return InvalidArgument("config.json: top level must be a JSON object");
  ModelConfig c;
  c.raw = j;
  Fields f(j);
  LUCID_RETURN_IF_ERROR(f.String("model_type", &c.model_type));
  if (j.contains("architectures")) {
    const auto& a = j["architectures"];
    if (!a.is_array() || a.empty() || !a[0].is_string())
      return InvalidArgument("config.json: \"architectures\" must be a non-empty list of strings");
    c.architecture = a[0];
  }
  const FamilyDefaults* d = nullptr;
  for (const auto& row : kDefaults)
    if (c.model_type == row.model_type) d = &row;
  if (d != nullptr) {
    c.vocab_size = d->vocab, c.hidden_size = d->hidden, c.intermediate_size = d->inter;
    c.moe_intermediate_size = d->moe_inter, c.num_hidden_layers = d->layers;
    c.num_attention_heads = d->heads, c.q_lora_rank = d->q_lora, c.kv_lora_rank = d->kv_lora;
    c.qk_rope_head_dim = d->rope, c.qk_nope_head_dim = d->nope, c.v_head_dim = d->v;
    c.n_routed_experts = d->experts, c.n_shared_experts = d->shared, c.num_experts_per_tok = d->topk;
    c.n_group = d->n_group, c.topk_group = d->topk_group, c.first_k_dense_replace = d->first_dense;
    c.max_position_embeddings = d->max_pos, c.routed_scaling_factor = d->scaling;
    c.rms_norm_eps = d->eps, c.rope.theta = d->theta, c.has_indexer = d->indexer;
    c.indexer_rope_layout = d->indexer_layout, c.index_n_heads = d->index_heads;
    c.index_head_dim = d->indexer ? 128 : 0, c.index_topk = d->indexer ? 2048 : 0;
  }
  LUCID_RETURN_IF_ERROR(f.String("torch_dtype", &c.torch_dtype));
  LUCID_RETURN_IF_ERROR(f.String("dtype", &c.torch_dtype));
  LUCID_RETURN_IF_ERROR(f.NonNegInt("vocab_size", &c.vocab_size));
  LUCID_RETURN_IF_ERROR(f.NonNegInt("hidden_size", &c.hidden_size));
  LUCID_RETURN_IF_ERROR(f.NonNegInt("intermediate_size", &c.intermediate_size));
  LUCID_RETURN_IF_ERROR(f.NonNegInt("moe_intermediate_size", &c.moe_intermediate_size));
  LUCID_RETURN_IF_ERROR(f.NonNegInt("num_hidden_layers", &c.num_hidden_layers));
  LUCID_RETURN_IF_ERROR(f.NonNegInt("num_attention_heads", &c.num_attention_heads));
  c.num_key_value_heads = c.num_attention_heads;
  LUCID_RETURN_IF_ERROR(f.NonNegInt("num_key_value_heads", &c.num_key_value_heads));
  if (j.contains("q_lora_rank") && j["q_lora_rank"].is_null()) c.q_lora_rank = 0;
  LUCID_RETURN_IF_ERROR(f.NonNegInt("q_lora_rank", &c.q_lora_rank));
  LUCID_RETURN_IF_ERROR(f.NonNegInt("kv_lora_rank", &c.kv_lora_rank));
  LUCID_RETURN_IF_ERROR(f.NonNegInt("qk_nope_head_dim", &c.qk_nope_head_dim));
  LUCID_RETURN_IF_ERROR(f.NonNegInt("qk_rope_head_dim", &c.qk_rope_head_dim));
  LUCID_RETURN_IF_ERROR(f.NonNegInt("v_head_dim", &c.v_head_dim));
  LUCID_RETURN_IF_ERROR(f.NonNegInt("n_routed_experts", &c.n_routed_experts));
  LUCID_RETURN_IF_ERROR(f.NonNegInt("num_local_experts", &c.n_routed_experts));
  LUCID_RETURN_IF_ERROR(f.NonNegInt("n_shared_experts", &c.n_shared_experts));
  LUCID_RETURN_IF_ERROR(f.NonNegInt("num_experts_per_tok", &c.num_experts_per_tok));
  LUCID_RETURN_IF_ERROR(f.NonNegInt("n_group", &c.n_group));
  LUCID_RETURN_IF_ERROR(f.NonNegInt("topk_group", &c.topk_group));
  LUCID_RETURN_IF_ERROR(f.NonNegInt("first_k_dense_replace", &c.first_k_dense_replace));
  LUCID_RETURN_IF_ERROR(f.NonNegInt("max_position_embeddings", &c.max_position_embeddings));
  LUCID_RETURN_IF_ERROR(f.Double("routed_scaling_factor", &c.routed_scaling_factor));
  LUCID_RETURN_IF_ERROR(f.Bool("norm_topk_prob", &c.norm_topk_prob));
  LUCID_RETURN_IF_ERROR(f.String("scoring_func", &c.scoring_func));
  LUCID_RETURN_IF_ERROR(f.String("hidden_act", &c.hidden_act));
  LUCID_RETURN_IF_ERROR(f.Double("rms_norm_eps", &c.rms_norm_eps));
  LUCID_RETURN_IF_ERROR(f.Bool("tie_word_embeddings", &c.tie_word_embeddings));
  LUCID_RETURN_IF_ERROR(f.Bool("attention_bias", &c.attention_bias));
  bool interleave = true;
  LUCID_RETURN_IF_ERROR(f.Bool("rope_interleave", &interleave));
  c.mla_rope_layout = interleave ? RopeLayout::kInterleaved : RopeLayout::kHalfSplit;
  if (c.has_indexer) {
    LUCID_RETURN_IF_ERROR(f.NonNegInt("index_n_heads", &c.index_n_heads));
    LUCID_RETURN_IF_ERROR(f.NonNegInt("index_head_dim", &c.index_head_dim));
    LUCID_RETURN_IF_ERROR(f.NonNegInt("index_topk", &c.index_topk));
  }
  if (c.attention_bias) return Unimplemented("config.json: attention_bias=true is not supported");
  LUCID_RETURN_IF_ERROR(ParseRope(j, &c));
  LUCID_RETURN_IF_ERROR(ParseLayerTypes(j, &c));
  if (j.contains("bos_token_id") && j["bos_token_id"].is_number_integer())
    c.bos_token_id = j["bos_token_id"].get<int64_t>();
  if (j.contains("eos_token_id")) {
    const auto& e = j["eos_token_id"];
    if (e.is_number_integer()) c.eos_token_ids.push_back(e.get<int64_t>());
    if (e.is_array())
      for (const auto& x : e)
        if (x.is_number_integer()) c.eos_token_ids.push_back(x.get<int64_t>());
  }
  if (d != nullptr) LUCID_RETURN_IF_ERROR(CheckDims(c));
  return c;
}

StatusOr<nlohmann::json> ReadJsonFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(path + ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidArgument(path + ": not valid JSON");
  return j;
}

StatusOr<ModelConfig> LoadModelConfig(const std::string& model_dir) {
  const std::string path = model_dir + "/config.json";
  LUCID_ASSIGN_OR_RETURN(nlohmann::json j, ReadJsonFile(path));
  auto c = ParseModelConfig(j);
  if (!c.ok()) return c.status().WithContext(model_dir);
  return c;
}

}  // namespace lucid
