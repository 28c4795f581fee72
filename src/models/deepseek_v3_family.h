// The DeepSeek-V3 family: DeepSeek-V3 / Kimi-K2 (dense MLA), DeepSeek-V3.2 and GLM-5 (MLA with the
// DSA lightning indexer). The exact forward pass is docs/MODEL-GLM-DSA.md.
//
// Attention always runs in the absorbed form over the latent cache: q_latent = q_nope · W_uk per
// head, scores against [ckv | k_pe], output latent · W_uv^T. Each query attends only to the tokens
// its indexer selected (gathered by index; cost grows with index_topk, not with context length), or
// to every causal token for deepseek_v3.
#pragma once

#include <cstdint>
#include <memory>

#include "backends/backend.h"
#include "models/model.h"
#include "ops/ops.h"

namespace lucid {

class Checkpoint;
class GgufFile;

// The indexer scores at most this many query rows at a time ([rows, context] f32 in the step's
// workspace): the memory plan's activations count one such block (config/memory_plan.cpp).
inline constexpr int64_t kIndexerRowBlock = 2048;

StatusOr<std::unique_ptr<Model>> CreateDeepseekV3Family(const ModelConfig& config,
                                                        const Checkpoint& ckpt,
                                                        std::shared_ptr<Backend> backend,
                                                        const ModelLoadOptions& options);
// The same family from a GGUF file (deepseek2, deepseek32, glm-dsa; models/deepseek_v3_gguf.h).
StatusOr<std::unique_ptr<Model>> CreateDeepseekV3FamilyFromGguf(
    const ModelConfig& config, std::shared_ptr<const GgufFile> file,
    std::shared_ptr<Backend> backend, const ModelLoadOptions& options);

}  // namespace lucid
