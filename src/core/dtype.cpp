// Numeric conversions between float32 and the narrow element types (see dtype.h for the rules).
//
// Every narrow float type is described by a small Format (mantissa bits, exponent bias, largest
// finite magnitude code). Decoding is exact arithmetic on the fields; encoding rounds the exact
// float32 value to the format's grid with round-to-nearest-even on the integer significand, which
// is what ml_dtypes does. The special values (NaN, Inf, zero, sign, overflow) are then handled per
// type, because that is where the types (and ml_dtypes' behaviour) differ.
//
// ue8m0 falls out of the same routine with 0 mantissa bits and bias 127, which reproduces
// ml_dtypes' float8_e8m0fnu exactly:
// - in a normal binade [2^k, 2^(k+1)) the significand is 1 (odd), so a tie at 1.5 * 2^k rounds
//   UP to 2^(k+1): effectively round-half-up (x >= 1.5 * 2^k goes to 2^(k+1)).
// - below 2^-126 the encoder treats code 0 like the zero of a subnormal range with quantum 2^-126:
//   x <= 2^-127 (tie goes to the even 0) gives code 0, which DECODES as 2^-127, while
//   2^-127 < x < 1.5 * 2^-126 gives code 1 (2^-126). So e.g. 1.1 * 2^-127 encodes as 2^-126.
// - results past code 254 (x >= 1.5 * 2^127) are NaN (0xFF); so are +-0, negatives, Inf and NaN.
#include "core/dtype.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

namespace lucid {
namespace {

struct Format {
  int mantissa_bits;
  int bias;
  uint32_t max_code;  // magnitude code (sign cleared) of the largest finite value
};

constexpr Format kF16Format{10, 15, 0x7BFF};
constexpr Format kE4M3Format{3, 7, 0x7E};
constexpr Format kE5M2Format{2, 15, 0x7B};
constexpr Format kE2M1Format{1, 1, 0x7};
constexpr Format kUE8M0Format{0, 127, 0xFE};

constexpr uint32_t kF32SignBit = 0x80000000u;
constexpr uint32_t kF32QuietNaN = 0x7FC00000u;

uint32_t F32Bits(float v) { return std::bit_cast<uint32_t>(v); }
float F32FromBits(uint32_t b) { return std::bit_cast<float>(b); }
bool IsNaNBits(uint32_t b) { return (b & 0x7FFFFFFFu) > 0x7F800000u; }
bool IsInfBits(uint32_t b) { return (b & 0x7FFFFFFFu) == 0x7F800000u; }

// Value of a finite, non-special magnitude code of `f` (exact in float32 for every format here).
float DecodeFiniteMagnitude(uint32_t code, const Format& f) {
  const uint32_t exp_field = code >> f.mantissa_bits;
  const uint32_t frac = code & ((1u << f.mantissa_bits) - 1);
  if (exp_field == 0) {  // subnormal: frac * 2^(1 - bias - mantissa_bits)
    return std::ldexp(static_cast<float>(frac), 1 - f.bias - f.mantissa_bits);
  }
  const uint32_t significand = (1u << f.mantissa_bits) | frac;
  return std::ldexp(static_cast<float>(significand),
                    static_cast<int>(exp_field) - f.bias - f.mantissa_bits);
}

// Rounds the magnitude of a finite, nonzero float32 (given as bits with the sign cleared) to the
// grid of `f` with round-to-nearest-even, and returns the magnitude code. The result may exceed
// f.max_code (overflow); the caller decides what overflow means.
uint64_t RoundMagnitude(uint32_t abs_bits, const Format& f) {
  // abs value = m * 2^e exactly, m an integer.
  const uint32_t exp_field = abs_bits >> 23;
  const uint32_t frac = abs_bits & 0x7FFFFFu;
  uint64_t m;
  int e;
  int floor_log2;  // floor(log2(value))
  if (exp_field == 0) {
    m = frac;
    e = -149;
    floor_log2 = (31 - std::countl_zero(frac)) - 149;
  } else {
    m = frac | 0x800000u;
    e = static_cast<int>(exp_field) - 150;
    floor_log2 = static_cast<int>(exp_field) - 127;
  }
  // The target's quantum in this binade is 2^(E - mantissa_bits), where E is the value's binade
  // clamped below at the minimum normal exponent (below it the subnormal quantum applies).
  const int min_normal_exp = 1 - f.bias;
  const int binade = floor_log2 > min_normal_exp ? floor_log2 : min_normal_exp;
  const int shift = (binade - f.mantissa_bits) - e;  // value / quantum = m / 2^shift
  uint64_t q;
  if (shift <= 0) {
    q = m << -shift;  // exact (does not happen for the formats here, kept for completeness)
  } else if (shift >= 40) {
    q = 0;  // m < 2^24, so m / 2^shift < 1/2: rounds to 0
  } else {
    q = m >> shift;
    const uint64_t rem = m & ((uint64_t{1} << shift) - 1);
    const uint64_t half = uint64_t{1} << (shift - 1);
    if (rem > half || (rem == half && (q & 1))) ++q;
  }
  // q is the significand in units of the quantum: < 2^mantissa_bits in the subnormal range, in
  // [2^mantissa_bits, 2^(mantissa_bits+1)] otherwise. Adding the binade offset yields the code
  // (a carry out of the significand bumps the exponent field, as it should).
  return (static_cast<uint64_t>(binade - min_normal_exp) << f.mantissa_bits) + q;
}

// Shared encoder for the signed fp8/fp16 formats. `sign_bit` is the position of the sign bit.
// nan_code / inf_code / overflow_code are magnitude codes (sign is added), used for NaN input,
// +-Inf input and finite overflow respectively.
uint32_t EncodeSigned(float v, const Format& f, int sign_bit, uint32_t nan_code, uint32_t inf_code,
                      uint32_t overflow_code) {
  const uint32_t bits = F32Bits(v);
  const uint32_t sign = (bits >> 31) << sign_bit;
  const uint32_t abs_bits = bits & 0x7FFFFFFFu;
  if (IsNaNBits(bits)) return sign | nan_code;
  if (IsInfBits(bits)) return sign | inf_code;
  if (abs_bits == 0) return sign;
  const uint64_t code = RoundMagnitude(abs_bits, f);
  if (code > f.max_code) return sign | overflow_code;
  return sign | static_cast<uint32_t>(code);
}

}  // namespace

float Bf16ToF32(uint16_t bits) { return F32FromBits(static_cast<uint32_t>(bits) << 16); }

uint16_t F32ToBf16(float v) {
  const uint32_t bits = F32Bits(v);
  if (IsNaNBits(bits)) return static_cast<uint16_t>((bits >> 16) & 0x8000u) | 0x7FC0u;
  // RNE on the low 16 bits; a carry propagates into the exponent, and rounding past the largest
  // finite value lands exactly on Inf (0x7F80), which is the overflow rule for bf16.
  const uint32_t rounding_bias = 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding_bias) >> 16);
}

float F16ToF32(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exp_field = (bits >> 10) & 0x1Fu;
  const uint32_t frac = bits & 0x3FFu;
  if (exp_field == 0x1F) {
    // Inf, or NaN with its payload kept in the top mantissa bits (as numpy and torch do).
    return F32FromBits(sign | 0x7F800000u | (frac << 13));
  }
  const float mag = DecodeFiniteMagnitude(bits & 0x7FFFu, kF16Format);
  return F32FromBits(sign | F32Bits(mag));
}

uint16_t F32ToF16(float v) {
  return static_cast<uint16_t>(EncodeSigned(v, kF16Format, 15, 0x7E00, 0x7C00, 0x7C00));
}

float F8E4M3ToF32(uint8_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x80u) << 24;
  if ((bits & 0x7Fu) == 0x7Fu) return F32FromBits(sign | kF32QuietNaN);
  return F32FromBits(sign | F32Bits(DecodeFiniteMagnitude(bits & 0x7Fu, kE4M3Format)));
}

uint8_t F32ToF8E4M3(float v) {
  // No Inf: Inf and overflow become NaN (0x7F with the input's sign), as in ml_dtypes.
  return static_cast<uint8_t>(EncodeSigned(v, kE4M3Format, 7, 0x7F, 0x7F, 0x7F));
}

uint8_t F32ToF8E4M3Saturate(float v) {
  return static_cast<uint8_t>(
      EncodeSigned(v, kE4M3Format, 7, 0x7F, kE4M3Format.max_code, kE4M3Format.max_code));
}

float F8E5M2ToF32(uint8_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x80u) << 24;
  const uint32_t mag = bits & 0x7Fu;
  if (mag == 0x7Cu) return F32FromBits(sign | 0x7F800000u);
  if (mag > 0x7Cu) return F32FromBits(sign | kF32QuietNaN);  // ml_dtypes drops the payload
  return F32FromBits(sign | F32Bits(DecodeFiniteMagnitude(mag, kE5M2Format)));
}

uint8_t F32ToF8E5M2(float v) {
  return static_cast<uint8_t>(EncodeSigned(v, kE5M2Format, 7, 0x7E, 0x7C, 0x7C));
}

uint8_t F32ToF8E5M2Saturate(float v) {
  return static_cast<uint8_t>(
      EncodeSigned(v, kE5M2Format, 7, 0x7E, kE5M2Format.max_code, kE5M2Format.max_code));
}

float F4E2M1ToF32(uint8_t code) {
  const uint32_t sign = static_cast<uint32_t>(code & 0x8u) << 28;
  return F32FromBits(sign | F32Bits(DecodeFiniteMagnitude(code & 0x7u, kE2M1Format)));
}

uint8_t F32ToF4E2M1(float v) {
  const uint32_t bits = F32Bits(v);
  // ml_dtypes' float4_e2m1fn has no NaN; its "quiet NaN" is the bit pattern 0x8 (-0), and a
  // negative NaN gets that negated: +NaN -> 0x8 (-0), -NaN -> 0x0 (+0). Reproduced as is.
  if (IsNaNBits(bits)) return (bits & kF32SignBit) ? 0x0 : 0x8;
  // Inf and finite overflow saturate to +-6 (0x7 with sign).
  return static_cast<uint8_t>(
      EncodeSigned(v, kE2M1Format, 3, 0x8, kE2M1Format.max_code, kE2M1Format.max_code));
}

float Ue8m0ToF32(uint8_t bits) {
  if (bits == 0xFF) return F32FromBits(kF32QuietNaN);
  if (bits == 0) return F32FromBits(0x00400000u);  // 2^-127, a float32 subnormal
  return F32FromBits(static_cast<uint32_t>(bits) << 23);
}

uint8_t F32ToUe8m0(float v) {
  // See the file comment for the rounding rule. NaN, Inf, +-0 and every negative value are NaN.
  const uint32_t bits = F32Bits(v);
  if (IsNaNBits(bits) || IsInfBits(bits) || (bits & kF32SignBit) || bits == 0) return 0xFF;
  const uint64_t code = RoundMagnitude(bits, kUE8M0Format);
  return code > kUE8M0Format.max_code ? 0xFF : static_cast<uint8_t>(code);
}

namespace {

// float -> integer by value: truncation toward zero, saturating at the type's range, NaN -> 0.
template <typename I>
I FloatToInt(float v) {
  if (std::isnan(v)) return 0;
  const double t = std::trunc(static_cast<double>(v));
  const double lo = static_cast<double>(std::numeric_limits<I>::min());
  const double hi = static_cast<double>(std::numeric_limits<I>::max());
  if (t <= lo) return std::numeric_limits<I>::min();
  if (t >= hi) return std::numeric_limits<I>::max();
  return static_cast<I>(t);
}

template <typename T, typename Fn>
void DecodeEach(const void* src, float* dst, size_t n, Fn fn) {
  const T* s = static_cast<const T*>(src);
  for (size_t i = 0; i < n; ++i) dst[i] = fn(s[i]);
}

template <typename T, typename Fn>
void EncodeEach(const float* src, void* dst, size_t n, Fn fn) {
  T* d = static_cast<T*>(dst);
  for (size_t i = 0; i < n; ++i) d[i] = fn(src[i]);
}

}  // namespace

void ConvertToF32(DType t, const void* src, float* dst, size_t n) {
  switch (t) {
    case DType::kF64:
      return DecodeEach<double>(src, dst, n, [](double x) { return static_cast<float>(x); });
    case DType::kF32:
      if (n) std::memcpy(dst, src, n * sizeof(float));
      return;
    case DType::kF16:
      return DecodeEach<uint16_t>(src, dst, n, F16ToF32);
    case DType::kBF16:
      return DecodeEach<uint16_t>(src, dst, n, Bf16ToF32);
    case DType::kF8E4M3:
      return DecodeEach<uint8_t>(src, dst, n, F8E4M3ToF32);
    case DType::kF8E5M2:
      return DecodeEach<uint8_t>(src, dst, n, F8E5M2ToF32);
    case DType::kUE8M0:
      return DecodeEach<uint8_t>(src, dst, n, Ue8m0ToF32);
    case DType::kF4E2M1: {
      const uint8_t* s = static_cast<const uint8_t*>(src);
      for (size_t i = 0; i < n; ++i) {
        const uint8_t byte = s[i / 2];
        dst[i] = F4E2M1ToF32((i % 2 == 0) ? (byte & 0xF) : (byte >> 4));
      }
      return;
    }
    case DType::kI64:
      return DecodeEach<int64_t>(src, dst, n, [](int64_t x) { return static_cast<float>(x); });
    case DType::kI32:
      return DecodeEach<int32_t>(src, dst, n, [](int32_t x) { return static_cast<float>(x); });
    case DType::kI16:
      return DecodeEach<int16_t>(src, dst, n, [](int16_t x) { return static_cast<float>(x); });
    case DType::kI8:
      return DecodeEach<int8_t>(src, dst, n, [](int8_t x) { return static_cast<float>(x); });
    case DType::kU8:
      return DecodeEach<uint8_t>(src, dst, n, [](uint8_t x) { return static_cast<float>(x); });
    case DType::kBool:
      return DecodeEach<uint8_t>(src, dst, n, [](uint8_t x) { return x != 0 ? 1.0f : 0.0f; });
  }
  LUCID_CHECK(false, "ConvertToF32: unknown dtype");
}

void ConvertFromF32(DType t, const float* src, void* dst, size_t n) {
  switch (t) {
    case DType::kF64:
      return EncodeEach<double>(src, dst, n, [](float x) { return static_cast<double>(x); });
    case DType::kF32:
      if (n) std::memcpy(dst, src, n * sizeof(float));
      return;
    case DType::kF16:
      return EncodeEach<uint16_t>(src, dst, n, F32ToF16);
    case DType::kBF16:
      return EncodeEach<uint16_t>(src, dst, n, F32ToBf16);
    case DType::kF8E4M3:
      return EncodeEach<uint8_t>(src, dst, n, F32ToF8E4M3);
    case DType::kF8E5M2:
      return EncodeEach<uint8_t>(src, dst, n, F32ToF8E5M2);
    case DType::kUE8M0:
      return EncodeEach<uint8_t>(src, dst, n, F32ToUe8m0);
    case DType::kF4E2M1: {
      uint8_t* d = static_cast<uint8_t*>(dst);
      for (size_t i = 0; i < n; i += 2) {
        const uint8_t lo = F32ToF4E2M1(src[i]);
        const uint8_t hi = (i + 1 < n) ? F32ToF4E2M1(src[i + 1]) : 0;
        d[i / 2] = static_cast<uint8_t>(lo | (hi << 4));
      }
      return;
    }
    case DType::kI64:
      return EncodeEach<int64_t>(src, dst, n, FloatToInt<int64_t>);
    case DType::kI32:
      return EncodeEach<int32_t>(src, dst, n, FloatToInt<int32_t>);
    case DType::kI16:
      return EncodeEach<int16_t>(src, dst, n, FloatToInt<int16_t>);
    case DType::kI8:
      return EncodeEach<int8_t>(src, dst, n, FloatToInt<int8_t>);
    case DType::kU8:
      return EncodeEach<uint8_t>(src, dst, n, FloatToInt<uint8_t>);
    case DType::kBool:
      // Like numpy/torch: any nonzero value (NaN included) is true.
      return EncodeEach<uint8_t>(src, dst, n, [](float x) -> uint8_t { return x != 0.0f; });
  }
  LUCID_CHECK(false, "ConvertFromF32: unknown dtype");
}

}  // namespace lucid
