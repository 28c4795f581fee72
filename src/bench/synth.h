// Random-weight checkpoints with the real models' per-head dimensions, for tests and benchmarks.
//
// Every preset keeps what the kernels' shapes depend on from the real model: kv_lora_rank 512,
// qk_rope_head_dim 64, the architecture's qk_nope/v head dims (GLM-5 192/256, DeepSeek 128/128),
// 128-dim indexer heads, index_topk 2048 (tiny: 16), and scales down heads, experts, layers, hidden
// size and vocabulary:
//   tiny  ~3.5M params (tests; a forward is milliseconds)
//   1g    ~0.55G params, about 1.1 GB in bf16 (benchmarks)
//   4g    ~2.1G params, about 4.2 GB in bf16 (benchmarks)
//   16g   ~8G params, about 16 GB in bf16 (GPU benchmarks: weights far beyond any L2)
// Output: DIR/config.json (HF-style, parsed by LoadModelConfig), one safetensors shard per layer
// plus one for embeddings/final norm/lm_head, and model.safetensors.index.json. Weights are bf16
// (index weights_proj and the router bias f32, as in the real checkpoints), drawn uniform in
// +-sqrt(3/fan_in) from a counter-based generator: the bytes depend only on (seed, tensor name,
// element index), not on the thread count. Norm weights are 1.
// Thread-safety: Synthesize may run concurrently for different directories.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/status.h"

namespace lucid {

struct SynthOptions {
  std::string arch = "glm_moe_dsa";  // glm_moe_dsa | deepseek_v32 | deepseek_v3
  std::string preset = "tiny";       // tiny | 1g | 4g | 16g
  std::string out_dir;
  std::string quant;  // "" (bf16) | nvfp4 | fp8-block
  uint64_t seed = 1;
};

struct SynthSummary {
  int64_t params = 0;
  uint64_t bytes = 0;  // tensor bytes written
  int64_t tensors = 0;
  int64_t shards = 0;
};

std::vector<std::string> SynthPresetNames();
std::vector<std::string> SynthArchNames();
// What Synthesize would write in bf16 (params, bytes, tensors, shards), computed from the same
// tensor table without writing anything.
StatusOr<SynthSummary> SynthSize(const std::string& arch, const std::string& preset);
// The config.json the preset writes (no files touched).
StatusOr<nlohmann::json> SynthConfig(const std::string& arch, const std::string& preset);
// Writes the checkpoint (bf16; with `quant`, bf16 written beside `out_dir` then quantized into it
// by QuantizeCheckpoint and removed). InvalidArgument for an unknown arch/preset/quant; I/O errors
// from the writers.
StatusOr<SynthSummary> Synthesize(const SynthOptions& o);

}  // namespace lucid
