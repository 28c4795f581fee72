// KV row encoding/decoding for PagedRows (layouts in ops.h): one definition shared by the KV pool
// (which encodes) and every kernel that reads the cache (which decodes).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/dtype.h"
#include "ops/ops.h"

namespace lucid {
namespace {

int64_t ScaleCount(const PagedRows& f) {
  return f.fp8_block > 0 ? (f.fp8_values + f.fp8_block - 1) / f.fp8_block : 0;
}

}  // namespace

int64_t KvRowBytes(const PagedRows& f) {
  switch (f.kind) {
    case KvRowKind::kF32:
      return 4 * f.row_floats;
    case KvRowKind::kBF16:
      return 2 * f.row_floats;
    case KvRowKind::kFp8:
      return f.fp8_values + 4 * ScaleCount(f) + 2 * (f.row_floats - f.fp8_values);
  }
  return 0;
}

// e4m3(v / scale), saturating; a NaN quotient (v NaN, or infinite over an infinite scale) is the
// NaN code with v's sign bit, whatever sign the hardware gives the quotient's NaN.
static uint8_t Fp8KvCode(float v, float scale) {
  const float q = v / scale;
  if (std::isnan(q)) return std::signbit(v) ? 0xFF : 0x7F;
  return F32ToF8E4M3Saturate(q);
}

void EncodeKvRow(const PagedRows& f, const float* in, uint8_t* out) {
  switch (f.kind) {
    case KvRowKind::kF32:
      std::memcpy(out, in, 4 * f.row_floats);
      return;
    case KvRowKind::kBF16:
      for (int64_t i = 0; i < f.row_floats; ++i) {
        const uint16_t b = F32ToBf16(in[i]);
        std::memcpy(out + 2 * i, &b, 2);
      }
      return;
    case KvRowKind::kFp8: {
      uint8_t* scales = out + f.fp8_values;
      for (int64_t b = 0; b < ScaleCount(f); ++b) {
        const int64_t b0 = b * f.fp8_block, b1 = std::min(f.fp8_values, b0 + f.fp8_block);
        float amax = 0.0f;
        for (int64_t i = b0; i < b1; ++i) amax = std::max(amax, std::abs(in[i]));
        const float scale = amax / 448.0f;
        for (int64_t i = b0; i < b1; ++i) out[i] = scale > 0.0f ? Fp8KvCode(in[i], scale) : 0;
        std::memcpy(scales + 4 * b, &scale, 4);
      }
      uint8_t* tail = scales + 4 * ScaleCount(f);
      for (int64_t i = f.fp8_values; i < f.row_floats; ++i) {
        const uint16_t v = F32ToBf16(in[i]);
        std::memcpy(tail + 2 * (i - f.fp8_values), &v, 2);
      }
      return;
    }
  }
}

void PagedRows::ReadRow(int64_t u, float* out) const {
  if (kind == KvRowKind::kF32) {
    std::memcpy(out, Row(u), 4 * row_floats);
    return;
  }
  const uint8_t* r = RowBytes(u);
  if (kind == KvRowKind::kBF16) {
    for (int64_t i = 0; i < row_floats; ++i) {
      uint16_t b;
      std::memcpy(&b, r + 2 * i, 2);
      out[i] = Bf16ToF32(b);
    }
    return;
  }
  const uint8_t* scales = r + fp8_values;
  const int64_t ns = (fp8_values + fp8_block - 1) / fp8_block;
  for (int64_t b = 0; b < ns; ++b) {
    float scale;
    std::memcpy(&scale, scales + 4 * b, 4);
    const int64_t b0 = b * fp8_block, b1 = std::min(fp8_values, b0 + fp8_block);
    for (int64_t i = b0; i < b1; ++i) out[i] = F8E4M3ToF32(r[i]) * scale;
  }
  const uint8_t* tail = scales + 4 * ns;
  for (int64_t i = fp8_values; i < row_floats; ++i) {
    uint16_t b;
    std::memcpy(&b, tail + 2 * (i - fp8_values), 2);
    out[i] = Bf16ToF32(b);
  }
}

}  // namespace lucid
