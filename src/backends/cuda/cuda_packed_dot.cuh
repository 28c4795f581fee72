// One warp's dot products of a weight row with a few activation rows, the lanes splitting the
// columns: the inner loop of the decode GEMV (cuda_gemv.cu) and the device-routed MoE
// (cuda_moe_gemv.h). Where every row of the view and of the activations allows it
// (DotVectorizable), a lane reads 16 columns at a time: the weight's chunk in one to four
// 16-byte loads (8 bytes for NVFP4) through the read-only cache, decoded in registers
// (DecodeChunk16: the same values as WeightAt, one block or group scale per chunk), and the
// activations as float4s; lane l takes chunks l, l + 32, ... and the columns past the last whole
// chunk one at a time. Otherwise every column is read alone (lane l takes l, l + 32, ...). Either
// way each product is a fused multiply-add into the lane's f32 sum of its token, the activation
// rounded to bf16 first when `round_bf16`, and the lanes' sums are added by the caller.
// `group_scaled` (NVFP4): values are e2m1 x group scale without the global scale, which the caller
// applies to the sum.
// Host functions too: cuda_packed_dot_test.cpp runs them on the CPU against WeightAt and through
// the ops conformance suite.
#pragma once

#include <vector_types.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "backends/cuda/cuda_weight_view.cuh"

namespace lucid::cuda {

inline constexpr int64_t kDotChunk = 16;  // columns a lane reads at once on the vector path

// Bytes from one stored row of the view's data to the next (WeightAt's row stride).
__host__ __device__ inline int64_t RowStrideBytes(const DeviceWeight& w) {
  switch (w.format) {
    case static_cast<int>(WeightFormat::kF32):
      return w.cols * 4;
    case static_cast<int>(WeightFormat::kBF16):
      return w.cols * 2;
    case static_cast<int>(WeightFormat::kFp8Block):
      return w.cols;
    default:
      return w.data_ld;  // NVFP4: bytes per stored row
  }
}

// Whether PackedDotLane's vector path may read `w` and activation rows `x_ld` floats apart from
// `x`: every chunk of 16 columns of every row starts on a 16-byte boundary (8 for NVFP4's 8
// bytes) and lies in one scale block or group. Host code (it reads the pointers' values).
inline bool DotVectorizable(const DeviceWeight& w, const float* x, int64_t x_ld) {
  const auto aligned = [](const void* p, int64_t a) {
    return reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(a) == 0;
  };
  if (!aligned(x, 16) || x_ld % 4 != 0) return false;
  const int64_t chunk_align = w.format == static_cast<int>(WeightFormat::kNvfp4) ? 8 : 16;
  if (!aligned(w.data, chunk_align) || RowStrideBytes(w) % chunk_align != 0) return false;
  switch (w.format) {
    case static_cast<int>(WeightFormat::kF32):
    case static_cast<int>(WeightFormat::kBF16):
      return true;
    case static_cast<int>(WeightFormat::kFp8Block):
      return w.block_cols % kDotChunk == 0;
    case static_cast<int>(WeightFormat::kNvfp4):
      return w.block_cols == kDotChunk;
  }
  return false;
}

// A T from `p`, which is aligned for T: a vector load through the read-only cache on the device.
template <typename T>
__host__ __device__ inline T LoadAligned(const void* p) {
#ifdef __CUDA_ARCH__
  return __ldg(static_cast<const T*>(p));
#else
  T v;
  memcpy(&v, p, sizeof(T));
  return v;
#endif
}

// Byte j (0-3) of a little-endian word, as memory holds it.
__host__ __device__ inline uint8_t ByteOf(uint32_t word, int j) {
  return static_cast<uint8_t>(word >> (8 * j));
}

// The values of columns [c0, c0 + 16) of view row r (c0 a multiple of 16, DotVectorizable):
// WeightAt's, or Nvfp4GroupScaled's when `group_scaled`.
__host__ __device__ inline void DecodeChunk16(const DeviceWeight& w, int64_t r, int64_t c0,
                                              bool group_scaled, float v[kDotChunk]) {
  const int64_t row = w.row_begin + r;
  const uint8_t* base = static_cast<const uint8_t*>(w.data) + row * RowStrideBytes(w);
  switch (w.format) {
    case static_cast<int>(WeightFormat::kF32):
      LUCID_UNROLL
      for (int i = 0; i < 4; ++i) {
        const float4 q = LoadAligned<float4>(base + c0 * 4 + 16 * i);
        v[4 * i] = q.x;
        v[4 * i + 1] = q.y;
        v[4 * i + 2] = q.z;
        v[4 * i + 3] = q.w;
      }
      return;
    case static_cast<int>(WeightFormat::kBF16):
      LUCID_UNROLL
      for (int i = 0; i < 2; ++i) {
        const uint4 q = LoadAligned<uint4>(base + c0 * 2 + 16 * i);
        const uint32_t words[4] = {q.x, q.y, q.z, q.w};
        LUCID_UNROLL
        for (int j = 0; j < 4; ++j) {
          v[8 * i + 2 * j] = FloatFromBits(words[j] << 16);
          v[8 * i + 2 * j + 1] = FloatFromBits(words[j] & 0xffff0000u);
        }
      }
      return;
    case static_cast<int>(WeightFormat::kFp8Block): {
      const uint4 q = LoadAligned<uint4>(base + c0);
      const uint32_t words[4] = {q.x, q.y, q.z, q.w};
      const int64_t idx = (row / w.block_rows) * w.scale_ld + c0 / w.block_cols;
      const float bs = w.scale_ue8m0 ? Ue8m0Value(static_cast<const uint8_t*>(w.scale)[idx])
                                     : static_cast<const float*>(w.scale)[idx];
      LUCID_UNROLL
      for (int j = 0; j < kDotChunk; ++j) v[j] = MulRn(E4m3Value(ByteOf(words[j / 4], j % 4)), bs);
      return;
    }
    default: {  // NVFP4: 8 bytes, the low nibble first; one e4m3 scale per 16 columns
      const uint2 q = LoadAligned<uint2>(base + c0 / 2);
      const uint32_t words[2] = {q.x, q.y};
      const float gs =
          E4m3Value(static_cast<const uint8_t*>(w.scale)[row * w.scale_ld + c0 / kDotChunk]);
      LUCID_UNROLL
      for (int j = 0; j < kDotChunk; ++j) {
        const uint8_t b = ByteOf(words[j / 8], (j / 2) % 4);
        const float gv = MulRn(E2m1Value((b >> ((j & 1) * 4)) & 0xF), gs);
        v[j] = group_scaled ? gv : MulRn(gv, *w.scale2);
      }
      return;
    }
  }
}

// Lane `lane`'s sums acc[t] += x[t] . W[r] (t < kT, activation rows x_ld floats apart) over its
// columns; `vec` is DotVectorizable(w, x, x_ld).
template <int kT>
__host__ __device__ inline void PackedDotLane(const DeviceWeight& w, int64_t r, const float* x,
                                              int64_t x_ld, int lane, bool vec, bool round_bf16,
                                              bool group_scaled, float* acc) {
  const int64_t K = w.cols;
  const int64_t vec_end = vec ? K / kDotChunk * kDotChunk : 0;
  for (int64_t c0 = int64_t{lane} * kDotChunk; c0 < vec_end; c0 += 32 * kDotChunk) {
    float v[kDotChunk];
    DecodeChunk16(w, r, c0, group_scaled, v);
    LUCID_UNROLL
    for (int t = 0; t < kT; ++t) {
      LUCID_UNROLL
      for (int i = 0; i < kDotChunk / 4; ++i) {
        const float4 q = LoadAligned<float4>(x + t * x_ld + c0 + 4 * i);
        const float xs[4] = {q.x, q.y, q.z, q.w};
        LUCID_UNROLL
        for (int j = 0; j < 4; ++j)
          acc[t] = fmaf(round_bf16 ? RoundToBf16(xs[j]) : xs[j], v[4 * i + j], acc[t]);
      }
    }
  }
  for (int64_t c = vec_end + lane; c < K; c += 32) {
    const float wv = group_scaled ? Nvfp4GroupScaled(w, w.row_begin + r, c) : WeightAt(w, r, c);
    LUCID_UNROLL
    for (int t = 0; t < kT; ++t) {
      const float xv = x[t * x_ld + c];
      acc[t] = fmaf(round_bf16 ? RoundToBf16(xv) : xv, wv, acc[t]);
    }
  }
}

}  // namespace lucid::cuda
