// Weights of the Llama family (models/llama_family.h), bound by Hugging Face tensor name from a
// safetensors checkpoint or a GGUF file and checked against the config's shapes. Nothing is
// copied: Weights and Tensors borrow the checkpoint's or the file's mapping.
// Errors name the tensor and the shape found and expected; a dtype lucid cannot run is refused by
// name (safetensors: f32 and bf16 matrices; GGUF: what models/gguf_weights.h decodes; norms f32 or
// bf16).
#pragma once

#include <memory>
#include <vector>

#include "formats/gguf.h"
#include "formats/model_config.h"
#include "formats/safetensors.h"
#include "ops/ops.h"

namespace lucid {

struct LlamaLayerWeights {
  Tensor input_norm, post_attn_norm;
  Tensor q_norm, k_norm;  // [head_dim] (qwen3 only; invalid otherwise)
  Weight q, k, v, o;      // [H*hd, D], [KVH*hd, D] x2, [D, H*hd]
  Weight gate, up, down;  // [I, D] x2, [D, I]
};

struct LlamaWeights {
  Weight embed;  // [V, D]
  std::vector<LlamaLayerWeights> layers;
  Tensor final_norm;
  Weight lm_head;                 // [V, D]; the embedding itself when tied
  std::vector<float> rope_freqs;  // GGUF rope_freqs.weight ([hd/2] divisors), empty if absent
  uint64_t bytes = 0;
};

// `qk_norm`: bind q_norm / k_norm (qwen3).
StatusOr<LlamaWeights> LoadLlamaWeights(const ModelConfig& c, const Checkpoint& ckpt, bool qk_norm);
StatusOr<LlamaWeights> LoadLlamaWeights(const ModelConfig& c, const GgufFile& file, bool qk_norm);

}  // namespace lucid
