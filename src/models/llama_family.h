// The Llama family: dense decoder-only transformers with grouped-query attention, RMSNorm, a SwiGLU
// MLP and RoPE (default or llama3 scaling), optionally tied embeddings. Served architectures:
// LlamaForCausalLM (model_type llama; SmolLM2, Llama 2/3) and Qwen3ForCausalLM (qwen3: the same
// plus an RMSNorm over each query and key head before RoPE, q_norm / k_norm).
//
// One layer, for hidden state x [N, D] (transformers' LlamaDecoderLayer):
//   h = rms(x) * input_layernorm;  q, k, v = h Wq^T, h Wk^T, h Wv^T   ([N, H*hd], [N, KVH*hd] x2)
//   (qwen3: q, k = per-head rms(q) * q_norm, rms(k) * k_norm)
//   q, k = RoPE(q), RoPE(k) at each row's position;  k, v -> the KV cache
//   x += GqaAttention(q, cache; scale hd^-0.5, causal) Wo^T
//   h = rms(x) * post_attention_layernorm;  x += (silu(h Wg^T) * (h Wu^T)) Wd^T
// then logits = (rms(x) * norm) W_lm^T, W_lm = embed_tokens when tie_word_embeddings.
//
// KV cache: the paged storage of models/kv_cache.h with latent_dim = rope_dim = KVH * hd, so each
// token's row is [k | v] (k in the "latent" part, v in the "rope" part). With fp8_e4m3 k is stored
// as e4m3 with one scale per 128 values and v as bf16 (the row layout that storage defines).
//
// Weights come from an HF safetensors checkpoint (config.json; f32 or bf16 tensors, q/k in HF row
// order, rotated in halves) or a GGUF file (formats/gguf_config.h maps its metadata and names;
// tensors of any ggml type lucid decodes). llama.cpp's converter permutes the q/k rows of "llama"
// files within each head so that adjacent pairs rotate together; this family keeps the stored
// rows and rotates adjacent pairs (RopeStyle::kInterleaved) for them: q and k are permuted alike,
// so every q.k product and the attention output equal the HF checkpoint's. A GGUF
// `rope_freqs.weight` (llama3 scaling as the converter writes it) divides the inverse frequencies.
// Qwen2 is refused by name: its q/k/v projections carry biases, and the ops have no bias add.
#pragma once

#include <memory>

#include "backends/backend.h"
#include "formats/gguf.h"
#include "models/model.h"
#include "ops/ops.h"

namespace lucid {

class Checkpoint;

StatusOr<std::unique_ptr<Model>> CreateLlamaFamily(const ModelConfig& config,
                                                   const Checkpoint& ckpt,
                                                   std::shared_ptr<Backend> backend,
                                                   const ModelLoadOptions& options);
StatusOr<std::unique_ptr<Model>> CreateLlamaFamilyFromGguf(const ModelConfig& config,
                                                           std::shared_ptr<const GgufFile> file,
                                                           std::shared_ptr<Backend> backend,
                                                           const ModelLoadOptions& options);
// The KV a Llama-family config needs: per layer and token [k | v] (see the file comment).
KvCacheSpec LlamaKvSpec(const ModelConfig& config);
// head_dim: config.json "head_dim", else hidden_size / num_attention_heads.
int64_t LlamaHeadDim(const ModelConfig& config);

}  // namespace lucid
