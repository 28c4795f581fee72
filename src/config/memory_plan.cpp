#include "config/memory_plan.h"

#include <algorithm>
#include <cmath>

#include "config/option_table.h"
#include "models/deepseek_v3_family.h"
#include "models/registry.h"

namespace lucid::config {
namespace {

// Estimates (docs/CONFIG.md): CUDA context + cuBLAS workspaces + allocator slack; NCCL buffers
// under tensor parallelism; the process and tokenizer on cpu; per captured graph, per layer.
constexpr uint64_t kCudaOverhead = 1ull << 30;
constexpr uint64_t kNcclOverhead = 512ull << 20;
constexpr uint64_t kCpuOverhead = 256ull << 20;
constexpr uint64_t kGraphBytesPerLayer = 32ull << 10;

uint64_t U(int64_t v) { return v < 0 ? 0 : static_cast<uint64_t>(v); }

std::string Dims(std::initializer_list<int64_t> d, int bytes) {
  std::string s;
  for (int64_t x : d) s += (s.empty() ? "" : " x ") + std::to_string(x);
  return s + " x " + std::to_string(bytes) + " B";
}

// Live buffers of one step over T token rows (one layer at a time; the largest set of buffers
// alive together, per device).
// Attention heads are split over tp ranks unless attention is data-parallel (each rank runs every
// head for its own requests); routed experts are whole under expert parallelism (rows are counted
// for every token, a rank may receive them all).
std::vector<MemoryItem> StepWorkspace(const ModelConfig& c, int64_t T, int64_t ctx,
                                      const MemoryInputs& in, int a, bool prefill) {
  const int64_t tp = in.tp, attn_tp = in.dp_attention ? 1 : in.tp, ep = in.ep;
  std::vector<MemoryItem> v;
  auto add = [&](std::string name, std::initializer_list<int64_t> dims, int bytes) {
    uint64_t n = bytes;
    for (int64_t d : dims) n *= U(d);
    v.push_back({std::move(name), n, Dims(dims, bytes)});
  };
  const int64_t D = c.hidden_size, Hd = std::max<int64_t>(1, c.num_attention_heads / attn_tp);
  add("residual, norm and output rows", {3, T, D}, a);
  add("query (latent + heads)", {T, c.q_lora_rank + Hd * c.qk_head_dim()}, a);
  add("absorbed query + attention output", {T, Hd, 2 * c.kv_lora_rank + c.qk_rope_head_dim}, a);
  add("value rows", {T, Hd, c.v_head_dim}, a);
  if (c.has_indexer) {
    add("indexer queries + weights", {T, c.index_n_heads * c.index_head_dim + c.index_n_heads}, a);
    add("indexer scores (row block)", {std::min(T, kIndexerRowBlock), ctx}, 4);
    add("top-k indices", {T, c.index_topk}, 4);
  }
  const bool moe = c.n_routed_experts > 0;
  if (moe) {
    const int64_t I = std::max<int64_t>(1, c.moe_intermediate_size / tp);
    const int64_t Ie = ep > 1 ? std::max<int64_t>(1, c.moe_intermediate_size) : I;
    add("router logits", {T, c.n_routed_experts}, 4);
    add("routed expert rows", {T, c.num_experts_per_tok, D + 3 * Ie}, a);
    add("shared expert", {T, 3 * I * std::max<int64_t>(1, c.n_shared_experts)}, a);
  }
  add("dense MLP", {T, 3 * std::max<int64_t>(1, c.intermediate_size / tp)}, a);
  const int64_t logit_rows = prefill ? 1 : T;
  add("logits (gathered)", {logit_rows, c.vocab_size}, 4);
  return v;
}

// The layout line (rule parallel-layout, docs/CONFIG.md): what is chosen, by which flags, and what
// each rank holds.
void DescribeLayout(const ModelConfig& c, const MemoryInputs& in, MemoryPlan* p) {
  const std::string tp = std::to_string(in.tp), ep = std::to_string(in.ep);
  const int64_t experts = c.n_routed_experts;
  const std::string moe = experts <= 0 ? ""
                          : in.ep > 1
                              ? "; routed experts expert-parallel (--ep-size " + ep +
                                    "): " + std::to_string(experts / in.ep) + " of " +
                                    std::to_string(experts) + " whole experts per rank"
                              : "; each routed expert split over " + tp + " ranks (--ep-size 1)";
  if (in.tp <= 1) {
    p->layout = "single device";
    p->layout_reason = "--tp-size 1: one device holds every weight and every request's KV";
    return;
  }
  if (in.dp_attention) {
    p->layout = "DP-attention " + tp + (in.ep > 1 ? " + EP " + ep : " + MoE TP " + tp);
    p->layout_reason = "--enable-dp-attention with --dp-size " + tp +
                       ": attention weights replicated on every rank, each rank runs attention "
                       "and holds the KV of its own requests only, so the server holds " +
                       tp + " x one rank's KV tokens" + moe;
    return;
  }
  p->layout = "TP " + tp + (in.ep > 1 ? " + EP " + ep : "");
  p->layout_reason = "--tp-size " + tp +
                     " without --enable-dp-attention: attention heads split over " + tp +
                     " ranks; MLA's latent KV is replicated on every rank (each holds every "
                     "request's KV), so the server holds as many KV tokens as one rank" +
                     moe;
}

uint64_t Sum(const std::vector<MemoryItem>& v) {
  uint64_t s = 0;
  for (const MemoryItem& i : v) s += i.bytes;
  return s;
}

}  // namespace

std::vector<int64_t> GraphBuckets(int64_t max_bs) {
  std::vector<int64_t> b;
  for (int64_t x : {1, 2, 4}) b.push_back(x);
  for (int64_t x = 8; x <= 256; x += 8) b.push_back(x);
  for (int64_t x = 272; x <= 4096; x += 16) b.push_back(x);
  std::vector<int64_t> out;
  for (int64_t x : b)
    if (x < max_bs) out.push_back(x);
  if (max_bs > 0) out.push_back(max_bs);
  return out;
}

int64_t GraphBucketFor(const std::vector<int64_t>& buckets, int64_t n) {
  if (n <= 0) return 0;
  auto it = std::lower_bound(buckets.begin(), buckets.end(), n);
  return it == buckets.end() ? 0 : *it;
}

std::string GraphBucketsText(const std::vector<int64_t>& b) {
  std::string s;
  for (size_t i = 0; i < b.size(); ++i) {
    if (b.size() > 8 && i == 6) {
      s += ", ...";
      i = b.size() - 3;
      continue;
    }
    s += (s.empty() ? "" : ", ") + std::to_string(b[i]);
  }
  return s;
}

MemoryPlan PlanFixedParts(const ModelFacts& model, const MemoryInputs& in) {
  MemoryPlan p;
  const ModelConfig& c = model.config;
  p.device_memory = U(in.device_memory);
  p.weight_parts = model.WeightsPerRank(in.tp, in.ep, in.dp_attention);
  p.weights = p.weight_parts.total();
  p.tp = in.tp;
  p.ep = in.ep;
  p.dp = in.dp_attention ? in.tp : 1;
  DescribeLayout(c, in, &p);
  const KvCacheSpec spec = KvSpecFor(c);
  p.kv_bytes_per_token_layer = spec.BytesPerTokenPerLayer(in.kv_dtype);
  p.kv_bytes_per_token = spec.BytesPerToken(in.kv_dtype);
  const int a = DTypeBits(in.compute_dtype) / 8;
  std::vector<MemoryItem> pre =
      StepWorkspace(c, in.chunked_prefill_size, in.context_length, in, a, true);
  std::vector<MemoryItem> dec =
      StepWorkspace(c, in.max_running_requests, in.context_length, in, a, false);
  const bool prefill_bigger = Sum(pre) >= Sum(dec);
  p.activation_items = prefill_bigger ? pre : dec;
  for (MemoryItem& i : p.activation_items)
    i.name = (prefill_bigger ? "prefill: " : "decode: ") + i.name;
  p.activations = Sum(p.activation_items);
  if (in.cuda && in.cuda_graph_max_bs > 0) {
    p.graph_buckets = GraphBuckets(in.cuda_graph_max_bs);
    p.graph_workspace =
        Sum(StepWorkspace(c, in.cuda_graph_max_bs, in.context_length, in, a, false));
    p.graph_exec = p.graph_buckets.size() * U(c.num_hidden_layers) * kGraphBytesPerLayer;
    p.graph_reserve = p.graph_workspace + p.graph_exec;
  }
  p.runtime_overhead = in.cuda ? kCudaOverhead + (in.tp > 1 ? kNcclOverhead : 0) : kCpuOverhead;
  p.dynamic_need = p.activations + p.graph_reserve + p.runtime_overhead;
  p.max_fraction =
      p.device_memory == 0
          ? 0
          : std::floor(100.0 * (static_cast<double>(p.device_memory) - p.dynamic_need) /
                       p.device_memory) /
                100.0;
  return p;
}

void PlanKvPool(MemoryPlan* p, double f, int64_t page_size, int64_t max_total_tokens) {
  p->mem_fraction_static = f;
  p->static_budget = static_cast<uint64_t>(std::floor(f * static_cast<double>(p->device_memory)));
  const int64_t pool = static_cast<int64_t>(p->static_budget) - static_cast<int64_t>(p->weights);
  const int64_t page_bytes = p->kv_bytes_per_token * page_size;
  p->kv_capacity_tokens = pool > 0 && page_bytes > 0 ? (pool / page_bytes) * page_size : 0;
  p->max_total_tokens = max_total_tokens > 0 ? std::min(max_total_tokens, p->kv_capacity_tokens)
                                             : p->kv_capacity_tokens;
  p->server_kv_tokens = p->max_total_tokens * std::max<int64_t>(p->dp, 1);
  // The pool holds whole pages.
  const int64_t pages = (p->max_total_tokens + page_size - 1) / std::max<int64_t>(page_size, 1);
  p->kv_pool_bytes = U(pages) * U(page_bytes);
}

nlohmann::json MemoryPlan::ToJson() const {
  nlohmann::json items = nlohmann::json::array();
  for (const MemoryItem& i : activation_items)
    items.push_back({{"name", i.name}, {"bytes", i.bytes}, {"detail", i.detail}});
  return {{"device_memory_bytes", device_memory},
          {"weights_bytes_per_device", weights},
          {"weights_per_rank",
           {{"attention_bytes", weight_parts.attention},
            {"routed_experts_bytes", weight_parts.experts},
            {"other_bytes", weight_parts.other}}},
          {"parallel",
           {{"layout", layout},
            {"rule", "parallel-layout"},
            {"reason", layout_reason},
            {"tp", tp},
            {"ep", ep},
            {"dp", dp},
            {"kv_replicated", tp > 1 && dp == 1}}},
          {"kv_bytes_per_token_per_layer", kv_bytes_per_token_layer},
          {"kv_bytes_per_token", kv_bytes_per_token},
          {"activations_bytes", activations},
          {"activation_items", items},
          {"graph_batch_sizes", graph_buckets},
          {"graph_reserve_bytes", graph_reserve},
          {"graph_workspace_bytes", graph_workspace},
          {"graph_exec_bytes", graph_exec},
          {"runtime_overhead_bytes", runtime_overhead},
          {"dynamic_need_bytes", dynamic_need},
          {"max_mem_fraction_static", max_fraction},
          {"mem_fraction_static", mem_fraction_static},
          {"static_budget_bytes", static_budget},
          {"kv_capacity_tokens", kv_capacity_tokens},
          {"max_total_tokens", max_total_tokens},
          {"kv_tokens_per_rank", max_total_tokens},
          {"server_kv_tokens", server_kv_tokens},
          {"kv_pool_bytes", kv_pool_bytes},
          {"notes", notes}};
}

}  // namespace lucid::config
