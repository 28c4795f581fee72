// AVX-512 kernels (F/BW/VL/DQ, and AVX512_BF16 for the dp-bf16 tiles). Every function carries a
// target attribute; callers reach them only through the kernel table after CPUID said yes. The
// fused FP8/NVFP4 tiles live in cpu_fast_kernels_avx512_packed.cpp.
#include <algorithm>

#include "backends/cpu/cpu_fast_avx512_common.h"

namespace lucid::fast {
namespace {

using namespace avx512;  // NOLINT: the shared helpers of the AVX-512 files

// One k step of a tile: NR weight vectors (masked past the row end when kMasked), MR x vectors.
template <int MR, int NR, bool kBf16, bool kMasked>
LUCID_AVX512 __attribute__((always_inline)) inline void FmaStep(__m512 (&acc)[MR][NR],
                                                                const float* const* x,
                                                                const void* const* wv, int64_t k,
                                                                __mmask16 m) {
  __m512 w[NR];
#pragma GCC unroll 8
  for (int j = 0; j < NR; ++j) {
    if constexpr (kBf16) {
      const uint16_t* wp = static_cast<const uint16_t*>(wv[j]) + k;
      w[j] = kMasked ? LoadBf16Masked(wp, m) : LoadBf16(wp);
    } else {
      const float* wp = static_cast<const float*>(wv[j]) + k;
      w[j] = kMasked ? _mm512_maskz_loadu_ps(m, wp) : _mm512_loadu_ps(wp);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
    const __m512 xi = _mm512_loadu_ps(x[i] + k);
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_fmadd_ps(xi, w[j], acc[i][j]);
  }
}

// f32 or bf16 weights, f32 activations, 16 lanes.
template <int MR, int NR, bool kBf16>
LUCID_AVX512 void TileFma(const void* const* xv, const void* const*, const void* const* wv,
                          int64_t k0, int64_t k1, int64_t K, float* out) {
  const float* x[MR];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) x[i] = static_cast<const float*>(xv[i]);
  __m512 acc[MR][NR];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_setzero_ps();
  const int64_t full = k0 + std::min(k1 - k0, K - k0) / 16 * 16;
  int64_t k = k0;
  for (; k < full; k += 16) FmaStep<MR, NR, kBf16, false>(acc, x, wv, k, 0xFFFF);
  if (k < k1) FmaStep<MR, NR, kBf16, true>(acc, x, wv, k, TailMask16(K - k));
  Reduce<MR, NR>(acc, out);
}

// kLo: the activations come as the hi/lo split (two vdpbf16ps per pair); else as bf16 alone (hi
// rows only, xl unused: FastActivations::kBf16).
template <int MR, int NR, bool kMasked, bool kLo>
LUCID_AVX512BF16 __attribute__((always_inline)) inline void DpStep(__m512 (&acc)[MR][NR],
                                                                   const void* const* xh,
                                                                   const void* const* xl,
                                                                   const void* const* wv, int64_t k,
                                                                   __mmask32 m) {
  __m512bh w[NR];
#pragma GCC unroll 8
  for (int j = 0; j < NR; ++j) {
    const uint16_t* wp = static_cast<const uint16_t*>(wv[j]) + k;
    w[j] = (__m512bh)(kMasked ? _mm512_maskz_loadu_epi16(m, wp) : _mm512_loadu_si512(wp));
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
    const __m512bh h = (__m512bh)_mm512_loadu_si512(static_cast<const uint16_t*>(xh[i]) + k);
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], h, w[j]);
    if constexpr (kLo) {
      const __m512bh l = (__m512bh)_mm512_loadu_si512(static_cast<const uint16_t*>(xl[i]) + k);
#pragma GCC unroll 8
      for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], l, w[j]);
    }
  }
}

// bf16 weights against the hi/lo bf16 split of the activations (two vdpbf16ps per pair), or
// against bf16 activations alone (!kLo).
template <int MR, int NR, bool kLo>
LUCID_AVX512BF16 void TileDpBf16(const void* const* xh, const void* const* xl,
                                 const void* const* wv, int64_t k0, int64_t k1, int64_t K,
                                 float* out) {
  __m512 acc[MR][NR];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_setzero_ps();
  const int64_t full = k0 + std::min(k1 - k0, K - k0) / 32 * 32;
  const NextRows nx = NextRowGroup<NR>(wv);
  int64_t k = k0;
  if (k0 == 0 && k1 >= K && nx.stride == 2 * K) {  // whole rows (see PrefetchSpan)
    for (; k < full; k += 32) {
      PrefetchSpan<NR>(nx, 2 * k);
      DpStep<MR, NR, false, kLo>(acc, xh, xl, wv, k, 0xFFFFFFFFu);
    }
  }
  for (; k < full; k += 32) {
    PrefetchRows<NR>(nx, 2 * k);
    DpStep<MR, NR, false, kLo>(acc, xh, xl, wv, k, 0xFFFFFFFFu);
  }
  if (k < k1) {
    const int64_t left = K - k;
    DpStep<MR, NR, true, kLo>(acc, xh, xl, wv, k, left >= 32 ? 0xFFFFFFFFu : ((1u << left) - 1));
  }
  Reduce<MR, NR>(acc, out);
}

// One token against NR bf16 rows read one after another, each row from start to end: the group
// is one sequential stream, where TileDpBf16<1, NR> steps through its NR rows side by side.
// BM_LinearBig, one token, the ~45-50 GB/s state of the dev box: one thread 43 against 36 GB/s
// with bf16 activations and 38 against 33 with the hi/lo split; two threads 58-60 against 53-54
// and 57-59 against 49-51 (above the read probe's 48-53); in the ~80 GB/s state 91 against 74 with
// bf16 activations. Each row's next line 4 KB ahead (the next row) is asked for in L2: one thread,
// hi/lo, 38-40 against 33-34 GB/s without. Four accumulators per half (hi and lo apart), reduced
// per row, so rows shorter than ~1024 columns pay more in reductions than they gain (the expert
// down projections at K 512 were 4% slower): MatmulRows takes it for one token from
// kRowsGemvMinK columns.
template <int NR, bool kLo>
LUCID_AVX512BF16 void TileDpBf16Rows(const void* const* xh, const void* const* xl,
                                     const void* const* wv, int64_t k0, int64_t k1, int64_t K,
                                     float* out) {
  const int64_t end = std::min(k1, K);
  const int64_t full = k0 + (end - k0) / 128 * 128;
  const uint16_t* h = static_cast<const uint16_t*>(xh[0]);
  const uint16_t* l = kLo ? static_cast<const uint16_t*>(xl[0]) : nullptr;
  for (int j = 0; j < NR; ++j) {
    const uint16_t* w = static_cast<const uint16_t*>(wv[j]);
    __m512 a[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                   _mm512_setzero_ps()};
    __m512 b[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                   _mm512_setzero_ps()};
    int64_t k = k0;
    for (; k < full; k += 128) {
#pragma GCC unroll 4
      for (int u = 0; u < 4; ++u)
        _mm_prefetch(reinterpret_cast<const char*>(w + k + 32 * u) + kRowsPrefetchBytes,
                     _MM_HINT_T1);
#pragma GCC unroll 4
      for (int u = 0; u < 4; ++u) {
        const __m512bh wk = (__m512bh)_mm512_loadu_si512(w + k + 32 * u);
        a[u] = _mm512_dpbf16_ps(a[u], (__m512bh)_mm512_loadu_si512(h + k + 32 * u), wk);
        if constexpr (kLo)
          b[u] = _mm512_dpbf16_ps(b[u], (__m512bh)_mm512_loadu_si512(l + k + 32 * u), wk);
      }
    }
#pragma GCC unroll 4
    for (int u = 0; u < 4; ++u) a[u] = _mm512_add_ps(a[u], b[u]);
    for (; k < end; k += 32) {
      const int64_t left = end - k;
      const __mmask32 m = left >= 32 ? 0xFFFFFFFFu : ((1u << left) - 1);
      const __m512bh wk = (__m512bh)_mm512_maskz_loadu_epi16(m, w + k);
      a[0] = _mm512_dpbf16_ps(a[0], (__m512bh)_mm512_maskz_loadu_epi16(m, h + k), wk);
      if constexpr (kLo)
        a[0] = _mm512_dpbf16_ps(a[0], (__m512bh)_mm512_maskz_loadu_epi16(m, l + k), wk);
    }
    out[j] =
        _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a[0], a[1]), _mm512_add_ps(a[2], a[3])));
  }
}

// The vector loops below run whole 16-lane chunks with plain loads and stores and only the tail
// masked: masked loads and stores cost more than plain ones on Zen 5.
LUCID_AVX512 void WidenBf16(const uint16_t* src, float* dst, int64_t n) {
  int64_t k = 0;
  for (; k + 16 <= n; k += 16) _mm512_storeu_ps(dst + k, LoadBf16(src + k));
  if (k < n) {
    const __mmask16 m = TailMask16(n - k);
    _mm512_mask_storeu_ps(dst + k, m, LoadBf16Masked(src + k, m));
  }
}

// out[i] = e4m3(q[i]) * scale, rounded once: the codes become exact bf16 through the table
// (E4m3ToBf16), widened exactly to f32, times the scale. (Placing the e4m3 bits in the f32 fields
// and multiplying by 2^120 * scale was 1.8x slower on Zen 5.)
LUCID_AVX512 void DequantFp8(const uint8_t* q, float scale, float* out, int64_t n) {
  const E4m3Table t = LoadE4m3Table();
  const __m512 s = _mm512_set1_ps(scale);
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512i v = E4m3ToBf16(_mm256_loadu_si256((const __m256i*)(q + i)), t);
    _mm512_storeu_ps(out + i, _mm512_mul_ps(Bf16BitsToF32(_mm512_castsi512_si256(v)), s));
    _mm512_storeu_ps(out + i + 16,
                     _mm512_mul_ps(Bf16BitsToF32(_mm512_extracti64x4_epi64(v, 1)), s));
  }
  if (i < n) {
    const int64_t left = n - i;
    const __mmask32 m = left >= 32 ? 0xFFFFFFFFu : (1u << left) - 1;
    const __m512i v = E4m3ToBf16(_mm256_maskz_loadu_epi8(m, q + i), t);
    _mm512_mask_storeu_ps(out + i, static_cast<__mmask16>(m),
                          _mm512_mul_ps(Bf16BitsToF32(_mm512_castsi512_si256(v)), s));
    _mm512_mask_storeu_ps(out + i + 16, static_cast<__mmask16>(m >> 16),
                          _mm512_mul_ps(Bf16BitsToF32(_mm512_extracti64x4_epi64(v, 1)), s));
  }
}

// NVFP4: 16 values (8 bytes) per group; lanes 2i / 2i+1 take the low / high nibble of byte i, and
// vpermps looks the e2m1 value up (it reads only the low 4 bits of each index lane).
LUCID_AVX512 void DequantNvfp4(const uint8_t* q, const float* gs, float s2, float* out,
                               int64_t groups) {
  const __m512 lut = _mm512_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f, -0.5f,
                                    -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f);
  const __m512 s2v = _mm512_set1_ps(s2);
  for (int64_t g = 0; g < groups; ++g) {
    const __m512i b = _mm512_cvtepu8_epi64(_mm_loadl_epi64((const __m128i*)(q + 8 * g)));
    const __m512i idx = _mm512_or_si512(b, _mm512_slli_epi64(_mm512_srli_epi64(b, 4), 32));
    const __m512 v = _mm512_mul_ps(_mm512_permutexvar_ps(idx, lut), _mm512_set1_ps(gs[g]));
    _mm512_storeu_ps(out + 16 * g, _mm512_mul_ps(v, s2v));
  }
}

// e4m3fn codes to f32 through fp16: the magnitude bits shifted left by 7 are the fp16 of the
// value / 2^8 (subnormals included, which vcvtph2ps widens exactly), times 2^8 exactly; the sign is
// or-ed in and the NaN codes (0x7F, 0xFF) set to NaN.
LUCID_AVX512 void WidenE4m3(const uint8_t* src, float* dst, int64_t n) {
  const E4m3Table t = LoadE4m3Table();
  int64_t i = 0;
  // Whole runs of 32 with plain loads and stores: the exact bf16 of each code (E4m3ToBf16, NaN
  // codes to NaN), widened to f32 by a shift.
  for (; i + 32 <= n; i += 32) {
    // Scales are often cold (the MLA heads' kv_b_proj scales are read once per step): ask for
    // the line 256 bytes ahead (never faults).
    _mm_prefetch(reinterpret_cast<const char*>(src) + i + 256, _MM_HINT_T0);
    const __m512i v = E4m3ToBf16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i)), t);
    _mm512_storeu_ps(dst + i, Bf16BitsToF32(_mm512_castsi512_si256(v)));
    _mm512_storeu_ps(dst + i + 16, Bf16BitsToF32(_mm512_extracti64x4_epi64(v, 1)));
  }
  if (i < n) {
    const __m512i v = E4m3ToBf16(
        _mm256_maskz_loadu_epi8(static_cast<__mmask32>((1ull << (n - i)) - 1), src + i), t);
    _mm512_mask_storeu_ps(dst + i, TailMask16(n - i), Bf16BitsToF32(_mm512_castsi512_si256(v)));
    if (n - i > 16)
      _mm512_mask_storeu_ps(dst + i + 16, TailMask16(n - i - 16),
                            Bf16BitsToF32(_mm512_extracti64x4_epi64(v, 1)));
  }
}

// The hi/lo split with vcvtneps2bf16 (round to nearest even; NaN to quiet NaN).
LUCID_AVX512BF16 void SplitBf16(const float* x, uint16_t* hi, uint16_t* lo, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = TailMask16(n - i);
    const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
    const __m256i h = (__m256i)_mm512_cvtneps_pbh(v);
    const __m512 hf = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    const __m256i l = (__m256i)_mm512_cvtneps_pbh(_mm512_sub_ps(v, hf));
    _mm256_mask_storeu_epi16(hi + i, m, h);
    _mm256_mask_storeu_epi16(lo + i, m, l);
  }
}

int64_t VectorK(int64_t K) { return K; }  // masked tails: the tiles cover every column

LUCID_AVX512 float Dot(const float* a, const float* b, int64_t n) {
  __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
    s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), s1);
  }
  for (; i < n; i += 16) {
    const __mmask16 m = TailMask16(n - i);
    s0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), s0);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
}

LUCID_AVX512 void Axpy(float a, const float* x, float* y, int64_t n) {
  const __m512 av = _mm512_set1_ps(a);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(y + i, _mm512_fmadd_ps(av, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
  if (i < n) {
    const __mmask16 m = TailMask16(n - i);
    _mm512_mask_storeu_ps(
        y + i, m,
        _mm512_fmadd_ps(av, _mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i)));
  }
}

// y_t[c] = sum over r < rows of x_t[r] * w[r * ldw + c] for c < C, t < T <= 2, with bf16 w
// widened in registers by interleaving with zero words (vpunpck{l,h}wd): the accumulators hold the
// columns in lane-interleaved order, put back in order by vpermt2ps at the store. Each column's
// sum runs over r in order with one FMA per row, as an axpy per row would.
template <int T>
LUCID_AVX512 void RowsAxpyBf16T(const uint16_t* w, int64_t ldw, int64_t rows, const float* x,
                                int64_t ldx, int64_t C, float* y, int64_t ldy) {
  const __m512i z = _mm512_setzero_si512();
  const __m512i idx0 = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23);
  const __m512i idx1 =
      _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31);
  for (int64_t c0 = 0; c0 < C; c0 += 128) {
    __mmask32 m[4];
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) {
      const int64_t left = C - c0 - 32 * v;
      m[v] = left >= 32 ? 0xFFFFFFFFu : left <= 0 ? 0u : (1u << left) - 1;
    }
    __m512 acc[T][8];
#pragma GCC unroll 2
    for (int t = 0; t < T; ++t)
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i) acc[t][i] = _mm512_setzero_ps();
    for (int64_t r = 0; r < rows; ++r) {
      __m512 xv[T];
#pragma GCC unroll 2
      for (int t = 0; t < T; ++t) xv[t] = _mm512_set1_ps(x[t * ldx + r]);
#pragma GCC unroll 4
      for (int v = 0; v < 4; ++v) {
        // Plain loads for whole vectors: masked loads cost more on Zen 5.
        const uint16_t* src = w + r * ldw + c0 + 32 * v;
        const __m512i wv =
            m[v] == 0xFFFFFFFFu ? _mm512_loadu_si512(src) : _mm512_maskz_loadu_epi16(m[v], src);
        const __m512 a = _mm512_castsi512_ps(_mm512_unpacklo_epi16(z, wv));
        const __m512 b = _mm512_castsi512_ps(_mm512_unpackhi_epi16(z, wv));
#pragma GCC unroll 2
        for (int t = 0; t < T; ++t) {
          acc[t][2 * v] = _mm512_fmadd_ps(xv[t], a, acc[t][2 * v]);
          acc[t][2 * v + 1] = _mm512_fmadd_ps(xv[t], b, acc[t][2 * v + 1]);
        }
      }
    }
#pragma GCC unroll 2
    for (int t = 0; t < T; ++t)
#pragma GCC unroll 4
      for (int v = 0; v < 4; ++v) {
        float* dst = y + t * ldy + c0 + 32 * v;
        _mm512_mask_storeu_ps(dst, static_cast<__mmask16>(m[v]),
                              _mm512_permutex2var_ps(acc[t][2 * v], idx0, acc[t][2 * v + 1]));
        _mm512_mask_storeu_ps(dst + 16, static_cast<__mmask16>(m[v] >> 16),
                              _mm512_permutex2var_ps(acc[t][2 * v], idx1, acc[t][2 * v + 1]));
      }
  }
}

// The same for f32 rows (weights decoded beforehand): 8 vectors of 16 columns per token.
template <int T>
LUCID_AVX512 void RowsAxpyF32T(const float* w, int64_t ldw, int64_t rows, const float* x,
                               int64_t ldx, int64_t C, float* y, int64_t ldy) {
  for (int64_t c0 = 0; c0 < C; c0 += 128) {
    __mmask16 m[8];
#pragma GCC unroll 8
    for (int v = 0; v < 8; ++v) m[v] = TailMask16(C - c0 - 16 * v > 0 ? C - c0 - 16 * v : 0);
    __m512 acc[T][8];
#pragma GCC unroll 2
    for (int t = 0; t < T; ++t)
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i) acc[t][i] = _mm512_setzero_ps();
    for (int64_t r = 0; r < rows; ++r) {
      __m512 xv[T];
#pragma GCC unroll 2
      for (int t = 0; t < T; ++t) xv[t] = _mm512_set1_ps(x[t * ldx + r]);
#pragma GCC unroll 8
      for (int v = 0; v < 8; ++v) {
        const float* src = w + r * ldw + c0 + 16 * v;
        const __m512 wv = m[v] == 0xFFFF ? _mm512_loadu_ps(src) : _mm512_maskz_loadu_ps(m[v], src);
#pragma GCC unroll 2
        for (int t = 0; t < T; ++t) acc[t][v] = _mm512_fmadd_ps(xv[t], wv, acc[t][v]);
      }
    }
#pragma GCC unroll 2
    for (int t = 0; t < T; ++t)
#pragma GCC unroll 8
      for (int v = 0; v < 8; ++v) _mm512_mask_storeu_ps(y + t * ldy + c0 + 16 * v, m[v], acc[t][v]);
  }
}

LUCID_AVX512 void RowsAxpyF32(const float* w, int64_t ldw, int64_t rows, const float* x,
                              int64_t ldx, int64_t T, int64_t C, float* y, int64_t ldy) {
  int64_t t = 0;
  for (; t + 2 <= T; t += 2) RowsAxpyF32T<2>(w, ldw, rows, x + t * ldx, ldx, C, y + t * ldy, ldy);
  if (t < T) RowsAxpyF32T<1>(w, ldw, rows, x + t * ldx, ldx, C, y + t * ldy, ldy);
}

LUCID_AVX512 void RowsAxpyBf16(const uint16_t* w, int64_t ldw, int64_t rows, const float* x,
                               int64_t ldx, int64_t T, int64_t C, float* y, int64_t ldy) {
  int64_t t = 0;
  for (; t + 2 <= T; t += 2) RowsAxpyBf16T<2>(w, ldw, rows, x + t * ldx, ldx, C, y + t * ldy, ldy);
  if (t < T) RowsAxpyBf16T<1>(w, ldw, rows, x + t * ldx, ldx, C, y + t * ldy, ldy);
}

LUCID_AVX512 void Scale(float a, float* y, int64_t n) {
  const __m512 av = _mm512_set1_ps(a);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, _mm512_mul_ps(av, _mm512_loadu_ps(y + i)));
  if (i < n) {
    const __mmask16 m = TailMask16(n - i);
    _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(av, _mm512_maskz_loadu_ps(m, y + i)));
  }
}

LUCID_AVX512 void ScaledMul(const float* x, const float* w, float inv, float* y, int64_t n) {
  const __m512 iv = _mm512_set1_ps(inv);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(
        y + i, _mm512_mul_ps(_mm512_loadu_ps(w + i), _mm512_mul_ps(_mm512_loadu_ps(x + i), iv)));
  if (i < n) {
    const __mmask16 m = TailMask16(n - i);
    const __m512 xn = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), iv);
    _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, w + i), xn));
  }
}

LUCID_AVX512 float SumSquares(const float* x, int64_t n) {
  __m512 s = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    s = _mm512_fmadd_ps(v, v, s);
  }
  if (i < n) {
    const __m512 v = _mm512_maskz_loadu_ps(TailMask16(n - i), x + i);
    s = _mm512_fmadd_ps(v, v, s);
  }
  return _mm512_reduce_add_ps(s);
}

// exp(x) for x <= ~88, Cephes-style polynomial on 2^n * e^r (relative error ~1e-7). NaN stays
// NaN: max/min return their second operand when one is NaN, so x goes second.
LUCID_AVX512 inline __m512 Exp(__m512 x) {
  x = _mm512_max_ps(_mm512_set1_ps(-87.0f), x);
  x = _mm512_min_ps(_mm512_set1_ps(88.0f), x);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(p, n);
}

LUCID_AVX512 void SwiGlu(const float* g, const float* u, float* o, int64_t n) {
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = TailMask16(n - i);
    const __m512 gv = _mm512_maskz_loadu_ps(m, g + i);
    const __m512 e = Exp(_mm512_sub_ps(_mm512_setzero_ps(), gv));
    const __m512 s = _mm512_div_ps(gv, _mm512_add_ps(one, e));
    _mm512_mask_storeu_ps(o + i, m, _mm512_mul_ps(s, _mm512_maskz_loadu_ps(m, u + i)));
  }
}

LUCID_AVX512 float ExpSum(float* s, int64_t n, float m) {
  const __m512 mv = _mm512_set1_ps(m);
  __m512 sum = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = TailMask16(n - i);
    const __m512 e = Exp(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, s + i), mv));
    _mm512_mask_storeu_ps(s + i, k, e);
    sum = _mm512_mask_add_ps(sum, k, sum, e);
  }
  return _mm512_reduce_add_ps(sum);
}

// Eight accumulators (128 floats) per pass over the block's rows.
LUCID_AVX512 void WeightedRows(const float* const* rows, const float* p, int64_t nb, float* out,
                               int64_t R) {
  int64_t c = 0;
  for (; c + 128 <= R; c += 128) {
    __m512 a[8];
#pragma GCC unroll 8
    for (int v = 0; v < 8; ++v) a[v] = _mm512_loadu_ps(out + c + 16 * v);
    for (int64_t j = 0; j < nb; ++j) {
      const __m512 pj = _mm512_set1_ps(p[j]);
      const float* r = rows[j] + c;
#pragma GCC unroll 8
      for (int v = 0; v < 8; ++v) a[v] = _mm512_fmadd_ps(pj, _mm512_loadu_ps(r + 16 * v), a[v]);
    }
#pragma GCC unroll 8
    for (int v = 0; v < 8; ++v) _mm512_storeu_ps(out + c + 16 * v, a[v]);
  }
  for (; c < R; c += 16) {
    const __mmask16 m = TailMask16(R - c);
    __m512 a = _mm512_maskz_loadu_ps(m, out + c);
    for (int64_t j = 0; j < nb; ++j)
      a = _mm512_fmadd_ps(_mm512_set1_ps(p[j]), _mm512_maskz_loadu_ps(m, rows[j] + c), a);
    _mm512_mask_storeu_ps(out + c, m, a);
  }
}

// G heads over one chunk of 16 x V columns: each row vector is loaded once (the empty asm keeps
// GCC from folding the load into every head's FMA, which doubled the loads) and feeds G FMAs;
// G x V accumulators.
template <int G, int V>
LUCID_AVX512 __attribute__((always_inline)) inline void WeightedChunk(const float* const* rows,
                                                                      int64_t c, const float* p,
                                                                      int64_t ldp, int64_t nb,
                                                                      float* out, int64_t ldo) {
  __m512 a[G][V];
#pragma GCC unroll 4
  for (int g = 0; g < G; ++g)
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) a[g][v] = _mm512_loadu_ps(out + g * ldo + c + 16 * v);
  for (int64_t j = 0; j < nb; ++j) {
    const float* r = rows[j] + c;
    __m512 x[V];
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) {
      x[v] = _mm512_loadu_ps(r + 16 * v);
      asm("" : "+v"(x[v]));
    }
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) {
      const __m512 pg = _mm512_set1_ps(p[g * ldp + j]);
#pragma GCC unroll 8
      for (int v = 0; v < V; ++v) a[g][v] = _mm512_fmadd_ps(pg, x[v], a[g][v]);
    }
  }
#pragma GCC unroll 4
  for (int g = 0; g < G; ++g)
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) _mm512_storeu_ps(out + g * ldo + c + 16 * v, a[g][v]);
}

// All heads, column chunk by chunk: the rows' 64-column slice (4 KB for 16 rows) stays in L1
// while every group of 4 heads uses it; per row, 4 vector loads and 4 broadcasts feed 16 FMAs.
// (Head pairs over whole rows, with GCC folding each row load into both heads' FMAs: BM_MlaDecode
// 2048 rows 272 us, that pass 42% of it.)
LUCID_AVX512 void WeightedRowsHeads(const float* const* rows, const float* p, int64_t ldp,
                                    int64_t H, int64_t nb, float* out, int64_t ldo, int64_t R) {
  int64_t c = 0;
  for (; c + 64 <= R; c += 64) {
    int64_t h = 0;
    for (; h + 4 <= H; h += 4)
      WeightedChunk<4, 4>(rows, c, p + h * ldp, ldp, nb, out + h * ldo, ldo);
    for (; h < H; ++h) WeightedChunk<1, 4>(rows, c, p + h * ldp, ldp, nb, out + h * ldo, ldo);
  }
  if (c < R) {
    const float* tail[16];
    for (int64_t j = 0; j < nb; ++j) tail[j] = rows[j] + c;
    for (int64_t h = 0; h < H; ++h) WeightedRows(tail, p + h * ldp, nb, out + h * ldo + c, R - c);
  }
}

// The indexer's sum over heads of scores16's output (the AVX-512 indexer scores its keys with
// scores16, heads in the lanes, so it needs no indexer_block: the scalar one completes the table).
// relu as max(0, s): a NaN score stays NaN (max returns its second operand when one is NaN).
LUCID_AVX512 void IndexerSum16(const float* s, int64_t ld, const float* w, int64_t heads,
                               float* out) {
  const __m512 z = _mm512_setzero_ps();
  __m512 total = _mm512_loadu_ps(out);
  for (int64_t h = 0; h < heads; ++h)
    total =
        _mm512_fmadd_ps(_mm512_set1_ps(w[h]), _mm512_max_ps(z, _mm512_loadu_ps(s + h * ld)), total);
  _mm512_storeu_ps(out, total);
}

// dst[d * 16 + r] = rows[r][d] for r < n (0 for n <= r < 16), d < D: 16 x 16 blocks transposed
// in registers (Transpose16x16).
LUCID_AVX512 void Transpose16(const float* const* rows, int64_t n, int64_t D, float* dst) {
  for (int64_t d0 = 0; d0 < D; d0 += 16) {
    const int64_t cols = D - d0 < 16 ? D - d0 : 16;
    const __mmask16 m = TailMask16(cols);
    __m512 r[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i)
      r[i] = i >= n       ? _mm512_setzero_ps()
             : cols == 16 ? _mm512_loadu_ps(rows[i] + d0)
                          : _mm512_maskz_loadu_ps(m, rows[i] + d0);
    Transpose16x16(r);
#pragma GCC unroll 16
    for (int c = 0; c < 16; ++c)
      if (c < cols) _mm512_storeu_ps(dst + (d0 + c) * 16, r[c]);
  }
}

// Scores of up to 16 heads against N rows: acc[i] lane h = sum_k qT[16 k + h] * rows[i][k]. One
// vector of the heads' q per k and each row's value broadcast from memory into its FMA. Every 16
// k (a cache line of each row), line k / 16 of each warm row is asked for in L2, if it lies
// within warm_bytes: spread this way, the next block's rows stream in under the FMAs (asked for
// all at once before the block, 576 prefetches of f32 rows queue up and stall the thread).
template <int N>
LUCID_AVX512 __attribute__((always_inline)) inline void ScoreRows(const float* qT, int64_t K,
                                                                  const float* const* rows,
                                                                  __m512* acc,
                                                                  const char* const* warm,
                                                                  int64_t warm_bytes) {
  const float* r[N];
#pragma GCC unroll 8
  for (int i = 0; i < N; ++i) {
    r[i] = rows[i];
    acc[i] = _mm512_setzero_ps();
  }
  int64_t k = 0;
  for (int64_t line = 0; k < K; ++line) {
    if (warm && 64 * line < warm_bytes) {
#pragma GCC unroll 8
      for (int i = 0; i < N; ++i) _mm_prefetch(warm[i] + 64 * line, _MM_HINT_T1);
    }
    for (const int64_t k1 = std::min(K, k + 16); k < k1; ++k) {
      const __m512 q = _mm512_loadu_ps(qT + 16 * k);
#pragma GCC unroll 8
      for (int i = 0; i < N; ++i) acc[i] = _mm512_fmadd_ps(_mm512_set1_ps(r[i][k]), q, acc[i]);
    }
  }
}

// s[h * ld + j] = sum_k qT[16 k + h] * rows[j][k] for h < H <= 16, j < nb <= 16: two passes of 8
// rows, then the 16 x 16 block transposed in registers.
LUCID_AVX512 void Scores16(const float* qT, int64_t K, const float* const* rows, int64_t nb,
                           int64_t H, float* s, int64_t ld, const void* const* warm,
                           int64_t warm_bytes) {
  const float* rr[16];
  for (int i = 0; i < 16; ++i) rr[i] = rows[i < nb ? i : nb - 1];
  const char* const* wr = reinterpret_cast<const char* const*>(warm);
  __m512 acc[16];
  ScoreRows<8>(qT, K, rr, acc, wr, warm_bytes);
  if (nb > 8) {
    ScoreRows<8>(qT, K, rr + 8, acc + 8, wr ? wr + 8 : nullptr, warm_bytes);
  } else {
    for (int i = 8; i < 16; ++i) acc[i] = _mm512_setzero_ps();
  }
  Transpose16x16(acc);
  const __mmask16 m = TailMask16(nb);
  for (int64_t h = 0; h < H; ++h) _mm512_mask_storeu_ps(s + h * ld, m, acc[h]);
}

KernelTable MakeTable(bool bf16) {
  KernelTable t;
  t.isa = bf16 ? CpuIsa::kAvx512Bf16 : CpuIsa::kAvx512;
  t.vector_k = &VectorK;
  t.gemv_f32 = {&TileFma<1, 8, false>, 1, 8};
  t.gemm_f32 = {&TileFma<4, 4, false>, 4, 4};
  if (bf16) {
    t.gemv_bf16 = {&TileDpBf16<1, 8, true>, 1, 8};
    t.gemv_bf16_rows = {&TileDpBf16Rows<8, true>, 1, 8};
    // 4 tokens x 6 rows: 24 accumulators, 6 weight vectors and the hi/lo pair fill the 32
    // registers (against 4 x 4: 370 vs 295 GFLOP/s at 16 tokens, 407 vs 322 at 32).
    t.gemm_bf16 = {&TileDpBf16<4, 6, true>, 4, 6};
    t.hi_only.gemv_bf16 = {&TileDpBf16<1, 8, false>, 1, 8};
    t.hi_only.gemv_bf16_rows = {&TileDpBf16Rows<8, false>, 1, 8};
    t.hi_only.gemm_bf16 = {&TileDpBf16<4, 6, false>, 4, 6};
    t.bf16_split = true;
    t.split_bf16 = &SplitBf16;
    AddFusedPackedTiles(t);
  } else {
    t.gemv_bf16 = {&TileFma<1, 8, true>, 1, 8};
    t.gemm_bf16 = {&TileFma<4, 4, true>, 4, 4};
  }
  t.dot = &Dot;
  t.axpy = &Axpy;
  t.scale = &Scale;
  t.scaled_mul = &ScaledMul;
  t.sum_squares = &SumSquares;
  t.swiglu = &SwiGlu;
  t.indexer_sum16 = &IndexerSum16;
  t.transpose16 = &Transpose16;
  t.scores16 = &Scores16;
  t.rows_axpy_bf16 = &RowsAxpyBf16;
  t.rows_axpy_f32 = &RowsAxpyF32;
  t.exp_sum = &ExpSum;
  t.weighted_rows = &WeightedRows;
  t.weighted_rows_heads = &WeightedRowsHeads;
  t.widen_bf16 = &WidenBf16;
  if (!t.widen_e4m3) t.widen_e4m3 = &WidenE4m3;  // the avx512bf16 level has a VBMI one
  t.dequant_fp8 = &DequantFp8;
  t.dequant_nvfp4 = &DequantNvfp4;
  t.dequant_ggml = &DequantGgmlAvx2;
  t.gemv_ggml = &GemvGgmlAvx2;
  return t;
}

}  // namespace

const KernelTable& Avx512Kernels() {
  static const KernelTable t = MakeTable(false);
  return t;
}
const KernelTable& Avx512Bf16Kernels() {
  static const KernelTable t = MakeTable(true);
  return t;
}

}  // namespace lucid::fast
