// GGUF block types (core/ggml_types.h) decoded with AVX2 + FMA + F16C, bit for bit as
// DequantizeGgmlBlock: a product the reference rounds once is one vector multiply, and an exact
// product followed by one add or subtraction (Q4_1's d * q + m, the K-quants' (d * sc) * q -
// dmin * m) is one FMA, which rounds that same sum once. The scalar products the reference makes
// per block or sub-block (d * sc, dmin * m) are made the same way here, in f32.
// Also taken by the AVX-512 tables (every AVX-512 CPU has AVX2, FMA and F16C).
#include <immintrin.h>

#include "backends/cpu/cpu_fast_kernels.h"

#define LUCID_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace lucid::fast {
namespace {

LUCID_AVX2 inline float Half(const uint8_t* p) {
  uint16_t h;
  __builtin_memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

enum class Op { kMul, kFmadd, kFmsub };

// out[i] = q[i] * a, q[i] * a + b or q[i] * a - b for the 8 signed bytes q in the low half of v.
template <Op kOp>
LUCID_AVX2 inline void Store8(__m128i v, __m256 a, __m256 b, float* out) {
  const __m256 q = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v));
  __m256 r;
  if constexpr (kOp == Op::kMul)
    r = _mm256_mul_ps(q, a);
  else if constexpr (kOp == Op::kFmadd)
    r = _mm256_fmadd_ps(q, a, b);
  else
    r = _mm256_fmsub_ps(q, a, b);
  _mm256_storeu_ps(out, r);
}

template <Op kOp>
LUCID_AVX2 inline void Store16(__m128i v, __m256 a, __m256 b, float* out) {
  Store8<kOp>(v, a, b, out);
  Store8<kOp>(_mm_srli_si128(v, 8), a, b, out + 8);
}

template <Op kOp>
LUCID_AVX2 inline void Store32(__m256i v, __m256 a, __m256 b, float* out) {
  Store16<kOp>(_mm256_castsi256_si128(v), a, b, out);
  Store16<kOp>(_mm256_extracti128_si256(v, 1), a, b, out + 16);
}

LUCID_AVX2 inline __m256i Load32(const uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}
LUCID_AVX2 inline __m128i Load16(const uint8_t* p) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
}

LUCID_AVX2 void DecodeQ8_0(const uint8_t* b, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i, b += 34, out += 32) {
    const __m256 d = _mm256_set1_ps(Half(b));
    Store32<Op::kMul>(Load32(b + 2), d, d, out);
  }
}

// Q4_0 (d * (q - 8)) and Q4_1 (d * q + m).
template <bool kQ4_1>
LUCID_AVX2 void DecodeQ4(const uint8_t* b, int64_t n, float* out) {
  constexpr int64_t kBytes = kQ4_1 ? 20 : 18;
  const __m128i low = _mm_set1_epi8(0x0F), eight = _mm_set1_epi8(8);
  for (int64_t i = 0; i < n; ++i, b += kBytes, out += 32) {
    const __m256 d = _mm256_set1_ps(Half(b));
    const __m128i qs = Load16(b + (kQ4_1 ? 4 : 2));
    __m128i lo = _mm_and_si128(qs, low), hi = _mm_and_si128(_mm_srli_epi16(qs, 4), low);
    if constexpr (kQ4_1) {
      const __m256 m = _mm256_set1_ps(Half(b + 2));
      Store16<Op::kFmadd>(lo, d, m, out);
      Store16<Op::kFmadd>(hi, d, m, out + 16);
    } else {
      lo = _mm_sub_epi8(lo, eight);
      hi = _mm_sub_epi8(hi, eight);
      Store16<Op::kMul>(lo, d, d, out);
      Store16<Op::kMul>(hi, d, d, out + 16);
    }
  }
}

// The 6-bit scale and min of sub-block j of a Q4_K / Q5_K super-block (ggml_types.h).
LUCID_AVX2 inline void ScaleMin(const uint8_t* s, int j, int* sc, int* m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
    *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// Q4_K and (kFive) Q5_K.
template <bool kFive>
LUCID_AVX2 void DecodeQ45K(const uint8_t* b, int64_t n, float* out) {
  constexpr int64_t kBytes = kFive ? 176 : 144;
  const __m256i low = _mm256_set1_epi8(0x0F), sixteen = _mm256_set1_epi8(16);
  for (int64_t i = 0; i < n; ++i, b += kBytes, out += 256) {
    const float d = Half(b), dmin = Half(b + 2);
    const uint8_t* scales = b + 4;
    const uint8_t* qs = b + (kFive ? 48 : 16);
    const __m256i qh = kFive ? Load32(b + 16) : _mm256_setzero_si256();
    for (int p = 0; p < 4; ++p) {
      const __m256i q = Load32(qs + 32 * p);
      const __m256i nib[2] = {_mm256_and_si256(q, low),
                              _mm256_and_si256(_mm256_srli_epi16(q, 4), low)};
      for (int h = 0; h < 2; ++h) {
        const int j = 2 * p + h;
        int sc, m;
        ScaleMin(scales, j, &sc, &m);
        __m256i v = nib[h];
        if constexpr (kFive) {
          const __m256i bit = _mm256_set1_epi8(static_cast<char>(1 << j));
          const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(qh, bit), bit);
          v = _mm256_or_si256(v, _mm256_and_si256(set, sixteen));
        }
        const float ds = d * static_cast<float>(sc), dm = dmin * static_cast<float>(m);
        Store32<Op::kFmsub>(v, _mm256_set1_ps(ds), _mm256_set1_ps(dm), out + 32 * j);
      }
    }
  }
}

LUCID_AVX2 void DecodeQ6_K(const uint8_t* b, int64_t n, float* out) {
  const __m256i low = _mm256_set1_epi8(0x0F), three = _mm256_set1_epi8(3);
  const __m256i off = _mm256_set1_epi8(32);
  for (int64_t i = 0; i < n; ++i, b += 210, out += 256) {
    const uint8_t* ql = b;
    const uint8_t* qh = b + 128;
    const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
    const float d = Half(b + 208);
    for (int h = 0; h < 2; ++h) {
      const __m256i hv = Load32(qh + 32 * h);
      const __m256i l0 = Load32(ql + 64 * h), l1 = Load32(ql + 64 * h + 32);
      // Elements 128h + 32c + l (l < 32): low bits from ql[64h + 32 (c % 2) + l] >> 4 (c / 2),
      // high bits from qh[32h + l] >> 2c, scales sc[8h + 2c] (l < 16) and sc[8h + 2c + 1].
      for (int c = 0; c < 4; ++c) {
        __m256i lo = c % 2 ? l1 : l0;
        if (c >= 2) lo = _mm256_srli_epi16(lo, 4);
        lo = _mm256_and_si256(lo, low);
        __m256i hi = _mm256_and_si256(_mm256_srl_epi16(hv, _mm_cvtsi32_si128(2 * c)), three);
        hi = _mm256_slli_epi16(hi, 4);
        const __m256i q = _mm256_sub_epi8(_mm256_or_si256(lo, hi), off);
        float* o = out + 128 * h + 32 * c;
        const __m256 s0 = _mm256_set1_ps(d * static_cast<float>(sc[8 * h + 2 * c]));
        const __m256 s1 = _mm256_set1_ps(d * static_cast<float>(sc[8 * h + 2 * c + 1]));
        Store16<Op::kMul>(_mm256_castsi256_si128(q), s0, s0, o);
        Store16<Op::kMul>(_mm256_extracti128_si256(q, 1), s1, s1, o + 16);
      }
    }
  }
}

LUCID_AVX2 void DecodeF16(const uint8_t* b, int64_t n, float* out) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, _mm256_cvtph_ps(Load16(b + 2 * i)));
  for (; i < n; ++i) out[i] = Half(b + 2 * i);
}

}  // namespace

bool DequantGgmlAvx2(GgmlType t, const uint8_t* blocks, int64_t n, float* out) {
  switch (t) {
    case GgmlType::kF16:
      DecodeF16(blocks, n, out);
      return true;
    case GgmlType::kQ8_0:
      DecodeQ8_0(blocks, n, out);
      return true;
    case GgmlType::kQ4_0:
      DecodeQ4<false>(blocks, n, out);
      return true;
    case GgmlType::kQ4_1:
      DecodeQ4<true>(blocks, n, out);
      return true;
    case GgmlType::kQ4_K:
      DecodeQ45K<false>(blocks, n, out);
      return true;
    case GgmlType::kQ5_K:
      DecodeQ45K<true>(blocks, n, out);
      return true;
    case GgmlType::kQ6_K:
      DecodeQ6_K(blocks, n, out);
      return true;
    default:
      return false;
  }
}

}  // namespace lucid::fast
