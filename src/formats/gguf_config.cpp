// GGUF metadata -> config.json and tensor names for the Llama family (see gguf_config.h).
#include "formats/gguf_config.h"

#include <array>
#include <regex>
#include <utility>

#include "formats/gguf_config_common.h"

namespace lucid {
namespace {

struct ArchRow {
  const char* gguf;
  const char* model_type;
  const char* hf_class;
  bool head_dim_from_rope;  // transformers maps rope.dimension_count to head_dim for llama only
};

constexpr std::array<ArchRow, 3> kArchs = {{
    {"llama", "llama", "LlamaForCausalLM", true},
    {"qwen2", "qwen2", "Qwen2ForCausalLM", false},
    {"qwen3", "qwen3", "Qwen3ForCausalLM", false},
}};

// <arch>.<suffix> -> config key, with whether the value is an integer (else a float).
struct KeyRow {
  const char* suffix;
  const char* hf;
  bool integer;
};
constexpr std::array<KeyRow, 9> kKeys = {{
    {"context_length", "max_position_embeddings", true},
    {"block_count", "num_hidden_layers", true},
    {"feed_forward_length", "intermediate_size", true},
    {"embedding_length", "hidden_size", true},
    {"rope.freq_base", "rope_theta", false},
    {"attention.head_count", "num_attention_heads", true},
    {"attention.head_count_kv", "num_key_value_heads", true},
    {"attention.layer_norm_rms_epsilon", "rms_norm_eps", false},
    {"vocab_size", "vocab_size", true},
}};

// Keys every dense Llama-family file must state.
constexpr std::array<const char*, 5> kRequired = {"block_count", "embedding_length",
                                                  "feed_forward_length", "attention.head_count",
                                                  "attention.layer_norm_rms_epsilon"};

Status SetNumber(const GgufFile& f, const std::string& key, const KeyRow& row,
                 nlohmann::json* out) {
  if (row.integer) {
    LUCID_ASSIGN_OR_RETURN(uint64_t v, f.GetUint(key));
    (*out)[row.hf] = v;
  } else {
    LUCID_ASSIGN_OR_RETURN(double v, f.GetFloat(key));
    (*out)[row.hf] = v;
  }
  return OkStatus();
}

}  // namespace

StatusOr<nlohmann::json> HfConfigFromGguf(const GgufFile& f) {
  LUCID_ASSIGN_OR_RETURN(std::string arch, f.GetString("general.architecture"));
  if (IsDeepseekGgufArchitecture(arch)) return DeepseekHfConfigFromGguf(f);
  const ArchRow* row = nullptr;
  for (const ArchRow& a : kArchs)
    if (arch == a.gguf) row = &a;
  if (row == nullptr) {
    return Unimplemented(f.path() + ": general.architecture \"" + arch +
                         "\" is not supported (supported: llama, qwen2, qwen3, deepseek2, "
                         "deepseek32, glm-dsa)");
  }
  for (const char* k : kRequired) {
    if (!f.Find(arch + "." + k)) return NotFound(f.path() + ": no metadata key " + arch + "." + k);
  }
  nlohmann::json c = nlohmann::json::object();
  c["model_type"] = row->model_type;
  c["architectures"] = {row->hf_class};
  for (const KeyRow& k : kKeys) {
    const std::string key = arch + "." + k.suffix;
    if (f.Find(key)) LUCID_RETURN_IF_ERROR(SetNumber(f, key, k, &c));
  }
  if (!c.contains("num_key_value_heads")) c["num_key_value_heads"] = c["num_attention_heads"];
  const std::string rope_dim = arch + ".rope.dimension_count",
                    key_len = arch + ".attention.key_length";
  if (f.Find(key_len)) {
    LUCID_ASSIGN_OR_RETURN(uint64_t v, f.GetUint(key_len));
    c["head_dim"] = v;
  } else if (row->head_dim_from_rope && f.Find(rope_dim)) {
    LUCID_ASSIGN_OR_RETURN(uint64_t v, f.GetUint(rope_dim));
    c["head_dim"] = v;
  } else {
    const uint64_t heads = c["num_attention_heads"].get<uint64_t>();
    if (heads == 0) return InvalidArgument(f.path() + ": " + arch + ".attention.head_count is 0");
    c["head_dim"] = c["hidden_size"].get<uint64_t>() / heads;
  }
  LUCID_RETURN_IF_ERROR(gguf_config::AddTokenizerKeys(f, c));
  return c;
}

std::optional<std::string> HfTensorName(const std::string& name) {
  static const std::map<std::string, std::string> kTop = {
      {"token_embd", "model.embed_tokens"}, {"output_norm", "model.norm"}, {"output", "lm_head"}};
  static const std::map<std::string, std::string> kLayer = {
      {"attn_q", "self_attn.q_proj"},          {"attn_k", "self_attn.k_proj"},
      {"attn_v", "self_attn.v_proj"},          {"attn_output", "self_attn.o_proj"},
      {"attn_q_norm", "self_attn.q_norm"},     {"attn_k_norm", "self_attn.k_norm"},
      {"ffn_gate", "mlp.gate_proj"},           {"ffn_up", "mlp.up_proj"},
      {"ffn_down", "mlp.down_proj"},           {"attn_norm", "input_layernorm"},
      {"ffn_norm", "post_attention_layernorm"}};
  static const std::regex kPattern(R"(^(?:blk\.(\d+)\.)?([a-z_]+)\.(weight|bias)$)");
  return gguf_config::HfNameFromTables(name, kPattern, kTop, kLayer);
}

RopeLayout QkRopeLayout(const std::string& arch) {
  return arch == "llama" ? RopeLayout::kInterleaved : RopeLayout::kHalfSplit;
}

}  // namespace lucid
