// The memory stage of resolution: plan, fill mem-fraction-static / max-total-tokens (and shrink
// an automatic cuda-graph-max-bs) when left to rules, refuse explicit values that do not fit with
// the largest values that would.
#include <cmath>
#include <cstdio>

#include "config/option_table.h"
#include "config/resolver_internal.h"

namespace lucid::config::internal {
namespace {

std::string B(uint64_t b) { return FormatBytes(static_cast<double>(b)); }

std::string Frac(double f) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", f);
  return buf;
}

std::string DynamicText(const MemoryPlan& p) {
  std::string s = "activations " + B(p.activations);
  if (p.graph_reserve > 0)
    s += " + CUDA graphs up to batch " + std::to_string(p.graph_buckets.back()) + " " +
         B(p.graph_reserve);
  return s + " + runtime " + B(p.runtime_overhead) + " = " + B(p.dynamic_need);
}

}  // namespace

Status Resolver::ResolveMemory() {
  MemoryInputs in;
  in.cuda = V("device") == "cuda";
  in.device_memory = in.cuda ? target_.gpu_memory : target_.cpu_memory;
  in.tp = V("tp-size").get<int64_t>();
  in.ep = V("ep-size").get<int64_t>();
  in.dp_attention = V("enable-dp-attention") == true;
  in.kv_dtype = *KvDtypeFromName(V("kv-cache-dtype").get<std::string>());
  in.compute_dtype = ComputeDTypeFromName(V("dtype").get<std::string>());
  // On this machine's GPU lucid's kernels keep activations in f32 in either set (cuda-bf16act
  // rounds only the matmuls' inputs); a described target plans the deployment's dtype.
  if (in.cuda && !target_.local_gpus.empty()) in.compute_dtype = DType::kF32;
  in.page_size = V("page-size").get<int64_t>();
  in.context_length = V("context-length").get<int64_t>();
  in.chunked_prefill_size = V("chunked-prefill-size").get<int64_t>();
  in.max_running_requests = V("max-running-requests").get<int64_t>();
  in.cuda_graph_max_bs =
      V("disable-cuda-graph") == true ? 0 : V("cuda-graph-max-bs").get<int64_t>();
  if (in.device_memory <= 0)
    return InvalidArgument("the target's memory is unknown (give --cpu-memory, e.g. 64GiB)");
  MemoryPlan plan = PlanFixedParts(model_, in);
  const std::string where = in.cuda ? "per GPU" : "of system memory";

  double f = 0;
  if (const ExplicitValue* v = User("mem-fraction-static")) {
    f = v->value.get<double>();
    const bool graphs = in.cuda_graph_max_bs > 0;
    if (f > plan.max_fraction + 1e-9 && graphs && !User("cuda-graph-max-bs")) {
      // The graph size is ours to choose: take the largest captured batch that fits.
      const MemoryPlan full = plan;
      std::vector<int64_t> buckets = GraphBuckets(in.cuda_graph_max_bs);
      for (auto it = buckets.rbegin() + 1; it < buckets.rend(); ++it) {
        MemoryInputs smaller = in;
        smaller.cuda_graph_max_bs = *it;
        MemoryPlan p = PlanFixedParts(model_, smaller);
        if (f <= p.max_fraction + 1e-9) {
          SetRule("cuda-graph-max-bs", *RuleById("graph-bs-fits-memory"), *it,
                  ": graphs up to batch " + std::to_string(in.cuda_graph_max_bs) + " need " +
                      B(full.graph_reserve) + ", but " + Cite("mem-fraction-static") + " leaves " +
                      B(full.device_memory - static_cast<uint64_t>(f * full.device_memory)) + " " +
                      where);
          in = smaller;
          plan = p;
          break;
        }
      }
    }
    if (f > plan.max_fraction + 1e-9) {
      std::string would = "would work: --mem-fraction-static <= " + Frac(plan.max_fraction);
      std::string conflict = Cite("mem-fraction-static");
      if (graphs) {
        int64_t best = 0;
        for (int64_t b : GraphBuckets(in.cuda_graph_max_bs)) {
          MemoryInputs t = in;
          t.cuda_graph_max_bs = b;
          if (f <= PlanFixedParts(model_, t).max_fraction + 1e-9) best = b;
        }
        if (User("cuda-graph-max-bs")) conflict += ", " + Cite("cuda-graph-max-bs");
        would += best > 0 ? " | --cuda-graph-max-bs " + std::to_string(best) : "";
        MemoryInputs t = in;
        t.cuda_graph_max_bs = 0;
        if (f <= PlanFixedParts(model_, t).max_fraction + 1e-9) would += " | --disable-cuda-graph";
      }
      return InvalidArgument(conflict + " leaves " +
                             B(plan.device_memory - static_cast<uint64_t>(f * plan.device_memory)) +
                             " " + where + ", but " + DynamicText(plan) + " is needed; " + would);
    }
    SetUser("mem-fraction-static");
  } else {
    f = plan.max_fraction;
    if (f <= 0)
      return InvalidArgument("the device memory (" + B(plan.device_memory) + " " + where +
                             ") cannot hold " + DynamicText(plan));
    SetRule("mem-fraction-static", *RuleById("mem-fraction-from-plan"), f,
            " (" + DynamicText(plan) + " " + where + ")");
  }

  const ExplicitValue* mtt = User("max-total-tokens");
  PlanKvPool(&plan, f, in.page_size, mtt ? mtt->value.get<int64_t>() : 0);
  const uint64_t one_page = static_cast<uint64_t>(plan.kv_bytes_per_token * in.page_size);
  if (plan.kv_capacity_tokens < in.page_size) {
    std::string would;
    const double need = std::ceil(100.0 * (plan.weights + one_page) / plan.device_memory) / 100.0;
    if (need <= plan.max_fraction) would += " | --mem-fraction-static >= " + Frac(need);
    if (in.cuda) {
      for (int64_t tp = in.tp + 1; tp <= target_.gpu_count; ++tp) {
        if (model_.config.num_attention_heads % tp != 0) continue;
        if (model_.WeightsPerRank(tp, in.ep > 1 ? tp : 1, in.dp_attention).total() + one_page <=
            plan.static_budget) {
          would += " | --tp-size " + std::to_string(tp);
          break;
        }
      }
    }
    return InvalidArgument(
        "weights need " + B(plan.weights) + " " + where + " (tp-size " + std::to_string(in.tp) +
        "), more than the static budget " + B(plan.static_budget) + " of " +
        Cite("mem-fraction-static") + " leaves for weights and KV cache; " +
        (would.empty() ? "the model does not fit this target" : "would work: " + would.substr(3)));
  }
  if (mtt != nullptr) {
    if (mtt->value.get<int64_t>() > plan.kv_capacity_tokens)
      return InvalidArgument(
          Cite("max-total-tokens") + " needs " +
          B(static_cast<double>(mtt->value.get<int64_t>()) * plan.kv_bytes_per_token) +
          " of KV cache " + where + ", but the plan has room for " +
          std::to_string(plan.kv_capacity_tokens) +
          " tokens; would work: --max-total-tokens <= " + std::to_string(plan.kv_capacity_tokens));
    SetUser("max-total-tokens");
  } else if (!in.cuda && in.max_running_requests > 0 && in.context_length > 0 &&
             in.max_running_requests * in.context_length < plan.kv_capacity_tokens) {
    // CPU: system memory is shared with everything else; hold only what the running requests
    // can use at once instead of claiming the whole budget.
    const int64_t cap = (in.max_running_requests * in.context_length + in.page_size - 1) /
                        in.page_size * in.page_size;
    PlanKvPool(&plan, f, in.page_size, cap);
    SetRule("max-total-tokens", *RuleById("kv-capacity-cpu-requests"), cap,
            " (max-running-requests " + std::to_string(in.max_running_requests) +
                " x context-length " + std::to_string(in.context_length) + ", whole pages of " +
                std::to_string(in.page_size) + "; the budget would hold " +
                std::to_string(plan.kv_capacity_tokens) + ")");
  } else {
    SetRule("max-total-tokens", *RuleById("kv-capacity-from-plan"), plan.kv_capacity_tokens,
            " (floor((" + B(plan.static_budget) + " - weights " + B(plan.weights) + ") / " +
                std::to_string(plan.kv_bytes_per_token) + " B per token), whole pages of " +
                std::to_string(in.page_size) + ")");
  }
  if (plan.max_total_tokens < in.context_length)
    plan.notes.push_back("KV capacity " + std::to_string(plan.max_total_tokens) +
                         " tokens is less than context-length " +
                         std::to_string(in.context_length) +
                         ": one full-length request cannot be held");
  memory_ = plan;
  return OkStatus();
}

}  // namespace lucid::config::internal
