// Typed view of a Hugging Face config.json for the DeepSeek-V3 family (deepseek_v3, deepseek_v32,
// glm_moe_dsa). Field meanings: docs/MODEL-GLM-DSA.md section 1.
//
// Parsing follows transformers' config classes: a missing field takes the default of the config
// class named by `model_type`; both the transformers-5 `rope_parameters` dict and the older
// `rope_theta` + `rope_scaling` spellings are accepted. Derived per-layer lists (mlp_layer_types,
// indexer_types) are filled exactly as transformers' __post_init__ does.
// This file does not decide whether an architecture is supported: models/registry does that.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace lucid {

enum class RopeLayout { kInterleaved, kHalfSplit };
const char* RopeLayoutName(RopeLayout l);

struct RopeConfig {
  std::string type = "default";  // "default", "yarn" or "llama3"
  double theta = 10000.0;
  // yarn only:
  double factor = 1.0;
  int64_t original_max_position_embeddings = 4096;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double mscale = 0.0;          // 0 means absent (transformers treats it as falsy)
  double mscale_all_dim = 0.0;  // 0 means absent
  double attention_factor = 0.0;  // 0 means absent: derived from mscale/mscale_all_dim
  bool truncate = true;  // transformers' yarn `truncate` (floor/ceil of the correction range)
  // llama3 only (with factor and original_max_position_embeddings above):
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
};

struct ModelConfig {
  std::string architecture;  // architectures[0], e.g. "GlmMoeDsaForCausalLM"
  std::string model_type;    // "glm_moe_dsa", "deepseek_v32", "deepseek_v3"
  std::string torch_dtype;   // "bfloat16", "float32", ... ("" if absent)

  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t moe_intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t q_lora_rank = 0;  // 0: no query compression (q_proj instead of q_a/q_b)
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;
  int64_t n_routed_experts = 0;
  int64_t n_shared_experts = 0;
  int64_t num_experts_per_tok = 0;
  int64_t n_group = 1;
  int64_t topk_group = 1;
  int64_t first_k_dense_replace = 0;
  double routed_scaling_factor = 1.0;
  bool norm_topk_prob = true;
  std::string scoring_func = "sigmoid";
  std::string hidden_act = "silu";
  double rms_norm_eps = 1e-6;
  int64_t max_position_embeddings = 0;
  bool tie_word_embeddings = false;
  bool attention_bias = false;
  RopeConfig rope;
  RopeLayout mla_rope_layout = RopeLayout::kInterleaved;  // deepseek_v3 `rope_interleave`

  // DSA indexer (has_indexer false for deepseek_v3).
  bool has_indexer = false;
  int64_t index_n_heads = 0;
  int64_t index_head_dim = 0;
  int64_t index_topk = 0;
  RopeLayout indexer_rope_layout = RopeLayout::kInterleaved;

  // Per layer, size num_hidden_layers.
  std::vector<bool> layer_is_moe;        // mlp_layer_types == "sparse"
  std::vector<bool> layer_runs_indexer;  // indexer_types == "full" (false for shared or no indexer)

  std::optional<int64_t> bos_token_id;
  std::vector<int64_t> eos_token_ids;

  nlohmann::json raw;  // the whole config.json, for quantization_config and the like

  int64_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
  // Softmax scale of MLA: qk_head_dim^-0.5, times mscale^2 for yarn with a truthy mscale_all_dim.
  double AttentionScale() const;
};

// Parses config.json contents. Errors name the field and what was expected.
StatusOr<ModelConfig> ParseModelConfig(const nlohmann::json& j);
// Reads and parses DIR/config.json (NotFound if missing; InvalidArgument naming the file on bad JSON).
// A path to a regular file is read as a GGUF file: its metadata as config.json (gguf_config.h).
StatusOr<ModelConfig> LoadModelConfig(const std::string& model_dir);
// Reads a JSON file; errors name the path (and the parse position for malformed JSON).
StatusOr<nlohmann::json> ReadJsonFile(const std::string& path);

}  // namespace lucid
