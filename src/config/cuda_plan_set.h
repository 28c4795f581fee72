// Which of lucid's CUDA op sets (backends/cuda/cuda_ops.h) runs a plan: a model runs one set, so
// the plan's kernels must name one, with one combination: cuda-fp8act for the FP8 block matmuls
// (and experts) beside cuda-bf16act everywhere else is the set cuda-fp8act, whose other kernels
// are cuda-bf16act's. cuda-fp8act quantizes the activations of every FP8 block matmul of the
// model, so a plan that names it for FP8 linear layers but not for FP8 experts (or the reverse)
// is refused, naming the flag that would make it whole.
// Thread-safety: pure function.
#pragma once

#include <string>
#include <vector>

#include "config/resolved_config.h"
#include "core/status.h"

namespace lucid::config {

// The set's kernel name ("cuda-bf16act", "cuda-reference", "cuda-fp8act"); FailedPrecondition
// naming the kernels when they are not one set.
StatusOr<std::string> CudaOpsSetOfPlan(const std::vector<KernelChoice>& kernels);

}  // namespace lucid::config
