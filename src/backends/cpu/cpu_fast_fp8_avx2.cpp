// AVX2 + FMA + F16C tiles for FP8-block weights (e4m3 codes, 128-column block scales) against f32
// activations, the codes decoded in registers (KernelTable::fp8_f32_tiles).
//
// Decode: a code's bits s eeee mmm placed as the f16 s 0eeee mmm0000000 are exactly e4m3 / 256,
// normals and subnormals alike (both formats' subnormals line up under that shift), so vcvtph2ps
// gives the code's value / 256 and the tile multiplies its sums by 256 at the end. Per 32 codes:
// vpunpck{l,h}bw with zero (each code in a 16-bit lane's high byte), vpsraw by 1 and an AND with
// 0xBF80 (sign to bit 15, bit 14 clear, magnitude to bits 13..7), four vcvtph2ps. The two NaN
// codes (0x7F, 0xFF) would decode to +-480 / 256: the tiles keep the byte max of (code & 0x7F)
// over each block of their rows and, where it reaches 0x7F, set the rows holding one to NaN (as
// any sum with a NaN product is).
//
// One token reads each row of its group from start to end (TileFp8F32Rows: the group is one
// ascending stream, as the AVX-512 TileFp8Rows); 2 to 8 tokens walk their rows block by block
// (TileFp8F32: each decoded vector serves every token, the tokens' 128-column block of x stays in
// L1 over the rows, read from the driver's panel of blocks at constant offsets).
#include <cstddef>

#include "backends/cpu/cpu_fast_avx2_common.h"
#include "backends/cpu/cpu_fast_kernels.h"
#include "core/dtype.h"

namespace lucid::fast {
namespace {

// 32 codes as f32 values / 256: v[0] columns 0-7, v[1] 16-23, v[2] 8-15, v[3] 24-31 (the lane
// order vpunpck{l,h}bw leaves them in; kCol gives each vector's first column).
constexpr int kCol[4] = {0, 16, 8, 24};

LUCID_AVX2 __attribute__((always_inline)) inline void E4m3x32(__m256i c, __m256 (&v)[4]) {
  const __m256i zero = _mm256_setzero_si256();
  const __m256i mask = _mm256_set1_epi16(static_cast<short>(0xBF80));
  const __m256i lo = _mm256_and_si256(_mm256_srai_epi16(_mm256_unpacklo_epi8(zero, c), 1), mask);
  const __m256i hi = _mm256_and_si256(_mm256_srai_epi16(_mm256_unpackhi_epi8(zero, c), 1), mask);
  v[0] = _mm256_cvtph_ps(_mm256_castsi256_si128(lo));
  v[1] = _mm256_cvtph_ps(_mm256_extracti128_si256(lo, 1));
  v[2] = _mm256_cvtph_ps(_mm256_castsi256_si128(hi));
  v[3] = _mm256_cvtph_ps(_mm256_extracti128_si256(hi, 1));
}

// 32 codes from p, of which the first n (< 32) are read; the rest are zero.
LUCID_AVX2 inline __m256i LoadTail(const uint8_t* p, int64_t n) {
  alignas(32) uint8_t b[32] = {};
  for (int64_t i = 0; i < n; ++i) b[i] = p[i];
  return _mm256_load_si256(reinterpret_cast<const __m256i*>(b));
}

// Whether any byte of m is 0x7F (m holds maxima of code & 0x7F).
LUCID_AVX2 inline bool HasNan(__m256i m) {
  return _mm256_movemask_epi8(_mm256_cmpeq_epi8(m, _mm256_set1_epi8(0x7F))) != 0;
}

// Whether codes [b0, b1) of row w hold a NaN code.
LUCID_AVX2 bool RowBlockNan(const uint8_t* w, int64_t b0, int64_t b1) {
  __m256i m = _mm256_setzero_si256();
  const __m256i low7 = _mm256_set1_epi8(0x7F);
  for (int64_t k = b0; k < b1; k += 32) {
    const __m256i c = b1 - k >= 32 ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + k))
                                   : LoadTail(w + k, b1 - k);
    m = _mm256_max_epu8(m, _mm256_and_si256(c, low7));
  }
  return HasNan(m);
}

using avx2::Hsum;

// The four 32-code steps of one row's block (codes k0.. of wj, up to k1 when kTail) against M
// tokens whose block xb holds token i's 128 values at xb + 128 * i: V sums per token into acc,
// the block's NaN-code maxima into nan. A whole block (kTail false) has no bounds check.
template <int M, int V, bool kTail>
LUCID_AVX2 __attribute__((always_inline)) inline void Fp8BlockSteps(const float* xb,
                                                                    const uint8_t* wj, int64_t k0,
                                                                    int64_t k1, __m256 (&acc)[M][V],
                                                                    __m256i& nan) {
  const __m256i low7 = _mm256_set1_epi8(0x7F);
  constexpr int kSteps = 4;
#pragma GCC unroll 4
  for (int s = 0; s < kSteps; ++s) {
    const int64_t k = k0 + 32 * s;
    if (kTail && k >= k1) break;
    const __m256i c = kTail && k1 - k < 32
                          ? LoadTail(wj + k, k1 - k)
                          : _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wj + k));
    nan = _mm256_max_epu8(nan, _mm256_and_si256(c, low7));
    __m256 v[4];
    E4m3x32(c, v);
#pragma GCC unroll 4
    for (int p = 0; p < 4; ++p)
#pragma GCC unroll 8
      for (int i = 0; i < M; ++i)
        acc[i][p % V] =
            _mm256_fmadd_ps(_mm256_loadu_ps(xb + 128 * i + 32 * s + kCol[p]), v[p], acc[i][p % V]);
  }
}

// M tokens (x[0]: their panel of 128-column blocks, KernelTable::Fp8F32Tile) against NR FP8 rows
// w[j] of K codes (none read at k >= K) with block scales sc[j][b]: out[i * NR + j]. The rows are
// walked block by block (the M x 128 activations of a block stay in L1 over the NR rows); each
// row's block runs V sums per token (4 for 1-2 tokens, 2 for 3-4, 1 from 5: 4 to 8 independent
// FMA chains), added into the row's total times the block's scale at its end. Whole blocks run
// four unrolled steps with no bounds check (a check per step, or a step loop GCC leaves rolled,
// cost ~20% of the 8-token tile); the last, partial block takes the checked steps.
template <int M, int NR>
LUCID_AVX2 void TileFp8F32(const float* const* x, const uint8_t* const* w, const float* const* sc,
                           int64_t K, float* out) {
  constexpr int V = M <= 2 ? 4 : M <= 4 ? 2 : 1;
  __m256 tot[M][NR];
#pragma GCC unroll 8
  for (int i = 0; i < M; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) tot[i][j] = _mm256_setzero_ps();
  // The same block of the next row group's rows (MatmulFp8F32 passes NR consecutive rows) asked
  // for in L2 as each row's block starts: the hardware prefetcher alone leaves 2-8 tokens waiting
  // on memory.
  const std::ptrdiff_t ahead = NR > 1 ? (w[1] - w[0]) * NR : 0;
  for (int64_t b0 = 0, blk = 0; b0 < K; b0 += 128, ++blk) {
    const bool whole = b0 + 128 <= K;
    __m256i nan = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) {
      const uint8_t* wj = w[j];
      if (ahead != 0) {
        _mm_prefetch(reinterpret_cast<const char*>(wj + b0 + ahead), _MM_HINT_T1);
        _mm_prefetch(reinterpret_cast<const char*>(wj + b0 + ahead) + 64, _MM_HINT_T1);
      }
      __m256 acc[M][V];
#pragma GCC unroll 8
      for (int i = 0; i < M; ++i)
#pragma GCC unroll 4
        for (int u = 0; u < V; ++u) acc[i][u] = _mm256_setzero_ps();
      const float* xb = x[0] + blk * M * 128;
      if (__builtin_expect(whole, 1))
        Fp8BlockSteps<M, V, false>(xb, wj, b0, b0 + 128, acc, nan);
      else
        Fp8BlockSteps<M, V, true>(xb, wj, b0, K, acc, nan);
      const __m256 s = _mm256_set1_ps(sc[j][blk]);
#pragma GCC unroll 8
      for (int i = 0; i < M; ++i) {
        __m256 a = acc[i][0];
#pragma GCC unroll 4
        for (int u = 1; u < V; ++u) a = _mm256_add_ps(a, acc[i][u]);
        tot[i][j] = _mm256_fmadd_ps(a, s, tot[i][j]);
      }
    }
    if (__builtin_expect(HasNan(nan), 0)) {
      const int64_t b1 = whole ? b0 + 128 : K;
      for (int j = 0; j < NR; ++j)
        if (RowBlockNan(w[j], b0, b1))
          for (int i = 0; i < M; ++i) tot[i][j] = _mm256_set1_ps(__builtin_nanf(""));
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < M; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) out[i * NR + j] = Hsum(tot[i][j]) * 256.0f;
}

// One token against NR rows read one after another, each from start to end (the row group is one
// ascending stream; the line kAheadBytes ahead is asked for in L2 as each block starts): per
// block four sums (one per vector of a 32-code step), added into the row's total times the
// block's scale. The NaN check runs over the whole row: a NaN code makes the row's sum NaN.
constexpr int64_t kAheadBytes = 4096;
template <int NR>
LUCID_AVX2 void TileFp8F32Rows(const float* const* xv, const uint8_t* const* w,
                               const float* const* sc, int64_t K, float* out) {
  const float* x = xv[0];
  const __m256i low7 = _mm256_set1_epi8(0x7F);
  for (int j = 0; j < NR; ++j) {
    const uint8_t* wj = w[j];
    const float* s = sc[j];
    __m256 tot = _mm256_setzero_ps();
    __m256i nan = _mm256_setzero_si256();
    int64_t b0 = 0, blk = 0;
    for (; b0 + 128 <= K; b0 += 128, ++blk) {
      _mm_prefetch(reinterpret_cast<const char*>(wj + b0) + kAheadBytes, _MM_HINT_T1);
      _mm_prefetch(reinterpret_cast<const char*>(wj + b0) + kAheadBytes + 64, _MM_HINT_T1);
      __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                       _mm256_setzero_ps()};
#pragma GCC unroll 4
      for (int64_t k = b0; k < b0 + 128; k += 32) {
        const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wj + k));
        nan = _mm256_max_epu8(nan, _mm256_and_si256(c, low7));
        __m256 v[4];
        E4m3x32(c, v);
#pragma GCC unroll 4
        for (int p = 0; p < 4; ++p)
          acc[p] = _mm256_fmadd_ps(_mm256_loadu_ps(x + k + kCol[p]), v[p], acc[p]);
      }
      const __m256 a = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
      tot = _mm256_fmadd_ps(a, _mm256_set1_ps(s[blk]), tot);
    }
    if (b0 < K) {  // the last, partial block
      __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                       _mm256_setzero_ps()};
      for (int64_t k = b0; k < K; k += 32) {
        const __m256i c = K - k >= 32 ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wj + k))
                                      : LoadTail(wj + k, K - k);
        nan = _mm256_max_epu8(nan, _mm256_and_si256(c, low7));
        __m256 v[4];
        E4m3x32(c, v);
#pragma GCC unroll 4
        for (int p = 0; p < 4; ++p)
          acc[p] = _mm256_fmadd_ps(_mm256_loadu_ps(x + k + kCol[p]), v[p], acc[p]);
      }
      const __m256 a = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
      tot = _mm256_fmadd_ps(a, _mm256_set1_ps(s[blk]), tot);
    }
    out[j] = HasNan(nan) ? __builtin_nanf("") : Hsum(tot) * 256.0f;
  }
}

}  // namespace

LUCID_AVX2 bool DecodeE4m3x32Avx2(const uint8_t* q, float* out) {
  const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
  __m256 v[4];
  E4m3x32(c, v);
  const __m256 k256 = _mm256_set1_ps(256.0f);
  for (int p = 0; p < 4; ++p) _mm256_storeu_ps(out + kCol[p], _mm256_mul_ps(v[p], k256));
  return HasNan(_mm256_and_si256(c, _mm256_set1_epi8(0x7F)));
}

// KernelTable::rows_axpy_fp8 for one token a pass (rows_axpy_packed_tokens = 1): y[c] = sum over
// rows r, in order from zero, of x[r] * (e4m3 * block scale), each row's codes read from start to
// end (the rows of a head are one ascending stream) and decoded 32 at a time by E4m3x32 (values
// / 256) into one FMA each with 256 * scale * x[r]; y stays in L1. A row holding a NaN code
// (RowBlockNan) and the columns past a multiple of 32 are summed one by one from the exact
// values. warm is not used: the rows are read in address order, which the hardware prefetcher
// follows.
LUCID_AVX2 void RowsAxpyFp8One(const uint8_t* w, int64_t ldw, int64_t rows, const float* sc,
                               int64_t lds, float, const float* x, int64_t ldx, int64_t T,
                               int64_t C, float* y, int64_t ldy, const WarmSpans&) {
  const int64_t body = C / 32 * 32;
  for (int64_t t = 0; t < T; ++t) {
    const float* xt = x + t * ldx;
    float* yt = y + t * ldy;
    for (int64_t c = 0; c < C; ++c) yt[c] = 0.0f;
    for (int64_t r = 0; r < rows; ++r) {
      const uint8_t* row = w + r * ldw;
      const float* s = sc + r * lds;
      int64_t done = 0;
      if (!RowBlockNan(row, 0, body)) {
        for (int64_t c = 0; c < body; c += 32) {
          const __m256 m = _mm256_set1_ps(256.0f * (s[c / 128] * xt[r]));
          __m256 v[4];
          E4m3x32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + c)), v);
#pragma GCC unroll 4
          for (int u = 0; u < 4; ++u) {
            float* o = yt + c + kCol[u];
            _mm256_storeu_ps(o, _mm256_fmadd_ps(v[u], m, _mm256_loadu_ps(o)));
          }
        }
        done = body;
      }
      for (int64_t c = done; c < C; ++c) yt[c] += xt[r] * (F8E4M3ToF32(row[c]) * s[c / 128]);
    }
  }
}

void AddFp8TilesAvx2(KernelTable& t) {
  t.rows_axpy_fp8 = &RowsAxpyFp8One;
  t.rows_axpy_packed_tokens = 1;
  t.fp8_f32_tiles[0] = {&TileFp8F32Rows<8>, 8};
  t.fp8_f32_tiles[1] = {&TileFp8F32<2, 4>, 4};
  t.fp8_f32_tiles[2] = {&TileFp8F32<3, 4>, 4};
  t.fp8_f32_tiles[3] = {&TileFp8F32<4, 4>, 4};
  t.fp8_f32_tiles[4] = {&TileFp8F32<5, 4>, 4};
  t.fp8_f32_tiles[5] = {&TileFp8F32<6, 4>, 4};
  t.fp8_f32_tiles[6] = {&TileFp8F32<7, 4>, 4};
  t.fp8_f32_tiles[7] = {&TileFp8F32<8, 4>, 4};
  t.fp8_f32_tokens = 8;
}

}  // namespace lucid::fast
