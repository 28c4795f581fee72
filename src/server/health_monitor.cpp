#include "server/health_monitor.h"

namespace lucid::server {

HealthVerdict HealthMonitor::Observe(const EngineStats& s, Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  samples_.push_back({now, s.requests_ok, s.requests_error, s.requests_numeric_error});
  // Keep one sample at or before the window's start as the baseline.
  while (samples_.size() > 1 && samples_[1].t <= now - window_) samples_.pop_front();
  const Sample zero{now, 0, 0, 0};
  const Sample& base = samples_.size() > 1 ? samples_.front() : zero;
  const Sample& last = samples_.back();
  HealthVerdict v;
  v.numeric_failures = last.numeric - base.numeric;
  v.other_failures = (last.error - base.error) - v.numeric_failures;
  v.finished = (last.ok - base.ok) + (last.error - base.error);
  if (v.numeric_failures >= min_failures_ &&
      double(v.numeric_failures) >= min_fraction_ * double(v.finished)) {
    v.degraded = true;
    v.reason = std::to_string(v.numeric_failures) + " of the last " + std::to_string(v.finished) +
               " finished requests failed on non-finite values (numerics guard) within " +
               std::to_string(window_.count()) + " s";
  }
  return v;
}

}  // namespace lucid::server
