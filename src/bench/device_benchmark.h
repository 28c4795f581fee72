// `lucid bench --device cuda`: the model benchmark on a device backend, normalized by probes of the
// same device in the same run.
//
// One run: the device's probes (given: read bandwidth, bf16 tensor-core and f32 GEMM rates, the
// theoretical bandwidth), the model loaded on the backend, prefill of prompt_len tokens (TFLOP/s
// against both GEMM rates), and decode steps at each batch size over a KV of `context` tokens
// (tokens/s, bytes per step, GB/s against the probed and the theoretical bandwidth). Every figure
// is the median of several timed steps; each is wall time from the step's start to its logits in
// host memory (what the engine samples from today) after Synchronize.
// Bytes and FLOPs come from ProfilingOps (bench/profiling_ops.h) around the backend's ops, in one
// untimed step of each configuration that counts the experts really touched (reading the routing
// choice from the device waits for the stream); the timed steps do not read it.
// KV for decode is synthetic rows written by the backend's own WriteKvRows into the device pool.
// Works on any Backend (the tests run it on GuardedDeviceBackend, whose memory the host must not
// touch); the CUDA build gives it CudaBackend and cuda_probe's figures.
// Thread-safety: one run at a time; uses the backend from this thread only.
#pragma once

#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "core/status.h"
#include "models/kv_cache.h"

namespace lucid {

// What the device does, measured in this run (0: not measured).
struct DeviceProbes {
  std::string device;        // "cuda:0 NVIDIA H200 (sm_90, ...)"
  double read_gbs = 0;       // a read kernel over a buffer far beyond L2, median GB/s
  double peak_gbs = 0;       // theoretical, from the memory clock and bus width
  double bf16_tflops = 0;    // dense bf16 GEMM on the tensor cores (f32 accumulate), median
  double f32_tflops = 0;     // f32 GEMM (SGEMM, no TF32): what cuda-reference's matmuls run
  std::string Line() const;  // one line for the log and docs/BENCHMARKS.md
};

struct DeviceBenchOptions {
  std::string model_path;
  std::vector<int64_t> batches = {1, 8, 32, 128};
  int64_t prompt_len = 512;  // prefill tokens
  int64_t context = 512;     // KV tokens per sequence at decode
  int64_t gen_len = 8;       // timed decode steps per configuration (after the counted one)
  int repeats = 3;           // timed prefills (after the counted one)
  bool skip_prefill = false;
  KvDtype kv_dtype = KvDtype::kBF16;
};

// Runs the benchmark on `backend`, printing lines to `log` as results arrive; returns them as
// JSON ({"device", "model", "prefill", "decode"}). Errors: the model's load or a step's.
StatusOr<nlohmann::json> RunDeviceBench(Backend& backend, const DeviceProbes& probes,
                                        const DeviceBenchOptions& o, std::FILE* log);

}  // namespace lucid
