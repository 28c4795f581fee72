// AVX-512 BF16 fused tiles for packed weights: FP8-block and NVFP4 codes decoded in registers to
// exact bf16 and multiplied against the hi/lo bf16 split of up to 4 tokens' activations, which
// PackX lays out in the column order the decode leaves the codes in (kFp8XOrder, kNvfp4XOrder).
#include <algorithm>
#include <array>

#include "backends/cpu/cpu_fast_avx512_common.h"

namespace lucid::fast::avx512 {
namespace {

// The activations' column order per block for the tiles below (KernelTable::XOrder): the order in
// which each tile's in-register decode leaves the codes, so that every vdpbf16ps lane pairs a
// weight with its own activation.
// FP8, 64-column blocks (E4m3ToBf16x64): vector v (positions 32 v..) word w = code 16 (w / 8) +
// 8 v + w % 8.
constexpr std::array<uint8_t, 64> MakeFp8XOrder() {
  std::array<uint8_t, 64> o{};
  for (int p = 0; p < 64; ++p)
    o[p] = static_cast<uint8_t>(16 * (p % 32 / 8) + 8 * (p / 32) + p % 8);
  return o;
}
// NVFP4, 128-column blocks (Nvfp4Step): vector m (positions 32 m..) word w = code 8 (w / 2) +
// 4 (w % 2) + m.
constexpr std::array<uint8_t, 128> MakeNvfp4XOrder() {
  std::array<uint8_t, 128> o{};
  for (int p = 0; p < 128; ++p)
    o[p] = static_cast<uint8_t>(8 * (p % 32 / 2) + 4 * (p % 2) + p / 32);
  return o;
}
constexpr std::array<uint8_t, 64> kFp8XOrder = MakeFp8XOrder();
constexpr std::array<uint8_t, 128> kNvfp4XOrder = MakeNvfp4XOrder();

// The same orders applied in place to n bf16 values (n a multiple of the block), by vpermi2w:
// each FP8 output vector draws from the block's two source vectors; NVFP4 output vector m is
// every fourth value from m, its first 16 from source vectors 0-1 and the rest from 2-3.
LUCID_AVX512BF16 void PermuteFp8X(uint16_t* x, int64_t n) {
  alignas(64) uint16_t idx[2][32];
  for (int p = 0; p < 64; ++p) idx[p / 32][p % 32] = kFp8XOrder[p];
  const __m512i i0 = _mm512_load_si512(idx[0]), i1 = _mm512_load_si512(idx[1]);
  for (int64_t b = 0; b < n; b += 64) {
    const __m512i a = _mm512_loadu_si512(x + b), c = _mm512_loadu_si512(x + b + 32);
    _mm512_storeu_si512(x + b, _mm512_permutex2var_epi16(a, i0, c));
    _mm512_storeu_si512(x + b + 32, _mm512_permutex2var_epi16(a, i1, c));
  }
}
LUCID_AVX512BF16 void PermuteNvfp4X(uint16_t* x, int64_t n) {
  alignas(64) uint16_t idx[4][32];
  for (int m = 0; m < 4; ++m)
    for (int w = 0; w < 32; ++w) idx[m][w] = static_cast<uint16_t>(kNvfp4XOrder[32 * m + w] % 64);
  __m512i is[4];
  for (int m = 0; m < 4; ++m) is[m] = _mm512_load_si512(idx[m]);
  for (int64_t b = 0; b < n; b += 128) {
    __m512i v[4];
    for (int i = 0; i < 4; ++i) v[i] = _mm512_loadu_si512(x + b + 32 * i);
    for (int m = 0; m < 4; ++m) {
      const __m512i lo = _mm512_permutex2var_epi16(v[0], is[m], v[1]);
      const __m512i hi = _mm512_permutex2var_epi16(v[2], is[m], v[3]);
      _mm512_storeu_si512(x + b + 32 * m,
                          _mm512_inserti64x4(lo, _mm512_extracti64x4_epi64(hi, 1), 1));
    }
  }
}

// MR tokens' hi/lo rows, one k step of a fused tile: each weight vector is decoded once and used
// by every token.
template <int MR>
struct XRows {
  const uint16_t* h[MR];
  const uint16_t* l[MR];
};
template <int MR>
LUCID_AVX512BF16 __attribute__((always_inline)) inline XRows<MR> LoadXRows(const void* const* xh,
                                                                           const void* const* xl) {
  XRows<MR> x;
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) {
    x.h[i] = static_cast<const uint16_t*>(xh[i]);
    x.l[i] = static_cast<const uint16_t*>(xl[i]);
  }
  return x;
}
// kLo: x as the hi/lo split (two vdpbf16ps per weight vector and token); else hi alone (x.l
// unused: FastActivations::kBf16).
template <int MR, int NR, bool kLo>
LUCID_AVX512BF16 __attribute__((always_inline)) inline void DpRows(__m512 (&acc)[MR][NR],
                                                                   const XRows<MR>& x, int64_t k,
                                                                   const __m512bh (&w)[NR]) {
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) {
    const __m512bh h = (__m512bh)_mm512_loadu_si512(x.h[i] + k);
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], h, w[j]);
    if constexpr (kLo) {
      const __m512bh l = (__m512bh)_mm512_loadu_si512(x.l[i] + k);
#pragma GCC unroll 8
      for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], l, w[j]);
    }
  }
}
template <int MR, int NR>
LUCID_AVX512BF16 __attribute__((always_inline)) inline void Zero(__m512 (&acc)[MR][NR]) {
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_setzero_ps();
}

// FP8-block weights against the hi/lo bf16 split, fused: 64 e4m3 codes per step become two vectors
// of 32 exact bf16 (E4m3ToBf16x64), four vdpbf16ps per token, and each 128-column block's sums are
// multiplied by that block's scale. The activations come in the order kFp8XOrder.
template <int MR, int NR, bool kMasked, bool kLo>
LUCID_AVX512BF16 __attribute__((always_inline)) inline void Fp8Step(__m512 (&acc)[MR][NR],
                                                                    const XRows<MR>& x,
                                                                    const void* const* wv,
                                                                    int64_t k, __mmask64 m,
                                                                    const E4m3ByteTables& t) {
  __m512bh a[NR], b[NR];
#pragma GCC unroll 8
  for (int j = 0; j < NR; ++j) {
    const uint8_t* wp = static_cast<const uint8_t*>(wv[j]) + k;
    const __m512i c = kMasked ? _mm512_maskz_loadu_epi8(m, wp) : _mm512_loadu_si512(wp);
    __m512i lo, hi;
    E4m3ToBf16x64(c, t, &lo, &hi);
    a[j] = (__m512bh)lo;
    b[j] = (__m512bh)hi;
  }
  DpRows<MR, NR, kLo>(acc, x, k, a);
  DpRows<MR, NR, kLo>(acc, x, k + 32, b);
}

// MR tokens (hi rows xh[i], lo rows xl[i]) against NR FP8 rows over [k0, k1) (k0 and every block
// start a multiple of 128 apart from k0); sc[j][b] is row j's scale of block b.
// out[i * NR + j]. !kLo: xl unused (bf16 activations alone).
template <int MR, int NR, bool kLo>
LUCID_AVX512BF16 void TileFp8Dp(const void* const* xh, const void* const* xl, const void* const* wv,
                                const float* const* sc, int64_t k0, int64_t k1, float* out) {
  const E4m3ByteTables t = LoadE4m3ByteTables();
  const XRows<MR> x = LoadXRows<MR>(xh, xl);
  __m512 tot[MR][NR];
  Zero<MR, NR>(tot);
  const NextRows nx = NextRowGroup<NR>(wv);
  for (int64_t b0 = k0, blk = 0; b0 < k1; b0 += 128, ++blk) {
    const int64_t b1 = b0 + 128 < k1 ? b0 + 128 : k1;
    __m512 acc[MR][NR];
    Zero<MR, NR>(acc);
    // The next row group's block, into L1: 1.5-2% faster batch-1 steps than into L2 in the 1g
    // and 4g FP8 models.
    PrefetchRows<NR, _MM_HINT_T0>(nx, b0);
    PrefetchRows<NR, _MM_HINT_T0>(nx, b0 + 64);
    int64_t k = b0;
    for (; k + 64 <= b1; k += 64) Fp8Step<MR, NR, false, kLo>(acc, x, wv, k, ~0ULL, t);
    if (k < b1) Fp8Step<MR, NR, true, kLo>(acc, x, wv, k, (1ULL << (b1 - k)) - 1, t);
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) {
      const __m512 s = _mm512_set1_ps(sc[j][blk]);
#pragma GCC unroll 4
      for (int i = 0; i < MR; ++i) tot[i][j] = _mm512_fmadd_ps(acc[i][j], s, tot[i][j]);
    }
  }
  Reduce<MR, NR>(tot, out);
}

// One token (bf16 activations alone) against NR FP8 rows read one after another, each from start
// to end, so the row group is one ascending stream (as TileDpBf16Rows for bf16); the next lines 4
// KB ahead are asked for in L2. Per 64 codes: the row's codes, E4m3ToBf16x64, two activation
// loads and two vdpbf16ps into separate sums, each 128-column block's sums times its scale.
// Against TileFp8Dp<1, 8, false>, whose 8 rows share each activation load (ABBA, same binary,
// fast-bf16act, batch 1): ~45 GB/s state, 4g FP8 22.15 against 26.91 ms and 1g FP8 7.09 against
// 7.97 (paired 83-86% against 71-74%); ~80 GB/s state, 4g 19.57 against 21.04 (one run) and 1g
// 6.44 against 6.30. With the hi/lo split (two more loads and vdpbf16ps per 64 codes) the same
// order lost: 4g FP8 in the ~80 state 22.30 against 18.83 ms, so the split keeps TileFp8Dp.
template <int NR>
LUCID_AVX512BF16 void TileFp8Rows(const void* const* xh, const void* const* /*xl*/,
                                  const void* const* wv, const float* const* sc, int64_t k0,
                                  int64_t k1, float* out) {
  const E4m3ByteTables t = LoadE4m3ByteTables();
  const uint16_t* h = static_cast<const uint16_t*>(xh[0]);
  for (int j = 0; j < NR; ++j) {
    const uint8_t* w = static_cast<const uint8_t*>(wv[j]);
    __m512 tot = _mm512_setzero_ps();
    for (int64_t b0 = k0, blk = 0; b0 < k1; b0 += 128, ++blk) {
      const int64_t b1 = b0 + 128 < k1 ? b0 + 128 : k1;
      _mm_prefetch(reinterpret_cast<const char*>(w + b0) + kRowsPrefetchBytes, _MM_HINT_T1);
      _mm_prefetch(reinterpret_cast<const char*>(w + b0) + kRowsPrefetchBytes + 64, _MM_HINT_T1);
      __m512 a = _mm512_setzero_ps(), b = _mm512_setzero_ps();
      for (int64_t k = b0; k < b1; k += 64) {
        const __m512i c = b1 - k >= 64 ? _mm512_loadu_si512(w + k)
                                       : _mm512_maskz_loadu_epi8((1ULL << (b1 - k)) - 1, w + k);
        __m512i lo, hi;
        E4m3ToBf16x64(c, t, &lo, &hi);
        a = _mm512_dpbf16_ps(a, (__m512bh)_mm512_loadu_si512(h + k), (__m512bh)lo);
        b = _mm512_dpbf16_ps(b, (__m512bh)_mm512_loadu_si512(h + k + 32), (__m512bh)hi);
      }
      tot = _mm512_fmadd_ps(_mm512_add_ps(a, b), _mm512_set1_ps(sc[j][blk]), tot);
    }
    out[j] = _mm512_reduce_add_ps(tot);
  }
}

// NVFP4 rows against the hi/lo bf16 split, fused, 128 codes (64 bytes, 8 groups) per step. The
// bytes are read as 32 words, word j holding codes 4j..4j+3 in its four nibbles; vpermw on the
// word shifted right by 0, 4, 8 and 12 looks up code 4j + m (m = 0..3) in the constant e2m1 table
// in bf16 (vpermw reads 5 index bits: the table holds the 16 values twice, so the next nibble's
// low bit in bit 4 does not matter). That gives four vectors v_m of 32 exact bf16; lane l of
// vdpbf16ps(x, v_m) sums codes 8l + m and 8l + 4 + m, both of group l / 2, so the eight
// vdpbf16ps of a token (hi and lo for each m) leave each lane within one group, and one FMA
// multiplies by the lanes' group scales (a vpermps of the 8 scales). The activations come in the
// order kNvfp4XOrder; the tensor scale s2 multiplies the finished sums.
struct Nvfp4Consts {
  __m512i e2m1;  // bf16 of the 16 e2m1 values, twice
  __m512i dup;   // vpermps indices: lane l <- scale l / 2
};
LUCID_AVX512BF16 inline Nvfp4Consts MakeNvfp4Consts() {
  const __m512 lut = _mm512_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f, -0.5f,
                                    -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f);
  return {(__m512i)_mm512_cvtne2ps_pbh(lut, lut),
          _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7)};
}

template <int MR, int NR, bool kMasked, bool kLo>
LUCID_AVX512BF16 __attribute__((always_inline)) inline void Nvfp4Step(
    __m512 (&acc)[MR][NR], const XRows<MR>& x, const void* const* wv, const float* const* gs,
    int64_t k, __mmask64 m, const Nvfp4Consts& c) {
#pragma GCC unroll 8
  for (int j = 0; j < NR; ++j) {
    const uint8_t* wp = static_cast<const uint8_t*>(wv[j]) + k / 2;
    const __m512i b = kMasked ? _mm512_maskz_loadu_epi8(m, wp) : _mm512_loadu_si512(wp);
    const __m512bh v0 = (__m512bh)_mm512_permutexvar_epi16(b, c.e2m1);
    const __m512bh v1 = (__m512bh)_mm512_permutexvar_epi16(_mm512_srli_epi16(b, 4), c.e2m1);
    const __m512bh v2 = (__m512bh)_mm512_permutexvar_epi16(_mm512_srli_epi16(b, 8), c.e2m1);
    const __m512bh v3 = (__m512bh)_mm512_permutexvar_epi16(_mm512_srli_epi16(b, 12), c.e2m1);
    const __m512 s =
        _mm512_permutexvar_ps(c.dup, _mm512_castps256_ps512(_mm256_loadu_ps(gs[j] + k / 16)));
    // The tokens' sums interleaved (MR independent chains of eight vdpbf16ps; one token: two of
    // four), then one FMA each.
    const __m512bh v[4] = {v0, v1, v2, v3};
    // The tokens per tile are capped (2 with the hi/lo split, 3 with bf16 activations): more
    // spilled the accumulators (split, 4 tokens: 187 against 300 GFLOP/s; bf16 activations, 4
    // tokens: 1g NVFP4 batch 32 39 against 35 ms). An empty asm on the row pointers, to make the
    // compiler reload the activations per row instead of keeping them in registers, did not
    // help (4 tokens: 39-43 against 37.5-38.7 ms with 3).
    __m512 t[MR], u[MR];
    const uint16_t *h[MR], *l[MR];
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i) {
      t[i] = u[i] = _mm512_setzero_ps();
      h[i] = x.h[i] + k;
      l[i] = x.l[i] + k;
    }
#pragma GCC unroll 4
    for (int q = 0; q < 4; ++q)
#pragma GCC unroll 4
      for (int i = 0; i < MR; ++i) {
        // Without the lo half a token has a second chain from alternate q.
        __m512& dst = !kLo && MR == 1 && q % 2 ? u[i] : t[i];
        dst = _mm512_dpbf16_ps(dst, (__m512bh)_mm512_loadu_si512(h[i] + 32 * q), v[q]);
        // One token sums its lo half in a second chain (BM_LinearBig NVFP4 one token 61 -> 65
        // GB/s); more tokens already have MR chains, and lost 7% at 4 tokens this way.
        if constexpr (kLo)
          (MR == 1 ? u[i] : t[i]) = _mm512_dpbf16_ps(
              MR == 1 ? u[i] : t[i], (__m512bh)_mm512_loadu_si512(l[i] + 32 * q), v[q]);
      }
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i)
      acc[i][j] = _mm512_fmadd_ps(MR == 1 ? _mm512_add_ps(t[i], u[i]) : t[i], s, acc[i][j]);
  }
}

// MR tokens against NR NVFP4 rows over columns [k0, k1) (k0 a multiple of 128; wv[j] points at the
// row's byte of column 0, gs[j] at its group scales in f32 from group 0, both readable for every
// group below k1 rounded up to 8 groups, with a zero scale for a padding group); out[i * NR + j] =
// s2 * sum. !kLo: xl unused (bf16 activations alone).
template <int MR, int NR, bool kLo>
LUCID_AVX512BF16 void TileNvfp4Dp(const void* const* xh, const void* const* xl,
                                  const void* const* wv, const float* const* gs, float s2,
                                  int64_t k0, int64_t k1, int64_t groups_end, float* out) {
  const Nvfp4Consts c = MakeNvfp4Consts();
  const XRows<MR> x = LoadXRows<MR>(xh, xl);
  __m512 acc[MR][NR];
  Zero<MR, NR>(acc);
  const NextRows nx = NextRowGroup<NR>(wv);
  int64_t k = k0;
  // The next row group's line at this column, into L1 (as in TileFp8Dp): 3-6% faster batch-1
  // steps than into L2 in the 1g and 4g NVFP4 models.
  for (; k + 128 <= k1; k += 128) {
    PrefetchRows<NR, _MM_HINT_T0>(nx, k / 2);
    Nvfp4Step<MR, NR, false, kLo>(acc, x, wv, gs, k, ~0ULL, c);
  }
  if (k < k1) {
    // Bytes left in the row: whole groups only (the row holds groups_end groups).
    const int64_t bytes = (groups_end - k / 16) * 8;
    Nvfp4Step<MR, NR, true, kLo>(acc, x, wv, gs, k, bytes >= 64 ? ~0ULL : (1ULL << bytes) - 1, c);
  }
  Reduce<MR, NR>(acc, out);
#pragma GCC unroll 8
  for (int i = 0; i < MR * NR; ++i) out[i] *= s2;
}

// KernelTable::widen_e4m3 with VBMI, 64 codes per step: the two vpermi2b lookups and the sign
// merge of E4m3ToBf16x64 give each code's bf16 high and low byte (NaN codes to NaN), and one
// zero-masked vpermi2b per 16 codes lays them into bytes 2 and 3 of each f32 lane: the bf16 bits
// shifted left by 16, which is the f32 of the same value. Against the avx512 WidenE4m3 (vpermi2w
// on 32 codes, then two widenings), about half the instructions per code: in a profile of 4g
// NVFP4 batch 1 it went from 22% to 14% of the NVFP4 tile's samples (the rest is the wait for
// the cold scale lines); BM_LinearHot NVFP4 one token 59-63 -> 64-67 GB/s with the split, but
// from memory (BM_LinearBig, the model: 4g NVFP4 13.90 against 13.93 ms, ABBA) no change.
struct E4m3F32Layout {
  __m512i idx[4];  // vector j, lane l: byte 2 <- low byte of code 16 j + l, byte 3 <- its high
};
constexpr std::array<uint8_t, 256> MakeE4m3F32Index() {
  std::array<uint8_t, 256> x{};
  for (int j = 0; j < 4; ++j)
    for (int l = 0; l < 16; ++l) {
      x[64 * j + 4 * l + 2] = static_cast<uint8_t>(16 * j + l);       // first table: low bytes
      x[64 * j + 4 * l + 3] = static_cast<uint8_t>(64 + 16 * j + l);  // second: high bytes
    }
  return x;
}
alignas(64) constexpr std::array<uint8_t, 256> kE4m3F32Index = MakeE4m3F32Index();
constexpr __mmask64 kF32HighBytes = 0xCCCCCCCCCCCCCCCCULL;  // bytes 2 and 3 of every lane

LUCID_AVX512BF16 void WidenE4m3Vbmi(const uint8_t* src, float* dst, int64_t n) {
  const E4m3ByteTables t = LoadE4m3ByteTables();
  __m512i idx[4];
  for (int j = 0; j < 4; ++j) idx[j] = _mm512_load_si512(kE4m3F32Index.data() + 64 * j);
  for (int64_t i = 0; i < n; i += 64) {
    const int64_t left = n - i;
    // Scales are often cold (read once per step): ask for the line 256 bytes ahead (never
    // faults).
    _mm_prefetch(reinterpret_cast<const char*>(src) + i + 256, _MM_HINT_T0);
    __m512i codes = left >= 64 ? _mm512_loadu_si512(src + i)
                               : _mm512_maskz_loadu_epi8((1ULL << left) - 1, src + i);
    asm("" : "+v"(codes));  // one register for the lookups and the sign merge (E4m3ToBf16x64)
    __m512i h = _mm512_permutex2var_epi8(t.hi0, codes, t.hi1);
    const __m512i l = _mm512_permutex2var_epi8(t.lo0, codes, t.lo1);
    h = _mm512_ternarylogic_epi32(h, codes, _mm512_set1_epi8(static_cast<char>(0x80)), 0xF8);
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      const __m512 f =
          _mm512_castsi512_ps(_mm512_maskz_permutex2var_epi8(kF32HighBytes, l, idx[j], h));
      if (left >= 64) {
        _mm512_storeu_ps(dst + i + 16 * j, f);
      } else if (left > 16 * j) {
        _mm512_mask_storeu_ps(dst + i + 16 * j, TailMask16(left - 16 * j), f);
      }
    }
  }
}

// The W_uk absorption over packed rows (KernelTable::rows_axpy_fp8 / rows_axpy_nvfp4), decoded
// in registers: per 128-column chunk, 8 f32 accumulators per token, and per row the chunk's codes
// decoded to 8 vectors of exact f32 weights (bf16 widened by vpunpck{l,h}wd with zero) in the
// decoder's lane order, each with one of two multipliers (the block or group scales) folded into
// the token's x value. The sums are put back in column order through the decoder's order table.
// FP8: the chunk is one scale block; E4m3ToBf16x64 on each 64-code half.
struct Fp8Rows {
  const uint8_t* w;
  int64_t ldw;
  const float* sc;
  int64_t lds;
  E4m3ByteTables t;
  // Vector v lane 4 L + i holds column 64 (v / 4) + 16 L + 8 (v / 2 % 2) + 4 (v % 2) + i.
  static constexpr std::array<uint8_t, 128> Order() {
    std::array<uint8_t, 128> o{};
    for (int v = 0; v < 8; ++v)
      for (int l = 0; l < 16; ++l)
        o[16 * v + l] = static_cast<uint8_t>(64 * (v / 4) + 16 * (l / 4) + 8 * (v / 2 % 2) +
                                             4 * (v % 2) + l % 4);
    return o;
  }
  LUCID_AVX512BF16 __attribute__((always_inline)) void Row(int64_t r, int64_t c0, int64_t C,
                                                           __m512 (&wv)[8], __m512 (&m)[2]) const {
    const __m512i z = _mm512_setzero_si512();
#pragma GCC unroll 2
    for (int p = 0; p < 2; ++p) {
      const int64_t c = c0 + 64 * p, left = C - c;
      const uint8_t* src = w + r * ldw + c;
      const __m512i codes = left >= 64 ? _mm512_loadu_si512(src)
                            : left > 0 ? _mm512_maskz_loadu_epi8((1ULL << left) - 1, src)
                                       : z;
      __m512i lo, hi;
      E4m3ToBf16x64(codes, t, &lo, &hi);
      wv[4 * p + 0] = _mm512_castsi512_ps(_mm512_unpacklo_epi16(z, lo));
      wv[4 * p + 1] = _mm512_castsi512_ps(_mm512_unpackhi_epi16(z, lo));
      wv[4 * p + 2] = _mm512_castsi512_ps(_mm512_unpacklo_epi16(z, hi));
      wv[4 * p + 3] = _mm512_castsi512_ps(_mm512_unpackhi_epi16(z, hi));
    }
    m[0] = m[1] = _mm512_set1_ps(sc[r * lds + c0 / 128]);
  }
};
// NVFP4: the 64 bytes of 8 groups read as words (as in Nvfp4Step); vpermw on the word shifted by
// 4 m gives code 4 j + m of word j, widened into vectors 2 m (words 0-3 of each 128-bit lane:
// group 2 L) and 2 m + 1 (words 4-7: group 2 L + 1).
struct Nvfp4Rows {
  const uint8_t* w;
  int64_t ldw;
  const float* gs;
  int64_t lds;
  float s2;
  Nvfp4Consts c;
  __m512i lo_idx, hi_idx;  // vpermps: lane 4 L + i <- group 2 L (lo) or 2 L + 1 (hi)
  // Vector v lane 4 L + i holds column 32 L + 16 (v % 2) + 4 i + v / 2.
  static constexpr std::array<uint8_t, 128> Order() {
    std::array<uint8_t, 128> o{};
    for (int v = 0; v < 8; ++v)
      for (int l = 0; l < 16; ++l)
        o[16 * v + l] = static_cast<uint8_t>(32 * (l / 4) + 16 * (v % 2) + 4 * (l % 4) + v / 2);
    return o;
  }
  LUCID_AVX512BF16 __attribute__((always_inline)) void Row(int64_t r, int64_t c0, int64_t C,
                                                           __m512 (&wv)[8], __m512 (&m)[2]) const {
    const __m512i z = _mm512_setzero_si512();
    const int64_t bytes = ((C + 15) / 16 - c0 / 16) * 8;  // whole groups left in the row
    const uint8_t* src = w + r * ldw + c0 / 2;
    const __m512i b =
        bytes >= 64 ? _mm512_loadu_si512(src) : _mm512_maskz_loadu_epi8((1ULL << bytes) - 1, src);
#pragma GCC unroll 4
    for (int q = 0; q < 4; ++q) {
      const __m512i v =
          _mm512_permutexvar_epi16(_mm512_srlv_epi16(b, _mm512_set1_epi16(4 * q)), c.e2m1);
      wv[2 * q] = _mm512_castsi512_ps(_mm512_unpacklo_epi16(z, v));
      wv[2 * q + 1] = _mm512_castsi512_ps(_mm512_unpackhi_epi16(z, v));
    }
    const __m512 g = _mm512_castps256_ps512(
        _mm256_mul_ps(_mm256_loadu_ps(gs + r * lds + c0 / 16), _mm256_set1_ps(s2)));
    m[0] = _mm512_permutexvar_ps(lo_idx, g);
    m[1] = _mm512_permutexvar_ps(hi_idx, g);
  }
};

// Walks the cache lines of WarmSpans in order, `per` lines at a time, asking for each in L2.
class WarmCursor {
 public:
  WarmCursor(const WarmSpans& w, int64_t steps) : w_(w) {
    const int64_t lines = (w.bytes[0] + 63) / 64 + (w.bytes[1] + 63) / 64;
    per_ = steps > 0 ? (lines + steps - 1) / steps : 0;
  }
  void Step() {
    for (int64_t i = 0; i < per_; ++i) {
      while (s_ < 2 && (!w_.p[s_] || off_ >= w_.bytes[s_])) ++s_, off_ = 0;
      if (s_ == 2) return;
      _mm_prefetch(static_cast<const char*>(w_.p[s_]) + off_, _MM_HINT_T1);
      off_ += 64;
    }
  }

 private:
  const WarmSpans& w_;
  int64_t per_ = 0, off_ = 0;
  int s_ = 0;
};

template <int T, class Rows>
LUCID_AVX512BF16 void RowsAxpyPackedT(const Rows& d, const uint8_t* order, int64_t rows,
                                      const float* x, int64_t ldx, int64_t C, float* y, int64_t ldy,
                                      const WarmSpans& warm) {
  alignas(64) float sums[128];
  // The next item's weights stream in while the passes after the first compute from L2 (the
  // first pass reads this item's rows from memory).
  const int64_t passes = (C + 127) / 128;
  WarmCursor next(warm, (passes > 1 ? passes - 1 : 1) * rows);
  for (int64_t c0 = 0; c0 < C; c0 += 128) {
    __m512 acc[T][8];
#pragma GCC unroll 2
    for (int t = 0; t < T; ++t)
#pragma GCC unroll 8
      for (int v = 0; v < 8; ++v) acc[t][v] = _mm512_setzero_ps();
    for (int64_t r = 0; r < rows; ++r) {
      // The first chunk's pass asks for whole rows a few rows ahead (the later chunks' passes
      // then find them in L2): a pass reads one cache line per row, too sparse for the hardware
      // prefetchers (the loads waited on memory 70% of the time).
      if (c0 == 0)
        for (int64_t b = 0; b < d.ldw; b += 64)
          _mm_prefetch(d.w + (r + 6) * d.ldw + b, _MM_HINT_T1);
      if (c0 > 0 || passes == 1) next.Step();
      __m512 wv[8], m[2];
      d.Row(r, c0, C, wv, m);
#pragma GCC unroll 2
      for (int t = 0; t < T; ++t) {
        const __m512 xv = _mm512_set1_ps(x[t * ldx + r]);
        const __m512 xm[2] = {_mm512_mul_ps(xv, m[0]), _mm512_mul_ps(xv, m[1])};
#pragma GCC unroll 8
        for (int v = 0; v < 8; ++v) acc[t][v] = _mm512_fmadd_ps(wv[v], xm[v % 2], acc[t][v]);
      }
    }
    const int64_t n = C - c0 < 128 ? C - c0 : 128;
#pragma GCC unroll 2
    for (int t = 0; t < T; ++t) {
#pragma GCC unroll 8
      for (int v = 0; v < 8; ++v) _mm512_store_ps(sums + 16 * v, acc[t][v]);
      float* dst = y + t * ldy + c0;
      for (int p = 0; p < 128; ++p)
        if (order[p] < n) dst[order[p]] = sums[p];
    }
  }
}

template <class Rows>
LUCID_AVX512BF16 void RowsAxpyPacked(const Rows& d, int64_t rows, const float* x, int64_t ldx,
                                     int64_t T, int64_t C, float* y, int64_t ldy,
                                     const WarmSpans& warm) {
  static constexpr std::array<uint8_t, 128> kOrder = Rows::Order();
  // The warm spans go with the first pair of tokens only (later pairs find them already in L2).
  const WarmSpans none;
  int64_t t = 0;
  for (; t + 2 <= T; t += 2)
    RowsAxpyPackedT<2>(d, kOrder.data(), rows, x + t * ldx, ldx, C, y + t * ldy, ldy,
                       t == 0 ? warm : none);
  if (t < T)
    RowsAxpyPackedT<1>(d, kOrder.data(), rows, x + t * ldx, ldx, C, y + t * ldy, ldy,
                       t == 0 ? warm : none);
}

LUCID_AVX512BF16 void RowsAxpyFp8(const uint8_t* w, int64_t ldw, int64_t rows, const float* sc,
                                  int64_t lds, float, const float* x, int64_t ldx, int64_t T,
                                  int64_t C, float* y, int64_t ldy, const WarmSpans& warm) {
  RowsAxpyPacked(Fp8Rows{w, ldw, sc, lds, LoadE4m3ByteTables()}, rows, x, ldx, T, C, y, ldy, warm);
}

LUCID_AVX512BF16 void RowsAxpyNvfp4(const uint8_t* w, int64_t ldw, int64_t rows, const float* gs,
                                    int64_t lds, float s2, const float* x, int64_t ldx, int64_t T,
                                    int64_t C, float* y, int64_t ldy, const WarmSpans& warm) {
  const Nvfp4Rows d{w,
                    ldw,
                    gs,
                    lds,
                    s2,
                    MakeNvfp4Consts(),
                    _mm512_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2, 4, 4, 4, 4, 6, 6, 6, 6),
                    _mm512_setr_epi32(1, 1, 1, 1, 3, 3, 3, 3, 5, 5, 5, 5, 7, 7, 7, 7)};
  RowsAxpyPacked(d, rows, x, ldx, T, C, y, ldy, warm);
}

}  // namespace

void AddFusedPackedTiles(KernelTable& t) {
  t.fp8_tiles[0] = {&TileFp8Dp<1, 8, true>, 8};
  t.fp8_tiles[1] = {&TileFp8Dp<1, 4, true>, 4};
  t.fp8_tiles[2] = {&TileFp8Dp<2, 4, true>, 4};
  t.fp8_tiles[3] = {&TileFp8Dp<3, 4, true>, 4};
  t.fp8_tiles[4] = {&TileFp8Dp<4, 4, true>, 4};
  t.fp8_x_order = {kFp8XOrder.data(), 64, &PermuteFp8X};
  t.fp8_tile_tokens = 4;
  t.nvfp4_tiles[0] = {&TileNvfp4Dp<1, 8, true>, 8};
  // NVFP4: 2 tokens x 4 rows. Each token's eight vdpbf16ps per row need the token's 8 activation
  // vectors, and with 3 or 4 tokens the compiler kept them all in registers and spilled the
  // accumulators: at 4 tokens, 2 x 4 runs 300 GFLOP/s, 4 x 4 187 and 3 x 4 253 (5 or 6 rows: no
  // faster).
  t.nvfp4_tiles[1] = {&TileNvfp4Dp<1, 4, true>, 4};
  t.nvfp4_tiles[2] = {&TileNvfp4Dp<2, 4, true>, 4};
  t.nvfp4_tile_tokens = 2;
  // Bf16 activations alone (FastActivations::kBf16): the same shapes without the lo half.
  KernelTable::HiOnlyTiles& h = t.hi_only;
  h.fp8[0] = {&TileFp8Rows<8>, 8};
  h.fp8[1] = {&TileFp8Dp<1, 4, false>, 4};
  h.fp8[2] = {&TileFp8Dp<2, 4, false>, 4};
  h.fp8[3] = {&TileFp8Dp<3, 4, false>, 4};
  h.fp8[4] = {&TileFp8Dp<4, 4, false>, 4};
  h.fp8_tokens = 4;
  h.nvfp4[0] = {&TileNvfp4Dp<1, 8, false>, 8};
  h.nvfp4[1] = {&TileNvfp4Dp<1, 4, false>, 4};
  h.nvfp4[2] = {&TileNvfp4Dp<2, 4, false>, 4};
  h.nvfp4[3] = {&TileNvfp4Dp<3, 4, false>, 4};
  h.nvfp4_tokens = 3;
  t.nvfp4_x_order = {kNvfp4XOrder.data(), 128, &PermuteNvfp4X};
  t.rows_axpy_fp8 = &RowsAxpyFp8;
  t.rows_axpy_nvfp4 = &RowsAxpyNvfp4;
  t.widen_e4m3 = &WidenE4m3Vbmi;
}

}  // namespace lucid::fast::avx512
