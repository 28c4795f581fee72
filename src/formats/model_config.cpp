#include "formats/model_config.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "formats/gguf_config.h"

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
    {"glm_moe_dsa",
     154880,
     6144,
     12288,
     2048,
     78,
     64,
     2048,
     512,
     64,
     192,
     256,
     256,
     1,
     8,
     1,
     1,
     3,
     202752,
     2.5,
     1e-5,
     10000.0,
     true,
     RopeLayout::kInterleaved,
     32},
    {"deepseek_v32",
     129280,
     7168,
     18432,
     2048,
     61,
     128,
     1536,
     512,
     64,
     128,
     128,
     256,
     1,
     8,
     8,
     4,
     3,
     163840,
     2.5,
     1e-6,
     10000.0,
     true,
     RopeLayout::kHalfSplit,
     64},
    {"deepseek_v3",
     129280,
     7168,
     18432,
     2048,
     61,
     128,
     1536,
     512,
     64,
     128,
     128,
     256,
     1,
     8,
     8,
     4,
     3,
     4096,
     2.5,
     1e-6,
     10000.0,
     false,
     RopeLayout::kInterleaved,
     0},
};

// The one-line refusal of a config.json field: its name, the value found and what is allowed.
Status Refuse(const std::string& key, const nlohmann::json& value, const std::string& allowed) {
  return InvalidArgument("config.json: field \"" + key + "\" is " + value.dump() +
                         "; allowed: " + allowed);
}

// Typed, range-checked field access with errors that name the field. An absent or null field
// keeps the caller's default; a present one of the wrong type or range is refused.
class Fields {
 public:
  explicit Fields(const nlohmann::json& j, std::string prefix = "") : j_(j), prefix_(prefix) {}

  bool Has(const char* key) const { return j_.contains(key) && !j_[key].is_null(); }
  bool IsNull(const char* key) const { return j_.contains(key) && j_[key].is_null(); }
  const nlohmann::json& At(const char* key) const { return j_[key]; }
  std::string Name(const char* key) const { return prefix_ + key; }

  // An integer in [min, max].
  Status Int(const char* key, int64_t* out, int64_t min = INT64_MIN,
             int64_t max = INT64_MAX) const {
    if (!Has(key)) return OkStatus();
    const auto& v = j_[key];
    const bool integer = v.is_number_integer() &&
                         !(v.is_number_unsigned() && v.get<uint64_t>() > uint64_t{INT64_MAX});
    if (integer && v.get<int64_t>() >= min && v.get<int64_t>() <= max) {
      *out = v.get<int64_t>();
      return OkStatus();
    }
    return Refuse(Name(key), v, IntRange(min, max));
  }
  Status NonNegInt(const char* key, int64_t* out) const { return Int(key, out, 0); }
  Status PositiveInt(const char* key, int64_t* out) const { return Int(key, out, 1); }
  // A finite number, > 0 when `positive`, else >= `min`.
  Status Double(const char* key, double* out, bool positive = false, double min = -HUGE_VAL) const {
    if (!Has(key)) return OkStatus();
    const auto& v = j_[key];
    if (v.is_number()) {
      const double x = v.get<double>();
      if (std::isfinite(x) && (positive ? x > 0 : x >= min)) {
        *out = x;
        return OkStatus();
      }
    }
    if (positive) return Refuse(Name(key), v, "a positive number");
    return Refuse(Name(key), v, min == -HUGE_VAL ? "a number" : "a number >= " + Num(min));
  }
  Status Bool(const char* key, bool* out) const {
    if (!Has(key)) return OkStatus();
    if (!j_[key].is_boolean()) return Refuse(Name(key), j_[key], "true or false");
    *out = j_[key].get<bool>();
    return OkStatus();
  }
  Status String(const char* key, std::string* out) const {
    if (!Has(key)) return OkStatus();
    if (!j_[key].is_string()) return Refuse(Name(key), j_[key], "a string");
    *out = j_[key].get<std::string>();
    return OkStatus();
  }
  // A string out of `allowed`.
  Status OneOf(const char* key, const std::vector<std::string>& allowed, std::string* out) const {
    if (!Has(key)) return OkStatus();
    const auto& v = j_[key];
    if (v.is_string())
      for (const auto& a : allowed)
        if (v.get<std::string>() == a) {
          *out = a;
          return OkStatus();
        }
    return Refuse(Name(key), v, "one of " + Join(allowed));
  }

  static std::string Join(const std::vector<std::string>& words) {
    std::string s;
    for (const auto& w : words) s += (s.empty() ? "\"" : ", \"") + w + "\"";
    return s;
  }

 private:
  static std::string Num(double x) {
    std::ostringstream o;
    o << x;
    return o.str();
  }
  static std::string IntRange(int64_t min, int64_t max) {
    if (min == INT64_MIN && max == INT64_MAX) return "an integer";
    if (max == INT64_MAX)
      return min == 1 ? "a positive integer" : "an integer >= " + std::to_string(min);
    return "an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]";
  }

  const nlohmann::json& j_;
  std::string prefix_;
};

// The rope dict: rope_parameters (transformers 5) over rope_scaling (older spelling); either must
// be an object when present. *name gets the field's name for errors.
StatusOr<nlohmann::json> RopeDict(const nlohmann::json& j, std::string* name) {
  nlohmann::json p = nlohmann::json::object();
  *name = "rope_parameters";
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    if (!j.contains(key) || j[key].is_null()) continue;
    if (!j[key].is_object()) return Refuse(key, j[key], "an object (or null)");
    p = j[key];
    *name = key;
  }
  return p;
}

Status ParseRope(const nlohmann::json& j, ModelConfig* c) {
  std::string name;
  LUCID_ASSIGN_OR_RETURN(nlohmann::json p, RopeDict(j, &name));
  LUCID_RETURN_IF_ERROR(Fields(j).Double("rope_theta", &c->rope.theta, /*positive=*/true));
  const Fields f(p, name + ".");
  LUCID_RETURN_IF_ERROR(f.Double("rope_theta", &c->rope.theta, /*positive=*/true));
  const std::vector<std::string> types = {"default", "yarn"};
  std::string type = "default";
  for (const char* key : {"type", "rope_type"}) {
    if (!f.Has(key)) continue;
    if (!f.At(key).is_string())
      return Refuse(f.Name(key), f.At(key), "one of " + Fields::Join(types));
    type = f.At(key).get<std::string>();
  }
  if (type != "default" && type != "yarn" && type != "llama3")
    return Unimplemented("config.json: rope type \"" + type +
                         "\" is not supported (supported: default, yarn, llama3)");
  c->rope.type = type;
  if (type == "llama3") {
    // transformers reads all four; a missing one is a KeyError there.
    for (const char* key :
         {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"})
      if (!f.Has(key))
        return InvalidArgument("config.json: " + f.Name(key) + " is required for rope type llama3");
    LUCID_RETURN_IF_ERROR(f.Double("factor", &c->rope.factor, /*positive=*/true));
    LUCID_RETURN_IF_ERROR(f.Double("low_freq_factor", &c->rope.low_freq_factor, true));
    LUCID_RETURN_IF_ERROR(f.Double("high_freq_factor", &c->rope.high_freq_factor, true));
    double omp = 0;
    LUCID_RETURN_IF_ERROR(f.Double("original_max_position_embeddings", &omp, /*positive=*/true));
    c->rope.original_max_position_embeddings = static_cast<int64_t>(omp);
    if (c->rope.high_freq_factor <= c->rope.low_freq_factor)
      return InvalidArgument("config.json: " + f.Name("high_freq_factor") +
                             " must be above low_freq_factor");
  }
  if (type == "yarn") {
    LUCID_RETURN_IF_ERROR(f.Double("factor", &c->rope.factor, /*positive=*/true));
    double omp = static_cast<double>(c->max_position_embeddings);
    LUCID_RETURN_IF_ERROR(f.Double("original_max_position_embeddings", &omp, /*positive=*/true));
    c->rope.original_max_position_embeddings = static_cast<int64_t>(omp);
    LUCID_RETURN_IF_ERROR(f.Double("beta_fast", &c->rope.beta_fast));
    LUCID_RETURN_IF_ERROR(f.Double("beta_slow", &c->rope.beta_slow));
    LUCID_RETURN_IF_ERROR(f.Double("mscale", &c->rope.mscale, false, 0.0));
    LUCID_RETURN_IF_ERROR(f.Double("mscale_all_dim", &c->rope.mscale_all_dim, false, 0.0));
    LUCID_RETURN_IF_ERROR(f.Double("attention_factor", &c->rope.attention_factor, false, 0.0));
    LUCID_RETURN_IF_ERROR(f.Bool("truncate", &c->rope.truncate));
  }
  return OkStatus();
}

// A per-layer list: an array of at least num_hidden_layers strings out of `allowed` (nullptr when
// absent). Longer lists are accepted (the extra entries are MTP layers, which lucid does not run).
StatusOr<const nlohmann::json*> LayerList(const nlohmann::json& j, const char* key, int64_t layers,
                                          const std::vector<std::string>& allowed) {
  if (!j.contains(key) || j[key].is_null()) return nullptr;
  const auto& a = j[key];
  const std::string what = "a list of at least num_hidden_layers (" + std::to_string(layers) +
                           ") of " + Fields::Join(allowed);
  if (!a.is_array() || static_cast<int64_t>(a.size()) < layers) return Refuse(key, a, what);
  for (size_t i = 0; i < a.size(); ++i) {
    bool ok = a[i].is_string();
    if (ok && !allowed.empty())
      ok = std::find(allowed.begin(), allowed.end(), a[i].get<std::string>()) != allowed.end();
    if (!ok)
      return Refuse(std::string(key) + "[" + std::to_string(i) + "]", a[i],
                    allowed.empty() ? "a string" : "one of " + Fields::Join(allowed));
  }
  return &a;
}

Status ParseLayerTypes(const nlohmann::json& j, ModelConfig* c) {
  const int64_t L = c->num_hidden_layers;
  // layer_types (the attention kind per layer) is not read beyond its shape: every layer of this
  // family is MLA. transformers refuses a list of the wrong length, and so does lucid.
  LUCID_RETURN_IF_ERROR(LayerList(j, "layer_types", L, {}).status());
  c->layer_is_moe.assign(L, false);
  LUCID_ASSIGN_OR_RETURN(const nlohmann::json* mlp,
                         LayerList(j, "mlp_layer_types", L, {"dense", "sparse"}));
  for (int64_t i = 0; i < L; ++i)
    c->layer_is_moe[i] = mlp != nullptr ? (*mlp)[i] == "sparse" : i >= c->first_k_dense_replace;
  c->layer_runs_indexer.assign(L, c->has_indexer);
  if (!c->has_indexer) return OkStatus();
  LUCID_ASSIGN_OR_RETURN(const nlohmann::json* indexer,
                         LayerList(j, "indexer_types", L, {"full", "shared"}));
  const Fields f(j);
  if (indexer != nullptr) {
    for (int64_t i = 0; i < L; ++i) c->layer_runs_indexer[i] = (*indexer)[i] != "shared";
  } else if (f.Has("index_topk_pattern")) {
    std::string pat;
    LUCID_RETURN_IF_ERROR(f.String("index_topk_pattern", &pat));
    if (static_cast<int64_t>(pat.size()) < L)
      return Refuse("index_topk_pattern", f.At("index_topk_pattern"),
                    "a string of at least num_hidden_layers (" + std::to_string(L) + ") letters");
    for (int64_t i = 0; i < L; ++i) c->layer_runs_indexer[i] = pat[i] != 'S';
  } else if (c->model_type == "glm_moe_dsa") {
    int64_t freq = 1, offset = 2;
    LUCID_RETURN_IF_ERROR(f.PositiveInt("index_topk_freq", &freq));
    LUCID_RETURN_IF_ERROR(f.NonNegInt("index_skip_topk_offset", &offset));
    for (int64_t i = 0; i < L; ++i)
      c->layer_runs_indexer[i] = (std::max<int64_t>(i - offset + 1, 0) % freq) == 0;
  }
  if (!c->layer_runs_indexer.empty() && !c->layer_runs_indexer[0])
    return InvalidArgument(
        "config.json: layer 0 is a shared-indexer layer with no earlier full layer");
  return OkStatus();
}

// bos_token_id: an id or null; eos_token_id: an id or a list of ids; each in [0, vocab_size).
Status ParseSpecialTokens(const nlohmann::json& j, ModelConfig* c) {
  const Fields f(j);
  const int64_t max_id = c->vocab_size > 0 ? c->vocab_size - 1 : INT64_MAX;
  int64_t bos = -1;
  LUCID_RETURN_IF_ERROR(f.Int("bos_token_id", &bos, 0, max_id));
  if (f.Has("bos_token_id")) c->bos_token_id = bos;
  if (!f.Has("eos_token_id")) return OkStatus();
  nlohmann::json ids = f.At("eos_token_id");
  if (!ids.is_array()) ids = nlohmann::json::array({ids});
  for (size_t i = 0; i < ids.size(); ++i) {
    const auto& x = ids[i];
    if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() > max_id)
      return Refuse(
          "eos_token_id", f.At("eos_token_id"),
          "a token id or a list of token ids, each in [0, " + std::to_string(max_id) + "]");
    c->eos_token_ids.push_back(x.get<int64_t>());
  }
  return OkStatus();
}

// The dtype and the sizes: every size the engine reads, range-checked where it is read.
Status ParseSizes(const Fields& f, ModelConfig* c) {
  const std::vector<std::string> dtypes = {"bfloat16", "float16", "float32"};
  LUCID_RETURN_IF_ERROR(f.OneOf("torch_dtype", dtypes, &c->torch_dtype));
  LUCID_RETURN_IF_ERROR(f.OneOf("dtype", dtypes, &c->torch_dtype));
  LUCID_RETURN_IF_ERROR(f.PositiveInt("vocab_size", &c->vocab_size));
  LUCID_RETURN_IF_ERROR(f.PositiveInt("hidden_size", &c->hidden_size));
  LUCID_RETURN_IF_ERROR(f.PositiveInt("intermediate_size", &c->intermediate_size));
  LUCID_RETURN_IF_ERROR(f.PositiveInt("moe_intermediate_size", &c->moe_intermediate_size));
  LUCID_RETURN_IF_ERROR(f.PositiveInt("num_hidden_layers", &c->num_hidden_layers));
  LUCID_RETURN_IF_ERROR(f.PositiveInt("num_attention_heads", &c->num_attention_heads));
  c->num_key_value_heads = c->num_attention_heads;
  LUCID_RETURN_IF_ERROR(f.PositiveInt("num_key_value_heads", &c->num_key_value_heads));
  if (f.IsNull("q_lora_rank")) c->q_lora_rank = 0;  // null or 0: no query compression
  LUCID_RETURN_IF_ERROR(f.NonNegInt("q_lora_rank", &c->q_lora_rank));
  LUCID_RETURN_IF_ERROR(f.PositiveInt("kv_lora_rank", &c->kv_lora_rank));
  LUCID_RETURN_IF_ERROR(f.PositiveInt("qk_nope_head_dim", &c->qk_nope_head_dim));
  LUCID_RETURN_IF_ERROR(f.PositiveInt("qk_rope_head_dim", &c->qk_rope_head_dim));
  LUCID_RETURN_IF_ERROR(f.PositiveInt("v_head_dim", &c->v_head_dim));
  LUCID_RETURN_IF_ERROR(f.NonNegInt("n_routed_experts", &c->n_routed_experts));
  LUCID_RETURN_IF_ERROR(f.NonNegInt("num_local_experts", &c->n_routed_experts));
  LUCID_RETURN_IF_ERROR(f.NonNegInt("n_shared_experts", &c->n_shared_experts));
  LUCID_RETURN_IF_ERROR(f.NonNegInt("num_experts_per_tok", &c->num_experts_per_tok));
  LUCID_RETURN_IF_ERROR(f.PositiveInt("n_group", &c->n_group));
  LUCID_RETURN_IF_ERROR(f.PositiveInt("topk_group", &c->topk_group));
  LUCID_RETURN_IF_ERROR(f.NonNegInt("first_k_dense_replace", &c->first_k_dense_replace));
  LUCID_RETURN_IF_ERROR(f.PositiveInt("max_position_embeddings", &c->max_position_embeddings));
  if (c->has_indexer) {
    LUCID_RETURN_IF_ERROR(f.PositiveInt("index_n_heads", &c->index_n_heads));
    LUCID_RETURN_IF_ERROR(f.PositiveInt("index_head_dim", &c->index_head_dim));
    LUCID_RETURN_IF_ERROR(f.PositiveInt("index_topk", &c->index_topk));
  }
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
    LUCID_RETURN_IF_ERROR(
        need(c.topk_group >= 1 && c.topk_group <= c.n_group, "need 1 <= topk_group <= n_group"));
    LUCID_RETURN_IF_ERROR(need(c.n_group == 1 || c.n_routed_experts / c.n_group >= 2,
                               "group-limited routing needs at least 2 experts per group"));
    LUCID_RETURN_IF_ERROR(need(c.scoring_func == "sigmoid", "scoring_func \"" + c.scoring_func +
                                                                "\" is not supported (sigmoid)"));
  }
  if (c.has_indexer) {
    LUCID_RETURN_IF_ERROR(need(c.index_n_heads > 0 && c.index_topk > 0,
                               "index_n_heads and index_topk must be positive"));
    LUCID_RETURN_IF_ERROR(need(c.index_head_dim >= c.qk_rope_head_dim,
                               "index_head_dim must be at least qk_rope_head_dim"));
  }
  return need(c.hidden_act == "silu",
              "hidden_act \"" + c.hidden_act + "\" is not supported (silu)");
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
    c.n_routed_experts = d->experts, c.n_shared_experts = d->shared,
    c.num_experts_per_tok = d->topk;
    c.n_group = d->n_group, c.topk_group = d->topk_group, c.first_k_dense_replace = d->first_dense;
    c.max_position_embeddings = d->max_pos, c.routed_scaling_factor = d->scaling;
    c.rms_norm_eps = d->eps, c.rope.theta = d->theta, c.has_indexer = d->indexer;
    c.indexer_rope_layout = d->indexer_layout, c.index_n_heads = d->index_heads;
    c.index_head_dim = d->indexer ? 128 : 0, c.index_topk = d->indexer ? 2048 : 0;
  }
  LUCID_RETURN_IF_ERROR(ParseSizes(f, &c));
  LUCID_RETURN_IF_ERROR(f.Double("routed_scaling_factor", &c.routed_scaling_factor, true));
  LUCID_RETURN_IF_ERROR(f.Bool("norm_topk_prob", &c.norm_topk_prob));
  LUCID_RETURN_IF_ERROR(f.String("scoring_func", &c.scoring_func));
  LUCID_RETURN_IF_ERROR(f.String("hidden_act", &c.hidden_act));
  LUCID_RETURN_IF_ERROR(f.Double("rms_norm_eps", &c.rms_norm_eps, /*positive=*/true));
  LUCID_RETURN_IF_ERROR(f.Bool("tie_word_embeddings", &c.tie_word_embeddings));
  LUCID_RETURN_IF_ERROR(f.Bool("attention_bias", &c.attention_bias));
  bool interleave = true;
  LUCID_RETURN_IF_ERROR(f.Bool("rope_interleave", &interleave));
  c.mla_rope_layout = interleave ? RopeLayout::kInterleaved : RopeLayout::kHalfSplit;
  if (c.attention_bias) return Unimplemented("config.json: attention_bias=true is not supported");
  LUCID_RETURN_IF_ERROR(ParseRope(j, &c));
  LUCID_RETURN_IF_ERROR(ParseLayerTypes(j, &c));
  LUCID_RETURN_IF_ERROR(ParseSpecialTokens(j, &c));
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
  if (std::filesystem::is_regular_file(model_dir)) {  // a GGUF file: its metadata as config.json
    LUCID_ASSIGN_OR_RETURN(std::shared_ptr<GgufFile> file, GgufFile::Open(model_dir));
    LUCID_ASSIGN_OR_RETURN(nlohmann::json j, HfConfigFromGguf(*file));
    auto c = ParseModelConfig(j);
    if (!c.ok()) return c.status().WithContext(model_dir);
    return c;
  }
  const std::string path = model_dir + "/config.json";
  LUCID_ASSIGN_OR_RETURN(nlohmann::json j, ReadJsonFile(path));
  auto c = ParseModelConfig(j);
  if (!c.ok()) return c.status().WithContext(model_dir);
  return c;
}

}  // namespace lucid
