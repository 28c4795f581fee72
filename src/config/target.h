// Target: the machine a configuration is resolved for. Either this machine ("local") or a
// described one (`--target cpu | cuda:sm_90 | cuda:sm_100 | cuda:sm_120 ...` with `--gpu-memory`
// and `--gpu-count`), so that a plan for an 8-GPU server can be made on a laptop.
// "local" is this machine's CPU plus the GPUs a CUDA build's probe found (LocalGpus, filled by the
// commands that run a model: the config layer does not link CUDA); without a probe, or with no
// device, it is a CPU target, and the description says why no GPU is used.
// Thread-safety: values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/kernel_catalog.h"
#include "core/status.h"

namespace lucid::config {

// One GPU of this machine, as the CUDA runtime reported it (backends/cuda/cuda_device.h).
struct LocalGpu {
  int index = 0;
  std::string name;  // "NVIDIA H200"
  int sm = 0;        // compute capability x10
  int64_t total_memory = 0;
  int64_t free_memory = 0;  // at the probe: what this process can still allocate
};

// This machine's GPUs: the devices found, or why there are none ("no CUDA device: ...", "this
// build has no CUDA backend").
struct LocalGpus {
  std::vector<LocalGpu> devices;
  std::string none_reason;
};

struct Target {
  std::string spec;    // "local", "cpu", "cuda:sm_120"
  bool local = false;  // this machine
  bool has_gpu = false;
  int sm = 0;              // compute capability x10 when has_gpu
  int64_t gpu_memory = 0;  // bytes per GPU
  int64_t gpu_count = 0;
  int64_t cpu_memory = 0;  // bytes of system memory
  // local only: the GPUs used (device 0's compute capability; the ones of another are left out)
  // and, when there are none, why.
  std::vector<LocalGpu> local_gpus;
  std::string no_gpu_reason;
  std::string Describe() const;  // "8 x cuda:sm_120 (96.00 GiB each), 125.00 GiB system memory"
};

// Parses a target spelling: "local", "cpu", "cuda:sm_<NN>" (NN in 70..130). InvalidArgument naming
// --target and the valid spellings otherwise.
StatusOr<Target> ParseTargetSpec(const std::string& spec);

// The local target for a probe's answer: has_gpu and sm from device 0 when there is one, the
// devices of device 0's compute capability kept (a plan has one kind of GPU). `gpus` null: not
// probed (the CPU only; `lucid bench`, tests).
void AddLocalGpus(const LocalGpus* gpus, Target* t);

// This machine's total system memory (MemTotal of /proc/meminfo); 0 when unknown.
int64_t LocalSystemMemory();

}  // namespace lucid::config
