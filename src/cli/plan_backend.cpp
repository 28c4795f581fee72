#include "cli/plan_backend.h"

#include <algorithm>
#include <vector>

#include "config/cpu_kernels.h"
#include "config/kernel_selection.h"

#ifdef LUCID_HAVE_CUDA
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_ops.h"
#endif

namespace lucid::cli {

StatusOr<PlanBackend> MakePlanBackend(const config::ResolvedConfig& rc) {
  if (rc.data().cpu_kernels.has_value())
    return PlanBackend{config::MakeCpuBackend(rc.cpu_kernel_set()), ""};
  if (rc.String("device") != "cuda")
    return FailedPrecondition("a model runs on --device cpu or cuda, not " + rc.String("device"));
#ifdef LUCID_HAVE_CUDA
  std::vector<std::string> gaps;  // what the plan asks of cuda-reference that it does not do
  for (const config::KernelChoice& k : rc.data().kernels)
    for (const std::string& g : k.gaps)
      if (std::find(gaps.begin(), gaps.end(), g) == gaps.end()) gaps.push_back(g);
  if (!gaps.empty()) {
    std::string text;
    for (const std::string& g : gaps) text += (text.empty() ? "" : "; ") + g;
    return FailedPrecondition(
        "--device cuda runs cuda-reference (exact f32, no CUDA graphs), but "
        "the plan needs what it lacks: " +
        text + " (pass --dtype float32 --disable-cuda-graph)");
  }
  LUCID_ASSIGN_OR_RETURN(std::unique_ptr<cuda::CudaBackend> b,
                         cuda::CudaBackend::Create(0, cuda::MakeCudaReferenceOps, "reference"));
  std::string description = b->name() + " on " + cuda::DescribeDevice(b->info());
  return PlanBackend{std::unique_ptr<Backend>(std::move(b)), std::move(description)};
#else
  return FailedPrecondition(
      "--device cuda: this build has no CUDA backend (configure with "
      "-DLUCID_CUDA=ON)");
#endif
}

}  // namespace lucid::cli
