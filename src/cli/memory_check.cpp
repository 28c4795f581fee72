#include "cli/memory_check.h"

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

std::string MemoryCheck::Describe() const {
  return "memory on " + device + ": " +
         Part("weights", weights_planned, weights_held, "mapped from the checkpoint") + "; " +
         Part("KV pool", kv_pool_planned, kv_pool_held, "host memory, not counted");
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
          {"agrees", agrees()}};
}

std::optional<int64_t> HeldGrowth(const Allocator& alloc, const std::function<void()>& f) {
  const std::optional<int64_t> before = alloc.held_bytes();
  f();
  const std::optional<int64_t> after = alloc.held_bytes();
  if (!before.has_value() || !after.has_value()) return std::nullopt;
  return *after - *before;
}

}  // namespace lucid::cli
