// The host side of cuda_step_kernels.h: RoPE's cos/sin table.
#include <cmath>

#include "backends/cuda/cuda_step_kernels.h"

namespace lucid::cuda {

std::vector<float> RopeCosSin(const RopeTable& table, std::span<const int64_t> positions) {
  const int64_t T = static_cast<int64_t>(positions.size()), half = table.dim() / 2;
  std::vector<float> cs(static_cast<size_t>(T * 2 * half));
  for (int64_t t = 0; t < T; ++t) {
    const float pos = static_cast<float>(positions[t]);
    for (int64_t i = 0; i < half; ++i) {
      const float f = pos * table.inv_freq[i];
      cs[(t * 2) * half + i] = std::cos(f) * table.attention_factor;
      cs[(t * 2 + 1) * half + i] = std::sin(f) * table.attention_factor;
    }
  }
  return cs;
}

}  // namespace lucid::cuda
