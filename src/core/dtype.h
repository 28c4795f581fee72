// Element types and exact scalar conversions.
//
// Conversions follow ml_dtypes bit for bit (numpy for f16), checked against golden fixtures
// generated with ml_dtypes 0.6.0 (tools/reference/gen_dtype_goldens.py):
// - float -> narrower float rounds to nearest, ties to even (RNE), on the exact float32 value,
//   including into the target's subnormals; underflow to zero keeps the sign.
// - NaN stays NaN, as the type's quiet NaN with the input's sign: bf16 0x7FC0, f16 0x7E00, e4m3fn
//   0x7F, e5m2 0x7E (| sign). (numpy keeps part of the payload for f16; we do not, like torch.)
//   Decoding keeps bf16/f16 NaN payloads (bit shift); fp8 NaNs decode to the quiet NaN with sign.
// - +-Inf maps to Inf where the type has it (bf16, f16, e5m2) and to NaN where it does not
//   (e4m3fn). Finite values beyond the type's range overflow like ml_dtypes: to Inf for
//   bf16/f16/e5m2, to NaN for e4m3fn (no saturation), unless the `Saturate` variant is used, which
//   clamps finite overflow AND +-Inf to +-max, i.e. clip to +-max then cast (what quantizers do
//   after scaling); NaN stays NaN.
// - e2m1 (fp4) has no NaN/Inf: values round (RNE) to the nearest of {0,.5,1,1.5,2,3,4,6} with sign;
//   finite overflow and +-Inf saturate to +-6, as ml_dtypes' float4_e2m1fn does. NaN input gives
//   ml_dtypes' quirk: a zero with the sign FLIPPED (+NaN -> 0x8 = -0, -NaN -> 0x0 = +0).
// - ue8m0 (float8_e8m0fnu) is an exponent-only unsigned type: code c means 2^(c-127) (code 0 is
//   2^-127, a float32 subnormal); 0xFF is NaN. Encoding (ml_dtypes): NaN, +-Inf, +-0 and every
//   negative value give 0xFF; in a binade [2^k, 2^(k+1)) values >= 1.5 * 2^k round UP to 2^(k+1)
//   (ties go up, not to even), and rounding past 2^127 (x >= 1.5 * 2^127) gives 0xFF. At the
//   bottom, x <= 2^-127 gives code 0, but 2^-127 < x < 1.5 * 2^-126 gives code 1 (2^-126), so e.g.
//   1.1 * 2^-127 encodes as 2^-126 (ml_dtypes rounds there as if code 0 were zero).
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
uint8_t F32ToUe8m0(float v);  // as ml_dtypes float8_e8m0fnu: rounding rule above

// Converts n elements of `src` (dtype `t`, contiguous) to float32 in `dst`. kF4E2M1 elements are
// packed (element i in byte i/2, low nibble first; an odd n reads only the low nibble of the last
// byte). Integer types convert by value (int64 rounds to nearest float); bool is 0/1 (any nonzero
// byte is 1).
void ConvertToF32(DType t, const void* src, float* dst, size_t n);
// Converts n float32 values to dtype `t` with RNE (non-saturating rules above). kF4E2M1 writes
// (n+1)/2 bytes; for an odd n the high nibble of the last byte is 0. Integer types truncate toward
// zero and saturate at the type's range, NaN -> 0; bool is 1 for any nonzero value (NaN included).
void ConvertFromF32(DType t, const float* src, void* dst, size_t n);

}  // namespace lucid
