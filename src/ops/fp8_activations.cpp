#include "ops/fp8_activations.h"

#include <algorithm>
#include <cmath>

#include "core/dtype.h"

namespace lucid {

float Fp8ActGroupScale(const float* x, int64_t n) {
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) amax = std::fmax(amax, std::fabs(x[i]));  // fmax drops NaN
  return std::max(amax, kFp8ActMinAmax) / 448.0f;
}

void QuantizeFp8Act(const float* x, int64_t T, int64_t K, uint8_t* codes, float* scales) {
  const int64_t groups = (K + kFp8ActGroup - 1) / kFp8ActGroup;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t c0 = g * kFp8ActGroup, n = std::min(kFp8ActGroup, K - c0);
      const float* xr = x + t * K + c0;
      const float s = Fp8ActGroupScale(xr, n);
      scales[t * groups + g] = s;
      for (int64_t i = 0; i < n; ++i) codes[t * K + c0 + i] = F32ToF8E4M3Saturate(xr[i] / s);
    }
}

Tensor Fp8ActDequantized(const Tensor& x) {
  const int64_t K = x.size(-1), T = K == 0 ? 0 : x.numel() / K;
  const int64_t groups = (K + kFp8ActGroup - 1) / kFp8ActGroup;
  std::vector<uint8_t> codes(static_cast<size_t>(T * K));
  std::vector<float> scales(static_cast<size_t>(T * groups));
  QuantizeFp8Act(x.data<float>(), T, K, codes.data(), scales.data());
  Tensor out = Tensor::Empty(DType::kF32, x.shape());
  float* o = out.data<float>();
  for (int64_t t = 0; t < T; ++t)
    for (int64_t c = 0; c < K; ++c)
      o[t * K + c] = F8E4M3ToF32(codes[t * K + c]) * scales[t * groups + c / kFp8ActGroup];
  return out;
}

}  // namespace lucid
