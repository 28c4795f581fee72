// Row dequantization for the reference kernels: the single definition of each weight format's
// math (see ops/weight.h for the layouts). Everything here is exact f32 arithmetic in a fixed
// order, so a faster kernel can be checked against it bit for bit where it keeps that order.
#include <algorithm>
#include <array>

#include "backends/cpu/cpu_ops.h"
#include "core/dtype.h"

namespace lucid {
namespace {

// e2m1 code -> value (bit 3 is the sign).
constexpr float kE2m1[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                             -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

const std::array<float, 256>& E4m3Table() {
  static const std::array<float, 256> t = [] {
    std::array<float, 256> a{};
    for (int i = 0; i < 256; ++i) a[i] = F8E4M3ToF32(static_cast<uint8_t>(i));
    return a;
  }();
  return t;
}

float ScalarF32(const Tensor& t) {
  LUCID_CHECK(t.valid() && t.numel() == 1 && t.dtype() == DType::kF32, "scalar f32 scale expected");
  return *t.data<const float>();
}

float BlockScale(const Tensor& scale, int64_t br, int64_t bc) {
  const int64_t idx = br * scale.size(1) + bc;
  if (scale.dtype() == DType::kUE8M0) return Ue8m0ToF32(scale.data<const uint8_t>()[idx]);
  return scale.data<const float>()[idx];
}

void DequantNvfp4(const Weight& w, int64_t row, int64_t c0, int64_t n, float* out) {
  const auto& e4m3 = E4m3Table();
  const uint8_t* q = w.data.data<const uint8_t>() + row * w.data.size(1);
  const uint8_t* s = w.scale.data<const uint8_t>() + row * w.scale.size(1);
  const float s2 = ScalarF32(w.scale2);
  const int64_t g = w.block_cols;
  for (int64_t i = c0; i < c0 + n;) {
    const float bs = e4m3[s[i / g]];
    const int64_t end = std::min(c0 + n, (i / g + 1) * g);
    for (; i < end; ++i) {
      const uint8_t nib = (q[i >> 1] >> ((i & 1) * 4)) & 0xF;
      out[i - c0] = (kE2m1[nib] * bs) * s2;
    }
  }
}

void DequantFp8Block(const Weight& w, int64_t row, int64_t c0, int64_t n, float* out) {
  const auto& e4m3 = E4m3Table();
  const uint8_t* q = w.data.data<const uint8_t>() + row * w.cols;
  const int64_t br = row / w.block_rows, bc = w.block_cols;
  for (int64_t i = c0; i < c0 + n;) {
    const float bs = BlockScale(w.scale, br, i / bc);
    const int64_t end = std::min(c0 + n, (i / bc + 1) * bc);
    for (; i < end; ++i) out[i - c0] = e4m3[q[i]] * bs;
  }
}

}  // namespace

void DequantizeRowSpan(const Weight& w, int64_t r, int64_t c0, int64_t n, float* out) {
  LUCID_CHECK(r >= 0 && r < w.rows && c0 >= 0 && n >= 0 && c0 + n <= w.cols,
              "DequantizeRowSpan out of range for " + w.name);
  const int64_t row = w.row_begin + r;
  switch (w.format) {
    case WeightFormat::kF32: {
      const float* src = w.data.data<const float>() + row * w.cols + c0;
      for (int64_t i = 0; i < n; ++i) out[i] = src[i];
      return;
    }
    case WeightFormat::kBF16: {
      const uint16_t* src = w.data.data<const uint16_t>() + row * w.cols + c0;
      for (int64_t i = 0; i < n; ++i) out[i] = Bf16ToF32(src[i]);
      return;
    }
    case WeightFormat::kNvfp4:
      DequantNvfp4(w, row, c0, n, out);
      return;
    case WeightFormat::kFp8Block:
      DequantFp8Block(w, row, c0, n, out);
      return;
    case WeightFormat::kGgml:
      DequantizeGgmlRowSpan(w.ggml_type, w.data.data<const uint8_t>() + row * w.data.size(1), c0, n,
                            out);
      return;
  }
  LUCID_CHECK(false, std::string("DequantizeRow: unknown format ") + WeightFormatName(w.format));
}

void DequantizeRow(const Weight& w, int64_t r, float* out) {
  DequantizeRowSpan(w, r, 0, w.cols, out);
}

void VectorToF32(const Tensor& v, float* out) {
  ConvertToF32(v.dtype(), v.raw(), out, static_cast<size_t>(v.numel()));
}

}  // namespace lucid
