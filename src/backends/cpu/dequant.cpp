// Row dequantization for the reference kernels: one output row at a time, in float32.
#include "backends/cpu/cpu_ops.h"
#include "core/dtype.h"

namespace lucid {

void DequantizeRow(const Weight& w, int64_t r, float* out) {
  const int64_t row = w.row_begin + r;
  switch (w.format) {
    case WeightFormat::kF32: {
      const float* src = w.data.data<const float>() + row * w.cols;
      for (int64_t i = 0; i < w.cols; ++i) out[i] = src[i];
      return;
    }
    case WeightFormat::kBF16: {
      const uint16_t* src = w.data.data<const uint16_t>() + row * w.cols;
      for (int64_t i = 0; i < w.cols; ++i) out[i] = Bf16ToF32(src[i]);
      return;
    }
    default:
      LUCID_CHECK(false, std::string("DequantizeRow: format not supported yet: ") +
                             WeightFormatName(w.format));
  }
}

void VectorToF32(const Tensor& v, float* out) {
  ConvertToF32(v.dtype(), v.raw(), out, static_cast<size_t>(v.numel()));
}

}  // namespace lucid
