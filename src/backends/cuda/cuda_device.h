// The CUDA devices of this machine, as the runtime reports them.
//
// ProbeCudaDevices answers once per call (cheap: no context is created beyond the runtime's own);
// with no usable device it fails with FailedPrecondition "no CUDA device: <why>" (no driver, a
// driver older than the runtime, CUDA_VISIBLE_DEVICES empty, ...), the reason every device test
// and `lucid backends` print. CompiledCudaArchitectures lists the machine code this build carries
// (CMAKE_CUDA_ARCHITECTURES), and RunsOn says whether a device can run it: sm_90a code runs only on
// compute capability 9.0, sm_100a only on 10.0, sm_120a only on 12.0 (the "a" targets are not
// forward compatible).
// Thread-safety: reentrant.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace lucid::cuda {

struct CudaDeviceInfo {
  int index = 0;
  std::string name;  // "NVIDIA H200"
  int sm = 0;        // compute capability major*10+minor (90)
  int multiprocessors = 0;
  int64_t total_memory = 0;  // bytes
  int64_t free_memory = 0;   // bytes, at the probe
  int64_t l2_bytes = 0;
  // Theoretical DRAM bandwidth from the memory clock and bus width, GB/s (0 when the runtime
  // does not report them).
  double peak_bandwidth_gbs = 0.0;
};

StatusOr<std::vector<CudaDeviceInfo>> ProbeCudaDevices();

// The compute capability (major * 10 + minor) of the calling thread's current device; 0 when the
// runtime cannot say.
int CurrentDeviceSm();

// The compute capabilities this build has machine code for, e.g. {90, 100, 120}.
std::vector<int> CompiledCudaArchitectures();
// "sm_90a, sm_100a, sm_120a".
std::string CompiledCudaArchitecturesText();

// Whether this build has machine code for a device of compute capability `sm`.
bool RunsOn(int sm);

// One line: "cuda:0 NVIDIA H200 (sm_90, 132 SMs, 139.8 GiB, 4.8 TB/s)".
std::string DescribeDevice(const CudaDeviceInfo& d);

}  // namespace lucid::cuda
