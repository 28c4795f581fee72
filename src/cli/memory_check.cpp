#include "cli/memory_check.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "server/http_server.h"

namespace lucid::cli {
namespace {

bool Equal(uint64_t planned, const std::optional<int64_t>& held) {
  return !held.has_value() || (*held >= 0 && static_cast<uint64_t>(*held) == planned);
}

std::string Part(const std::string& what, uint64_t planned, const std::optional<int64_t>& held,
                 const std::string& uncounted) {
  if (!held.has_value())
    return what + " " + std::to_string(planned) + " B planned (" + uncounted + ")";
  std::string s = what + " " + std::to_string(*held) + " B held";
  if (Equal(planned, held)) return s + ", as planned";
  const int64_t diff = *held - static_cast<int64_t>(planned);
  return s + ", plan " + std::to_string(planned) + " B (" +
         std::to_string(diff > 0 ? diff : -diff) + " B " + (diff > 0 ? "more" : "less") +
         " than planned)";
}

}  // namespace

bool MemoryCheck::agrees() const {
  return Equal(weights_planned, weights_held) && Equal(kv_pool_planned, kv_pool_held);
}

bool MemoryCheck::activations_within_plan() const {
  return !activations_held.has_value() ||
         *activations_held <= static_cast<int64_t>(activations_planned);
}

bool MemoryCheck::ops_scratch_within_plan() const {
  return !ops_scratch_held.has_value() ||
         *ops_scratch_held <= static_cast<int64_t>(runtime_overhead_planned);
}

std::string MemoryCheck::Describe() const {
  std::string s = "memory on " + device + ": " +
                  Part("weights", weights_planned, weights_held, "mapped from the checkpoint") +
                  "; " + Part("KV pool", kv_pool_planned, kv_pool_held, "host memory, not counted");
  if (!activations_held.has_value()) return s;
  const int64_t over = *activations_held - static_cast<int64_t>(activations_planned);
  s += "; activations " + std::to_string(*activations_held) + " B held after the largest " +
       "step (" + std::to_string(largest_step_tokens) + " tokens), plan " +
       std::to_string(activations_planned) + " B" +
       (over > 0 ? " (" + std::to_string(over) + " B more than planned)" : "");
  if (!ops_scratch_held.has_value()) return s;
  const int64_t past = *ops_scratch_held - static_cast<int64_t>(runtime_overhead_planned);
  return s + "; ops scratch " + std::to_string(*ops_scratch_held) + " B held, runtime overhead " +
         "plan " + std::to_string(runtime_overhead_planned) + " B" +
         (past > 0 ? " (" + std::to_string(past) + " B more than planned)" : "");
}

nlohmann::json MemoryCheck::ToJson() const {
  auto held = [](const std::optional<int64_t>& v) {
    return v.has_value() ? nlohmann::json(*v) : nlohmann::json(nullptr);
  };
  return {{"device", device},
          {"weights_planned_bytes", weights_planned},
          {"weights_held_bytes", held(weights_held)},
          {"kv_pool_planned_bytes", kv_pool_planned},
          {"kv_pool_held_bytes", held(kv_pool_held)},
          {"agrees", agrees()},
          {"activations_planned_bytes", activations_planned},
          {"activations_held_bytes", held(activations_held)},
          {"largest_step_tokens", largest_step_tokens},
          {"runtime_overhead_planned_bytes", runtime_overhead_planned},
          {"ops_scratch_held_bytes", held(ops_scratch_held)}};
}

std::optional<int64_t> HeldGrowth(const Allocator& alloc, const std::function<void()>& f) {
  const std::optional<int64_t> before = alloc.held_bytes();
  f();
  const std::optional<int64_t> after = alloc.held_bytes();
  if (!before.has_value() || !after.has_value()) return std::nullopt;
  return *after - *before;
}

int64_t LargestStepTokens(const EngineOptions& eo) {
  int64_t n = eo.chunked_prefill_size;
  if (eo.context_length > 0) n = std::min(n, eo.context_length - 1);
  if (eo.num_pages > 0)
    n = std::min(n, eo.num_pages / std::max(eo.kv_partitions, 1) * eo.page_size - 1);
  return std::max<int64_t>(n, 1);
}

StatusOr<std::optional<StepMemory>> ProfileLargestStep(Engine& engine, const Allocator& alloc,
                                                       const Ops& ops, const EngineOptions& eo,
                                                       int32_t token) {
  if (!alloc.held_bytes().has_value()) return std::optional<StepMemory>();
  const std::vector<int32_t> prompt(static_cast<size_t>(LargestStepTokens(eo)), token);
  Status run = OkStatus();
  const std::optional<int64_t> grew = HeldGrowth(alloc, [&] {
    run = server::RunTestGeneration(engine, prompt, 1, std::chrono::seconds(600));
  });
  if (!run.ok()) return run;
  if (!grew.has_value()) return std::optional<StepMemory>();
  return std::optional<StepMemory>(StepMemory{*grew, ops.scratch_held_bytes()});
}

}  // namespace lucid::cli
