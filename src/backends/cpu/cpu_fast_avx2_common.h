// Internal to the AVX2 kernel files (cpu_fast_kernels_avx2.cpp, cpu_fast_gemm_avx2.cpp,
// cpu_fast_nvfp4_avx2.cpp): the target attribute and the small always-inline decoders they share.
// Include only from files compiled for x86-64; every function here carries the target attribute
// and is reached only after CPUID said AVX2 + FMA (F16C comes with every such CPU lucid meets).
#pragma once

#include <immintrin.h>

#include <cstdint>

#define LUCID_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace lucid::fast::avx2 {

LUCID_AVX2 inline float Hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// 8 bf16 values from p, widened exactly (the bits move to the top half).
LUCID_AVX2 inline __m256 LoadBf16(const uint16_t* p) {
  return _mm256_castsi256_ps(
      _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)p)), 16));
}

// e4m3 -> f32 through f16: a code's bits s eeee mmm placed as the f16 s 0eeee mmm0000000 are
// exactly e4m3 / 256 (normals and subnormals alike), so 8 codes (the low 8 bytes of `bytes`) come
// out as value / 256 * scale256, rounded once; NaN codes (0x7F, 0xFF) to NaN. With scale256 =
// 256 * s this is e4m3 * s rounded once, DequantizeRowSpan's value.
LUCID_AVX2 inline __m256 E4m3x8(__m128i bytes, __m256 scale256) {
  const __m128i b = _mm_cvtepu8_epi16(bytes);
  const __m128i mag = _mm_and_si128(b, _mm_set1_epi16(0x7F));
  const __m128i h = _mm_or_si128(_mm_slli_epi16(_mm_and_si128(b, _mm_set1_epi16(0x80)), 8),
                                 _mm_slli_epi16(mag, 7));
  const __m256 nan =
      _mm256_castsi256_ps(_mm256_cvtepi16_epi32(_mm_cmpeq_epi16(mag, _mm_set1_epi16(0x7F))));
  const __m256 v = _mm256_mul_ps(_mm256_cvtph_ps(h), scale256);
  return _mm256_blendv_ps(v, _mm256_set1_ps(__builtin_nanf("")), nan);
}

// The e2m1 magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6 (index = the nibble's low 3 bits).
LUCID_AVX2 inline __m256 E2m1Table() {
  return _mm256_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f);
}

// 8 NVFP4 values from the 4 bytes at q (lanes 2i / 2i + 1 = the low / high nibble of byte i),
// exactly the e2m1 values: the magnitude from the vpermps table, the sign (bit 3 of the nibble)
// moved to bit 31.
LUCID_AVX2 inline __m256 E2m1x8(const uint8_t* q, __m256 lut) {
  int32_t four;
  __builtin_memcpy(&four, q, 4);
  const __m256i b = _mm256_cvtepu8_epi64(_mm_cvtsi32_si128(four));
  const __m256i idx = _mm256_or_si256(b, _mm256_slli_epi64(_mm256_srli_epi64(b, 4), 32));
  const __m256 mag = _mm256_permutevar8x32_ps(lut, idx);
  const __m256i sign = _mm256_set1_epi32(static_cast<int>(0x80000000u));
  return _mm256_xor_ps(mag,
                       _mm256_castsi256_ps(_mm256_and_si256(_mm256_slli_epi32(idx, 28), sign)));
}

// v rounded to bf16 as Bf16Rne does (nearest even; Inf kept; NaN kept a NaN, quieted), returned as
// the f32 whose top half is the bf16 (low half zero).
LUCID_AVX2 inline __m256 RoundBf16(__m256 v) {
  const __m256i b = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(1));
  const __m256i rne = _mm256_add_epi32(b, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7FFF)));
  const __m256i exp = _mm256_set1_epi32(0x7F800000);
  const __m256i special = _mm256_cmpeq_epi32(_mm256_and_si256(b, exp), exp);  // Inf or NaN
  const __m256i zero_mant =
      _mm256_cmpeq_epi32(_mm256_and_si256(b, _mm256_set1_epi32(0x7FFFFF)), _mm256_setzero_si256());
  const __m256i quiet =
      _mm256_or_si256(b, _mm256_andnot_si256(zero_mant, _mm256_set1_epi32(0x400000)));
  const __m256i r = _mm256_blendv_epi8(rne, quiet, special);
  return _mm256_castsi256_ps(_mm256_and_si256(r, _mm256_set1_epi32(static_cast<int>(0xFFFF0000u))));
}

// Lanes below `left` (clamped to 0..8) all ones: the mask of vmaskmov loads and stores.
LUCID_AVX2 inline __m256i TailMask8(int64_t left) {
  const int n = left <= 0 ? 0 : left >= 8 ? 8 : static_cast<int>(left);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// r[c][j] = r[j][c] for an 8x8 block of floats in eight registers.
LUCID_AVX2 __attribute__((always_inline)) inline void Transpose8x8(__m256 (&r)[8]) {
  __m256 t[8], u[8];
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
#pragma GCC unroll 2
  for (int i = 0; i < 2; ++i) {
    u[4 * i] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    u[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    u[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    u[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
    r[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
  }
}

}  // namespace lucid::fast::avx2
