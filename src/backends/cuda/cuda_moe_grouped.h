// MoeExperts grouped by expert on the device (cuda_moe_grouped.cuh) as CudaOps calls it.
// Thread-safety: launches on `stream`; the scratch belongs to the caller until the stream is idle.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "backends/cuda/cuda_weight_view.cuh"

namespace lucid::cuda {

// Token counts the grouped path takes under cuda-bf16act: past the device-routed decode path
// (cuda_moe_gemv.h) up to this; beyond it the routing goes to the host, whose one wait per layer
// is small beside a prefill chunk's arithmetic and whose scratch is one expert's rows at a time
// (this path's is every pair's: P x (2 I + D) floats). A guess until a GPU measures it.
inline constexpr int64_t kMoeGroupedMaxTokens = 256;

// Whether the grouped kernels take experts `views` (3 per expert: gate, up, down): at most
// kMoeGroupMaxExperts experts, every view one the weight-only GEMM takes, all with f32 block
// scales or none.
bool MoeGroupedFits(const std::vector<DeviceWeight>& views);

struct MoeGroupedArgs {
  const DeviceWeight* experts = nullptr;  // device table: 3 views per expert
  DeviceWeight gate, down;                // the first expert's views (format and shapes)
  int64_t E = 0, T = 0, k = 0;
  const int32_t* idx = nullptr;    // [T, k] expert ids
  const float* weights = nullptr;  // [T, k]
  const float* x = nullptr;        // [T, D]
  float* out = nullptr;            // [T, D], added into
};

// Bytes of scratch LaunchMoeGrouped needs.
size_t MoeGroupedScratchBytes(int64_t T, int64_t k, int64_t E, int64_t D, int64_t I);
void LaunchMoeGrouped(const MoeGroupedArgs& a, void* scratch, cudaStream_t stream);

}  // namespace lucid::cuda
