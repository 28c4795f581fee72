// Internal to the fast CPU backend: the kernels of the outer-product GEMM (GemmRows in
// cpu_fast_kernels.h), one small table per instruction set that has them.
//
// Layouts (f32, 64-byte aligned buffers):
//   x panel  [kc][mr]: column k of mr activation rows (tokens), rows past the last token zero.
//   w panel  [kc][nr]: column k of nr weight rows (outputs) = a kc x nr slice of W^T, rows past the
//            last weight row zero.
// The micro-kernel keeps an mr x nr tile of C in registers (vectors along the outputs), broadcasts
// one x value per row and k, and multiplies it with the nr/16 weight vectors of that k.
#pragma once

#include <cstdint>

#include "backends/cpu/cpu_fast_ops.h"

namespace lucid::fast {

struct GemmKernels {
  int mr = 0, nr = 0;
  // C[i * ldc + j] (+ when add)= sum over k < kc of xp[k * mr + i] * wp[k * nr + j], for i < m and
  // j < n (m <= mr, n <= nr); nothing outside that tile of C is read or written. The sum over k is
  // in k order, in f32, from zero; with add it is then added to C.
  void (*tile)(const float* xp, const float* wp, int64_t kc, float* c, int64_t ldc, int m, int n,
               bool add) = nullptr;
  // wp[k * nr + j] = rows[j][k] for k < kc, j < nr (every row readable: missing rows point at
  // zeros).
  void (*pack_w)(const float* const* rows, int64_t kc, float* wp) = nullptr;
  // The same from bf16 rows (widened exactly).
  void (*pack_w_bf16)(const uint16_t* const* rows, int64_t kc, float* wp) = nullptr;
  // The same from FP8-block rows decoded exactly as DequantizeRowSpan: rows[j] at the k block's
  // first column (a multiple of block_cols, itself a multiple of 16); sc[j][b] is row j's scale of
  // its b-th scale block from there (value = e4m3 * scale, rounded once).
  void (*pack_w_fp8)(const uint8_t* const* rows, const float* const* sc, int64_t block_cols,
                     int64_t kc, float* wp) = nullptr;
  // The same from NVFP4 rows (16-column groups): rows[j] at the byte of the k block's first
  // column (a multiple of 16), gs[j][g] the f32 value of group g's e4m3 scale from there, s2 the
  // tensor scale.
  void (*pack_w_nvfp4)(const uint8_t* const* rows, const float* const* gs, float s2, int64_t kc,
                       float* wp) = nullptr;
  // xp[k * mr + i] = x[i * ldx + k] for k < kc, i < m; rows i >= m give zeros.
  void (*pack_x)(const float* x, int64_t ldx, int m, int64_t kc, float* xp) = nullptr;
  // The same with each value rounded to bf16 as it packs (Bf16Rne: nearest even, NaN kept a
  // NaN): activations rounded to bf16 (FastActivations::kBf16) where there are no bf16 pairs.
  // Optional.
  void (*pack_x_bf16)(const float* x, int64_t ldx, int m, int64_t kc, float* xp) = nullptr;

  // bf16 pairs (avx512bf16; for activations rounded to bf16, FastActivations::kBf16): the same
  // panels with columns 2p and 2p + 1 side by side in one 32-bit word (bf16, low half first), so
  // one vdpbf16ps does two k per output. Layouts: x panel [ceil(kc / 2)][mr] words, w panel
  // [ceil(kc / 2)][nr] words; a column at or past kc is zero.
  // C[i * ldc + j] (+)= scale[j] * sum over pairs p < kc2 of the pair products, as `tile` (scale:
  // nr per-output multipliers: NVFP4's s2, an FP8 row's block scale, or 1).
  void (*tile_pairs)(const uint32_t* xp, const uint32_t* wp, int64_t kc2, float* c, int64_t ldc,
                     int m, int n, bool add, const float* scale) = nullptr;
  // From bf16 rows (exact).
  void (*pack_w_bf16_pairs)(const uint16_t* const* rows, int64_t kc, uint32_t* wp) = nullptr;
  // From NVFP4 rows as pack_w_nvfp4 but without s2 (the tile's scale): e2m1 * group scale has at
  // most 6 significant bits, so it is exact in bf16.
  void (*pack_w_nvfp4_pairs)(const uint8_t* const* rows, const float* const* gs, int64_t kc,
                             uint32_t* wp) = nullptr;
  // From FP8-block rows: the e4m3 codes alone (exact in bf16, NaN codes to NaN); the block scales
  // are the tile's multipliers, one call per scale block.
  void (*pack_w_fp8_pairs)(const uint8_t* const* rows, int64_t kc, uint32_t* wp) = nullptr;
  // From f32 rows holding bf16 values (exact; others rounded to nearest even).
  void (*pack_x_pairs)(const float* x, int64_t ldx, int m, int64_t kc, uint32_t* xp) = nullptr;
};

// The kernels of each instruction set that has them (cpu_fast_gemm_avx512.cpp,
// cpu_fast_gemm_avx2.cpp; the AVX2 table has no bf16-pair kernels).
const GemmKernels* Avx512GemmKernels();
const GemmKernels* Avx2GemmKernels();

}  // namespace lucid::fast
