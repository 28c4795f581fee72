// Machine probes run by `lucid bench` in the same process as the measurements they normalize:
// memory read bandwidth (all threads summing a buffer much larger than the last-level cache) and
// the fp32 FMA peak (all threads, independent vector FMA chains, at the best instruction set the
// fast backend uses). Medians over repeats; the machine is assumed noisy.
// Thread-safety: run one probe at a time (they use every thread).
#pragma once

#include <cstdint>
#include <string>

namespace lucid {

struct MachineInfo {
  std::string cpu;     // /proc/cpuinfo model name
  std::string isa;     // the fast backend's instruction set
  int threads = 0;
  double read_gbs = 0;        // median read bandwidth, GB/s (1e9 bytes)
  double read_gbs_best = 0;   // best repeat
  double fma_gflops = 0;      // median fp32 FMA peak, GFLOP/s (all threads)
  double fma_gflops_best = 0;
  std::string Line() const;   // the one-line machine summary printed with every result
};

// bytes: probe buffer size; repeats: how many timed passes.
MachineInfo ProbeMachine(uint64_t bytes = uint64_t{512} << 20, int repeats = 7);

}  // namespace lucid
