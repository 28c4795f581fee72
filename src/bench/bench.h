// `lucid bench`: end-to-end model benchmarks normalized by probes of the same machine.
//
// One run: machine probes (read bandwidth, FMA peak), model load and time to first token, prefill
// of prompt_len tokens, decode steps at each batch size (each after a fresh bandwidth probe: its
// percentages use the larger of that and the first probe), and a decode-step sweep over context
// lengths for sparse (DSA) and dense MLA attention on the same weights. Every figure is the median
// of several repeats (steps); bytes and FLOPs come from ProfilingOps' per-op accounting of the
// actual step (experts really touched, KV rows really read); the JSON also lists each decode
// configuration's matmuls per weight (ProfilingOps::ByWeight).
// KV for decode and the context sweep is filled with synthetic rows written straight into the
// pool (prefilling 32 sequences or 32k tokens at CPU speed would take minutes and only timing
// matters there); prefill is measured separately on real tokens.
// Under tensor parallelism (`mpirun -np N lucid bench --tp-size N [--ep-size N]`, BenchOptions::tp)
// every rank runs the same steps in lock-step on its shard (the same seeds give the same inputs;
// the step input that `serve`'s rank 0 broadcasts is not in the timed step), after a barrier; only
// rank 0 probes the machine (the others wait in a barrier) and prints, the paired per-step probe
// is skipped, and each decode configuration says the time its steps spent in collectives on every
// rank (TimedCommunicator: transfer plus any wait for the slower rank).
// Thread-safety: uses every thread; one run at a time.
#pragma once

#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backends/cpu/cpu_fast_ops.h"
#include "core/status.h"
#include "core/timed_communicator.h"
#include "models/kv_cache.h"

namespace lucid {

struct BenchOptions {
  std::string model_path;
  std::vector<int64_t> batches = {1, 8, 32};
  int64_t prompt_len = 512;
  int64_t gen_len = 8;            // timed decode steps per configuration (after one warm-up)
  std::vector<int64_t> contexts;  // context sweep (empty: skipped)
  int repeats = 3;                // prefill repeats
  bool reference_ops = false;     // CpuOps instead of CpuFastOps (`--cpu-kernels reference`)
  // CpuFastOps' matmul activations (`--cpu-kernels fast-bf16act`: kBf16).
  FastActivations activations = FastActivations::kF32;
  // The set's name (`--cpu-kernels`; its entry in the backend registry,
  // backends/cpu/ops_registry.h, builds the ops, and the two fields above describe it) and why it
  // was chosen, as the command resolved them; printed with the ops and kept in the JSON.
  std::string kernel_set = "fast";
  std::string kernel_set_reason = "given";
  bool skip_prefill = false;
  KvDtype kv_dtype = KvDtype::kF32;  // how the KV pool stores rows (decode, sweep and prefill)
  bool by_weight = false;  // print each decode configuration's matmuls per weight (`--by-weight`)
  // The tensor-parallel group (null: one process), wrapped so that collectives are timed; borrowed.
  TimedCommunicator* tp = nullptr;
  int ep_size = 1;  // expert parallelism over the group (1 or its size)
};

// Runs the benchmark, printing human-readable lines to `log` as results arrive; returns them all
// as JSON.
StatusOr<nlohmann::json> RunBench(const BenchOptions& o, std::FILE* log);

}  // namespace lucid
