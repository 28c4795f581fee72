// The model a GGUF file describes, in the Hugging Face spelling lucid's families read: a
// config.json object from the `<arch>.*` metadata, and each GGUF tensor's Hugging Face name.
//
// Dense Llama-family architectures ("llama", "qwen2", "qwen3"):
// - config: the keys transformers' GGUF config mapping sets (integrations/ggml.py
//   GGUF_CONFIG_MAPPING: context_length -> max_position_embeddings, block_count ->
//   num_hidden_layers, feed_forward_length -> intermediate_size, embedding_length -> hidden_size,
//   rope.dimension_count -> head_dim (llama only), rope.freq_base -> rope_theta,
//   attention.head_count(_kv) -> num_attention_heads / num_key_value_heads,
//   attention.layer_norm_rms_epsilon -> rms_norm_eps, vocab_size), checked against it on SmolLM2
//   (tools/reference/gguf/config_goldens.py); plus what lucid needs and the file states otherwise:
//   model_type and architectures (LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM), head_dim
//   from attention.key_length where given, vocab_size from the token list when the key is absent,
//   tie_word_embeddings = no `output.weight` tensor, bos/eos_token_id from tokenizer.ggml.*.
// - Q/K layout: llama.cpp's converter permutes the rows of q_proj / k_proj of "llama" files
//   within each head (HF row h*D + j*D/2 + i is stored at row h*D + 2i + j), so that ggml's
//   adjacent-pair RoPE applies. A family reading these weights as stored must rotate adjacent
//   pairs (RopeLayout::kInterleaved) where the HF checkpoint rotates halves: q and k are permuted
//   alike, so every q.k product, and the attention output, is unchanged. `QkRopeLayout` says which.
// - names: blk.N.attn_q -> model.layers.N.self_attn.q_proj, ..._k/_v/_output, attn_q_norm /
//   attn_k_norm -> q_norm / k_norm, ffn_gate/up/down -> mlp.gate_proj/up_proj/down_proj,
//   attn_norm -> input_layernorm, ffn_norm -> post_attention_layernorm, token_embd ->
//   model.embed_tokens, output_norm -> model.norm, output -> lm_head (".weight" / ".bias" kept),
//   as the converter's table (gguf's TensorNameMap) maps them.
//
// DeepSeek-V3 family architectures ("deepseek2" -> deepseek_v3, "deepseek32" -> deepseek_v32,
// "glm-dsa" -> glm_moe_dsa), as llama.cpp's converter (DeepseekV2Model, DeepseekV32Model,
// GlmMoeDsaModel) writes them:
// - config: block_count minus nextn_predict_layers -> num_hidden_layers (the MTP blocks are not
//   run), attention.head_count -> num_attention_heads and num_key_value_heads (the file's
//   head_count_kv 1 is MLA seen as MQA), attention.q_lora_rank (absent: null), kv_lora_rank,
//   rope.dimension_count -> qk_rope_head_dim, key_length_mla - rope -> qk_nope_head_dim,
//   value_length_mla -> v_head_dim (older files: key_length / value_length), expert_* ->
//   n_routed_experts, num_experts_per_tok, n_shared_experts, moe_intermediate_size,
//   routed_scaling_factor (absent: 1), norm_topk_prob (absent: false), n_group / topk_group
//   (absent: 1), leading_dense_block_count -> first_k_dense_replace, expert_gating_func ->
//   scoring_func, rope.freq_base and rope.scaling.* (yarn; yarn_log_multiplier / 0.1 ->
//   mscale_all_dim), attention.indexer.{head_count, key_length, top_k, types} -> index_n_heads,
//   index_head_dim, index_topk, indexer_types. Every field is stated, so no transformers class
//   default fills in what the file leaves out. RoPE rotates adjacent pairs (llama.cpp's
//   LLAMA_ROPE_TYPE_NORM = rope_interleave true); the indexer's layout follows the model type.
// - names (DeepseekHfTensorName): attn_q_a / attn_q_a_norm / attn_q_b / attn_q -> q_a_proj /
//   q_a_layernorm / q_b_proj / q_proj, attn_kv_a_mqa -> kv_a_proj_with_mqa, attn_kv_a_norm ->
//   kv_a_layernorm, attn_kv_b -> kv_b_proj, attn_output -> o_proj, indexer.{attn_q_b, attn_k,
//   k_norm, proj} -> indexer.{wq_b, wk, k_norm, weights_proj}, ffn_gate_inp -> mlp.gate,
//   exp_probs_b.bias -> mlp.gate.e_score_correction_bias, ffn_*_shexp -> mlp.shared_experts.*.
//   Two tensors have no 1:1 name: the converter splits kv_b_proj into attn_k_b (per head
//   [Rkv, nope], transposed) and attn_v_b (per head [v, Rkv]), and stacks the routed experts into
//   ffn_{gate,up,down}_exps [E, rows, cols]; models/deepseek_v3_gguf.h rebuilds both.
// Other architectures are refused by name (Unimplemented). Errors name the file and the key.
// Thread-safety: pure functions.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "core/status.h"
#include "formats/gguf.h"
#include "formats/model_config.h"

namespace lucid {

// config.json contents for the file's model (see file comment).
StatusOr<nlohmann::json> HfConfigFromGguf(const GgufFile& file);
// The Hugging Face name of a Llama-family GGUF tensor name; nullopt for a name outside the table.
std::optional<std::string> HfTensorName(const std::string& gguf_name);
// Whether general.architecture names a DeepSeek-V3 family file (deepseek2, deepseek32, glm-dsa).
bool IsDeepseekGgufArchitecture(const std::string& gguf_architecture);
// config.json contents for a DeepSeek-V3 family file (see file comment).
StatusOr<nlohmann::json> DeepseekHfConfigFromGguf(const GgufFile& file);
// The Hugging Face name of a DeepSeek-family GGUF tensor with a 1:1 counterpart; nullopt otherwise
// (attn_k_b, attn_v_b, ffn_*_exps and names outside the table).
std::optional<std::string> DeepseekHfTensorName(const std::string& gguf_name);
// kInterleaved for "llama" files (the converter's permutation), kHalfSplit for qwen2 / qwen3.
RopeLayout QkRopeLayout(const std::string& gguf_architecture);

}  // namespace lucid
