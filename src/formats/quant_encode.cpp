#include "formats/quant_encode.h"

#include <algorithm>
#include <cmath>

#include "core/dtype.h"

namespace lucid {

float Nvfp4GlobalScale(const float* w, size_t n) {
  float amax = 0.0f;
  for (size_t i = 0; i < n; ++i) amax = std::max(amax, std::abs(w[i]));
  return amax / 2688.0f;  // 6 * 448
}

uint8_t Nvfp4Code(float x) {
  // torch.searchsorted(bounds, |x|) (count of bounds < |x|), +1 on the odd bounds (ties to even).
  static constexpr float kBounds[7] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
  const float a = std::abs(x);
  uint8_t ord = 0;
  if (std::isnan(a)) {
    ord = 7;
  } else {
    while (ord < 7 && kBounds[ord] < a) ++ord;
  }
  if (a == 0.75f || a == 1.75f || a == 3.5f) ++ord;
  return static_cast<uint8_t>(((x < 0.0f) ? 8 : 0) + ord);
}

void QuantizeNvfp4(const float* w, int64_t rows, int64_t cols, float scale2, uint8_t* packed,
                   uint8_t* scales) {
  const int64_t groups = (cols + 15) / 16;
  const float denom = 6.0f * scale2;
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = w + r * cols;
    uint8_t* pr = packed + r * groups * 8;
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t c0 = g * 16, c1 = std::min(cols, c0 + 16);
      float amax = 0.0f;
      for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::abs(row[c]));
      float s = amax / denom;
      if (s == 0.0f) s = 1.0f;
      s = std::clamp(s, 0.001953125f, 448.0f);  // [2^-9, 448]
      const uint8_t s8 = F32ToF8E4M3(s);
      scales[r * groups + g] = s8;
      const float div = F8E4M3ToF32(s8) * scale2;
      for (int64_t c = c0; c < c0 + 16; c += 2) {
        const uint8_t lo = c < cols ? Nvfp4Code(row[c] / div) : 0;
        const uint8_t hi = c + 1 < cols ? Nvfp4Code(row[c + 1] / div) : 0;
        pr[c / 2] = static_cast<uint8_t>((hi << 4) | lo);
      }
    }
  }
}

void QuantizeFp8Block(const float* w, int64_t rows, int64_t cols, int64_t br, int64_t bc,
                      bool ue8m0, uint8_t* q, float* scales) {
  const int64_t nr = (rows + br - 1) / br, nc = (cols + bc - 1) / bc;
  for (int64_t i = 0; i < nr; ++i) {
    for (int64_t j = 0; j < nc; ++j) {
      const int64_t r1 = std::min(rows, (i + 1) * br), c1 = std::min(cols, (j + 1) * bc);
      float amax = 0.0f;
      for (int64_t r = i * br; r < r1; ++r)
        for (int64_t c = j * bc; c < c1; ++c) amax = std::max(amax, std::abs(w[r * cols + c]));
      float s = std::max(amax, 1e-4f) / 448.0f;
      if (ue8m0) {
        int e = 0;
        const float m = std::frexp(s, &e);
        if (m != 0.5f) s = std::ldexp(1.0f, e);
      }
      scales[i * nc + j] = s;
      for (int64_t r = i * br; r < r1; ++r)
        for (int64_t c = j * bc; c < c1; ++c)
          q[r * cols + c] = F32ToF8E4M3(std::clamp(w[r * cols + c] / s, -448.0f, 448.0f));
    }
  }
}

}  // namespace lucid
