// AVX-512 kernels of the outer-product GEMM (layouts in cpu_fast_gemm.h): a kMr x 32 register
// tile (kMr rows of two zmm accumulators), 16x16 in-register transposes for packing. Every
// function carries a target attribute; GemmRows reaches them only when the kernel table's level
// is an AVX-512 one (CPUID said yes).
#include <type_traits>

#include "backends/cpu/cpu_fast_avx512_common.h"  // target macros, the e4m3 -> bf16 table
#include "backends/cpu/cpu_fast_gemm.h"

namespace lucid::fast {
namespace {

constexpr int kMr = 12;  // tokens per tile (broadcast)
constexpr int kNv = 2;   // zmm vectors of outputs per tile row: nr = 32

LUCID_AVX512 inline __mmask16 Mask16(int64_t left) {
  if (left <= 0) return 0;
  return left >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << left) - 1);
}

// A micro-kernel's start: C's tile asked for (it is read or written at the end), the
// accumulators zeroed.
template <int MR>
LUCID_AVX512 __attribute__((always_inline)) inline void StartTile(const float* c, int64_t ldc,
                                                                  __m512 (&acc)[MR][kNv]) {
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < kNv; ++v) {
      _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc + 16 * v), _MM_HINT_T0);
      acc[i][v] = _mm512_setzero_ps();
    }
}

// acc[i][v] = sum_k xp[k * kMr + i] * wp[k * 16 kNv + 16 v ...], then C (+)= acc under the masks.
template <int MR>
LUCID_AVX512 void Kernel(const float* xp, const float* wp, int64_t kc, float* c, int64_t ldc,
                         const __mmask16* mask, bool add) {
  __m512 acc[MR][kNv];
  StartTile<MR>(c, ldc, acc);
#pragma GCC unroll 2
  for (int64_t k = 0; k < kc; ++k) {
    __m512 w[kNv];
#pragma GCC unroll 4
    for (int v = 0; v < kNv; ++v) w[v] = _mm512_load_ps(wp + k * 16 * kNv + 16 * v);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const __m512 xi = _mm512_set1_ps(xp[k * kMr + i]);
#pragma GCC unroll 4
      for (int v = 0; v < kNv; ++v) acc[i][v] = _mm512_fmadd_ps(xi, w[v], acc[i][v]);
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < kNv; ++v) {
      float* p = c + i * ldc + 16 * v;
      const __m512 r =
          add ? _mm512_add_ps(_mm512_maskz_loadu_ps(mask[v], p), acc[i][v]) : acc[i][v];
      _mm512_mask_storeu_ps(p, mask[v], r);
    }
}

// Calls f(std::integral_constant<int, m>{}) for 1 <= m <= kMr (the micro-kernels' row counts).
template <typename F>
inline void WithRows(int m, F&& f) {
  switch (m) {
    case 12:
      return f(std::integral_constant<int, 12>{});
    case 11:
      return f(std::integral_constant<int, 11>{});
    case 10:
      return f(std::integral_constant<int, 10>{});
    case 9:
      return f(std::integral_constant<int, 9>{});
    case 8:
      return f(std::integral_constant<int, 8>{});
    case 7:
      return f(std::integral_constant<int, 7>{});
    case 6:
      return f(std::integral_constant<int, 6>{});
    case 5:
      return f(std::integral_constant<int, 5>{});
    case 4:
      return f(std::integral_constant<int, 4>{});
    case 3:
      return f(std::integral_constant<int, 3>{});
    case 2:
      return f(std::integral_constant<int, 2>{});
    case 1:
      return f(std::integral_constant<int, 1>{});
    default:
      return;
  }
}
static_assert(kMr == 12, "WithRows covers 1..12 rows");

LUCID_AVX512 void Tile(const float* xp, const float* wp, int64_t kc, float* c, int64_t ldc, int m,
                       int n, bool add) {
  __mmask16 mask[kNv];
  for (int v = 0; v < kNv; ++v) mask[v] = Mask16(n - 16 * v);
  WithRows(m, [&](auto mr) { Kernel<mr.value>(xp, wp, kc, c, ldc, mask, add); });
}

// Weight sources for PackW: Load(j, k, m, blk) is 16 values of row j at columns k.. (lanes outside
// m zero or anything finite: PackW stores only the columns below kc); blk = Block(k), computed
// once per 16 columns. Rows are never null (missing rows point at zeros). Whole chunks use plain
// loads: masked ones cost much more on Zen 5 (FP8 decode 1.7x).
struct F32Rows {
  const float* const* rows;
  int64_t Block(int64_t) const { return 0; }
  LUCID_AVX512 __m512 Load(int j, int64_t k, __mmask16 m, int64_t) const {
    return m == 0xFFFF ? _mm512_loadu_ps(rows[j] + k) : _mm512_maskz_loadu_ps(m, rows[j] + k);
  }
};
// bf16 -> f32 is exact: the bits move to the top half.
struct Bf16Rows {
  const uint16_t* const* rows;
  int64_t Block(int64_t) const { return 0; }
  LUCID_AVX512 __m512 Load(int j, int64_t k, __mmask16 m, int64_t) const {
    const __m256i b = m == 0xFFFF
                          ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[j] + k))
                          : _mm256_maskz_loadu_epi16(m, rows[j] + k);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16));
  }
};

// FP8-block rows: rows[j] at the block's first column; for the scale block b holding column k
// (b = k / block_cols, block_cols a multiple of 16, so 16 columns share one scale) value =
// e4m3 * sc[j][b], rounded once (the codes become exact bf16 through the table, widened to f32):
// exactly DequantFp8.
struct Fp8Rows {
  const uint8_t* const* rows;
  const float* const* sc;
  int64_t block_cols;
  avx512::E4m3Table table;
  int64_t Block(int64_t k) const { return k / block_cols; }
  LUCID_AVX512 __m512 Load(int j, int64_t k, __mmask16 m, int64_t blk) const {
    const __m128i b = m == 0xFFFF ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[j] + k))
                                  : _mm_maskz_loadu_epi8(m, rows[j] + k);
    const __m512i v = avx512::E4m3ToBf16(_mm256_zextsi128_si256(b), table);
    return _mm512_mul_ps(avx512::Bf16BitsToF32(_mm512_castsi512_si256(v)),
                         _mm512_set1_ps(sc[j][blk]));
  }
};

// NVFP4 rows: rows[j] at the byte of the block's first column (a multiple of 16), gs[j][k / 16]
// the f32 value of the e4m3 scale of the group holding column k; value = (e2m1 * gs) * s2, as
// DequantNvfp4. Whole groups are read (a row holds whole groups).
struct Nvfp4Rows {
  const uint8_t* const* rows;
  const float* const* gs;
  float s2;
  int64_t Block(int64_t) const { return 0; }
  LUCID_AVX512 __m512 Load(int j, int64_t k, __mmask16, int64_t) const {
    const __m512 lut = _mm512_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f, -0.5f,
                                      -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f);
    // Lanes 2i / 2i+1 take the low / high nibble of byte i; vpermps reads the low 4 index bits.
    const __m512i b = _mm512_cvtepu8_epi64(_mm_loadl_epi64((const __m128i*)(rows[j] + k / 2)));
    const __m512i idx = _mm512_or_si512(b, _mm512_slli_epi64(_mm512_srli_epi64(b, 4), 32));
    const __m512 v = _mm512_mul_ps(_mm512_permutexvar_ps(idx, lut), _mm512_set1_ps(gs[j][k / 16]));
    return _mm512_mul_ps(v, _mm512_set1_ps(s2));
  }
};

// wp[k * nr + j] = row j at column k, for k < kc, j < nr.
template <typename Src>
LUCID_AVX512 void PackW(const Src& src, int64_t kc, float* wp) {
  constexpr int nr = 16 * kNv;
  for (int64_t k0 = 0; k0 < kc; k0 += 16) {
    const __mmask16 m = Mask16(kc - k0);
    const int64_t cols = kc - k0 < 16 ? kc - k0 : 16;
    const int64_t blk = src.Block(k0);
#pragma GCC unroll 4
    for (int v = 0; v < kNv; ++v) {
      __m512 r[16];
#pragma GCC unroll 16
      for (int j = 0; j < 16; ++j) r[j] = src.Load(16 * v + j, k0, m, blk);
      avx512::Transpose16x16(r);
      if (cols == 16) {
#pragma GCC unroll 16
        for (int c = 0; c < 16; ++c) _mm512_store_ps(wp + (k0 + c) * nr + 16 * v, r[c]);
      } else {
        for (int c = 0; c < cols; ++c) _mm512_store_ps(wp + (k0 + c) * nr + 16 * v, r[c]);
      }
    }
  }
}

LUCID_AVX512 void PackWF32(const float* const* rows, int64_t kc, float* wp) {
  PackW(F32Rows{rows}, kc, wp);
}
LUCID_AVX512 void PackWBf16(const uint16_t* const* rows, int64_t kc, float* wp) {
  PackW(Bf16Rows{rows}, kc, wp);
}
LUCID_AVX512 void PackWFp8(const uint8_t* const* rows, const float* const* sc, int64_t block_cols,
                           int64_t kc, float* wp) {
  PackW(Fp8Rows{rows, sc, block_cols, avx512::LoadE4m3Table()}, kc, wp);
}
LUCID_AVX512 void PackWNvfp4(const uint8_t* const* rows, const float* const* gs, float s2,
                             int64_t kc, float* wp) {
  PackW(Nvfp4Rows{rows, gs, s2}, kc, wp);
}

LUCID_AVX512 void PackX(const float* x, int64_t ldx, int m, int64_t kc, float* xp) {
  const __mmask16 out = static_cast<__mmask16>((1u << kMr) - 1);
  for (int64_t k0 = 0; k0 < kc; k0 += 16) {
    const __mmask16 mk = Mask16(kc - k0);
    const int64_t cols = kc - k0 < 16 ? kc - k0 : 16;
    __m512 r[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i)
      r[i] = i >= m         ? _mm512_setzero_ps()
             : mk == 0xFFFF ? _mm512_loadu_ps(x + i * ldx + k0)
                            : _mm512_maskz_loadu_ps(mk, x + i * ldx + k0);
    avx512::Transpose16x16(r);
    for (int c = 0; c < cols; ++c) _mm512_mask_storeu_ps(xp + (k0 + c) * kMr, out, r[c]);
  }
}

// ---- bf16 pairs (AVX512_BF16) ----

template <int MR>
LUCID_AVX512BF16 void KernelPairs(const uint32_t* xp, const uint32_t* wp, int64_t kc2, float* c,
                                  int64_t ldc, const __mmask16* mask, bool add,
                                  const float* scale) {
  __m512 acc[MR][kNv];
  StartTile<MR>(c, ldc, acc);
#pragma GCC unroll 2
  for (int64_t p = 0; p < kc2; ++p) {
    __m512bh w[kNv];
#pragma GCC unroll 4
    for (int v = 0; v < kNv; ++v) w[v] = (__m512bh)_mm512_load_si512(wp + p * 16 * kNv + 16 * v);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const __m512bh xi = (__m512bh)_mm512_set1_epi32(static_cast<int>(xp[p * kMr + i]));
#pragma GCC unroll 4
      for (int v = 0; v < kNv; ++v) acc[i][v] = _mm512_dpbf16_ps(acc[i][v], xi, w[v]);
    }
  }
  __m512 s[kNv];
#pragma GCC unroll 4
  for (int v = 0; v < kNv; ++v) s[v] = _mm512_loadu_ps(scale + 16 * v);
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < kNv; ++v) {
      float* out = c + i * ldc + 16 * v;
      const __m512 r = add ? _mm512_fmadd_ps(acc[i][v], s[v], _mm512_maskz_loadu_ps(mask[v], out))
                           : _mm512_mul_ps(acc[i][v], s[v]);
      _mm512_mask_storeu_ps(out, mask[v], r);
    }
}

LUCID_AVX512BF16 void TilePairs(const uint32_t* xp, const uint32_t* wp, int64_t kc2, float* c,
                                int64_t ldc, int m, int n, bool add, const float* scale) {
  __mmask16 mask[kNv];
  for (int v = 0; v < kNv; ++v) mask[v] = Mask16(n - 16 * v);
  WithRows(m, [&](auto mr) { KernelPairs<mr.value>(xp, wp, kc2, c, ldc, mask, add, scale); });
}

// 32-column chunk sources for PackPairs: Load(j, k, left) is row j's columns k..k+31 as 16 bf16
// pairs (columns at or past `left` from k zero).
LUCID_AVX512 inline __mmask32 Mask32(int64_t left) {
  if (left <= 0) return 0;
  return left >= 32 ? static_cast<__mmask32>(0xFFFFFFFFu)
                    : static_cast<__mmask32>((1u << left) - 1);
}
struct Bf16PairRows {
  const uint16_t* const* rows;
  LUCID_AVX512BF16 __m512 Load(int j, int64_t k, int64_t left) const {
    const __m512i v = left >= 32 ? _mm512_loadu_si512(rows[j] + k)
                                 : _mm512_maskz_loadu_epi16(Mask32(left), rows[j] + k);
    return _mm512_castsi512_ps(v);
  }
};
// FP8 blocks: the e4m3 codes' bf16 bits (exact), without the block scale.
struct Fp8PairRows {
  const uint8_t* const* rows;
  avx512::E4m3Table table;
  LUCID_AVX512BF16 __m512 Load(int j, int64_t k, int64_t left) const {
    const __m256i b = left >= 32 ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[j] + k))
                                 : _mm256_maskz_loadu_epi8(Mask32(left), rows[j] + k);
    return _mm512_castsi512_ps(avx512::E4m3ToBf16(b, table));
  }
};
// NVFP4: e2m1 * group scale in f32 (exact), then bf16 (exact: at most 6 significant bits).
struct Nvfp4PairRows {
  const uint8_t* const* rows;
  const float* const* gs;
  LUCID_AVX512BF16 __m512 Group(int j, int64_t k) const {  // 16 values from column k (k % 16 == 0)
    const __m512 lut = _mm512_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f, -0.5f,
                                      -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f);
    const __m512i b = _mm512_cvtepu8_epi64(_mm_loadl_epi64((const __m128i*)(rows[j] + k / 2)));
    const __m512i idx = _mm512_or_si512(b, _mm512_slli_epi64(_mm512_srli_epi64(b, 4), 32));
    return _mm512_mul_ps(_mm512_permutexvar_ps(idx, lut), _mm512_set1_ps(gs[j][k / 16]));
  }
  LUCID_AVX512BF16 __m512 Load(int j, int64_t k, int64_t left) const {
    // Rows hold whole groups; a group at or past `left` is not read (zero).
    const __m512 a = Group(j, k);
    const __m512 b = left > 16 ? Group(j, k + 16) : _mm512_setzero_ps();
    return _mm512_castsi512_ps((__m512i)_mm512_cvtne2ps_pbh(b, a));
  }
};

// wp[p * nr + j] = row j's pair p (columns 2p, 2p + 1), for p < ceil(kc / 2), j < nr.
template <typename Src>
LUCID_AVX512BF16 void PackPairs(const Src& src, int64_t kc, uint32_t* wp) {
  constexpr int nr = 16 * kNv;
  for (int64_t k0 = 0; k0 < kc; k0 += 32) {
    const int64_t left = kc - k0, pairs = left >= 32 ? 16 : (left + 1) / 2;
#pragma GCC unroll 4
    for (int v = 0; v < kNv; ++v) {
      __m512 r[16];
#pragma GCC unroll 16
      for (int j = 0; j < 16; ++j) r[j] = src.Load(16 * v + j, k0, left);
      avx512::Transpose16x16(r);
      for (int64_t q = 0; q < pairs; ++q)
        _mm512_store_ps(reinterpret_cast<float*>(wp + (k0 / 2 + q) * nr + 16 * v), r[q]);
    }
  }
}

LUCID_AVX512BF16 void PackWBf16Pairs(const uint16_t* const* rows, int64_t kc, uint32_t* wp) {
  PackPairs(Bf16PairRows{rows}, kc, wp);
}
LUCID_AVX512BF16 void PackWFp8Pairs(const uint8_t* const* rows, int64_t kc, uint32_t* wp) {
  PackPairs(Fp8PairRows{rows, avx512::LoadE4m3Table()}, kc, wp);
}
LUCID_AVX512BF16 void PackWNvfp4Pairs(const uint8_t* const* rows, const float* const* gs,
                                      int64_t kc, uint32_t* wp) {
  PackPairs(Nvfp4PairRows{rows, gs}, kc, wp);
}

LUCID_AVX512BF16 void PackXPairs(const float* x, int64_t ldx, int m, int64_t kc, uint32_t* xp) {
  const __mmask16 out = static_cast<__mmask16>((1u << kMr) - 1);
  for (int64_t k0 = 0; k0 < kc; k0 += 32) {
    const int64_t left = kc - k0, pairs = left >= 32 ? 16 : (left + 1) / 2;
    const __mmask16 m0 = Mask16(left), m1 = Mask16(left - 16);
    __m512 r[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) {
      if (i >= m) {
        r[i] = _mm512_setzero_ps();
        continue;
      }
      const float* row = x + i * ldx + k0;
      const __m512 a = m0 == 0xFFFF ? _mm512_loadu_ps(row) : _mm512_maskz_loadu_ps(m0, row);
      const __m512 b =
          m1 == 0xFFFF ? _mm512_loadu_ps(row + 16) : _mm512_maskz_loadu_ps(m1, row + 16);
      r[i] = _mm512_castsi512_ps((__m512i)_mm512_cvtne2ps_pbh(b, a));
    }
    avx512::Transpose16x16(r);
    for (int64_t q = 0; q < pairs; ++q)
      _mm512_mask_storeu_ps(reinterpret_cast<float*>(xp + (k0 / 2 + q) * kMr), out, r[q]);
  }
}

}  // namespace

const GemmKernels* Avx512GemmKernels() {
  static const GemmKernels g = [] {
    GemmKernels t;
    t.mr = kMr;
    t.nr = 16 * kNv;
    t.tile = &Tile;
    t.pack_w = &PackWF32;
    t.pack_w_bf16 = &PackWBf16;
    t.pack_w_fp8 = &PackWFp8;
    t.pack_w_nvfp4 = &PackWNvfp4;
    t.pack_x = &PackX;
    // The pair kernels need AVX512_BF16: GemmRows uses them only at that level.
    t.tile_pairs = &TilePairs;
    t.pack_w_bf16_pairs = &PackWBf16Pairs;
    t.pack_w_nvfp4_pairs = &PackWNvfp4Pairs;
    t.pack_w_fp8_pairs = &PackWFp8Pairs;
    t.pack_x_pairs = &PackXPairs;
    return t;
  }();
  return &g;
}

}  // namespace lucid::fast
