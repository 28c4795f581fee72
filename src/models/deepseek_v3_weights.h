// Weights of the DeepSeek-V3 family (deepseek_v3, deepseek_v32, glm_moe_dsa), bound to checkpoint
// tensors by name and validated against the config's shapes at load. Tensors borrow the
// checkpoint's memory mapping; nothing is copied except tiny f32 vectors (router bias). Packed
// weights (NVFP4, FP8 block) stay packed: Weight views of the mapped payload and scale tensors,
// dequantized block by block by the ops at compute time. Resident memory is therefore the packed
// size of what has been touched (docs/QUANTIZATION.md has the measurement).
#pragma once

#include <memory>
#include <vector>

#include "formats/gguf.h"
#include "formats/model_config.h"
#include "formats/quant_config.h"
#include "formats/safetensors.h"
#include "ops/ops.h"

namespace lucid {

struct MlaWeights {
  Weight q_a, q_b, q_proj;  // q_a/q_b when q_lora_rank > 0, else q_proj
  Tensor q_a_norm;
  Weight kv_a;  // [Rkv + dr, D]
  Tensor kv_a_norm;
  Weight kv_b;  // [H * (dn + dv), Rkv]
  Weight o;     // [D, H * dv]
};

struct IndexerWeights {
  bool present = false;
  Weight wq_b;  // [nI * dI, Rq]
  Weight wk;    // [dI, D]
  Tensor k_norm_w, k_norm_b;
  Weight weights_proj;  // [nI, D]
};

struct MlpWeights {
  Weight gate, up, down;
};

struct MoeWeights {
  Weight router;       // [E, D]
  Tensor router_bias;  // e_score_correction_bias f32 [E]
  std::vector<ExpertWeights> experts;
  MlpWeights shared;
};

struct LayerWeights {
  Tensor input_norm, post_attn_norm;
  MlaWeights attn;
  IndexerWeights indexer;
  bool is_moe = false;
  MlpWeights dense;
  MoeWeights moe;
};

struct DeepseekV3Weights {
  Weight embed;  // [V, D]
  std::vector<LayerWeights> layers;
  Tensor final_norm;
  Weight lm_head;  // [V, D]
  uint64_t bytes = 0;
};

// Binds and validates every tensor the config needs. Errors name the tensor, file and shapes.
// The quantization metadata (hf_quant_config.json in the checkpoint's directory, config.json
// quantization_config) decides each Linear's expected format; the checkpoint must agree
// (InvalidArgument naming the tensor, what the metadata expects and what was found), every
// metadata exclude pattern must name some tensor, and unknown methods are refused by name.
StatusOr<DeepseekV3Weights> LoadDeepseekV3Weights(const ModelConfig& c, const Checkpoint& ckpt);
StatusOr<DeepseekV3Weights> LoadDeepseekV3Weights(const ModelConfig& c, const Checkpoint& ckpt,
                                                  const QuantConfig& q);

// The same model from a GGUF file of the family (deepseek2, deepseek32, glm-dsa:
// formats/gguf_config.h maps the metadata to `c`). Tensors by their ggml type, kv_b_proj and the
// stacked routed experts rebuilt as models/deepseek_v3_gguf.h says; the weights keep the file's
// mapping alive.
StatusOr<DeepseekV3Weights> LoadDeepseekV3Weights(const ModelConfig& c,
                                                  std::shared_ptr<const GgufFile> file);

}  // namespace lucid
