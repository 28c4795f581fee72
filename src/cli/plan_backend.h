// The Backend (backends/backend.h) that a resolved plan's device runs on, for the commands that
// run a model (generate, serve):
//   --device cpu   the plan's CPU kernel set (config/cpu_kernels.h: MakeCpuBackend).
//   --device cuda  a CUDA build's ops on device 0 (backends/cuda/cuda_backend.h), the set the
//                  plan's kernels name (cuda-bf16act for --dtype bfloat16, cuda-reference for
//                  float32), without CUDA graphs: a plan that asks for more (the resolver's
//                  kernel gaps) is refused with the flags that make it runnable, and
//                  a machine without a CUDA device gets the runtime's reason. Before the backend
//                  is made, the self-test gate (cli/kernel_gate.h) checks the plan's kernels
//                  against this binary's self-test record for the device (measuring it first
//                  when there is none) and refuses a failed or never-run one unless
//                  --allow-unverified-kernels.
// The plan's device is the only input: nothing is swapped for something else silently.
// Thread-safety: a pure function of its argument (plus the CUDA runtime's device probe).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "config/resolved_config.h"
#include "core/status.h"
#ifdef LUCID_HAVE_CUDA
#include "backends/cuda/cuda_ops.h"
#endif

namespace lucid::cli {

struct PlanBackend {
  std::unique_ptr<Backend> backend;
  std::string description;  // one line for the log ("cuda-bf16act on cuda:0 NVIDIA H200 ...");
                            // empty for the CPU, whose kernel set the resolved plan already prints
  std::vector<std::string> notes;     // the self-test gate's record and verdict (log at info)
  std::vector<std::string> warnings;  // kernels started unverified; a record not kept
};

// FailedPrecondition (exit status 2) for a plan this build or machine cannot run on its device.
StatusOr<PlanBackend> MakePlanBackend(const config::ResolvedConfig& rc);

#ifdef LUCID_HAVE_CUDA
// The CUDA op set the plan's kernels name (each family's choice computes in the plan's dtype, so
// they name one); FailedPrecondition naming the flags when the plan asks for what the kernels
// lack (the resolver's kernel gaps: another dtype, CUDA graphs), or when they name none or two.
StatusOr<const cuda::CudaOpsSet*> PlanCudaOpsSet(const config::ResolvedConfig& rc);
#endif

}  // namespace lucid::cli
