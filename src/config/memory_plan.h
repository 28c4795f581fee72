// The memory planner: every byte the server will hold per device, before a weight is loaded.
//
// Per device (one GPU under tensor parallelism, or the whole system memory on cpu):
//   static  = memory x mem_fraction_static   = weights + KV pool
//   dynamic = memory - static               >= activations + graph reserve + runtime overhead
//   KV capacity (tokens) = floor((static - weights) / kv_bytes_per_token / page) x page
// Weights are the packed sizes (safetensors headers when present, else computed from config and
// quantization metadata), per rank by role (ModelFacts::WeightsPerRank): split tensors divided
// by tp, routed experts whole and spread over ep ranks under expert parallelism, attention weights
// whole on every rank under data-parallel attention. KV bytes per token come from
// models/kv_cache.h (the one source of KV sizes). The layout decides what the KV pool means:
// under tensor parallelism the MLA latent cache is replicated on every rank (all heads read the
// same latent; each rank holds every request's KV), so the server holds as many tokens as one
// rank; under data-parallel attention each rank holds only its own requests' KV, and the server
// holds dp x one rank's tokens. Activations are the larger of one
// chunked-prefill step and one decode step at max-running-requests (formula in memory_plan.cpp,
// listed item by item in the plan). The graph reserve is the decode workspace at the largest
// captured batch (graphs share one memory pool, captured largest first) plus a per-graph estimate.
// Estimates are labelled as such in the plan; docs/CONFIG.md lists their constants.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "config/model_facts.h"
#include "core/dtype.h"
#include "models/kv_cache.h"

namespace lucid::config {

struct MemoryInputs {
  bool cuda = false;
  int64_t device_memory = 0;  // bytes per device (GPU memory, or system memory on cpu)
  int64_t tp = 1;
  int64_t ep = 1;             // 1 or tp
  bool dp_attention = false;  // attention data-parallel over the tp ranks (dp = tp)
  KvDtype kv_dtype = KvDtype::kF32;
  DType compute_dtype = DType::kF32;
  int64_t page_size = 1;
  int64_t context_length = 0;
  int64_t chunked_prefill_size = 0;
  int64_t max_running_requests = 0;
  int64_t cuda_graph_max_bs = 0;  // 0: no graphs
};

struct MemoryItem {
  std::string name;
  uint64_t bytes = 0;
  std::string detail;  // the arithmetic
};

struct MemoryPlan {
  uint64_t device_memory = 0;
  uint64_t weights = 0;            // per device
  RankWeights weight_parts;        // the same by role
  int64_t tp = 1, ep = 1, dp = 1;  // dp: attention replicas (tp under DP attention, else 1)
  std::string layout;              // "TP 8 + EP 8"
  std::string layout_reason;       // why, with what each rank holds (rule parallel-layout)
  int64_t kv_bytes_per_token = 0;  // per device, all layers
  int64_t kv_bytes_per_token_layer = 0;
  std::vector<MemoryItem> activation_items;
  uint64_t activations = 0;
  std::vector<int64_t> graph_buckets;  // captured decode batch sizes
  uint64_t graph_reserve = 0;          // graph_workspace + graph_exec
  uint64_t graph_workspace = 0;        // decode buffers at the largest bucket (shared pool)
  uint64_t graph_exec = 0;             // per graph per layer estimate x graphs x layers
  uint64_t runtime_overhead = 0;
  uint64_t dynamic_need = 0;  // activations + graph_reserve + runtime_overhead
  double max_fraction = 0;    // largest mem_fraction_static that leaves dynamic_need
  double mem_fraction_static = 0;
  uint64_t static_budget = 0;
  int64_t kv_capacity_tokens = 0;  // what the static budget holds (page multiple)
  int64_t max_total_tokens = 0;    // the pool actually sized (<= capacity), per rank
  int64_t server_kv_tokens = 0;    // the server's KV tokens: dp x max_total_tokens
  uint64_t kv_pool_bytes = 0;
  std::vector<std::string> notes;
  nlohmann::json ToJson() const;
};

// Bytes of everything except the KV pool for `in` (fills all but the fraction-dependent fields).
MemoryPlan PlanFixedParts(const ModelFacts& model, const MemoryInputs& in);
// The captured batch sizes up to max_bs, as SGLang captures them: 1, 2, 4, 8, then every 8 to 256,
// then every 16 (272, 288, ...), the sizes below max_bs and then max_bs itself (so that a full
// batch has its graph). Empty for max_bs <= 0.
std::vector<int64_t> GraphBuckets(int64_t max_bs);
// The graph a decode batch of n requests runs in: the smallest bucket >= n (the batch is padded
// to it with n - bucket idle rows); 0 when n exceeds the largest bucket (or there are none): the
// step runs without a graph.
int64_t GraphBucketFor(const std::vector<int64_t>& buckets, int64_t n);
// "1, 2, 4, 8, 16, 24, ..., 248, 256" (the first six, "...", the last two when there are more).
std::string GraphBucketsText(const std::vector<int64_t>& buckets);
// Completes `plan` for fraction `f` and an optional explicit max_total_tokens (0 = all that fits).
void PlanKvPool(MemoryPlan* plan, double f, int64_t page_size, int64_t max_total_tokens);

}  // namespace lucid::config
