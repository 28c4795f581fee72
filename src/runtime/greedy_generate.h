// Greedy generation for one sequence: prefill the prompt in one step, then decode one token per
// step through the KV cache. The minimal driver used by `lucid generate` and the model tests;
// the continuous-batching engine replaces it for serving.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "models/model.h"

namespace lucid {

// Returns the max_new_tokens greedy tokens (argmax, lowest id on ties). If prompt_logits is not
// null it receives the prompt's logits [prompt_len, vocab]. page_size: KV page size in tokens;
// kv_dtype: the KV cache's storage dtype.
StatusOr<std::vector<int32_t>> GreedyGenerate(Model& model, const std::vector<int32_t>& prompt,
                                              int64_t max_new_tokens, Tensor* prompt_logits,
                                              int64_t page_size = 64,
                                              KvDtype kv_dtype = KvDtype::kF32);

// Index of the largest value (first on ties).
int32_t ArgMax(const float* v, int64_t n);

}  // namespace lucid
