// Machine probes run by `lucid bench` in the same process as the measurements they normalize:
// memory read bandwidth (all threads summing a buffer much larger than the last-level cache), the
// fp32 FMA peak (all threads, independent vector FMA chains, at the best instruction set the fast
// backend uses) and, with AVX512_BF16, the vdpbf16ps peak (what matmuls on bf16 activations are
// bound by). Medians over repeats; the machine is assumed noisy.
// Thread-safety: run one probe at a time (they use every thread).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace lucid {

struct MachineInfo {
  std::string cpu;  // /proc/cpuinfo model name
  std::string isa;  // the fast backend's instruction set
  int threads = 0;
  double read_gbs = 0;       // median read bandwidth, GB/s (1e9 bytes)
  double read_gbs_best = 0;  // best repeat
  double fma_gflops = 0;     // median fp32 FMA peak, GFLOP/s (all threads)
  double fma_gflops_best = 0;
  // Median vdpbf16ps peak, GFLOP/s (each instruction 32 bf16 products and sums = 64 FLOPs); 0
  // without AVX512_BF16.
  double dot_bf16_gflops = 0;
  std::string Line() const;  // the one-line machine summary printed with every result
};

// bytes: probe buffer size; repeats: how many timed passes.
MachineInfo ProbeMachine(uint64_t bytes = uint64_t{512} << 20, int repeats = 7);

// The read-bandwidth probe with its buffer kept (allocated and first-touched once), so that a
// measurement can be paired with the bandwidth of the same moment: Measure() runs one untimed
// pass and then `passes` timed ones over the whole buffer with every thread, and returns the
// median GB/s. The buffer (much larger than the last-level cache) evicts the caches.
class BandwidthProbe {
 public:
  explicit BandwidthProbe(uint64_t bytes = uint64_t{512} << 20);
  ~BandwidthProbe();
  BandwidthProbe(const BandwidthProbe&) = delete;
  BandwidthProbe& operator=(const BandwidthProbe&) = delete;
  double Measure(int passes);
  // GB/s of each timed pass of the last Measure() (for the best-of figure).
  const std::vector<double>& last_passes() const { return last_; }

 private:
  float* buf_ = nullptr;
  int64_t n_ = 0;  // floats in buf_
  std::vector<double> last_;
};

}  // namespace lucid
