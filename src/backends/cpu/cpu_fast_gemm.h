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

  // NVFP4 against int16 activations (AVX2, cpu_fast_gemm_q16_avx2.cpp; for activations rounded
  // to bf16 where there are no bf16 pairs), mr = kQ16Mr tokens, nr = kQ16Nr rows. Panels are per
  // 16-column group g of the k block, 32-byte aligned:
  //   x group [kQ16XGroupFloats]: token i's 16 values as int16 q (32 bytes at 8 i floats), then
  //            its scale s[i] (f32 at 8 kQ16Mr + i; 0 for a token past m and an all-zero group):
  //            x = bf16(x) ~ q * s, q = bf16(x) * 2^k rounded to nearest, one k per token and
  //            group (the group's largest |bf16(x)| * 2^k in [2^14, 2^15)), s = 2^-k. A value
  //            within 2^7 of its group's largest is exact; a smaller one is off by at most
  //            2^-16 of the largest.
  //   w group [kQ16WGroupFloats]: for each column pair p < 8 and half h (rows 8h..8h+7) one
  //            vector (32 bytes at (2p + h) * 8 floats) of 8 rows' int16 pairs 2 * e2m1(col 2p),
  //            2 * e2m1(col 2p + 1); then the rows' group scales / 2 (f32, at 8 kQ16Nr + j).
  // Returns false, leaving xp unusable, when a value is non-finite or a group's k falls outside
  // what the tile's scales hold; columns from kc to the last group's end read as zero.
  bool (*pack_x_q16)(const float* x, int64_t ldx, int m, int64_t kc, float* xp) = nullptr;
  // rows[j] at the byte of the k block's first column (a multiple of 16), gs[j][g] the f32 value
  // of group g's e4m3 scale from there, for j < kQ16Nr (missing rows point at zeros).
  void (*pack_w_nvfp4_q16)(const uint8_t* const* rows, const float* const* gs, int64_t groups,
                           float* wp) = nullptr;
  // C[i * ldc + j] (+ when add)= s2 * sum over groups of the group's integer sum of q * 2 e2m1
  // (exact) times its w scale times its x scale, for i < m, j < n.
  void (*tile_q16)(const float* xp, const float* wp, int64_t groups, float s2, float* c,
                   int64_t ldc, int m, int n, bool add) = nullptr;
};

constexpr int kQ16Mr = 6, kQ16Nr = 16;
constexpr int64_t kQ16XGroupFloats = (kQ16Mr * 32 + 32) / 4;
constexpr int64_t kQ16WGroupFloats = (8 * kQ16Nr * 4 + kQ16Nr * 4) / 4;
// The Q16 kernels of cpu_fast_gemm_q16_avx2.cpp into t.
void AddQ16GemmAvx2(GemmKernels& t);

// The kernels of each instruction set that has them (cpu_fast_gemm_avx512.cpp,
// cpu_fast_gemm_avx2.cpp; the AVX2 table has no bf16-pair kernels).
const GemmKernels* Avx512GemmKernels();
const GemmKernels* Avx2GemmKernels();

}  // namespace lucid::fast
