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

// q[i] * a, q[i] * a + b or q[i] * a - b for the 8 signed bytes q in the low half of v.
template <Op kOp>
LUCID_AVX2 inline __m256 Value8(__m128i v, __m256 a, __m256 b) {
  const __m256 q = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v));
  if constexpr (kOp == Op::kMul)
    return _mm256_mul_ps(q, a);
  else if constexpr (kOp == Op::kFmadd)
    return _mm256_fmadd_ps(q, a, b);
  else
    return _mm256_fmsub_ps(q, a, b);
}

template <Op kOp>
LUCID_AVX2 inline void Store8(__m128i v, __m256 a, __m256 b, float* out) {
  _mm256_storeu_ps(out, Value8<kOp>(v, a, b));
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

// One block of a 32-element type (Q8_0, Q4_0: d * (q - 8), Q4_1: d * q + m) into v[0..4), elements
// 8i .. 8i + 8 in v[i]; the values DequantizeGgmlBlock gives.
template <GgmlType kT>
LUCID_AVX2 inline void Block32(const uint8_t* b, __m256 v[4]) {
  const __m256 d = _mm256_set1_ps(Half(b));
  if constexpr (kT == GgmlType::kQ8_0) {
    const __m256i q = Load32(b + 2);
    const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
    v[0] = Value8<Op::kMul>(lo, d, d);
    v[1] = Value8<Op::kMul>(_mm_srli_si128(lo, 8), d, d);
    v[2] = Value8<Op::kMul>(hi, d, d);
    v[3] = Value8<Op::kMul>(_mm_srli_si128(hi, 8), d, d);
  } else {
    constexpr bool kQ4_1 = kT == GgmlType::kQ4_1;
    const __m128i low = _mm_set1_epi8(0x0F);
    const __m128i qs = Load16(b + (kQ4_1 ? 4 : 2));
    __m128i lo = _mm_and_si128(qs, low), hi = _mm_and_si128(_mm_srli_epi16(qs, 4), low);
    if constexpr (kQ4_1) {
      const __m256 m = _mm256_set1_ps(Half(b + 2));
      v[0] = Value8<Op::kFmadd>(lo, d, m);
      v[1] = Value8<Op::kFmadd>(_mm_srli_si128(lo, 8), d, m);
      v[2] = Value8<Op::kFmadd>(hi, d, m);
      v[3] = Value8<Op::kFmadd>(_mm_srli_si128(hi, 8), d, m);
    } else {
      lo = _mm_sub_epi8(lo, _mm_set1_epi8(8));
      hi = _mm_sub_epi8(hi, _mm_set1_epi8(8));
      v[0] = Value8<Op::kMul>(lo, d, d);
      v[1] = Value8<Op::kMul>(_mm_srli_si128(lo, 8), d, d);
      v[2] = Value8<Op::kMul>(hi, d, d);
      v[3] = Value8<Op::kMul>(_mm_srli_si128(hi, 8), d, d);
    }
  }
}

constexpr int64_t Bytes32(GgmlType t) {
  return t == GgmlType::kQ8_0 ? 34 : t == GgmlType::kQ4_1 ? 20 : 18;
}

template <GgmlType kT>
LUCID_AVX2 void Decode32(const uint8_t* b, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i, b += Bytes32(kT), out += 32) {
    __m256 v[4];
    Block32<kT>(b, v);
    for (int k = 0; k < 4; ++k) _mm256_storeu_ps(out + 8 * k, v[k]);
  }
}

LUCID_AVX2 inline float Hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// out[j] = sum over the n blocks' elements k of x[k] * W_j[k] for 4 rows (w[j]: row j's first
// block), each block decoded in registers as Block32 and multiplied at once.
template <GgmlType kT>
LUCID_AVX2 void Gemv4(const float* x, const uint8_t* const* w, int64_t n, float* out) {
  __m256 acc[4][2];
  for (int j = 0; j < 4; ++j) acc[j][0] = acc[j][1] = _mm256_setzero_ps();
  for (int64_t b = 0; b < n; ++b) {
    const float* xb = x + 32 * b;
    const __m256 x0 = _mm256_loadu_ps(xb), x1 = _mm256_loadu_ps(xb + 8);
    const __m256 x2 = _mm256_loadu_ps(xb + 16), x3 = _mm256_loadu_ps(xb + 24);
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      __m256 v[4];
      Block32<kT>(w[j] + b * Bytes32(kT), v);
      acc[j][0] = _mm256_fmadd_ps(x0, v[0], acc[j][0]);
      acc[j][1] = _mm256_fmadd_ps(x1, v[1], acc[j][1]);
      acc[j][0] = _mm256_fmadd_ps(x2, v[2], acc[j][0]);
      acc[j][1] = _mm256_fmadd_ps(x3, v[3], acc[j][1]);
    }
  }
  for (int j = 0; j < 4; ++j) out[j] = Hsum(_mm256_add_ps(acc[j][0], acc[j][1]));
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
      Decode32<GgmlType::kQ8_0>(blocks, n, out);
      return true;
    case GgmlType::kQ4_0:
      Decode32<GgmlType::kQ4_0>(blocks, n, out);
      return true;
    case GgmlType::kQ4_1:
      Decode32<GgmlType::kQ4_1>(blocks, n, out);
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

bool GemvGgmlAvx2(GgmlType t, const float* x, const uint8_t* const* w, int64_t n, float* out) {
  switch (t) {
    case GgmlType::kQ8_0:
      Gemv4<GgmlType::kQ8_0>(x, w, n, out);
      return true;
    case GgmlType::kQ4_0:
      Gemv4<GgmlType::kQ4_0>(x, w, n, out);
      return true;
    case GgmlType::kQ4_1:
      Gemv4<GgmlType::kQ4_1>(x, w, n, out);
      return true;
    default:
      return false;
  }
}

}  // namespace lucid::fast
