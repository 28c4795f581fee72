// The CPU-contention rule of the serving engine (option `cpu-contention`, docs/SERVING.md "A
// shared CPU"): while other processes want the CPUs the kernels' OpenMP team runs on, the engine
// runs its parallel regions with fewer threads (core/parallel.h TeamLimit), leaving a core to the
// competitor and to the HTTP threads; once the CPUs are free again it uses the whole team.
//
// Why: every parallel region ends at a barrier, so a team member that the scheduler preempts for
// a competitor holds up the whole step for a time slice, many times a step; one thread fewer than
// the cores leaves the team a core each. The chunks of every kernel follow NumThreads(), not the
// team, so the outputs are the same bits at any team size (only the time changes).
//
// The signals (Linux /proc; where they cannot be read the rule does nothing):
//  - lowering: the engine thread's own wait for a CPU, /proc/thread-self/schedstat (time on a CPU,
//    time runnable but waiting): the team is lowered when, over at least kLowerActivitySeconds of
//    the thread's activity (on a CPU or waiting), it waited more than kLowerWaitFraction of it.
//    Time asleep (no work) counts for neither, so an idle server never lowers.
//  - raising: other processes' use of the CPUs this process may run on (sched_getaffinity), from
//    /proc/stat's per-CPU busy time less this process's CPU time: after at least
//    kRaiseWindowSeconds lowered, the whole team comes back when the others used less than
//    cpus - threads + kRaiseOthersCores cores over the window. (A competitor starved by the whole
//    team used less than its share; lowered, it takes a whole core, so the two states do not
//    flap.) A CPU quota (cgroup cpu.max) is not seen by either signal.
// Thread-safety: a ContentionRule belongs to one thread (the engine thread); ReadCpu reads the
// calling thread's counters.
#pragma once

#include <cstdint>
#include <functional>

namespace lucid {

// Cumulative CPU counters, in seconds.
struct CpuReading {
  bool valid = false;          // own_* could be read
  double own_cpu_s = 0;        // the calling thread on a CPU
  double own_wait_s = 0;       // the calling thread runnable, waiting for a CPU
  bool machine_valid = false;  // the fields below could be read (only asked for when needed)
  double process_cpu_s = 0;    // every thread of this process
  double machine_busy_s = 0;   // the CPUs this process may run on, summed: time not idle
  int cpus = 0;                // how many CPUs those are
};
// Reads the calling thread's counters, and with `machine` the process's and the CPUs'.
using CpuReader = std::function<CpuReading(bool machine)>;
CpuReading ReadCpu(bool machine);

inline constexpr double kCpuReadSeconds = 0.01;        // at most one reading per 10 ms
inline constexpr double kLowerActivitySeconds = 0.02;  // activity a lowering decision needs
inline constexpr double kLowerWaitFraction = 0.10;
inline constexpr double kRaiseWindowSeconds = 1.0;
inline constexpr double kRaiseOthersCores = 0.5;
inline constexpr double kStaleWindowSeconds = 5.0;  // a lowering window older than this restarts

class ContentionRule {
 public:
  // `threads`: the team the kernels plan for (NumThreads()). `busy_threads`: the team while the CPU
  // is contended; the rule is off when it is 0 or not below `threads`.
  ContentionRule(int threads, int busy_threads, CpuReader reader = ReadCpu);

  // Called after every engine step with the steady clock's time: reads the counters when due and
  // returns the team limit for the next steps (0: none, the whole team).
  int AfterStep(double now_s);

  bool enabled() const { return enabled_; }
  int team() const { return lowered_ ? busy_threads_ : threads_; }  // threads allowed now
  int64_t lowerings() const { return lowerings_; }                  // cumulative

 private:
  void StartLowerWindow(double now_s, const CpuReading& r);
  void Lower(double now_s, const CpuReading& r);

  int threads_, busy_threads_;
  CpuReader reader_;
  bool enabled_ = false, lowered_ = false;
  double last_read_s_ = -1e300;
  // Lowering window (the engine thread's own counters) and raising window (the machine's).
  double window_start_s_ = 0;
  CpuReading window_start_;
  double raise_start_s_ = 0;
  CpuReading raise_start_;
  int64_t lowerings_ = 0;
};

}  // namespace lucid
