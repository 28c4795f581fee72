// AVX2 + FMA kernels of the outer-product GEMM (layouts in cpu_fast_gemm.h): a 6 x 16 register
// tile (6 tokens of two ymm accumulators: 12 accumulators, two weight vectors and a broadcast of
// the 16 registers), 8x8 in-register transposes for packing. The weight decoders are those of the
// AVX2 DequantSpan (cpu_fast_avx2_common.h), so the panels hold DequantizeRowSpan's values. There
// is no bf16-pair path at this level (no vdpbf16ps): every format multiplies f32 panels, but NVFP4
// against activations rounded to bf16, which takes the int16 kernels of
// cpu_fast_gemm_q16_avx2.cpp (vpmaddwd: twice the multiply-adds of an FMA). Every
// function carries the AVX2 target attribute; GemmRows reaches them only when the kernel table's
// level is kAvx2 (CPUID said yes).
#include <type_traits>

#include "backends/cpu/cpu_fast_avx2_common.h"
#include "backends/cpu/cpu_fast_gemm.h"

namespace lucid::fast {
namespace {

using avx2::TailMask8;

constexpr int kMr = 6;   // tokens per tile (broadcast)
constexpr int kNr = 16;  // outputs per tile: two ymm vectors

// acc[i][v] = sum_k xp[k * kMr + i] * wp[k * 16 + 8 v ...], then C (+)= acc (under the masks of n
// outputs when n < 16).
template <int MR>
LUCID_AVX2 void Kernel(const float* xp, const float* wp, int64_t kc, float* c, int64_t ldc, int n,
                       bool add) {
  __m256 acc[MR][2];
#pragma GCC unroll 6
  for (int i = 0; i < MR; ++i) {
    _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc + 15), _MM_HINT_T0);
    acc[i][0] = _mm256_setzero_ps();
    acc[i][1] = _mm256_setzero_ps();
  }
#pragma GCC unroll 4
  for (int64_t k = 0; k < kc; ++k) {
    const __m256 w0 = _mm256_load_ps(wp + k * kNr), w1 = _mm256_load_ps(wp + k * kNr + 8);
#pragma GCC unroll 6
    for (int i = 0; i < MR; ++i) {
      const __m256 xi = _mm256_broadcast_ss(xp + k * kMr + i);
      acc[i][0] = _mm256_fmadd_ps(xi, w0, acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(xi, w1, acc[i][1]);
    }
  }
  // Every loop over acc unrolled: an index left to run time would keep acc in memory.
  const bool full = n == kNr;
  const __m256i m0 = TailMask8(n), m1 = TailMask8(n - 8);
#pragma GCC unroll 6
  for (int i = 0; i < MR; ++i) {
    float* p = c + i * ldc;
    if (full) {
      _mm256_storeu_ps(p, add ? _mm256_add_ps(_mm256_loadu_ps(p), acc[i][0]) : acc[i][0]);
      _mm256_storeu_ps(p + 8, add ? _mm256_add_ps(_mm256_loadu_ps(p + 8), acc[i][1]) : acc[i][1]);
    } else {
      _mm256_maskstore_ps(p, m0,
                          add ? _mm256_add_ps(_mm256_maskload_ps(p, m0), acc[i][0]) : acc[i][0]);
      _mm256_maskstore_ps(
          p + 8, m1, add ? _mm256_add_ps(_mm256_maskload_ps(p + 8, m1), acc[i][1]) : acc[i][1]);
    }
  }
}

LUCID_AVX2 void Tile(const float* xp, const float* wp, int64_t kc, float* c, int64_t ldc, int m,
                     int n, bool add) {
  switch (m) {
    case 6:
      return Kernel<6>(xp, wp, kc, c, ldc, n, add);
    case 5:
      return Kernel<5>(xp, wp, kc, c, ldc, n, add);
    case 4:
      return Kernel<4>(xp, wp, kc, c, ldc, n, add);
    case 3:
      return Kernel<3>(xp, wp, kc, c, ldc, n, add);
    case 2:
      return Kernel<2>(xp, wp, kc, c, ldc, n, add);
    case 1:
      return Kernel<1>(xp, wp, kc, c, ldc, n, add);
    default:
      return;
  }
}
static_assert(kMr == 6, "Tile covers 1..6 rows");

// Weight sources for PackW: Load(j, k, left, blk) is 8 values of row j at columns k.. of which
// the first `left` (< 8 only in a row's last chunk) are read; the other lanes are anything finite
// (PackW stores only the columns below kc). blk = Block(k), computed once per 8 columns. Rows are
// never null (missing rows point at zeros).
struct F32Rows {
  const float* const* rows;
  int64_t Block(int64_t) const { return 0; }
  LUCID_AVX2 __m256 Load(int j, int64_t k, int64_t left, int64_t) const {
    return left >= 8 ? _mm256_loadu_ps(rows[j] + k)
                     : _mm256_maskload_ps(rows[j] + k, TailMask8(left));
  }
};

struct Bf16Rows {
  const uint16_t* const* rows;
  int64_t Block(int64_t) const { return 0; }
  LUCID_AVX2 __m256 Load(int j, int64_t k, int64_t left, int64_t) const {
    if (left >= 8) return avx2::LoadBf16(rows[j] + k);
    uint16_t b[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t i = 0; i < left; ++i) b[i] = rows[j][k + i];
    return avx2::LoadBf16(b);
  }
};

// FP8-block rows: rows[j] at the block's first column; the scale block b holding column k
// (b = k / block_cols, block_cols a multiple of 16, so 8 columns share one scale): value =
// e4m3 * sc[j][b], rounded once, as the AVX2 DequantFp8.
struct Fp8Rows {
  const uint8_t* const* rows;
  const float* const* sc;
  int64_t block_cols;
  int64_t Block(int64_t k) const { return k / block_cols; }
  LUCID_AVX2 __m256 Load(int j, int64_t k, int64_t left, int64_t blk) const {
    const __m256 s = _mm256_set1_ps(sc[j][blk] * 256.0f);
    if (left >= 8) return avx2::E4m3x8(_mm_loadl_epi64((const __m128i*)(rows[j] + k)), s);
    uint8_t b[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t i = 0; i < left; ++i) b[i] = rows[j][k + i];
    return avx2::E4m3x8(_mm_loadl_epi64((const __m128i*)b), s);
  }
};

// NVFP4 rows: rows[j] at the byte of the block's first column (a multiple of 16), gs[j][k / 16]
// the f32 value of the group's e4m3 scale; value = (e2m1 * gs) * s2, as DequantNvfp4. A row
// holds whole groups, so the 4 bytes of 8 columns are always readable.
struct Nvfp4Rows {
  const uint8_t* const* rows;
  const float* const* gs;
  float s2;
  int64_t Block(int64_t) const { return 0; }
  LUCID_AVX2 __m256 Load(int j, int64_t k, int64_t, int64_t) const {
    const __m256 v = _mm256_mul_ps(avx2::E2m1x8(rows[j] + k / 2, avx2::E2m1Table()),
                                   _mm256_set1_ps(gs[j][k / 16]));
    return _mm256_mul_ps(v, _mm256_set1_ps(s2));
  }
};

// wp[k * kNr + j] = row j at column k, for k < kc, j < kNr.
template <typename Src>
LUCID_AVX2 void PackW(const Src& src, int64_t kc, float* wp) {
  for (int64_t k0 = 0; k0 < kc; k0 += 8) {
    const int64_t left = kc - k0, cols = left < 8 ? left : 8;
    const int64_t blk = src.Block(k0);
#pragma GCC unroll 2
    for (int v = 0; v < 2; ++v) {
      __m256 r[8];
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j) r[j] = src.Load(8 * v + j, k0, left, blk);
      avx2::Transpose8x8(r);
      if (cols == 8) {
#pragma GCC unroll 8
        for (int c = 0; c < 8; ++c) _mm256_store_ps(wp + (k0 + c) * kNr + 8 * v, r[c]);
      } else {
        for (int c = 0; c < cols; ++c) _mm256_store_ps(wp + (k0 + c) * kNr + 8 * v, r[c]);
      }
    }
  }
}

LUCID_AVX2 void PackWF32(const float* const* rows, int64_t kc, float* wp) {
  PackW(F32Rows{rows}, kc, wp);
}
LUCID_AVX2 void PackWBf16(const uint16_t* const* rows, int64_t kc, float* wp) {
  PackW(Bf16Rows{rows}, kc, wp);
}
LUCID_AVX2 void PackWFp8(const uint8_t* const* rows, const float* const* sc, int64_t block_cols,
                         int64_t kc, float* wp) {
  PackW(Fp8Rows{rows, sc, block_cols}, kc, wp);
}
LUCID_AVX2 void PackWNvfp4(const uint8_t* const* rows, const float* const* gs, float s2, int64_t kc,
                           float* wp) {
  PackW(Nvfp4Rows{rows, gs, s2}, kc, wp);
}

// xp[k * kMr + i] = x[i * ldx + k] for k < kc, i < m; rows i >= m give zeros. kRound: each value
// rounded to bf16 first.
template <bool kRound>
LUCID_AVX2 void PackX(const float* x, int64_t ldx, int m, int64_t kc, float* xp) {
  const __m256i out = TailMask8(kMr);
  for (int64_t k0 = 0; k0 < kc; k0 += 8) {
    const int64_t left = kc - k0, cols = left < 8 ? left : 8;
    const __m256i mk = TailMask8(left);
    __m256 r[8];
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i)
      r[i] = i >= m      ? _mm256_setzero_ps()
             : left >= 8 ? _mm256_loadu_ps(x + i * ldx + k0)
                         : _mm256_maskload_ps(x + i * ldx + k0, mk);
    if constexpr (kRound) {
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i) r[i] = avx2::RoundBf16(r[i]);
    }
    avx2::Transpose8x8(r);
    // Column c's 6 values with a full 8-float store, whose last 2 the next column's store
    // overwrites (a masked store is microcoded on AMD cores: it was most of this function's
    // time); the panel's last column is stored masked, so nothing past the panel is written.
    for (int64_t c = 0; c < cols; ++c) {
      if (k0 + c + 1 < kc)
        _mm256_storeu_ps(xp + (k0 + c) * kMr, r[c]);
      else
        _mm256_maskstore_ps(xp + (k0 + c) * kMr, out, r[c]);
    }
  }
}

}  // namespace

const GemmKernels* Avx2GemmKernels() {
  static const GemmKernels g = [] {
    GemmKernels t;
    t.mr = kMr;
    t.nr = kNr;
    t.tile = &Tile;
    t.pack_w = &PackWF32;
    t.pack_w_bf16 = &PackWBf16;
    t.pack_w_fp8 = &PackWFp8;
    t.pack_w_nvfp4 = &PackWNvfp4;
    t.pack_x = &PackX<false>;
    t.pack_x_bf16 = &PackX<true>;
    AddQ16GemmAvx2(t);
    return t;
  }();
  return &g;
}

}  // namespace lucid::fast
