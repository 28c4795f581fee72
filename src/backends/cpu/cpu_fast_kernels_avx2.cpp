// AVX2 + FMA kernels (8 lanes). Tiles cover K rounded down to 8; the driver adds the tail.
#include <cstddef>

#include "backends/cpu/cpu_fast_avx2_common.h"
#include "backends/cpu/cpu_fast_kernels.h"

namespace lucid::fast {
namespace {

using avx2::Hsum;
using avx2::LoadBf16;
using avx2::RoundBf16;
using avx2::TailMask8;

template <int MR, int NR, bool kBf16>
LUCID_AVX2 void TileFma(const void* const* xv, const void* const*, const void* const* wv,
                        int64_t k0, int64_t k1, int64_t, float* out) {
  const float* x[MR];
  for (int i = 0; i < MR; ++i) x[i] = static_cast<const float*>(xv[i]);
  __m256 acc[MR][NR];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) acc[i][j] = _mm256_setzero_ps();
  // bf16 weights (MatmulRows' row groups, NR consecutive rows): each 64 bytes of a row, the same
  // columns of the next group's row asked for in L2 (the hardware prefetcher alone leaves the
  // tile waiting on memory at 4-8 tokens).
  const std::ptrdiff_t ahead =
      kBf16 && NR > 1 ? (static_cast<const char*>(wv[1]) - static_cast<const char*>(wv[0])) * NR
                      : 0;
  for (int64_t k = k0; k < k1; k += 8) {
    if (kBf16 && ahead != 0 && k % 32 == 0)
#pragma GCC unroll 8
      for (int j = 0; j < NR; ++j)
        _mm_prefetch(static_cast<const char*>(wv[j]) + 2 * k + ahead, _MM_HINT_T1);
    __m256 w[NR];
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) {
      if constexpr (kBf16)
        w[j] = LoadBf16(static_cast<const uint16_t*>(wv[j]) + k);
      else
        w[j] = _mm256_loadu_ps(static_cast<const float*>(wv[j]) + k);
    }
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const __m256 xi = _mm256_loadu_ps(x[i] + k);
#pragma GCC unroll 8
      for (int j = 0; j < NR; ++j) acc[i][j] = _mm256_fmadd_ps(xi, w[j], acc[i][j]);
    }
  }
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) out[i * NR + j] = Hsum(acc[i][j]);
}

// One token against NR bf16 rows read one after another, each from start to end (the row group
// is one ascending stream, where TileFma<1, 4, true> steps through 4 rows side by side): per 64
// columns the two lines 4 KB ahead are asked for in L2, eight vectors widened and multiplied into
// four sums, reduced per row. MatmulRows takes it for one token from kRowsGemvMinK columns.
constexpr int64_t kRowsAheadBytes = 4096;
template <int NR>
LUCID_AVX2 void TileBf16Rows(const void* const* xv, const void* const*, const void* const* wv,
                             int64_t k0, int64_t k1, int64_t, float* out) {
  const float* x = static_cast<const float*>(xv[0]);
  const int64_t full = k0 + (k1 - k0) / 64 * 64;
  for (int j = 0; j < NR; ++j) {
    const uint16_t* w = static_cast<const uint16_t*>(wv[j]);
    __m256 a[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps()};
    int64_t k = k0;
    for (; k < full; k += 64) {
      _mm_prefetch(reinterpret_cast<const char*>(w + k) + kRowsAheadBytes, _MM_HINT_T1);
      _mm_prefetch(reinterpret_cast<const char*>(w + k + 32) + kRowsAheadBytes, _MM_HINT_T1);
#pragma GCC unroll 8
      for (int u = 0; u < 8; ++u)
        a[u % 4] =
            _mm256_fmadd_ps(_mm256_loadu_ps(x + k + 8 * u), LoadBf16(w + k + 8 * u), a[u % 4]);
    }
    for (; k < k1; k += 8) a[0] = _mm256_fmadd_ps(_mm256_loadu_ps(x + k), LoadBf16(w + k), a[0]);
    out[j] = Hsum(_mm256_add_ps(_mm256_add_ps(a[0], a[1]), _mm256_add_ps(a[2], a[3])));
  }
}

LUCID_AVX2 void WidenBf16(const uint16_t* src, float* dst, int64_t n) {
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) _mm256_storeu_ps(dst + k, LoadBf16(src + k));
  for (; k < n; ++k) {
    const uint32_t b = static_cast<uint32_t>(src[k]) << 16;
    __builtin_memcpy(dst + k, &b, 4);
  }
}

// hi = x rounded to bf16, lo = (x - hi) rounded to bf16 (KernelTable::split_bf16), 16 values a
// pass: the top halves packed to 16 bits in lane order (vpackusdw within 128-bit lanes, then the
// quarters back in order).
LUCID_AVX2 inline __m256i TopHalves(__m256 a, __m256 b) {
  const __m256i p = _mm256_packus_epi32(_mm256_srli_epi32(_mm256_castps_si256(a), 16),
                                        _mm256_srli_epi32(_mm256_castps_si256(b), 16));
  return _mm256_permute4x64_epi64(p, 0xD8);
}

LUCID_AVX2 void SplitBf16(const float* x, uint16_t* hi, uint16_t* lo, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const int64_t left = n - i;
    const __m256 a = _mm256_maskload_ps(x + i, TailMask8(left)),
                 b = _mm256_maskload_ps(x + i + 8, TailMask8(left - 8));
    const __m256 ha = RoundBf16(a), hb = RoundBf16(b);
    const __m256i h = TopHalves(ha, hb),
                  l = TopHalves(RoundBf16(_mm256_sub_ps(a, ha)), RoundBf16(_mm256_sub_ps(b, hb)));
    if (left >= 16) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(hi + i), h);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(lo + i), l);
      continue;
    }
    alignas(32) uint16_t th[16], tl[16];
    _mm256_store_si256(reinterpret_cast<__m256i*>(th), h);
    _mm256_store_si256(reinterpret_cast<__m256i*>(tl), l);
    for (int64_t k = 0; k < left; ++k) hi[i + k] = th[k], lo[i + k] = tl[k];
  }
}

LUCID_AVX2 void DequantFp8(const uint8_t* q, float scale, float* out, int64_t n) {
  const __m256 s = _mm256_set1_ps(scale * 256.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, avx2::E4m3x8(_mm_loadl_epi64((const __m128i*)(q + i)), s));
  if (i < n) {
    uint8_t tail[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    float v[8];
    for (int64_t j = i; j < n; ++j) tail[j - i] = q[j];
    _mm256_storeu_ps(v, avx2::E4m3x8(_mm_loadl_epi64((const __m128i*)tail), s));
    for (int64_t j = i; j < n; ++j) out[j] = v[j - i];
  }
}

// e4m3 codes to f32 exactly (NaN codes to NaN): 16 codes a step as the f16 bit patterns of value
// / 256 (avx2::E4m3x8's), built in 16-bit lanes, a NaN code given an f16 NaN there rather than
// blended in after the widening; the last 8-15 codes through avx2::E4m3x8.
LUCID_AVX2 void WidenE4m3(const uint8_t* src, float* dst, int64_t n) {
  const __m256 k256 = _mm256_set1_ps(256.0f);
  const __m256i m7f = _mm256_set1_epi16(0x7F), nan_bits = _mm256_set1_epi16(0x7E00);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    // Scales are often cold (NVFP4 row groups read theirs once a step): the line 256 bytes ahead.
    if (i % 64 == 0) _mm_prefetch(reinterpret_cast<const char*>(src) + i + 256, _MM_HINT_T0);
    const __m256i b = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i*)(src + i)));
    const __m256i mag = _mm256_and_si256(b, m7f);
    const __m256i sign = _mm256_slli_epi16(_mm256_xor_si256(b, mag), 8);
    const __m256i nan = _mm256_and_si256(_mm256_cmpeq_epi16(mag, m7f), nan_bits);
    const __m256i h = _mm256_or_si256(_mm256_or_si256(sign, _mm256_slli_epi16(mag, 7)), nan);
    _mm256_storeu_ps(dst + i, _mm256_mul_ps(_mm256_cvtph_ps(_mm256_castsi256_si128(h)), k256));
    _mm256_storeu_ps(dst + i + 8,
                     _mm256_mul_ps(_mm256_cvtph_ps(_mm256_extracti128_si256(h, 1)), k256));
  }
  for (; i + 8 <= n; i += 8) {
    // Scales are often cold (NVFP4 row groups read theirs once a step): the line 256 bytes ahead.
    if (i % 64 == 0) _mm_prefetch(reinterpret_cast<const char*>(src) + i + 256, _MM_HINT_T0);
    _mm256_storeu_ps(dst + i, avx2::E4m3x8(_mm_loadl_epi64((const __m128i*)(src + i)), k256));
  }
  if (i < n) {
    uint8_t tail[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    float v[8];
    for (int64_t j = i; j < n; ++j) tail[j - i] = src[j];
    _mm256_storeu_ps(v, avx2::E4m3x8(_mm_loadl_epi64((const __m128i*)tail), k256));
    for (int64_t j = i; j < n; ++j) dst[j] = v[j - i];
  }
}

// NVFP4, 8 values (4 bytes) per half group (avx2::E2m1x8), times the group and tensor scales.
LUCID_AVX2 void DequantNvfp4(const uint8_t* q, const float* gs, float s2, float* out,
                             int64_t groups) {
  const __m256 lut = avx2::E2m1Table();
  const __m256 s2v = _mm256_set1_ps(s2);
  for (int64_t h = 0; h < 2 * groups; ++h) {
    const __m256 v = avx2::E2m1x8(q + 4 * h, lut);
    _mm256_storeu_ps(out + 8 * h, _mm256_mul_ps(_mm256_mul_ps(v, _mm256_set1_ps(gs[h / 2])), s2v));
  }
}

int64_t VectorK(int64_t K) { return K / 8 * 8; }

LUCID_AVX2 float Dot(const float* a, const float* b, int64_t n) {
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
  }
  for (; i + 8 <= n; i += 8)
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
  float s = Hsum(_mm256_add_ps(s0, s1));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

LUCID_AVX2 void Axpy(float a, const float* x, float* y, int64_t n) {
  const __m256 av = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] += a * x[i];
}

LUCID_AVX2 void Scale(float a, float* y, int64_t n) {
  const __m256 av = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(av, _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] *= a;
}

LUCID_AVX2 void ScaledMul(const float* x, const float* w, float inv, float* y, int64_t n) {
  const __m256 iv = _mm256_set1_ps(inv);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(
        y + i, _mm256_mul_ps(_mm256_loadu_ps(w + i), _mm256_mul_ps(_mm256_loadu_ps(x + i), iv)));
  for (; i < n; ++i) y[i] = w[i] * (x[i] * inv);
}

LUCID_AVX2 float SumSquares(const float* x, int64_t n) {
  __m256 s = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    s = _mm256_fmadd_ps(v, v, s);
  }
  float r = Hsum(s);
  for (; i < n; ++i) r += x[i] * x[i];
  return r;
}

// exp(x), x clamped to [-87, 88]; Cephes polynomial on 2^n * e^r (relative error ~1e-7). NaN
// stays NaN: max/min return their second operand when one is NaN, so x goes second (the clamp
// must not turn a NaN score into e^-87, which hid a broken model from the numerics guard).
LUCID_AVX2 inline __m256 Exp(__m256 x) {
  x = _mm256_max_ps(_mm256_set1_ps(-87.0f), x);
  x = _mm256_min_ps(_mm256_set1_ps(88.0f), x);
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  // 2^n: n in [-126, 127] after the clamp, so the exponent field never overflows.
  const __m256i e =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

LUCID_AVX2 float ExpSum(float* s, int64_t n, float m) {
  const __m256 mv = _mm256_set1_ps(m);
  __m256 sum = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = Exp(_mm256_sub_ps(_mm256_loadu_ps(s + i), mv));
    _mm256_storeu_ps(s + i, e);
    sum = _mm256_add_ps(sum, e);
  }
  float r = Hsum(sum);
  for (; i < n; ++i) {
    float buf[8] = {s[i] - m, 0, 0, 0, 0, 0, 0, 0};
    _mm256_storeu_ps(buf, Exp(_mm256_loadu_ps(buf)));
    r += (s[i] = buf[0]);
  }
  return r;
}

LUCID_AVX2 void SwiGlu(const float* g, const float* u, float* o, int64_t n) {
  const __m256 one = _mm256_set1_ps(1.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 gv = _mm256_loadu_ps(g + i);
    const __m256 e = Exp(_mm256_sub_ps(_mm256_setzero_ps(), gv));
    _mm256_storeu_ps(
        o + i, _mm256_mul_ps(_mm256_div_ps(gv, _mm256_add_ps(one, e)), _mm256_loadu_ps(u + i)));
  }
  for (; i < n; ++i) {
    float buf[8] = {-g[i], 0, 0, 0, 0, 0, 0, 0};
    _mm256_storeu_ps(buf, Exp(_mm256_loadu_ps(buf)));
    o[i] = g[i] / (1.0f + buf[0]) * u[i];
  }
}

LUCID_AVX2 void WeightedRows(const float* const* rows, const float* p, int64_t nb, float* out,
                             int64_t R) {
  int64_t c = 0;
  for (; c + 64 <= R; c += 64) {
    __m256 a[8];
#pragma GCC unroll 8
    for (int v = 0; v < 8; ++v) a[v] = _mm256_loadu_ps(out + c + 8 * v);
    for (int64_t j = 0; j < nb; ++j) {
      const __m256 pj = _mm256_set1_ps(p[j]);
      const float* r = rows[j] + c;
#pragma GCC unroll 8
      for (int v = 0; v < 8; ++v) a[v] = _mm256_fmadd_ps(pj, _mm256_loadu_ps(r + 8 * v), a[v]);
    }
#pragma GCC unroll 8
    for (int v = 0; v < 8; ++v) _mm256_storeu_ps(out + c + 8 * v, a[v]);
  }
  for (; c < R; ++c) {
    float s = out[c];
    for (int64_t j = 0; j < nb; ++j) s += p[j] * rows[j][c];
    out[c] = s;
  }
}

// HB heads' weighted sums of the block's rows over columns [c, c + 32): each (head, column) summed
// over j in order from out, as WeightedRows, the 4 vectors of each row loaded once for all HB.
template <int HB>
LUCID_AVX2 __attribute__((always_inline)) inline void WeightedRowsHeads32(const float* const* rows,
                                                                          const float* p,
                                                                          int64_t ldp, int64_t nb,
                                                                          float* out, int64_t ldo,
                                                                          int64_t c) {
  __m256 a[HB][4];
#pragma GCC unroll 3
  for (int h = 0; h < HB; ++h)
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) a[h][v] = _mm256_loadu_ps(out + h * ldo + c + 8 * v);
  for (int64_t j = 0; j < nb; ++j) {
    const float* r = rows[j] + c;
    const __m256 r0 = _mm256_loadu_ps(r), r1 = _mm256_loadu_ps(r + 8), r2 = _mm256_loadu_ps(r + 16),
                 r3 = _mm256_loadu_ps(r + 24);
#pragma GCC unroll 3
    for (int h = 0; h < HB; ++h) {
      const __m256 ph = _mm256_broadcast_ss(p + h * ldp + j);
      a[h][0] = _mm256_fmadd_ps(ph, r0, a[h][0]);
      a[h][1] = _mm256_fmadd_ps(ph, r1, a[h][1]);
      a[h][2] = _mm256_fmadd_ps(ph, r2, a[h][2]);
      a[h][3] = _mm256_fmadd_ps(ph, r3, a[h][3]);
    }
  }
#pragma GCC unroll 3
  for (int h = 0; h < HB; ++h)
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) _mm256_storeu_ps(out + h * ldo + c + 8 * v, a[h][v]);
}

// KernelTable::weighted_rows_heads: 32 columns at a time for 3 heads at once (12 accumulators,
// 7 loads per 12 FMAs where WeightedRows per head does 9 per 8); columns past the last multiple
// of 32 per head through WeightedRows.
LUCID_AVX2 void WeightedRowsHeads(const float* const* rows, const float* p, int64_t ldp, int64_t H,
                                  int64_t nb, float* out, int64_t ldo, int64_t R) {
  const int64_t Rv = R / 32 * 32;
  for (int64_t c = 0; c < Rv; c += 32) {
    int64_t h = 0;
    for (; h + 3 <= H; h += 3)
      WeightedRowsHeads32<3>(rows, p + h * ldp, ldp, nb, out + h * ldo, ldo, c);
    if (H - h == 2) WeightedRowsHeads32<2>(rows, p + h * ldp, ldp, nb, out + h * ldo, ldo, c);
    if (H - h == 1) WeightedRowsHeads32<1>(rows, p + h * ldp, ldp, nb, out + h * ldo, ldo, c);
  }
  if (Rv == R) return;
  const float* tail[16];
  for (int64_t j = 0; j < nb; ++j) tail[j] = rows[j] + Rv;
  for (int64_t h = 0; h < H; ++h) WeightedRows(tail, p + h * ldp, nb, out + h * ldo + Rv, R - Rv);
}

// 8 weights of row `src` as f32 (bf16 widened exactly, or f32), of which the first `left` (< 8:
// the row's last columns) are read, the rest zero.
template <typename W>
LUCID_AVX2 inline __m256 LoadW8(const W* src, int64_t left) {
  if constexpr (sizeof(W) == 2) {
    if (left >= 8) return LoadBf16(src);
    uint16_t b[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t i = 0; i < left; ++i) b[i] = src[i];
    return LoadBf16(b);
  } else {
    return left >= 8 ? _mm256_loadu_ps(src) : _mm256_maskload_ps(src, avx2::TailMask8(left));
  }
}

// KernelTable::rows_axpy_bf16 / rows_axpy_f32 for T (1 or 2) tokens: 32 columns at a time, the
// sum over rows in order from zero, each weight vector used by both tokens.
template <int T, typename W>
LUCID_AVX2 void RowsAxpyT(const W* w, int64_t ldw, int64_t rows, const float* x, int64_t ldx,
                          int64_t C, float* y, int64_t ldy) {
  for (int64_t c0 = 0; c0 < C; c0 += 32) {
    const int64_t left = C - c0;
    __m256 acc[T][4];
#pragma GCC unroll 2
    for (int t = 0; t < T; ++t)
#pragma GCC unroll 4
      for (int v = 0; v < 4; ++v) acc[t][v] = _mm256_setzero_ps();
    for (int64_t r = 0; r < rows; ++r) {
      __m256 xv[T];
#pragma GCC unroll 2
      for (int t = 0; t < T; ++t) xv[t] = _mm256_broadcast_ss(x + t * ldx + r);
      const W* src = w + r * ldw + c0;
#pragma GCC unroll 4
      for (int v = 0; v < 4; ++v) {
        if (left <= 8 * v) break;
        const __m256 wv = LoadW8(src + 8 * v, left - 8 * v);
#pragma GCC unroll 2
        for (int t = 0; t < T; ++t) acc[t][v] = _mm256_fmadd_ps(xv[t], wv, acc[t][v]);
      }
    }
#pragma GCC unroll 2
    for (int t = 0; t < T; ++t)
#pragma GCC unroll 4
      for (int v = 0; v < 4; ++v) {
        if (left <= 8 * v) break;
        float* dst = y + t * ldy + c0 + 8 * v;
        if (left - 8 * v >= 8)
          _mm256_storeu_ps(dst, acc[t][v]);
        else
          _mm256_maskstore_ps(dst, avx2::TailMask8(left - 8 * v), acc[t][v]);
      }
  }
}

// One token, whole rows: y += x[r] * row r for each row in turn, so the weights are read in
// address order (8 rows side by side, or a strip of columns of every row, read 64 bytes 1 KB
// apart: 8.9 and 7.4 GB/s on one thread at the 1g shapes, against 15.5 this way); y stays in L1.
// y[c] gets the rows' products in row order from zero, as RowsAxpyT sums them.
template <typename W>
LUCID_AVX2 void RowsAxpyOne(const W* w, int64_t ldw, int64_t rows, const float* x, int64_t C,
                            float* y) {
  const int64_t body = C / 8 * 8;
  for (int64_t c = 0; c < C; ++c) y[c] = 0.0f;
  for (int64_t r = 0; r < rows; ++r) {
    const __m256 xr = _mm256_broadcast_ss(x + r);
    const W* row = w + r * ldw;
    for (int64_t c = 0; c < body; c += 8)
      _mm256_storeu_ps(y + c, _mm256_fmadd_ps(xr, LoadW8(row + c, 8), _mm256_loadu_ps(y + c)));
  }
  if (body < C) RowsAxpyT<1>(w + body, ldw, rows, x, 1, C - body, y + body, 1);
}

template <typename W>
LUCID_AVX2 void RowsAxpy(const W* w, int64_t ldw, int64_t rows, const float* x, int64_t ldx,
                         int64_t T, int64_t C, float* y, int64_t ldy) {
  int64_t t = 0;
  for (; t + 2 <= T; t += 2) RowsAxpyT<2>(w, ldw, rows, x + t * ldx, ldx, C, y + t * ldy, ldy);
  if (t == T) return;
  if (C >= 256)
    RowsAxpyOne(w, ldw, rows, x + t * ldx, C, y + t * ldy);
  else
    RowsAxpyT<1>(w, ldw, rows, x + t * ldx, ldx, C, y + t * ldy, ldy);
}

// dst[d * 16 + r] = rows[r][d] for r < n (0 for n <= r < 16), d < D: 8 x 8 blocks transposed in
// registers (avx2::Transpose8x8), rows 0-7 then 8-15 of each 8 columns.
LUCID_AVX2 void Transpose16(const float* const* rows, int64_t n, int64_t D, float* dst) {
  for (int64_t d0 = 0; d0 < D; d0 += 8) {
    const int64_t cols = D - d0 < 8 ? D - d0 : 8;
    const __m256i m = avx2::TailMask8(cols);
#pragma GCC unroll 2
    for (int half = 0; half < 2; ++half) {
      __m256 r[8];
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i) {
        const int64_t row = 8 * half + i;
        r[i] = row >= n    ? _mm256_setzero_ps()
               : cols == 8 ? _mm256_loadu_ps(rows[row] + d0)
                           : _mm256_maskload_ps(rows[row] + d0, m);
      }
      avx2::Transpose8x8(r);
#pragma GCC unroll 8
      for (int c = 0; c < 8; ++c)
        if (c < cols) _mm256_storeu_ps(dst + (d0 + c) * 16 + 8 * half, r[c]);
    }
  }
}

// Scores of up to 16 heads against N rows, heads in the lanes (two vectors): acc[i][v] lane h =
// sum over k of qT[16 k + 8 v + h] * rows[i][k], in k order from zero. Per k the heads' two q
// vectors are loaded once and each row's value is broadcast from memory into its two FMAs (no
// transpose of the rows, no reduction). Every 16 k (a cache line of each f32 row), line k / 16 of
// each warm row is asked for in L2, if it lies within warm_bytes.
template <int N>
LUCID_AVX2 __attribute__((always_inline)) inline void ScoreRows(const float* qT, int64_t K,
                                                                const float* const* rows,
                                                                __m256 (*acc)[2],
                                                                const char* const* warm,
                                                                int64_t warm_bytes) {
  __m256 a[N][2];
  const float* r[N];
#pragma GCC unroll 6
  for (int i = 0; i < N; ++i) {
    r[i] = rows[i];
    a[i][0] = a[i][1] = _mm256_setzero_ps();
  }
  int64_t k = 0;
  for (int64_t line = 0; k < K; ++line) {
    if (warm && 64 * line < warm_bytes) {
#pragma GCC unroll 6
      for (int i = 0; i < N; ++i) _mm_prefetch(warm[i] + 64 * line, _MM_HINT_T1);
    }
    for (const int64_t k1 = k + 16 < K ? k + 16 : K; k < k1; ++k) {
      const __m256 q0 = _mm256_loadu_ps(qT + 16 * k), q1 = _mm256_loadu_ps(qT + 16 * k + 8);
#pragma GCC unroll 6
      for (int i = 0; i < N; ++i) {
        const __m256 x = _mm256_broadcast_ss(r[i] + k);
        a[i][0] = _mm256_fmadd_ps(x, q0, a[i][0]);
        a[i][1] = _mm256_fmadd_ps(x, q1, a[i][1]);
      }
    }
  }
#pragma GCC unroll 6
  for (int i = 0; i < N; ++i) acc[i][0] = a[i][0], acc[i][1] = a[i][1];
}

// KernelTable::scores16: s[h * ld + j] = sum_k qT[16 k + h] * rows[j][k] for h < H <= 16, j < nb
// <= 16. Passes of 6, 6 and 4 rows (12 accumulators at most), then each 8 rows x 8 heads quarter
// transposed in registers and stored head by head (masked past nb).
LUCID_AVX2 void Scores16(const float* qT, int64_t K, const float* const* rows, int64_t nb,
                         int64_t H, float* s, int64_t ld, const void* const* warm,
                         int64_t warm_bytes) {
  const float* rr[16];
  for (int i = 0; i < 16; ++i) rr[i] = rows[i < nb ? i : nb - 1];
  const char* const* wr = reinterpret_cast<const char* const*>(warm);
  __m256 acc[16][2];
  ScoreRows<6>(qT, K, rr, acc, wr, warm_bytes);
  if (nb > 6) ScoreRows<6>(qT, K, rr + 6, acc + 6, wr ? wr + 6 : nullptr, warm_bytes);
  if (nb > 12) ScoreRows<4>(qT, K, rr + 12, acc + 12, wr ? wr + 12 : nullptr, warm_bytes);
  for (int half = 0; half < 2; ++half) {
    const int64_t j0 = 8 * half, left = nb - j0;
    if (left <= 0) break;
    const __m256i m = TailMask8(left);
    for (int v = 0; v < 2; ++v) {
      if (8 * v >= H) break;
      __m256 t[8];
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i) t[i] = acc[j0 + i < nb ? j0 + i : j0][v];
      avx2::Transpose8x8(t);  // t[c] = head 8 v + c over rows j0..j0 + 7
      for (int c = 0; c < 8 && 8 * v + c < H; ++c) {
        float* dst = s + (8 * v + c) * ld + j0;
        if (left >= 8)
          _mm256_storeu_ps(dst, t[c]);
        else
          _mm256_maskstore_ps(dst, m, t[c]);
      }
    }
  }
}

// KernelTable::indexer_sum16: out[j] += sum over h < heads, in order, of w[h] * max(s[h * ld + j],
// 0) for j < 16. relu as max(0, s): a NaN score stays NaN (max returns its second operand when
// one is NaN).
LUCID_AVX2 void IndexerSum16(const float* s, int64_t ld, const float* w, int64_t heads,
                             float* out) {
  const __m256 z = _mm256_setzero_ps();
  __m256 t0 = _mm256_loadu_ps(out), t1 = _mm256_loadu_ps(out + 8);
  for (int64_t h = 0; h < heads; ++h) {
    const __m256 wh = _mm256_set1_ps(w[h]);
    t0 = _mm256_fmadd_ps(wh, _mm256_max_ps(z, _mm256_loadu_ps(s + h * ld)), t0);
    t1 = _mm256_fmadd_ps(wh, _mm256_max_ps(z, _mm256_loadu_ps(s + h * ld + 8)), t1);
  }
  _mm256_storeu_ps(out, t0);
  _mm256_storeu_ps(out + 8, t1);
}

KernelTable MakeTable() {
  KernelTable t;
  t.isa = CpuIsa::kAvx2;
  t.vector_k = &VectorK;
  t.gemv_f32 = {&TileFma<1, 4, false>, 1, 4};
  t.gemm_f32 = {&TileFma<4, 3, false>, 4, 3};
  t.gemv_bf16 = {&TileFma<1, 4, true>, 1, 4};
  t.gemm_bf16 = {&TileFma<4, 3, true>, 4, 3};
  t.gemv_bf16_rows = {&TileBf16Rows<8>, 1, 8};
  t.dot = &Dot;
  t.axpy = &Axpy;
  t.scale = &Scale;
  t.scaled_mul = &ScaledMul;
  t.sum_squares = &SumSquares;
  t.swiglu = &SwiGlu;
  t.scores16 = &Scores16;
  t.indexer_sum16 = &IndexerSum16;
  t.transpose16 = &Transpose16;
  t.rows_axpy_bf16 = &RowsAxpy<uint16_t>;
  t.rows_axpy_f32 = &RowsAxpy<float>;
  t.exp_sum = &ExpSum;
  t.weighted_rows = &WeightedRows;
  t.weighted_rows_heads = &WeightedRowsHeads;
  t.widen_bf16 = &WidenBf16;
  t.widen_e4m3 = &WidenE4m3;
  t.split_bf16 = &SplitBf16;
  t.dequant_fp8 = &DequantFp8;
  t.dequant_nvfp4 = &DequantNvfp4;
  t.dequant_ggml = &DequantGgmlAvx2;
  t.gemv_ggml = &GemvGgmlAvx2;
  AddFp8TilesAvx2(t);
  AddNvfp4TilesAvx2(t);
  return t;
}

}  // namespace

const KernelTable& Avx2Kernels() {
  static const KernelTable t = MakeTable();
  return t;
}

}  // namespace lucid::fast
