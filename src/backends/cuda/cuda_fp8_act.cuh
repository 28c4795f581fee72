// The FP8 activation quantization of ops/fp8_activations.h as QuantizeFp8ActKernel computes it
// (cuda_fp8_gemm.cu: a warp per (token, group of 128 columns)), in host and device functions:
// each lane's amax over its entries, the group's scale from the warp's amax, an entry's code by
// the hardware conversion (__nv_cvt_float_to_fp8 with saturation to the finite range; cuda_fp8.h
// implements it on the host too) and the value the GEMM multiplies. cuda_fp8_act_test.cpp checks
// them against ops/fp8_activations.h's definition on the CPU.
#pragma once

#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "backends/cuda/cuda_weight_view.cuh"
#include "ops/fp8_activations.h"

namespace lucid::cuda {

inline constexpr int kFp8ActLanes = 32;

// a / b rounded to nearest (IEEE division, not the fast approximation).
__host__ __device__ inline float DivRn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

// The largest |x| among a group's entries lane, lane + 32, ... below n (fmaxf drops a NaN).
__host__ __device__ inline float Fp8ActLaneAmax(const float* xr, int64_t n, int lane) {
  float amax = 0.0f;
  for (int64_t i = lane; i < n; i += kFp8ActLanes) amax = fmaxf(amax, fabsf(xr[i]));
  return amax;
}

// The group's scale from its amax: max(amax, 1e-10) / 448.
__host__ __device__ inline float Fp8ActScaleOfAmax(float amax) {
  return DivRn(fmaxf(amax, kFp8ActMinAmax), 448.0f);
}

// The e4m3 code of v / s (round to nearest even, saturated to +-448, NaN stays NaN).
__host__ __device__ inline uint8_t Fp8ActCode(float v, float s) {
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(DivRn(v, s), __NV_SATFINITE, __NV_E4M3));
}

// What the GEMM multiplies for code q of a group with scale s.
__host__ __device__ inline float Fp8ActValue(uint8_t q, float s) { return MulRn(E4m3Value(q), s); }

}  // namespace lucid::cuda
