// What the memory plan (config/memory_plan.h) says a device holds, against what its backend's
// allocator really holds once the model is loaded and the engine made: the weights (the bytes the
// load took) and the KV pool (the bytes the engine took). `lucid serve` logs it at start-up and
// puts it in /server_info, so that the plan `explain` prints and the server's memory can be
// compared to the byte.
// Where the allocator counts (a device), the largest step the engine can be given runs once
// before serving (ProfileLargestStep): its activations take their memory at start-up, so that a
// device that cannot hold them is found then, and what they took is reported beside the plan's
// activation estimate (an estimate: not expected to agree to the byte), and what the ops' own
// scratch (Ops::scratch_held_bytes: CudaOps' buffers, outside the allocator) holds after it,
// beside the plan's runtime overhead, the estimate that is to cover it.
// On the CPU the allocator does not count (the weights are views of the checkpoint mapping, the
// KV pool host memory): only the plan's figures are reported.
// Thread-safety: values and pure functions.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "core/allocator.h"
#include "core/status.h"
#include "ops/ops.h"
#include "runtime/engine.h"

namespace lucid::cli {

struct MemoryCheck {
  std::string device;  // "cuda", "cpu"
  uint64_t weights_planned = 0, kv_pool_planned = 0;
  std::optional<int64_t> weights_held{}, kv_pool_held{};  // nullopt: the allocator does not count
  // The plan's activations, and what the largest step (largest_step_tokens rows) left held;
  // nullopt: not profiled (the allocator does not count).
  uint64_t activations_planned = 0;
  std::optional<int64_t> activations_held{};
  int64_t largest_step_tokens = 0;
  // The plan's runtime overhead, and the ops' scratch held after the largest step; nullopt: the
  // ops hold none that counts, or not profiled.
  uint64_t runtime_overhead_planned = 0;
  std::optional<int64_t> ops_scratch_held{};
  // The weights and the KV pool held equal their plan (true when they are not counted).
  bool agrees() const;
  // The largest step held no more than the plan's activations (true when not profiled).
  bool activations_within_plan() const;
  // The ops' scratch is no more than the plan's runtime overhead (true when not counted).
  bool ops_scratch_within_plan() const;
  // One line: "memory on cuda: weights 555296 B held, as planned; KV pool ... held, plan ...
  // (1024 B more than planned)".
  std::string Describe() const;
  nlohmann::json ToJson() const;
};

// How many bytes `alloc` holds more after `f` ran than before; nullopt where it does not count.
std::optional<int64_t> HeldGrowth(const Allocator& alloc, const std::function<void()>& f);

// The rows of the largest step `engine` can be given under `eo`: a prompt's first chunk, at most
// chunked_prefill_size, with room for one generated token in the context and in one KV
// partition's pages (a context_length or num_pages of 0 does not bound it).
int64_t LargestStepTokens(const EngineOptions& eo);

// What the largest step took: the bytes the backend's allocator holds more after it (the
// workspace it grew: its activations), and what the ops' scratch holds after it.
struct StepMemory {
  int64_t activations = 0;
  std::optional<int64_t> ops_scratch{};  // Ops::scratch_held_bytes
};

// Where `alloc` (the engine's backend memory) counts: one greedy token after a prompt of
// LargestStepTokens(eo) copies of `token`, through `engine` (whose model runs on `ops`), and what
// it took. nullopt, running nothing, where `alloc` does not count. Errors: the generation's
// (ResourceExhausted when the device cannot hold the step's activations or its scratch: the
// engine fails that request and goes on).
StatusOr<std::optional<StepMemory>> ProfileLargestStep(Engine& engine, const Allocator& alloc,
                                                       const Ops& ops, const EngineOptions& eo,
                                                       int32_t token);

}  // namespace lucid::cli
