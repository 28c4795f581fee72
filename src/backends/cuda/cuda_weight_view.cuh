// A weight view (ops/weight.h) as the device kernels read it, and its values with the host's
// arithmetic (DequantizeRowSpan): e4m3 and e2m1 codes decoded exactly (every e4m3 value, NaN
// included, is exact in f16, which the hardware conversion goes through), ue8m0 scales as
// 2^(e-127) (255 NaN), FP8 block values code x block scale, NVFP4 values e2m1 x its e4m3 group
// scale x the f32 global scale. DeviceWeightOf makes the view of a Weight. Shared by
// cuda_ops.cu, cuda_gemv.cu, cuda_moe_gemv.h and cuda_fp8_gemm.cu. The decoders are host
// functions too, so that cuda_weight_view_test.cpp checks them against the
// host's (core/dtype.h) on machines without a GPU.
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <cstring>

#include "ops/weight.h"

// `#pragma unroll` for nvcc; nothing for the host compiler, which does not know it.
#ifdef __CUDACC__
#define LUCID_UNROLL _Pragma("unroll")
#else
#define LUCID_UNROLL
#endif

namespace lucid::cuda {

struct DeviceWeight {
  int format = 0;  // WeightFormat
  const void* data = nullptr;
  int64_t data_ld = 0;  // bytes per stored row (NVFP4), elements otherwise
  const void* scale = nullptr;
  bool scale_ue8m0 = false;
  int64_t scale_ld = 0;
  const float* scale2 = nullptr;
  int64_t rows = 0, cols = 0, row_begin = 0, block_rows = 1, block_cols = 1;
};

__host__ __device__ inline float FloatFromBits(uint32_t b) {
  float f;
  memcpy(&f, &b, sizeof(f));
  return f;
}

__host__ __device__ inline uint32_t BitsOfFloat(float v) {
  uint32_t b;
  memcpy(&b, &v, sizeof(b));
  return b;
}

// a * b rounded to nearest (never contracted into an FMA).
__host__ __device__ inline float MulRn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

__host__ __device__ inline float E4m3Value(uint8_t code) {
  const __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(code), __NV_E4M3);
  return __half2float(__half(h));
}

__host__ __device__ inline float Ue8m0Value(uint8_t e) {
  if (e == 255) return FloatFromBits(0x7fc00000u);
  return FloatFromBits(e == 0 ? 0x00400000u : static_cast<uint32_t>(e) << 23);
}

// The e2m1 value of a 4-bit code (bit 3 the sign): 0, 0.5, 1, 1.5, 2, 3, 4, 6.
__host__ __device__ inline float E2m1Value(uint8_t nib) {
  const int e = (nib >> 1) & 3, m = nib & 1;
  const float mag = e == 0 ? 0.5f * m : (1.0f + 0.5f * m) * static_cast<float>(1 << (e - 1));
  return (nib & 8) ? -mag : mag;
}

// core/dtype.h's F32ToBf16: round to nearest even, a NaN kept quiet with its sign.
__host__ __device__ inline uint16_t Bf16BitsRne(float v) {
  const uint32_t b = BitsOfFloat(v);
  if ((b & 0x7fffffffu) > 0x7f800000u)
    return static_cast<uint16_t>(((b >> 16) & 0x8000u) | 0x7fc0u);
  return static_cast<uint16_t>((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
}

// v rounded to bf16 (Bf16BitsRne), as f32.
__host__ __device__ inline float RoundToBf16(float v) {
  return FloatFromBits(static_cast<uint32_t>(Bf16BitsRne(v)) << 16);
}

// An NVFP4 value times its e4m3 group scale, without the global scale (exact in bf16: at most 6
// significant bits, within bf16's range). `row` counts stored rows.
__host__ __device__ inline float Nvfp4GroupScaled(const DeviceWeight& w, int64_t row, int64_t c) {
  const uint8_t q = static_cast<const uint8_t*>(w.data)[row * w.data_ld + (c >> 1)];
  const float bs =
      E4m3Value(static_cast<const uint8_t*>(w.scale)[row * w.scale_ld + c / w.block_cols]);
  return MulRn(E2m1Value((q >> ((c & 1) * 4)) & 0xF), bs);
}

// W[r, c] of the view (r counts the view's rows), in f32.
__host__ __device__ inline float WeightAt(const DeviceWeight& w, int64_t r, int64_t c) {
  const int64_t row = w.row_begin + r;
  switch (w.format) {
    case static_cast<int>(WeightFormat::kF32):
      return static_cast<const float*>(w.data)[row * w.cols + c];
    case static_cast<int>(WeightFormat::kBF16):
      return FloatFromBits(
          static_cast<uint32_t>(static_cast<const uint16_t*>(w.data)[row * w.cols + c]) << 16);
    case static_cast<int>(WeightFormat::kFp8Block): {
      const int64_t idx = (row / w.block_rows) * w.scale_ld + c / w.block_cols;
      const float bs = w.scale_ue8m0 ? Ue8m0Value(static_cast<const uint8_t*>(w.scale)[idx])
                                     : static_cast<const float*>(w.scale)[idx];
      return MulRn(E4m3Value(static_cast<const uint8_t*>(w.data)[row * w.cols + c]), bs);
    }
    case static_cast<int>(WeightFormat::kNvfp4):
      return MulRn(Nvfp4GroupScaled(w, row, c), *w.scale2);
  }
  return FloatFromBits(0x7fc00000u);
}

// The view of `w` that the kernels read (host pointers stay host pointers; CudaOps passes device
// weights). GGUF block weights have no CUDA kernel: the caller refuses them first.
inline DeviceWeight DeviceWeightOf(const Weight& w) {
  DeviceWeight d;
  d.format = static_cast<int>(w.format);
  d.data = w.data.raw();
  d.data_ld = w.data.rank() == 2 ? w.data.size(1) : w.cols;
  d.scale = w.scale.raw();
  d.scale_ue8m0 = w.scale.dtype() == DType::kUE8M0;
  d.scale_ld = w.scale.rank() == 2 ? w.scale.size(1) : 0;
  d.scale2 = static_cast<const float*>(w.scale2.raw());
  d.rows = w.rows;
  d.cols = w.cols;
  d.row_begin = w.row_begin;
  d.block_rows = w.block_rows > 0 ? w.block_rows : 1;
  d.block_cols = w.block_cols > 0 ? w.block_cols : 1;
  return d;
}

inline bool operator==(const DeviceWeight& a, const DeviceWeight& b) {
  return a.format == b.format && a.data == b.data && a.data_ld == b.data_ld && a.scale == b.scale &&
         a.scale_ue8m0 == b.scale_ue8m0 && a.scale_ld == b.scale_ld && a.scale2 == b.scale2 &&
         a.rows == b.rows && a.cols == b.cols && a.row_begin == b.row_begin &&
         a.block_rows == b.block_rows && a.block_cols == b.block_cols;
}

}  // namespace lucid::cuda
