#include "runtime/cpu_contention.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <time.h>

#include <utility>

namespace lucid {
namespace {

// A machine of `cpus` CPUs the test drives by hand: Advance(dt, ...) moves the counters as if the
// engine thread ran for `run` and waited for `wait` of dt, this process used `process` cores and
// other processes `others` cores.
struct FakeCpu {
  CpuReading now{true, 0, 0, true, 0, 0, 2};
  int reads = 0, machine_reads = 0;
  bool machine_readable = true;

  void Advance(double dt, double run, double wait, double process, double others) {
    now.own_cpu_s += run * dt;
    now.own_wait_s += wait * dt;
    now.process_cpu_s += process * dt;
    now.machine_busy_s += (process + others) * dt;
  }
  CpuReader Reader() {
    return [this](bool machine) {
      ++reads;
      CpuReading r = now;
      if (machine) ++machine_reads;
      r.machine_valid = machine && machine_readable;
      return r;
    };
  }
};

// Steps of `step_s` for `seconds` at the given shares; returns the last team limit.
int Drive(ContentionRule& rule, FakeCpu& cpu, double* t, double seconds, double run, double wait,
          double others, double step_s = 0.002) {
  int limit = -1;
  for (double end = *t + seconds; *t < end; *t += step_s) {
    cpu.Advance(step_s, run, wait, run * 2, others);
    limit = rule.AfterStep(*t);
  }
  return limit;
}

TEST(ContentionRuleTest, OffWithoutAFewerThreadsTeam) {
  FakeCpu cpu;
  for (auto [threads, busy] : {std::pair{2, 0}, {2, 2}, {2, 3}, {1, 1}, {1, 0}}) {
    ContentionRule rule(threads, busy, cpu.Reader());
    EXPECT_FALSE(rule.enabled()) << threads << " " << busy;
    double t = 0;
    EXPECT_EQ(Drive(rule, cpu, &t, 0.5, 0.5, 0.5, 1.0), 0);
    EXPECT_EQ(rule.team(), threads);
  }
  EXPECT_EQ(cpu.reads, 0);
  EXPECT_FALSE(ContentionRule(2, 1, nullptr).enabled());
}

TEST(ContentionRuleTest, AQuietCpuKeepsTheWholeTeam) {
  FakeCpu cpu;
  ContentionRule rule(2, 1, cpu.Reader());
  ASSERT_TRUE(rule.enabled());
  double t = 0;
  // Busy engine, waiting 5% of its activity (an HTTP thread now and then): below the threshold.
  EXPECT_EQ(Drive(rule, cpu, &t, 3.0, 0.95, 0.05, 0.0), 0);
  EXPECT_EQ(rule.team(), 2);
  EXPECT_EQ(rule.lowerings(), 0);
}

TEST(ContentionRuleTest, WaitingForACpuLowersTheTeamOnceEnoughActivityIsSeen) {
  FakeCpu cpu;
  ContentionRule rule(4, 3, cpu.Reader());
  double t = 0;
  // 30% of the activity waiting; 20 ms of activity are needed, at 100% activity that is 20 ms
  // (plus the first reading, which only starts the window).
  EXPECT_EQ(Drive(rule, cpu, &t, 0.012, 0.7, 0.3, 0.0), 0);
  EXPECT_EQ(Drive(rule, cpu, &t, 0.04, 0.7, 0.3, 0.0), 3);
  EXPECT_EQ(rule.team(), 3);
  EXPECT_EQ(rule.lowerings(), 1);
}

TEST(ContentionRuleTest, AnIdleEngineNeverLowers) {
  FakeCpu cpu;
  ContentionRule rule(2, 1, cpu.Reader());
  double t = 0;
  // Asleep (no work): neither on a CPU nor waiting, while the machine is full of others.
  EXPECT_EQ(Drive(rule, cpu, &t, 10.0, 0.0, 0.0, 2.0), 0);
  // A trickle of activity with a high wait share but spread over more than the stale window:
  // every window restarts before it has 20 ms of activity.
  EXPECT_EQ(Drive(rule, cpu, &t, 20.0, 0.0015, 0.0015, 2.0), 0);
  EXPECT_EQ(rule.lowerings(), 0);
}

TEST(ContentionRuleTest, ReadsTheCountersAtMostEveryTenMilliseconds) {
  FakeCpu cpu;
  ContentionRule rule(2, 1, cpu.Reader());
  double t = 0;
  Drive(rule, cpu, &t, 1.0, 0.95, 0.05, 0.0, 0.001);  // 1000 steps
  EXPECT_LE(cpu.reads, 1.0 / kCpuReadSeconds + 1);
  EXPECT_GE(cpu.reads, 1.0 / kCpuReadSeconds / 2);
}

TEST(ContentionRuleTest, StaysLoweredWhileACompetitorHoldsACoreAndRaisesWhenItLeaves) {
  FakeCpu cpu;  // 2 CPUs
  ContentionRule rule(2, 1, cpu.Reader());
  double t = 0;
  ASSERT_EQ(Drive(rule, cpu, &t, 0.1, 0.7, 0.3, 0.7), 1);
  // Lowered, the competitor takes its whole core and the engine waits no more.
  EXPECT_EQ(Drive(rule, cpu, &t, 5.0, 1.0, 0.0, 1.0), 1);
  EXPECT_EQ(rule.lowerings(), 1);
  // The competitor leaves: not before a whole raise window has passed...
  EXPECT_EQ(Drive(rule, cpu, &t, 0.5, 1.0, 0.0, 0.1), 1);
  // ...then the whole team again (others 0.1 core < 2 - 2 + 0.5).
  EXPECT_EQ(Drive(rule, cpu, &t, 1.6, 1.0, 0.0, 0.1), 0);
  EXPECT_EQ(rule.team(), 2);
  // Contended again: lowered again.
  EXPECT_EQ(Drive(rule, cpu, &t, 0.1, 0.7, 0.3, 0.7), 1);
  EXPECT_EQ(rule.lowerings(), 2);
}

TEST(ContentionRuleTest, OnABigMachineOthersMayUseTheSpareCores) {
  FakeCpu cpu;
  cpu.now.cpus = 16;
  ContentionRule rule(8, 7, cpu.Reader());  // a team of 8 on 16 CPUs
  double t = 0;
  ASSERT_EQ(Drive(rule, cpu, &t, 0.1, 0.7, 0.3, 9.0), 7);
  EXPECT_EQ(Drive(rule, cpu, &t, 3.0, 1.0, 0.0, 8.6), 7);  // 8.6 > 16 - 8 + 0.5
  EXPECT_EQ(Drive(rule, cpu, &t, 2.5, 1.0, 0.0, 8.2), 0);  // 8.2 < 8.5: eight cores are free
}

TEST(ContentionRuleTest, DoesNotLowerWhenTheMachineCannotBeRead) {
  FakeCpu cpu;
  cpu.machine_readable = false;
  ContentionRule rule(2, 1, cpu.Reader());
  double t = 0;
  EXPECT_EQ(Drive(rule, cpu, &t, 1.0, 0.5, 0.5, 1.0), 0);  // it could never come back up
  EXPECT_EQ(rule.lowerings(), 0);
  EXPECT_GT(cpu.machine_reads, 0);
}

TEST(ContentionRuleTest, UnreadableCountersLeaveTheTeamAlone) {
  ContentionRule rule(2, 1, [](bool) { return CpuReading{}; });
  ASSERT_TRUE(rule.enabled());
  for (double t = 0; t < 1.0; t += 0.005) EXPECT_EQ(rule.AfterStep(t), 0);
}

// The real counters on this machine: the thread's own time on a CPU grows while it computes, and
// the machine's CPUs are those this process may run on.
TEST(ReadCpuTest, ReadsTheThreadsAndTheMachinesCounters) {
  const CpuReading a = ReadCpu(true);
  if (!a.valid)
    GTEST_SKIP() << "/proc/thread-self/schedstat is not readable (kernel without "
                    "CONFIG_SCHED_INFO?): the rule is off here";
  ASSERT_TRUE(a.machine_valid);
  EXPECT_GE(a.cpus, 1);
  cpu_set_t mask;
  CPU_ZERO(&mask);
  ASSERT_EQ(sched_getaffinity(0, sizeof mask, &mask), 0);
  EXPECT_EQ(a.cpus, CPU_COUNT(&mask));
  // Spin ~50 ms of this thread's CPU time.
  timespec ts0{}, ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts0);
  volatile double x = 0;
  do {
    for (int i = 0; i < 100000; ++i) x = x + 1e-9;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  } while ((ts.tv_sec - ts0.tv_sec) + (ts.tv_nsec - ts0.tv_nsec) * 1e-9 < 0.05);
  const CpuReading b = ReadCpu(true);
  EXPECT_GE(b.own_cpu_s - a.own_cpu_s, 0.04);
  EXPECT_GE(b.process_cpu_s - a.process_cpu_s, 0.04);
  EXPECT_GE(b.own_wait_s, a.own_wait_s);
  // /proc/stat counts in ticks (10 ms): the CPUs were busy at least while this thread spun.
  EXPECT_GE(b.machine_busy_s - a.machine_busy_s, 0.02);
  EXPECT_FALSE(ReadCpu(false).machine_valid);
}

}  // namespace
}  // namespace lucid
