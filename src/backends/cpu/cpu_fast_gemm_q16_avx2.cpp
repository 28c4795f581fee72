// AVX2 kernels of the NVFP4 GEMM on int16 activations (GemmKernels::tile_q16, layouts in
// cpu_fast_gemm.h): activations rounded to bf16 are held as int16 per 16-column group with a
// power-of-two scale, the e2m1 codes as the small integers 2 * e2m1 (-12..12), and vpmaddwd
// multiplies 16 of each into 8 int32 lanes, two columns per lane. One vpmaddwd does 16
// multiply-adds where the f32 GEMM's FMA does 8, and the integer sums are exact.
//
// The w panel puts rows in lanes: per group, 8 vectors (one per column pair), each 8 rows x 2
// int16; the x panel holds each token's column pair as one 32-bit word, broadcast against them.
// A group's sum per (token, 8 rows) is 8 vpmaddwd + 7 vpaddd, then one conversion to f32 and one
// FMA by the group's scales (w's group scale / 2 times x's 2^-k), so a group scale costs one
// multiply per 128 multiply-adds. Exactness: |q| <= 32767 and |2 e2m1| <= 12, so a group's sum is
// below 16 * 32767 * 12 < 2^23 and its conversion to f32 is exact; the group's products with
// one-hot x equal e2m1 * gs exactly, and the tensor scale s2 multiplies the sums last, so such a
// GEMM gives (e2m1 * gs) * s2 rounded once, DequantizeRowSpan's value.
#include <cstdint>

#include "backends/cpu/cpu_fast_avx2_common.h"
#include "backends/cpu/cpu_fast_gemm.h"

namespace lucid::fast {
namespace {

using avx2::TailMask8;

constexpr int kMr = kQ16Mr;
constexpr int kNr = kQ16Nr;
static_assert(kMr == 6 && kNr == 16, "the tile covers 1..6 tokens of two 8-row halves");
constexpr int64_t kXg = kQ16XGroupFloats;
constexpr int64_t kWg = kQ16WGroupFloats;
static_assert(kXg * 4 == kMr * 32 + 32, "x group: kMr rows of 16 int16, then 8 f32 scales");
static_assert(kWg * 4 == 8 * kNr * 4 + kNr * 4, "w group: 8 pair vectors of kNr rows, kNr scales");

// Exponents k of x's scale 2^-k that PackXQ16 takes: with a group scale gs / 2 in [2^-10, 224]
// the tile's products gs / 2 * 2^-k stay normal f32 and so do its sums.
constexpr int kMinK = -64, kMaxK = 96;

// 2^k for k in [-126, 127].
inline float Pow2(int k) {
  const uint32_t bits = static_cast<uint32_t>(k + 127) << 23;
  float f;
  __builtin_memcpy(&f, &bits, 4);
  return f;
}

// One token's group: 16 values (the first `left` of them read, the rest zero) rounded to bf16,
// as int16 q = v * 2^k rounded to nearest even, k such that the group's largest |v| * 2^k is in
// [2^14, 2^15) (q saturated at 32767: a largest value that rounds up), and the scale 2^-k (0 for
// an all-zero group). False for a non-finite value or a k outside [kMinK, kMaxK].
LUCID_AVX2 bool QuantizeGroup(const float* x, int64_t left, __m256i* q, float* s) {
  __m256 a0, a1;
  if (left >= 16) {
    a0 = _mm256_loadu_ps(x);
    a1 = _mm256_loadu_ps(x + 8);
  } else {
    a0 = _mm256_maskload_ps(x, TailMask8(left));
    a1 = _mm256_maskload_ps(x + 8, TailMask8(left - 8));
  }
  a0 = avx2::RoundBf16(a0);
  a1 = avx2::RoundBf16(a1);
  const __m256i exp_mask = _mm256_set1_epi32(0x7F800000);
  const __m256i special = _mm256_or_si256(
      _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_castps_si256(a0), exp_mask), exp_mask),
      _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_castps_si256(a1), exp_mask), exp_mask));
  if (!_mm256_testz_si256(special, special)) return false;  // NaN or Inf: the f32 GEMM carries it
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const __m256 m8 = _mm256_max_ps(_mm256_and_ps(a0, abs_mask), _mm256_and_ps(a1, abs_mask));
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m8), _mm256_extractf128_ps(m8, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  const float mx = _mm_cvtss_f32(_mm_max_ss(m4, _mm_movehdup_ps(m4)));
  if (mx == 0.0f) {
    _mm256_store_si256(q, _mm256_setzero_si256());
    *s = 0.0f;
    return true;
  }
  // mx = f * 2^e, f in [0.5, 1), from its exponent bits (a subnormal reads as e = -126, whose
  // k is out of range as its own would be).
  uint32_t bits;
  __builtin_memcpy(&bits, &mx, 4);
  const int e = static_cast<int>(bits >> 23) - 126;
  const int k = 15 - e;
  if (k < kMinK || k > kMaxK) return false;
  const __m256 p = _mm256_set1_ps(Pow2(k));
  const __m256i q0 = _mm256_cvtps_epi32(_mm256_mul_ps(a0, p));
  const __m256i q1 = _mm256_cvtps_epi32(_mm256_mul_ps(a1, p));
  // vpackssdw saturates 32768 to 32767 and interleaves 128-bit lanes: put them back in order.
  _mm256_store_si256(q, _mm256_permute4x64_epi64(_mm256_packs_epi32(q0, q1), 0xD8));
  *s = Pow2(-k);
  return true;
}

// GemmKernels::pack_x_q16.
LUCID_AVX2 bool PackXQ16(const float* x, int64_t ldx, int m, int64_t kc, float* xp) {
  const int64_t groups = (kc + 15) / 16;
  for (int64_t g = 0; g < groups; ++g) {
    float* grp = xp + g * kXg;
    float* sc = grp + kMr * 8;
    for (int i = 0; i < kMr; ++i) {
      __m256i* q = reinterpret_cast<__m256i*>(grp + 8 * i);
      if (i >= m) {
        _mm256_store_si256(q, _mm256_setzero_si256());
        sc[i] = 0.0f;
      } else if (!QuantizeGroup(x + i * ldx + 16 * g, kc - 16 * g, q, &sc[i])) {
        return false;
      }
    }
    sc[6] = sc[7] = 0.0f;
  }
  return true;
}

// GemmKernels::pack_w_nvfp4_q16: per group, the 8 rows of each half transposed byte-wise (one
// byte of each row per column pair), each nibble looked up as 2 * e2m1 by vpshufb, the low and
// high nibbles of a byte interleaved into the pair and widened to int16.
LUCID_AVX2 void PackWNvfp4Q16(const uint8_t* const* rows, const float* const* gs, int64_t groups,
                              float* wp) {
  const __m128i table =
      _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);  // 2 * e2m1
  const __m128i low4 = _mm_set1_epi8(0x0F);
  for (int64_t g = 0; g < groups; ++g) {
    __m256i* wg = reinterpret_cast<__m256i*>(wp + g * kWg);
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      __m128i r[8];
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j)
        r[j] = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(rows[8 * h + j] + 8 * g));
      // a: byte i of two rows side by side; b: of four rows; c[q]: byte 2q of the 8 rows in the
      // low half, byte 2q + 1 in the high half.
      const __m128i a0 = _mm_unpacklo_epi8(r[0], r[1]), a1 = _mm_unpacklo_epi8(r[2], r[3]);
      const __m128i a2 = _mm_unpacklo_epi8(r[4], r[5]), a3 = _mm_unpacklo_epi8(r[6], r[7]);
      const __m128i b0 = _mm_unpacklo_epi16(a0, a1), b1 = _mm_unpackhi_epi16(a0, a1);
      const __m128i b2 = _mm_unpacklo_epi16(a2, a3), b3 = _mm_unpackhi_epi16(a2, a3);
      const __m128i c[4] = {_mm_unpacklo_epi32(b0, b2), _mm_unpackhi_epi32(b0, b2),
                            _mm_unpacklo_epi32(b1, b3), _mm_unpackhi_epi32(b1, b3)};
#pragma GCC unroll 4
      for (int q = 0; q < 4; ++q) {
        const __m128i lo = _mm_shuffle_epi8(table, _mm_and_si128(c[q], low4));
        const __m128i hi = _mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(c[q], 4), low4));
        _mm256_store_si256(wg + 2 * (2 * q) + h, _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(lo, hi)));
        _mm256_store_si256(wg + 2 * (2 * q + 1) + h,
                           _mm256_cvtepi8_epi16(_mm_unpackhi_epi8(lo, hi)));
      }
    }
    float* sc = wp + g * kWg + 8 * kNr;
#pragma GCC unroll 16
    for (int j = 0; j < kNr; ++j) sc[j] = gs[j][g] * 0.5f;  // the codes hold 2 * e2m1
  }
}

// C rows i < M, columns [8h, 8h + 8) for both halves h: acc = sum over groups of
// f32(sum over pairs of vpmaddwd(w, x)) * (w scale * x scale), times s2, stored (or added).
template <int M>
LUCID_AVX2 void KernelQ16(const float* xp, const float* wp, int64_t groups, float s2, float* c,
                          int64_t ldc, int n, bool add) {
  const __m256 vs2 = _mm256_set1_ps(s2);
  for (int h = 0; h < 2 && 8 * h < n; ++h) {
    __m256 acc[M];
#pragma GCC unroll 6
    for (int i = 0; i < M; ++i) acc[i] = _mm256_setzero_ps();
    for (int64_t g = 0; g < groups; ++g) {
      const int32_t* xg = reinterpret_cast<const int32_t*>(xp + g * kXg);
      const __m256i* wg = reinterpret_cast<const __m256i*>(wp + g * kWg) + h;
      __m256i s[M];
      {
        const __m256i w = _mm256_load_si256(wg);
#pragma GCC unroll 6
        for (int i = 0; i < M; ++i) s[i] = _mm256_madd_epi16(w, _mm256_set1_epi32(xg[8 * i]));
      }
#pragma GCC unroll 7
      for (int p = 1; p < 8; ++p) {
        const __m256i w = _mm256_load_si256(wg + 2 * p);
#pragma GCC unroll 6
        for (int i = 0; i < M; ++i) {
          s[i] = _mm256_add_epi32(s[i], _mm256_madd_epi16(w, _mm256_set1_epi32(xg[8 * i + p])));
          // Each sum stays one register updated in place: left free, GCC reassociates the adds
          // into all 48 products first and spills them.
          asm("" : "+x"(s[i]));
        }
      }
      const __m256 sw = _mm256_load_ps(wp + g * kWg + 8 * kNr + 8 * h);
      const float* sx = xp + g * kXg + 8 * kMr;
#pragma GCC unroll 6
      for (int i = 0; i < M; ++i)
        acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[i]),
                                 _mm256_mul_ps(sw, _mm256_broadcast_ss(sx + i)), acc[i]);
    }
    const int left = n - 8 * h;
    const __m256i mask = TailMask8(left);
#pragma GCC unroll 6
    for (int i = 0; i < M; ++i) {
      float* p = c + i * ldc + 8 * h;
      const __m256 v = _mm256_mul_ps(acc[i], vs2);
      if (left >= 8)
        _mm256_storeu_ps(p, add ? _mm256_add_ps(_mm256_loadu_ps(p), v) : v);
      else
        _mm256_maskstore_ps(p, mask, add ? _mm256_add_ps(_mm256_maskload_ps(p, mask), v) : v);
    }
  }
}

LUCID_AVX2 void TileQ16(const float* xp, const float* wp, int64_t groups, float s2, float* c,
                        int64_t ldc, int m, int n, bool add) {
  switch (m) {
    case 6:
      return KernelQ16<6>(xp, wp, groups, s2, c, ldc, n, add);
    case 5:
      return KernelQ16<5>(xp, wp, groups, s2, c, ldc, n, add);
    case 4:
      return KernelQ16<4>(xp, wp, groups, s2, c, ldc, n, add);
    case 3:
      return KernelQ16<3>(xp, wp, groups, s2, c, ldc, n, add);
    case 2:
      return KernelQ16<2>(xp, wp, groups, s2, c, ldc, n, add);
    case 1:
      return KernelQ16<1>(xp, wp, groups, s2, c, ldc, n, add);
    default:
      return;
  }
}

}  // namespace

void AddQ16GemmAvx2(GemmKernels& t) {
  t.pack_x_q16 = &PackXQ16;
  t.pack_w_nvfp4_q16 = &PackWNvfp4Q16;
  t.tile_q16 = &TileQ16;
}

}  // namespace lucid::fast
