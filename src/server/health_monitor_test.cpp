#include "server/health_monitor.h"

#include <gtest/gtest.h>

namespace lucid::server {
namespace {

using namespace std::chrono_literals;

EngineStats Counts(int64_t ok, int64_t error, int64_t numeric) {
  EngineStats s;
  s.requests_ok = ok;
  s.requests_error = error;
  s.requests_numeric_error = numeric;
  return s;
}

TEST(HealthMonitor, DegradedWhileNumericFailuresDominateTheWindow) {
  HealthMonitor m(60s, /*min_failures=*/3, /*min_fraction=*/0.5);
  const auto t0 = HealthMonitor::Clock::now();
  EXPECT_FALSE(m.Observe(Counts(10, 0, 0), t0).degraded);
  // 2 numeric failures: below min_failures.
  EXPECT_FALSE(m.Observe(Counts(10, 2, 2), t0 + 1s).degraded);
  // 19 of 20 since t0 failed on numerics.
  HealthVerdict v = m.Observe(Counts(11, 19, 19), t0 + 2s);
  EXPECT_TRUE(v.degraded);
  EXPECT_EQ(v.numeric_failures, 19);
  EXPECT_EQ(v.finished, 20);
  EXPECT_NE(v.reason.find("19 of the last 20"), std::string::npos) << v.reason;
  // A minute of successes later, the failures have left the window.
  EXPECT_TRUE(m.Observe(Counts(15, 19, 19), t0 + 30s).degraded);
  v = m.Observe(Counts(60, 19, 19), t0 + 95s);
  EXPECT_FALSE(v.degraded) << v.reason;
  EXPECT_EQ(v.numeric_failures, 0);
}

TEST(HealthMonitor, OtherFailuresAndRareNumericOnesDoNotDegrade) {
  HealthMonitor m(60s, 3, 0.5);
  const auto t0 = HealthMonitor::Clock::now();
  HealthVerdict v = m.Observe(Counts(0, 50, 0), t0);  // e.g. aborted by shutdown: not numerics
  EXPECT_FALSE(v.degraded);
  EXPECT_EQ(v.other_failures, 50);
  v = m.Observe(Counts(100, 54, 4), t0 + 1s);  // 4 numeric of 154: under half
  EXPECT_FALSE(v.degraded);
}

}  // namespace
}  // namespace lucid::server
