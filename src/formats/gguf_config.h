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
// kInterleaved for "llama" files (the converter's permutation), kHalfSplit for qwen2 / qwen3.
RopeLayout QkRopeLayout(const std::string& gguf_architecture);

}  // namespace lucid
