// The DeepSeek-V3 family's tensor table (glm_moe_dsa, deepseek_v32, deepseek_v3): every tensor a
// checkpoint of the family holds for the layers lucid loads, with its name pattern, its shape as a
// formula of the config, whether it may be stored quantized, and its role when the model is
// sharded (docs/MODEL-GLM-DSA.md section 3). The planner (config/model_facts) and `lucid synth`
// read their tensor lists from here.
//
// Roles, as SGLang shards the family without DP attention:
//   replicated     every rank holds it whole (norms, the router, the low-rank q_a / kv_a
//                  projections, the indexer)
//   split-rows     output rows split across ranks (q_b / q_proj / kv_b by heads, gate / up)
//   split-columns  input columns split (o_proj, down_proj: a partial sum then an all-reduce)
//   vocabulary     rows split by vocabulary (embed_tokens, lm_head)
//   per-expert     a routed expert's matrices, placed by expert (EP) or split as above (TP)
// The MTP layer (index num_hidden_layers) is not part of the table.
// Thread-safety: the table is immutable; functions are pure.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "formats/model_config.h"

namespace lucid {

enum class ShardRole { kReplicated, kSplitRows, kSplitColumns, kVocabulary, kPerExpert };
const char* ShardRoleName(ShardRole r);  // "replicated", "split-rows", ...

// What a tensor is: a Linear's weight, the embedding table, a norm's weight or bias, the MoE
// router's weight or its score-correction bias (stored in f32 by the reference checkpoints).
enum class TensorKind { kLinear, kEmbedding, kNormWeight, kNormBias, kRouter, kRouterBias };

struct TensorRow {
  // "model.layers.{L}.mlp.experts.{E}.down_proj.weight": {L} a layer index, {E} an expert index.
  const char* pattern;
  TensorKind kind;
  bool quantizable;  // a Linear the quantization metadata may store quantized
  ShardRole role;
  Shape (*shape)(const ModelConfig& c);
  // Whether layer `l` has it (global rows: null, always).
  bool (*present)(const ModelConfig& c, int64_t l);
};

// The table, global rows first, then one layer's rows, in checkpoint order.
const std::vector<TensorRow>& DeepseekV3TensorTable();

struct TensorSpec {
  std::string name;
  Shape shape;
  const TensorRow* row = nullptr;
  int64_t layer = -1;   // -1 for the global tensors
  int64_t expert = -1;  // routed experts only
  // The module a Linear's weight belongs to (name without ".weight"); the name otherwise.
  std::string Module() const;
};

// The tensors of layer l of a model with config c (l = -1: the global ones), in table order.
std::vector<TensorSpec> DeepseekV3LayerTensors(const ModelConfig& c, int64_t l);
// Every tensor the model loads: the global ones, then each layer's.
std::vector<TensorSpec> DeepseekV3Tensors(const ModelConfig& c);

// The row a tensor name matches and its layer (-1 for a global tensor); nullptr when the name is
// not one of the table's (an MTP layer's tensors do match their pattern: the caller compares
// the layer with num_hidden_layers).
const TensorRow* FindTensorRow(const std::string& name, int64_t* layer = nullptr);

}  // namespace lucid
