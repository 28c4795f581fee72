// ModelFacts: what planning needs to know about a model, read without touching tensor data.
//
// Inputs: config.json (required), hf_quant_config.json (ModelOpt, optional) and the safetensors
// headers when the directory has weights (a directory holding only the JSON files is valid: sizes
// are then computed from the config and the quantization metadata, `sizes_from_checkpoint` false).
// Every tensor is classified by name (docs/MODEL-GLM-DSA.md section 3) as split across tensor-
// parallel ranks (attention heads, MLP/expert widths, vocabulary) or replicated (low-rank
// projections, indexer, router, norms), as SGLang shards DeepSeek-family models without DP
// attention. The MTP layer (index num_hidden_layers) is not loaded and not counted.
// Thread-safety: values.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "formats/model_config.h"
#include "formats/safetensors.h"
#include "ops/weight.h"

namespace lucid::config {

struct TensorEntry {
  std::string name;
  uint64_t bytes = 0;
  bool split = false;                         // divided across tensor-parallel ranks
  bool expert = false;                        // a routed expert's weight (MoE runner)
  bool linear = false;                        // a linear layer's weight (or its scales)
  WeightFormat format = WeightFormat::kBF16;  // for linear weights
  bool attention = false;                     // an attention tensor (self_attn.*, indexer too)
};

// What one rank holds, by role (ModelFacts::WeightsPerRank).
struct RankWeights {
  uint64_t attention = 0;  // self_attn.*: split by tp, or whole under data-parallel attention
  uint64_t experts = 0;    // routed experts: each split by tp, or whole experts spread over ep
  uint64_t other = 0;      // embedding, lm_head, dense MLP, shared experts (split), norms, router
  uint64_t total() const { return attention + experts + other; }
};

struct ModelFacts {
  std::string dir;
  ModelConfig config;
  bool sparse_attention = false;      // has the DSA indexer
  int max_tensor_parallel = 1;        // what the model registry implements today
  std::string quant_method = "none";  // "none", "fp8", "modelopt"
  std::string quant_algo;     // as formats/quant_config.h: "FP8_BLOCK", "NVFP4", "MIXED_PRECISION"
  bool ue8m0_scales = false;  // fp8 block scales are powers of two (scale_fmt ue8m0)
  // fp8 block scales are stored as ue8m0 bytes (F8_E8M0 tensors) rather than f32; from the first
  // weight_scale_inv header, false without a checkpoint (the published checkpoints store f32).
  bool fp8_scales_stored_ue8m0 = false;
  std::string kv_cache_quant_algo;            // ModelOpt kv_cache_quant_algo ("FP8") or ""
  std::vector<WeightFormat> linear_formats;   // formats of non-expert linear layers, distinct
  std::optional<WeightFormat> expert_format;  // routed experts (nullopt without MoE layers)
  bool sizes_from_checkpoint = false;
  // Bytes of whole-line tensors that start off a 64-byte line of their files (read more slowly by
  // the CPU kernels; `lucid align` fixes it). 0 without a checkpoint.
  uint64_t misaligned_weight_bytes = 0;
  std::vector<TensorEntry> tensors;

  uint64_t TotalBytes() const;
  // Bytes one device holds under tensor parallelism `tp` (split tensors divided, rounded up).
  uint64_t BytesPerDevice(int64_t tp) const;
  // Bytes one rank holds with tensor parallelism `tp`, expert parallelism `ep` (1 or tp: the routed
  // experts of each layer partitioned into ep sets of whole experts) and, with `dp_attention`, the
  // attention weights replicated on every rank (each rank runs attention for its own requests).
  RankWeights WeightsPerRank(int64_t tp, int64_t ep, bool dp_attention) const;
  std::string QuantDescription() const;  // "NVFP4 (ModelOpt), experts + ...", "bf16"
};

// Reads `dir` (see file comment). NotFound naming config.json when it is missing. A path to a
// regular file is read as a GGUF file (LoadGgufModelFacts).
StatusOr<ModelFacts> LoadModelFacts(const std::string& dir);
// The facts of a GGUF file (model_facts_gguf.cpp): config from its metadata, every tensor
// replicated (single device), quant_method "gguf", quant_algo the ggml types of its matrices.
StatusOr<ModelFacts> LoadGgufModelFacts(const std::string& path);

// The same from parsed JSON (hf_quant may be null) and optionally an opened checkpoint; used by
// LoadModelFacts and by tests that synthesize models.
StatusOr<ModelFacts> BuildModelFacts(const nlohmann::json& config_json,
                                     const nlohmann::json& hf_quant, const Checkpoint* ckpt,
                                     const std::string& dir);

}  // namespace lucid::config
