// HealthMonitor: whether the server is degraded, from the engine's cumulative request counters
// (issue 26, item 5). A model whose weights go non-finite only on some paths (an expert the
// warm-up never routes to) loads and warms up fine and then fails most requests; /health kept
// answering 200. The monitor keeps the counters it was shown over a sliding window and calls the
// server degraded while, within the window, at least `min_failures` requests failed the numerics
// guard and they are at least `min_fraction` of the requests that finished.
// Thread-safety: every method may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>

#include "runtime/engine.h"

namespace lucid::server {

struct HealthVerdict {
  bool degraded = false;
  std::string reason;  // why, when degraded
  // Within the window:
  int64_t finished = 0, numeric_failures = 0, other_failures = 0;
};

class HealthMonitor {
 public:
  using Clock = std::chrono::steady_clock;
  explicit HealthMonitor(std::chrono::seconds window = std::chrono::seconds(60),
                         int64_t min_failures = 3, double min_fraction = 0.5)
      : window_(window), min_failures_(min_failures), min_fraction_(min_fraction) {}

  // Records the engine's counters as of `now` and judges the window that ends there. Counts
  // since the first observation (or since 0 for the very first) when no older sample is kept.
  HealthVerdict Observe(const EngineStats& stats, Clock::time_point now);

 private:
  struct Sample {
    Clock::time_point t;
    int64_t ok, error, numeric;
  };
  const std::chrono::seconds window_;
  const int64_t min_failures_;
  const double min_fraction_;
  std::mutex mu_;
  std::deque<Sample> samples_;
};

}  // namespace lucid::server
