// Element types and exact scalar conversions.
//
// Conversions follow ml_dtypes / torch bit for bit:
// - float -> narrower float rounds to nearest, ties to even (RNE), on the exact float32 value.
// - NaN stays NaN (quiet); +-Inf maps to Inf where the type has it (bf16, f16, e5m2) and to NaN
//   where it does not (e4m3fn). Finite values beyond the type's range overflow like ml_dtypes:
//   to Inf for bf16/f16/e5m2, to NaN for e4m3fn (no saturation), unless the `saturate` variant is
//   used, which clamps to +-max (what quantizers do after scaling).
// - e2m1 (fp4) has no NaN/Inf: values round to the nearest of {0,.5,1,1.5,2,3,4,6} with sign, and
//   overflow saturates to +-6, as ml_dtypes' float4_e2m1fn does.
// - ue8m0 is an exponent-only unsigned type: code c means 2^(c-127); 0xFF is NaN.
// kF4E2M1 tensors are packed two per byte, the LOW nibble holding the even element (ModelOpt).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"

namespace lucid {

enum class DType : uint8_t {
  kF64,
  kF32,
  kF16,
  kBF16,
  kF8E4M3,  // float8_e4m3fn: bias 7, no Inf, 0x7F/0xFF are NaN, max 448
  kF8E5M2,  // float8_e5m2: bias 15, IEEE-like with Inf and NaN, max 57344
  kF4E2M1,  // float4_e2m1fn, packed two per byte
  kUE8M0,   // float8_e8m0fnu: scale exponent
  kI64,
  kI32,
  kI16,
  kI8,
  kU8,
  kBool,
};

// Bits per element: 4 for kF4E2M1, 8 for the fp8 types and so on.
int DTypeBits(DType t);
// Short lowercase name: "f32", "bf16", "f8_e4m3", "f4_e2m1", "ue8m0", ...
const char* DTypeName(DType t);
bool IsFloatingPoint(DType t);

// The safetensors header spelling ("F32", "BF16", "F8_E4M3", "F8_E5M2", "F8_E8M0", "U8", ...).
// Unknown names are InvalidArgument naming the string.
StatusOr<DType> DTypeFromSafetensorsName(std::string_view name);
const char* SafetensorsName(DType t);

// Scalar conversions (exact decode; RNE encode).
float Bf16ToF32(uint16_t bits);
uint16_t F32ToBf16(float v);
float F16ToF32(uint16_t bits);
uint16_t F32ToF16(float v);
float F8E4M3ToF32(uint8_t bits);
uint8_t F32ToF8E4M3(float v);
uint8_t F32ToF8E4M3Saturate(float v);
float F8E5M2ToF32(uint8_t bits);
uint8_t F32ToF8E5M2(float v);
uint8_t F32ToF8E5M2Saturate(float v);
// code is a 4-bit value (bit 3 = sign).
float F4E2M1ToF32(uint8_t code);
uint8_t F32ToF4E2M1(float v);
float Ue8m0ToF32(uint8_t bits);
uint8_t F32ToUe8m0(float v);  // as ml_dtypes float8_e8m0fnu: see dtype.cpp for the rounding rule

// Converts n elements of `src` (dtype `t`, contiguous; for kF4E2M1 n must be even and elements are
// packed) to float32 in `dst`. Integer types convert by value.
void ConvertToF32(DType t, const void* src, float* dst, size_t n);
// Converts n float32 values to dtype `t` with RNE (non-saturating rules above).
void ConvertFromF32(DType t, const float* src, void* dst, size_t n);

}  // namespace lucid
