// Target: the machine a configuration is resolved for. Either this machine ("local") or a
// described one (`--target cpu | cuda:sm_90 | cuda:sm_100 | cuda:sm_120 ...` with `--gpu-memory`
// and `--gpu-count`), so that a plan for an 8-GPU server can be made on a laptop.
// No model runs on the CUDA backend yet (with or without -DLUCID_CUDA=ON), so "local" is always a
// CPU target (stated in the description, with whether the build has the CUDA kernels).
// Thread-safety: values.
#pragma once

#include <cstdint>
#include <string>

#include "config/kernel_catalog.h"
#include "core/status.h"

namespace lucid::config {

struct Target {
  std::string spec;    // "local", "cpu", "cuda:sm_120"
  bool local = false;  // this machine
  bool has_gpu = false;
  int sm = 0;              // compute capability x10 when has_gpu
  int64_t gpu_memory = 0;  // bytes per GPU
  int64_t gpu_count = 0;
  int64_t cpu_memory = 0;        // bytes of system memory
  std::string Describe() const;  // "8 x cuda:sm_120 (96.00 GiB each), 125.00 GiB system memory"
};

// Parses a target spelling: "local", "cpu", "cuda:sm_<NN>" (NN in 70..130). InvalidArgument naming
// --target and the valid spellings otherwise.
StatusOr<Target> ParseTargetSpec(const std::string& spec);

// This machine's total system memory (MemTotal of /proc/meminfo); 0 when unknown.
int64_t LocalSystemMemory();

}  // namespace lucid::config
