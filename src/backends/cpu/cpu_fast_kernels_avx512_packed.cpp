// AVX-512 BF16 fused tiles for packed weights: FP8-block and NVFP4 codes decoded in registers to
// exact bf16 and multiplied against the hi/lo bf16 split of up to 4 tokens' activations.
#include <algorithm>

#include "backends/cpu/cpu_fast_avx512_common.h"

namespace lucid::fast::avx512 {
namespace {

// FP8-block weights against the hi/lo bf16 split of the activations, fused: e4m3 codes become bf16
// in registers (E4m3ToBf16: every e4m3 value is exact in bf16), two vdpbf16ps per 32 codes, and
// each 128-column block's sums are multiplied by that block's scale.
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
template <int MR, int NR>
LUCID_AVX512BF16 __attribute__((always_inline)) inline void DpRows(__m512 (&acc)[MR][NR],
                                                                   const XRows<MR>& x, int64_t k,
                                                                   const __m512bh (&w)[NR]) {
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) {
    const __m512bh h = (__m512bh)_mm512_loadu_si512(x.h[i] + k);
    const __m512bh l = (__m512bh)_mm512_loadu_si512(x.l[i] + k);
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) {
      acc[i][j] = _mm512_dpbf16_ps(acc[i][j], h, w[j]);
      acc[i][j] = _mm512_dpbf16_ps(acc[i][j], l, w[j]);
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

template <int MR, int NR, bool kMasked>
LUCID_AVX512BF16 __attribute__((always_inline)) inline void Fp8Step(__m512 (&acc)[MR][NR],
                                                                    const XRows<MR>& x,
                                                                    const void* const* wv,
                                                                    int64_t k, __mmask32 m,
                                                                    const E4m3Table& t) {
  __m512bh w[NR];
#pragma GCC unroll 8
  for (int j = 0; j < NR; ++j) {
    const uint8_t* wp = static_cast<const uint8_t*>(wv[j]) + k;
    const __m256i b =
        kMasked ? _mm256_maskz_loadu_epi8(m, wp) : _mm256_loadu_si256((const __m256i*)wp);
    w[j] = (__m512bh)E4m3ToBf16(b, t);
  }
  DpRows<MR, NR>(acc, x, k, w);
}

// MR tokens (hi rows xh[i], lo rows xl[i]) against NR FP8 rows over [k0, k1) (k0 and every block
// start a multiple of 128 apart from k0); sc[j * kFp8TileBlocks + b] is row j's scale of block b.
// out[i * NR + j].
template <int MR, int NR>
LUCID_AVX512BF16 void TileFp8Dp(const void* const* xh, const void* const* xl, const void* const* wv,
                                const float* sc, int64_t k0, int64_t k1, float* out) {
  const E4m3Table t = LoadE4m3Table();
  const XRows<MR> x = LoadXRows<MR>(xh, xl);
  __m512 tot[MR][NR];
  Zero<MR, NR>(tot);
  const NextRows nx = NextRowGroup<NR>(wv);
  for (int64_t b0 = k0, blk = 0; b0 < k1; b0 += 128, ++blk) {
    const int64_t b1 = b0 + 128 < k1 ? b0 + 128 : k1;
    __m512 acc[MR][NR];
    Zero<MR, NR>(acc);
    PrefetchRows<NR>(nx, b0);
    PrefetchRows<NR>(nx, b0 + 64);
    int64_t k = b0;
    for (; k + 32 <= b1; k += 32) Fp8Step<MR, NR, false>(acc, x, wv, k, 0xFFFFFFFFu, t);
    if (k < b1) Fp8Step<MR, NR, true>(acc, x, wv, k, (1u << (b1 - k)) - 1, t);
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) {
      const __m512 s = _mm512_set1_ps(sc[j * kFp8TileBlocks + blk]);
#pragma GCC unroll 4
      for (int i = 0; i < MR; ++i) tot[i][j] = _mm512_fmadd_ps(acc[i][j], s, tot[i][j]);
    }
  }
  Reduce<MR, NR>(tot, out);
}

// NVFP4 rows against the hi/lo bf16 split, fused: per 32 columns (two 16-column groups) a 32-entry
// bf16 table holds e2m1(code) * group scale for both groups (every such product is exact in
// bf16), vpermw looks each nibble up (index = nibble + 16 for the second group), two vdpbf16ps
// per token. The nibbles become word indices in three instructions: vpermb copies byte i into
// words 2i and 2i+1, vpsrlvw shifts the odd words right by 4, vpternlog keeps the low nibble and
// ors in the group bit. The tensor scale s2 multiplies the finished sums.
struct Nvfp4Consts {
  __m512 lut;     // e2m1 values of the 16 codes
  __m512i dup;    // vpermb indices: byte 2w <- byte w / 2
  __m512i shift;  // 0 for even words, 4 for odd
  __m512i low;    // 0x000F per word
  __m512i half;   // 16 for words 16..31 (the second group)
};
LUCID_AVX512BF16 inline Nvfp4Consts MakeNvfp4Consts() {
  alignas(64) uint8_t dup[64];
  alignas(64) uint16_t shift[32], half[32];
  for (int w = 0; w < 32; ++w) {
    dup[2 * w] = static_cast<uint8_t>(w / 2);
    dup[2 * w + 1] = 0;
    shift[w] = static_cast<uint16_t>(w % 2 ? 4 : 0);
    half[w] = static_cast<uint16_t>(w >= 16 ? 16 : 0);
  }
  return {_mm512_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f, -0.5f, -1.0f, -1.5f,
                         -2.0f, -3.0f, -4.0f, -6.0f),
          _mm512_load_si512(dup), _mm512_load_si512(shift), _mm512_set1_epi16(0xF),
          _mm512_load_si512(half)};
}

// The 32 codes of row w from column k (16 bytes) as 32 words, code i in word i's low 4 bits (the
// even words also carry the byte's other nibble in bits 4-7): vpermb copies byte i / 2 into word
// i, vpsrlvw shifts the odd words right by 4.
template <bool kMasked>
LUCID_AVX512BF16 __attribute__((always_inline)) inline __m512i Nvfp4Nibbles(const void* w,
                                                                            int64_t k, __mmask16 m,
                                                                            const Nvfp4Consts& c) {
  const uint8_t* wp = static_cast<const uint8_t*>(w) + k / 2;
  const __m128i b = kMasked ? _mm_maskz_loadu_epi8(m, wp) : _mm_loadu_si128((const __m128i*)wp);
  const __m512i bytes =
      _mm512_maskz_permutexvar_epi8(0x5555555555555555ULL, c.dup, _mm512_castsi128_si512(b));
  return _mm512_srlv_epi16(bytes, c.shift);
}

template <int MR, int NR, bool kMasked>
LUCID_AVX512BF16 __attribute__((always_inline)) inline void Nvfp4Step(
    __m512 (&acc)[MR][NR], const XRows<MR>& x, const void* const* wv, const float* const* gs,
    int64_t k, __mmask16 m, const Nvfp4Consts& c) {
  __m512bh w[NR];
#pragma GCC unroll 8
  for (int j = 0; j < NR; ++j) {
    const __m512i nib = Nvfp4Nibbles<kMasked>(wv[j], k, m, c);
    const __m512i idx = _mm512_ternarylogic_epi32(nib, c.low, c.half, 0xEA);  // & 0xF | half
    const float* g = gs[j] + k / 16;
    const __m512bh tbl = _mm512_cvtne2ps_pbh(_mm512_mul_ps(c.lut, _mm512_set1_ps(g[1])),
                                             _mm512_mul_ps(c.lut, _mm512_set1_ps(g[0])));
    w[j] = (__m512bh)_mm512_permutexvar_epi16(idx, (__m512i)tbl);
  }
  DpRows<MR, NR>(acc, x, k, w);
}

// MR tokens against NR NVFP4 rows over columns [k0, k1) (k0 a multiple of 32; wv[j] points at the
// row's byte of column 0, gs[j] at its group scales in f32 from group 0, both readable for every
// group below k1, with a zero scale for a padding group); out[i * NR + j] = s2 * sum.
template <int MR, int NR>
LUCID_AVX512BF16 void TileNvfp4Dp(const void* const* xh, const void* const* xl,
                                  const void* const* wv, const float* const* gs, float s2,
                                  int64_t k0, int64_t k1, int64_t groups_end, float* out) {
  const Nvfp4Consts c = MakeNvfp4Consts();
  const XRows<MR> x = LoadXRows<MR>(xh, xl);
  __m512 acc[MR][NR];
  Zero<MR, NR>(acc);
  const NextRows nx = NextRowGroup<NR>(wv);
  int64_t k = k0;
  for (; k + 32 <= k1; k += 32) {
    if (k % 128 == 0) PrefetchRows<NR>(nx, k / 2);
    Nvfp4Step<MR, NR, false>(acc, x, wv, gs, k, 0xFFFF, c);
  }
  if (k < k1) {
    // Bytes left in the row: whole groups only (the row holds groups_end groups).
    const int64_t bytes = (groups_end - k / 16) * 8;
    Nvfp4Step<MR, NR, true>(acc, x, wv, gs, k, bytes >= 16 ? 0xFFFF : (1u << bytes) - 1, c);
  }
  Reduce<MR, NR>(acc, out);
#pragma GCC unroll 4
  for (int i = 0; i < MR * NR; ++i) out[i] *= s2;
}

// One token against NR NVFP4 rows, same contract as TileNvfp4Dp<1, NR>, with the group scales
// applied after the dot products instead of folded into a per-row table: the codes map to the
// constant e2m1 table in bf16, two vdpbf16ps give each lane's pair sum for its group (lanes 0-7:
// the first 16 columns, 8-15: the next 16), and one FMA multiplies by the lanes' group scales (a
// vpermps of the two scales). One token has no other token to share a per-row table with, so this
// saves the table's two multiplies and conversion per 32 columns.
template <int NR, bool kMasked>
LUCID_AVX512BF16 __attribute__((always_inline)) inline void Nvfp4Step1(
    __m512 (&acc)[NR], const uint16_t* xh, const uint16_t* xl, const void* const* wv,
    const float* const* gs, int64_t k, __mmask16 m, const Nvfp4Consts& c, __m512i e2m1,
    __m512i pair) {
  const __m512bh h = (__m512bh)_mm512_loadu_si512(xh + k);
  const __m512bh l = (__m512bh)_mm512_loadu_si512(xl + k);
#pragma GCC unroll 8
  for (int j = 0; j < NR; ++j) {
    // No mask: vpermw reads the low 5 index bits, and an even word's bit 4 (the byte's other
    // nibble) only picks the table's second copy of the same 16 values.
    const __m512bh w =
        (__m512bh)_mm512_permutexvar_epi16(Nvfp4Nibbles<kMasked>(wv[j], k, m, c), e2m1);
    __m512 t = _mm512_dpbf16_ps(_mm512_setzero_ps(), h, w);
    t = _mm512_dpbf16_ps(t, l, w);
    const __m128 g2 = _mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(gs[j] + k / 16)));
    acc[j] = _mm512_fmadd_ps(t, _mm512_permutexvar_ps(pair, _mm512_castps128_ps512(g2)), acc[j]);
  }
}

template <int NR>
LUCID_AVX512BF16 void TileNvfp4Dp1(const void* const* xh, const void* const* xl,
                                   const void* const* wv, const float* const* gs, float s2,
                                   int64_t k0, int64_t k1, int64_t groups_end, float* out) {
  const Nvfp4Consts c = MakeNvfp4Consts();
  const __m512i e2m1 = (__m512i)_mm512_cvtne2ps_pbh(c.lut, c.lut);  // entries 0-15 and 16-31
  const __m512i pair = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
  const uint16_t* h = static_cast<const uint16_t*>(xh[0]);
  const uint16_t* l = static_cast<const uint16_t*>(xl[0]);
  __m512 acc[NR];
#pragma GCC unroll 8
  for (int j = 0; j < NR; ++j) acc[j] = _mm512_setzero_ps();
  const NextRows nx = NextRowGroup<NR>(wv);
  int64_t k = k0;
  for (; k + 32 <= k1; k += 32) {
    if (k % 128 == 0) PrefetchRows<NR>(nx, k / 2);
    Nvfp4Step1<NR, false>(acc, h, l, wv, gs, k, 0xFFFF, c, e2m1, pair);
  }
  if (k < k1) {
    const int64_t bytes = (groups_end - k / 16) * 8;
    Nvfp4Step1<NR, true>(acc, h, l, wv, gs, k, bytes >= 16 ? 0xFFFF : (1u << bytes) - 1, c, e2m1,
                         pair);
  }
#pragma GCC unroll 8
  for (int j = 0; j < NR; ++j) out[j] = _mm512_reduce_add_ps(acc[j]) * s2;
}

}  // namespace

void AddFusedPackedTiles(KernelTable& t) {
  t.fp8_tiles[0] = {&TileFp8Dp<1, 8>, 8};
  t.fp8_tiles[1] = {&TileFp8Dp<1, 4>, 4};
  t.fp8_tiles[2] = {&TileFp8Dp<2, 4>, 4};
  t.fp8_tiles[3] = {&TileFp8Dp<3, 4>, 4};
  t.fp8_tiles[4] = {&TileFp8Dp<4, 4>, 4};
  t.nvfp4_tiles[0] = {&TileNvfp4Dp1<8>, 8};
  // NVFP4: 5 rows per token tile (20 accumulators, 5 weight vectors, the hi/lo pair and 5
  // constants: 32 registers; 299 vs 279 GFLOP/s at 8 tokens against 4 rows). FP8 stays at 4
  // rows: its per-block totals double the accumulators, and 5 rows measured no faster.
  t.nvfp4_tiles[1] = {&TileNvfp4Dp<1, 5>, 5};
  t.nvfp4_tiles[2] = {&TileNvfp4Dp<2, 5>, 5};
  t.nvfp4_tiles[3] = {&TileNvfp4Dp<3, 5>, 5};
  t.nvfp4_tiles[4] = {&TileNvfp4Dp<4, 5>, 5};
}

}  // namespace lucid::fast::avx512
