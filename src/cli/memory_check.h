// What the memory plan (config/memory_plan.h) says a device holds, against what its backend's
// allocator really holds once the model is loaded and the engine made: the weights (the bytes the
// load took) and the KV pool (the bytes the engine took). `lucid serve` logs it at start-up and
// puts it in /server_info, so that the plan `explain` prints and the server's memory can be
// compared to the byte.
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

namespace lucid::cli {

struct MemoryCheck {
  std::string device;  // "cuda", "cpu"
  uint64_t weights_planned = 0, kv_pool_planned = 0;
  std::optional<int64_t> weights_held, kv_pool_held;  // nullopt: the allocator does not count
  // Every figure held equals its plan (true when none is counted).
  bool agrees() const;
  // One line: "memory on cuda: weights 555296 B held, as planned; KV pool ... held, plan ...
  // (1024 B more than planned)".
  std::string Describe() const;
  nlohmann::json ToJson() const;
};

// How many bytes `alloc` holds more after `f` ran than before; nullopt where it does not count.
std::optional<int64_t> HeldGrowth(const Allocator& alloc, const std::function<void()>& f);

}  // namespace lucid::cli
