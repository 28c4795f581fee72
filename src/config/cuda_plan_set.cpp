#include "config/cuda_plan_set.h"

#include <algorithm>

namespace lucid::config {
namespace {

bool HasFp8Weights(const KernelChoice& k) {
  return (k.family == KernelFamily::kMatmul || k.family == KernelFamily::kMoe) &&
         std::any_of(k.situations.begin(), k.situations.end(),
                     [](const Situation& s) { return s.weight_format == WeightFormat::kFp8Block; });
}

}  // namespace

StatusOr<std::string> CudaOpsSetOfPlan(const std::vector<KernelChoice>& kernels) {
  const bool fp8act = std::any_of(kernels.begin(), kernels.end(),
                                  [](const KernelChoice& k) { return k.kernel == kCudaFp8Act; });
  std::string name;
  for (const KernelChoice& k : kernels) {
    std::string set = k.kernel;
    if (fp8act && set == kCudaBf16Act) {
      if (HasFp8Weights(k))
        return FailedPrecondition(
            std::string("--device cuda: cuda-fp8act quantizes the activations of every FP8 block "
                        "matmul of the model, but the plan's ") +
            FamilyName(k.family) + " kernel for " + k.what + " is cuda-bf16act (pass --" +
            (k.flag.empty() ? std::string("fp8-gemm-backend") : k.flag) + " cuda-fp8act too)");
      set = kCudaFp8Act;  // cuda-fp8act runs cuda-bf16act's kernels here
    }
    if (name.empty()) name = set;
    if (set != name)
      return FailedPrecondition("--device cuda: the plan's kernels are of two CUDA sets (" + name +
                                ", " + k.kernel + "); one set runs a model (pass --dtype)");
  }
  return name;
}

}  // namespace lucid::config
