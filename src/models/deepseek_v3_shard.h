// Tensor-parallel sharding of the DeepSeek-V3 family's bound weights
// (models/deepseek_v3_weights.h).
//
// Rank r of a group of n keeps (Megatron's split, as SGLang and vLLM shard these models):
// - attention heads [r * H/n, (r + 1) * H/n): q_b (q_proj) and kv_b by rows of those heads,
//   o_proj by the matching input columns (its output is a partial sum: all-reduce);
// - the dense MLP, the shared experts and every routed expert by intermediate dimension: gate and
//   up by rows, down by input columns (partial sums: one all-reduce per MLP or MoE block);
// - embed_tokens and lm_head by vocabulary rows [r * V/n, (r + 1) * V/n) (the embedding's rows of
//   other ranks' tokens are zero before an all-reduce; lm_head's logits are all-gathered);
// - with data-parallel attention, the attention weights whole instead (each rank runs every head
//   of its own sequences over its own KV partition, models/model.h ModelLoadOptions::dp_attention);
// - everything else whole (q_a, kv_a and their norms, the indexer, the router and its bias, the
//   layer norms): those outputs are computed identically on every rank, so the KV (MLA's latent),
//   the indexer's selection and the router's choice are replicated.
// Row shards are views (Weight::RowRange): the rank reads only its rows' pages of the mapping.
// Column shards are copies of the rank's columns into owned memory, made at load (the copy reads
// the rank's column range of every row, which touches the whole matrix's pages once).
// Block-quantized weights are split at block boundaries only: FP8 columns at multiples of the
// block's columns (128), NVFP4 columns at multiples of the group (16); otherwise the load is
// refused naming the weight, the dimension and the block. GGUF-packed weights are refused.
#pragma once

#include "core/status.h"
#include "formats/model_config.h"
#include "models/deepseek_v3_weights.h"

namespace lucid {

// Replaces *w by rank `rank`'s shard of a group of `size` (size 1: unchanged). With dp_attention
// (data-parallel attention) the attention weights (q_b / q_proj, kv_b, o_proj) stay whole: each
// rank runs every head for its own sequences. With ep_size ==
// size (expert parallelism), the routed experts are not sliced: the rank keeps experts
// [rank * E/size, (rank + 1) * E/size) whole and the others' ExpertWeights are left unbound (no
// view of their tensors, so their pages are never touched). InvalidArgument naming the config
// dimension when heads, intermediate sizes, experts or the vocabulary do not divide by `size`,
// and naming the weight when a block boundary would be cut.
Status ShardDeepseekV3Weights(const ModelConfig& c, int rank, int size, int ep_size,
                              bool dp_attention, DeepseekV3Weights* w);

}  // namespace lucid
