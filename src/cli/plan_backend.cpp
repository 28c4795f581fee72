#include "cli/plan_backend.h"

#include <algorithm>
#include <vector>

#include "config/cpu_kernels.h"
#include "config/cuda_plan_set.h"
#include "config/kernel_selection.h"

#ifdef LUCID_HAVE_CUDA
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_device.h"
#include "backends/cuda/cuda_ops.h"
#include "cli/cuda_self_test_record.h"
#include "cli/kernel_gate.h"
#endif

namespace lucid::cli {

#ifdef LUCID_HAVE_CUDA
StatusOr<const cuda::CudaOpsSet*> PlanCudaOpsSet(const config::ResolvedConfig& rc) {
  std::vector<std::string> gaps;  // what the plan asks of lucid's CUDA kernels that they lack
  for (const config::KernelChoice& k : rc.data().kernels)
    for (const std::string& g : k.gaps)
      if (std::find(gaps.begin(), gaps.end(), g) == gaps.end()) gaps.push_back(g);
  if (!gaps.empty()) {
    std::string text;
    for (const std::string& g : gaps) text += (text.empty() ? "" : "; ") + g;
    return FailedPrecondition(
        "--device cuda runs lucid's CUDA kernels (cuda-bf16act and cuda-fp8act in bfloat16, "
        "cuda-reference "
        "in float32; no CUDA graphs), but the plan needs what they lack: " +
        text + " (pass --dtype bfloat16 or float32, and --disable-cuda-graph)");
  }
  LUCID_ASSIGN_OR_RETURN(const std::string name, config::CudaOpsSetOfPlan(rc.data().kernels));
  const cuda::CudaOpsSet* set = cuda::FindCudaOpsSet(name);
  if (set == nullptr)
    return FailedPrecondition("--device cuda: the plan's kernel " +
                              (name.empty() ? std::string("(none)") : name) +
                              " is not a CUDA op set of this build");
  return set;
}
#endif

StatusOr<PlanBackend> MakePlanBackend(const config::ResolvedConfig& rc) {
  if (rc.data().cpu_kernels.has_value())
    return PlanBackend{config::MakeCpuBackend(rc.cpu_kernel_set()), "", {}, {}};
  if (rc.String("device") != "cuda")
    return FailedPrecondition("a model runs on --device cpu or cuda, not " + rc.String("device"));
#ifdef LUCID_HAVE_CUDA
  LUCID_ASSIGN_OR_RETURN(const cuda::CudaOpsSet* set, PlanCudaOpsSet(rc));
  LUCID_ASSIGN_OR_RETURN(std::vector<cuda::CudaDeviceInfo> devices, cuda::ProbeCudaDevices());
  if (devices.empty()) return FailedPrecondition("--device cuda: no CUDA device");
  GateInputs gate;
  gate.dir = SelfTestDir(rc.String("self-test-dir"));
  LUCID_ASSIGN_OR_RETURN(gate.build, BinaryIdentity());
  gate.device = cuda::DescribeDevice(devices[0]);
  gate.sm = devices[0].sm;
  gate.set = set->kernel;
  gate.formats = RequiredFormats(rc.kernels(), rc.kv_cache_dtype());
  gate.allow_unverified = rc.Bool("allow-unverified-kernels");
  LUCID_ASSIGN_OR_RETURN(GateOutcome verdict, VerifyKernels(gate, RunCudaSelfTestRecord));
  LUCID_ASSIGN_OR_RETURN(std::unique_ptr<cuda::CudaBackend> b,
                         cuda::CudaBackend::Create(0, set->make, set->backend));
  std::string description = std::string(set->kernel) + " on " + cuda::DescribeDevice(b->info());
  return PlanBackend{std::unique_ptr<Backend>(std::move(b)), std::move(description),
                     std::move(verdict.notes), std::move(verdict.warnings)};
#else
  return FailedPrecondition(
      "--device cuda: this build has no CUDA backend (configure with "
      "-DLUCID_CUDA=ON)");
#endif
}

}  // namespace lucid::cli
