// Internal to the fast CPU backend: the per-instruction-set kernel table and the matmul driver.
//
// Every kernel here works on raw pointers and is compiled with a GCC target attribute for its
// instruction set (cpu_fast_kernels_avx512.cpp, cpu_fast_kernels_avx2.cpp); nothing from the
// standard library is instantiated inside them, so no wide-ISA code can leak into baseline paths.
//
// Matmul tiles use the "dot product" form: x rows and weight rows are both contiguous along k, a
// tile keeps MR x NR vector accumulators over k and reduces them horizontally at the end of a k
// block. Activations are packed once per call (PackedX): f32 rows padded with zeros to a multiple
// of 64 columns, plus, for vdpbf16ps, a bf16 hi/lo split of the same rows.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "backends/cpu/cpu_fast_ops.h"

namespace lucid::fast {

// out[i * NR + j] = sum over k in [k0, k1) of x_i[k] * w_j[k], for i < MR, j < NR.
// x: MR row pointers (f32, or bf16 hi rows); x2: MR bf16 lo rows (dp-bf16 tiles only, else null);
// w: NR weight row pointers (f32 or bf16). k0 is a multiple of the vector width; K is the true row
// length: weight elements at k >= K are never read (masked or left to the scalar tail, see
// KernelTable::vector_k); x rows must be readable and zero up to the padded length.
using TileFn = void (*)(const void* const* x, const void* const* x2, const void* const* w,
                        int64_t k0, int64_t k1, int64_t K, float* out);

struct TileKernel {
  TileFn fn = nullptr;
  int mr = 0, nr = 0;
};

// FP8-block rows fused with the dp-bf16 split (see KernelTable::gemv_fp8).
// 128-column scale blocks per FP8 tile call (16384 columns): whole rows of the supported models'
// matrices but the widest, so a tile streams each row from start to end.
constexpr int64_t kFp8TileBlocks = 128;
using Fp8TileFn = void (*)(const void* const* xh, const void* const* xl, const void* const* w,
                           const float* const* sc, int64_t k0, int64_t k1, float* out);

// FP8-block rows against f32 activations (see KernelTable::fp8_f32_tiles).
using Fp8F32TileFn = void (*)(const float* const* x, const uint8_t* const* w,
                              const float* const* sc, int64_t K, float* out);

// NVFP4 rows against f32 activations (see KernelTable::nvfp4_f32_tiles).
using Nvfp4F32TileFn = void (*)(const float* const* x, const uint8_t* const* w,
                                const float* const* gs, int64_t groups, float* out);

using Nvfp4TileFn = void (*)(const void* const* xh, const void* const* xl, const void* const* w,
                             const float* const* gs, float s2, int64_t k0, int64_t k1,
                             int64_t groups_end, float* out);

// Asks for warm_bytes from each of 16 pointers (a kernel's `warm` rows) into L2 at once: for the
// kernels that take such a hint but do not spread it over their work.
inline void WarmAll16(const void* const* warm, int64_t bytes) {
  if (!warm) return;
  for (int r = 0; r < 16; ++r)
    for (int64_t b = 0; b < bytes; b += 64)
      __builtin_prefetch(static_cast<const char*>(warm[r]) + b, 0, 2);
}

// Memory a kernel pulls into L2 while it computes (the next work item's weights), so that the
// next call finds it there: up to two byte spans; a null pointer or zero bytes is no span.
struct WarmSpans {
  const void* p[2] = {nullptr, nullptr};
  int64_t bytes[2] = {0, 0};
};

using RowsAxpyPackedFn = void (*)(const uint8_t* w, int64_t ldw, int64_t rows, const float* sc,
                                  int64_t lds, float s2, const float* x, int64_t ldx, int64_t T,
                                  int64_t C, float* y, int64_t ldy, const WarmSpans& warm);

struct KernelTable {
  CpuIsa isa = CpuIsa::kScalar;
  // Columns the vector tiles cover: K (masked tails) or K rounded down to the vector width (the
  // driver adds the rest with scalar code).
  int64_t (*vector_k)(int64_t K) = nullptr;
  TileKernel gemv_f32, gemm_f32;    // f32 weights
  TileKernel gemv_bf16, gemm_bf16;  // bf16 weights (dp tiles when bf16_split)
  // One token against bf16 rows read one after another (optional; MatmulRows takes it over
  // gemv_bf16 for one token from kRowsGemvMinK columns, where the rows are long enough to pay for
  // a reduction each).
  TileKernel gemv_bf16_rows;
  bool bf16_split = false;  // bf16 tiles take hi/lo bf16 activations
  // Fused packed-weight tiles (avx512bf16), codes decoded in registers and each decoded vector
  // used by every token of the tile. fp8_tiles[m] / nvfp4_tiles[m] take m tokens (m = 1..n; x as
  // the hi/lo bf16 split, n = fp8_tile_tokens / nvfp4_tile_tokens) against nr rows; [0] is the
  // one-token tile with the widest row group. All empty (fn null): decode into the f32 sliver
  // instead. Results land in out[i * nr + j].
  // FP8 block (128-column blocks): out = sum over blocks b of sc[j][b] *
  // sum_k x_i[k] * e4m3(w_j[k]) for k in [k0, k1), k1 - k0 <= 128 * kFp8TileBlocks.
  struct Fp8Tile {
    Fp8TileFn fn = nullptr;
    int nr = 0;
  };
  Fp8Tile fp8_tiles[5];
  // NVFP4: out = s2 * sum over k in [k0, k1) of x_i[k] * (e2m1(w_j[k]) * gs[j][k / 16]); w[j]
  // points at the row's first byte, gs[j] at its group scales (f32; 0 for a padding group up to
  // a multiple of 8), groups_end = the row's group count.
  struct Nvfp4Tile {
    Nvfp4TileFn fn = nullptr;
    int nr = 0;
  };
  Nvfp4Tile nvfp4_tiles[5];
  // FP8 block (128-column blocks) against f32 activations, codes decoded in registers (AVX2,
  // cpu_fast_fp8_avx2.cpp; empty elsewhere): fp8_f32_tiles[m - 1] takes m tokens (m = 1..
  // fp8_f32_tokens) against nr rows: out[i * nr + j] = sum over blocks b of sc[j][b] * sum over
  // k < K in block b of x_i[k] * e4m3(w_j[k]) (NaN where a row holds a NaN code). One token:
  // x[0] is its row, readable and zero from K up to K rounded up to 64. m > 1 tokens: x[0] is a
  // panel of 128-column blocks, token after token within a block (block b of token i at x[0] +
  // (b * m + i) * 128), zero from K to the last block's end: every address then is one base
  // plus a constant, where m row pointers spilled GCC's registers. Codes at k >= K are never
  // read; K <= 128 * kFp8TileBlocks.
  struct Fp8F32Tile {
    Fp8F32TileFn fn = nullptr;
    int nr = 0;
  };
  Fp8F32Tile fp8_f32_tiles[8];
  int fp8_f32_tokens = 0;
  // NVFP4 (16-column groups) against f32 activations, codes decoded in registers (AVX2,
  // cpu_fast_nvfp4_avx2.cpp; empty elsewhere): nvfp4_f32_tiles[m - 1] takes m tokens (m = 1..
  // nvfp4_f32_tokens) against nr rows: out[i * nr + j] = sum over groups g < groups of the sum
  // over its 16 columns k of x_i[k] * (e2m1(w_j[k]) * gs[j][g]), without the tensor scale. w[j]
  // at the row's first byte (groups whole groups readable), gs[j] its groups' scales in f32. A
  // tile with order_x: x[i] token i's row in that order, written by the driver once per call
  // and token (xo[p] = x[order position p] for the first 16 * groups values), zero from the true
  // K. Without: one token's x[0] is its row, readable up to 16 * groups, zero from the true K;
  // m > 1 tokens' x[0] a panel of 128-column blocks as for Fp8F32Tile.
  struct Nvfp4F32Tile {
    Nvfp4F32TileFn fn = nullptr;
    int nr = 0;
    void (*order_x)(const float* x, int64_t groups, float* xo) = nullptr;
  };
  Nvfp4F32Tile nvfp4_f32_tiles[8];
  int nvfp4_f32_tokens = 0;
  // One token of activations rounded to bf16 (PackedX::hi_only) against NVFP4 rows through
  // integer products (AVX2, cpu_fast_nvfp4_avx2.cpp; empty elsewhere). quantize_x writes x (16 *
  // groups values, groups a multiple of 4) as int16 in the tile's column order, q = x * 2^k
  // rounded to nearest, one k per 16-column group (the group's largest |x| * 2^k in [2^14,
  // 2^15)), and s[g] = 2^-k; it returns false, with q and s unusable, when x holds a non-finite
  // value or a group's k falls outside what f32 scales hold. A bf16 value within 2^7 of its
  // group's largest is then exact; a smaller one is off by at most 2^-15 of the largest. fn:
  // out[j] = sum over groups of (sum over the group of q * e2m1(w_j)) * gs[j][g] * s[g], the
  // integer sums exact, for nr rows (w, gs as for Nvfp4F32Tile).
  struct Nvfp4Q16Tile {
    bool (*quantize_x)(const float* x, int64_t groups, int16_t* q, float* s) = nullptr;
    void (*fn)(const int16_t* q, const float* s, const uint8_t* const* w, const float* const* gs,
               int64_t groups, float* out) = nullptr;
    int nr = 0;
  };
  Nvfp4Q16Tile nvfp4_q16_tile;
  // The column order in which the fused tiles of a format read the hi/lo split: within each block
  // of `block` columns (64 for FP8, 128 for NVFP4, dividing kFusedPadK), position p holds column
  // order[p] of the block (the order their in-register decode leaves the weights in).
  struct XOrder {
    const uint8_t* order = nullptr;
    int block = 0;
    // Applies the order in place to n values (n a multiple of block).
    void (*permute)(uint16_t* x, int64_t n) = nullptr;
  };
  XOrder fp8_x_order, nvfp4_x_order;
  // The most tokens per fused tile call (tiles [1..n] are set, all with the same nr).
  int fp8_tile_tokens = 0, nvfp4_tile_tokens = 0;
  // The dp-bf16 tiles above for activations rounded to bf16 (PackedX with hi rows and no lo:
  // FastActivations::kBf16): one vdpbf16ps per weight pair instead of the hi/lo pair, the same
  // contracts with x2 / xl unused. Set wherever bf16_split is.
  struct HiOnlyTiles {
    TileKernel gemv_bf16, gemm_bf16, gemv_bf16_rows;
    Fp8Tile fp8[5];
    Nvfp4Tile nvfp4[5];
    int fp8_tokens = 0, nvfp4_tokens = 0;
  };
  HiOnlyTiles hi_only;
  // Whether the fused tiles take `format` (then PackX makes the hi/lo split for every T, in the
  // format's XOrder).
  bool Fused(WeightFormat format) const;
  float (*dot)(const float* a, const float* b, int64_t n) = nullptr;
  void (*axpy)(float a, const float* x, float* y, int64_t n) = nullptr;  // y += a x
  void (*scale)(float a, float* y, int64_t n) = nullptr;                 // y *= a
  // y = w * x * inv (one RmsNorm row).
  void (*scaled_mul)(const float* x, const float* w, float inv, float* y, int64_t n) = nullptr;
  float (*sum_squares)(const float* x, int64_t n) = nullptr;
  void (*swiglu)(const float* g, const float* u, float* o, int64_t n) = nullptr;
  // dst[i] = float(src[i]) for n bf16 values.
  void (*widen_bf16)(const uint16_t* src, float* dst, int64_t n) = nullptr;
  // dst[i] = e4m3fn(src[i]) exactly (NaN codes to NaN) for n codes: NVFP4 group scales.
  void (*widen_e4m3)(const uint8_t* src, float* dst, int64_t n) = nullptr;
  // The hi/lo bf16 split of n activations: hi[i] = bf16_rne(x[i]), lo[i] = bf16_rne(x[i] - hi[i])
  // (NaN to a quiet NaN; the vector version flushes denormals to zero, as vdpbf16ps reads them).
  void (*split_bf16)(const float* x, uint16_t* hi, uint16_t* lo, int64_t n) = nullptr;
  // Packed weight formats, decoded exactly as DequantizeRowSpan (bit for bit, NaN codes to NaN):
  // out[i] = e4m3(q[i]) * scale for i < n (FP8 block: one scale block's run of a row).
  void (*dequant_fp8)(const uint8_t* q, float scale, float* out, int64_t n) = nullptr;
  // NVFP4: out[16 g + i] = (e2m1(nibble i of group g) * gs[g]) * s2 for g < groups, i < 16; q holds
  // 8 bytes per group (low nibble first), gs the groups' e4m3 scales already in f32.
  void (*dequant_nvfp4)(const uint8_t* q, const float* gs, float s2, float* out,
                        int64_t groups) = nullptr;
  // GGUF block types (core/ggml_types.h): decodes n whole blocks of type t (n elements for F16)
  // stored from `blocks` into out, bit for bit as DequantizeGgmlBlock. Returns false, writing
  // nothing, for a type it has no kernel for. Null at the scalar level.
  bool (*dequant_ggml)(GgmlType t, const uint8_t* blocks, int64_t n, float* out) = nullptr;
  // One token against 4 rows of a GGUF block type, each block decoded in registers (the values
  // dequant_ggml gives) and multiplied at once: out[j] = sum over the n blocks' elements k of
  // x[k] * W_j[k], w[j] at row j's first block. False (nothing written) for a type it has no
  // kernel for (it has Q8_0, Q4_0, Q4_1). Null at the scalar level.
  bool (*gemv_ggml)(GgmlType t, const float* x, const uint8_t* const* w, int64_t n,
                    float* out) = nullptr;
  // s[i] = exp(s[i] - m) for i < n; returns their sum.
  float (*exp_sum)(float* s, int64_t n, float m) = nullptr;
  // out[0..R) += sum over j < nb of p[j] * rows[j][0..R).
  void (*weighted_rows)(const float* const* rows, const float* p, int64_t nb, float* out,
                        int64_t R) = nullptr;
  // weighted_rows for H heads over the same rows (nb <= 16): out[h * ldo + c] += sum over j < nb
  // of p[h * ldp + j] * rows[j][c] for h < H, c < R. May be null (then weighted_rows per head).
  void (*weighted_rows_heads)(const float* const* rows, const float* p, int64_t ldp, int64_t H,
                              int64_t nb, float* out, int64_t ldo, int64_t R) = nullptr;
  // Indexer: for a block of nk <= 16 keys given transposed as kt[d][16] (d < head_dim), adds
  // sum_j w[j] * relu(q[j] . k) to out[0..nk) over heads j < heads (q: [heads, head_dim]).
  // warm (may be null; a hint a kernel may ignore): 16 pointers to warm_bytes each, read into L2
  // while it computes (the next block's stored keys), as in scores16.
  void (*indexer_block)(const float* q, const float* w, int64_t heads, int64_t head_dim,
                        const float* kt, float* out, const void* const* warm,
                        int64_t warm_bytes) = nullptr;
  // out[j] += sum over h < heads, in order, of w[h] * max(s[h * ld + j], 0), for j < 16, one FMA
  // per head (the indexer's sum over heads of scores16's output). May be null.
  void (*indexer_sum16)(const float* s, int64_t ld, const float* w, int64_t heads,
                        float* out) = nullptr;
  // dst[d * 16 + r] = rows[r][d] for d < D and r < n <= 16; 0 for n <= r < 16.
  void (*transpose16)(const float* const* rows, int64_t n, int64_t D, float* dst) = nullptr;
  // Attention scores of up to 16 heads against a block of nb <= 16 rows: s[h * ld + j] = sum over
  // k < K of qT[16 k + h] * rows[j][k] for h < H <= 16, j < nb (qT: the heads' q transposed,
  // [K][16]). warm (may be null): 16 pointers, each to warm_bytes the kernel reads into L2
  // while it computes, one cache line per row at a time (the next block's stored rows). May be
  // null.
  void (*scores16)(const float* qT, int64_t K, const float* const* rows, int64_t nb, int64_t H,
                   float* s, int64_t ld, const void* const* warm, int64_t warm_bytes) = nullptr;
  // y[t * ldy + c] = sum over r < rows of x[t * ldx + r] * w[r * ldw + c] for t < T, c < C, with
  // bf16 w (the W_uk absorption); y is overwritten. Null: dequantize rows and axpy instead.
  void (*rows_axpy_bf16)(const uint16_t* w, int64_t ldw, int64_t rows, const float* x, int64_t ldx,
                         int64_t T, int64_t C, float* y, int64_t ldy) = nullptr;
  // The same with f32 w (rows decoded beforehand).
  void (*rows_axpy_f32)(const float* w, int64_t ldw, int64_t rows, const float* x, int64_t ldx,
                        int64_t T, int64_t C, float* y, int64_t ldy) = nullptr;
  // The same with packed rows decoded in registers (avx512bf16; null elsewhere). w points at row
  // 0's byte of column 0, ldw bytes apart. FP8 block (128-column blocks): sc[r * lds + c / 128] is
  // row r's block scale, s2 unused. NVFP4: sc[r * lds + g] is row r's group scale g in f32, zero
  // for padding groups up to a multiple of 8; s2 the tensor scale. `warm` is read into L2 over the
  // column passes after the first (all passes if there is one), spread evenly over their rows.
  RowsAxpyPackedFn rows_axpy_fp8 = nullptr, rows_axpy_nvfp4 = nullptr;
  // The most tokens a rows_axpy_fp8 / rows_axpy_nvfp4 call is given (0: any); callers with more
  // take the decoded f32 rows and rows_axpy_f32.
  int rows_axpy_packed_tokens = 0;
};

const KernelTable& Kernels(CpuIsa isa);
const KernelTable& ScalarKernels();
const KernelTable& Avx2Kernels();
const KernelTable& Avx512Kernels();
const KernelTable& Avx512Bf16Kernels();
// KernelTable::dequant_ggml with AVX2 + FMA + F16C (cpu_fast_ggml_avx2.cpp; every AVX-512 level
// takes it too).
bool DequantGgmlAvx2(GgmlType t, const uint8_t* blocks, int64_t n, float* out);
bool GemvGgmlAvx2(GgmlType t, const float* x, const uint8_t* const* w, int64_t n, float* out);
// The fp8_f32_tiles of cpu_fast_fp8_avx2.cpp into t (AVX2 + FMA + F16C).
void AddFp8TilesAvx2(KernelTable& t);
// The nvfp4_f32_tiles of cpu_fast_nvfp4_avx2.cpp into t (AVX2 + FMA).
void AddNvfp4TilesAvx2(KernelTable& t);
// The decode of the FP8 tiles on 32 codes (AVX2 + FMA + F16C only), for tests: out[i] = e4m3(q[i])
// for every code but the NaN ones (0x7F, 0xFF: finite here; the tiles' per-block NaN check stands
// in for them); returns that check: whether q holds a NaN code.
bool DecodeE4m3x32Avx2(const uint8_t* q, float* out);

// Activations of one Linear call, packed for the tiles.
// Returns a GEMM panel buffer to its pool (cpu_fast_gemm.cpp).
struct GemmPanelsFree {
  void operator()(float* p) const;
};
struct PackedX {
  int64_t T = 0, K = 0, Kpad = 0;
  std::vector<float> f32;        // [T, Kpad]; empty when gemm_panels holds x
  std::vector<uint16_t> hi, lo;  // [T, Kpad] when the bf16 tiles want the split
  // FastActivations::kBf16: every form above holds x rounded to bf16, and the dp-bf16 tiles take
  // hi alone (lo stays empty; KernelTable::hi_only).
  bool hi_only = false;
  // When GemmRows takes every call on this x (T >= GemmMinTokens): x as the GEMM's panels of
  // gemm_mr tokens, [ceil(T / gemm_mr)][K][gemm_mr] (cpu_fast_gemm.h), instead of f32.
  std::unique_ptr<float[], GemmPanelsFree> gemm_panels;
  int64_t gemm_mr = 0;
  // gemm_panels hold bf16 pairs ([ceil(T / gemm_mr)][ceil(K / 2)][gemm_mr] 32-bit words; see
  // GemmPairs) instead of f32.
  bool gemm_pairs = false;
  // gemm_panels hold NVFP4's int16 activations ([ceil(T / gemm_mr)][ceil(K / 16)] x groups of
  // GemmKernels::pack_x_q16; see GemmQ16) instead of f32.
  bool gemm_q16 = false;
};
constexpr int64_t kPadK = 64;
// The padding of an x with a hi/lo split for the fused packed tiles (a multiple of every
// KernelTable::XOrder block).
constexpr int64_t kFusedPadK = 128;
// Packs T rows of x (row stride ldx) of K columns; FastActivations::kBf16 rounds them to bf16
// first (round to nearest even; the vector split flushes denormals to zero).
void PackX(const KernelTable& kt, const float* x, int64_t ldx, int64_t T, int64_t K,
           WeightFormat format, FastActivations act, PackedX* p);

// Columns [k0, k1) of view row r of any weight format in f32, exactly as DequantizeRowSpan. For
// packed formats k0 must be a multiple of the scale block (block_cols) and NVFP4 writes whole
// 16-column groups: out needs room for k1 - k0 rounded up to 16. GGUF block weights take any span
// (spans not on block boundaries at both ends go through DequantizeRowSpan).
void DequantSpan(const KernelTable& kt, const Weight& w, int64_t r, int64_t k0, int64_t k1,
                 float* out);

// The column multiple DequantSpan spans should start on: the scale block of FP8 and NVFP4, the
// block of GGUF types (the vector decoders take whole blocks), else 1.
int64_t DequantAlign(const Weight& w);

// y[t * ldy + n] = sum_k x[t, k] * W[n, k] for t in [t0, t1) and n in [n0, n1). Single-threaded;
// the caller splits n (or t) across threads. Formats without a fast tile use DequantizeRow.
void MatmulRows(const KernelTable& kt, const PackedX& x, int64_t t0, int64_t t1, const Weight& w,
                int64_t n0, int64_t n1, float* y, int64_t ldy);

// Many tokens: the outer-product GEMM of cpu_fast_gemm.cpp, same contract as MatmulRows (reads
// x.gemm_panels, else x.f32). Returns false (writing nothing) when it has no kernel for this
// instruction set or weight format, or for fewer than GemmMinTokens tokens on an x with f32
// rows; MatmulRows then uses the dot-product tiles. MatmulRows tries it from kGemmMinTokens.
constexpr int64_t kGemmMinTokens = 32;
// Columns from which one token against bf16 weights takes the gemv_bf16_rows tiles.
constexpr int64_t kRowsGemvMinK = 1024;
bool GemmRows(const KernelTable& kt, const PackedX& x, int64_t t0, int64_t t1, const Weight& w,
              int64_t n0, int64_t n1, float* y, int64_t ldy);
// Tokens from which GemmRows takes calls on this format at this level (>= kGemmMinTokens where
// it has a kernel; 0: never). PackX packs an x of at least that many tokens for the GEMM alone
// (gemm_panels, no f32), and then GemmRows takes every call on it (callers pass MatmulRows at
// least kGemmMinTokens of its tokens).
int64_t GemmMinTokens(const KernelTable& kt, WeightFormat f, FastActivations act);
// Whether the GEMM runs on bf16 pairs (one vdpbf16ps per two k) for this format: activations
// rounded to bf16 at avx512bf16. Every format but f32 has weights exact in bf16 up to a factor
// the tile applies to its sums: bf16 (1), NVFP4 with 16-column groups (s2), FP8 blocks (the
// block scale: one tile call per scale block).
bool GemmPairs(const KernelTable& kt, WeightFormat f, FastActivations act);
// Whether the GEMM runs NVFP4 weights on int16 activations (GemmKernels::tile_q16, vpmaddwd) for
// this format: activations rounded to bf16 at a level with such kernels and no bf16 pairs (AVX2).
// A bf16 value within 2^7 of the largest in its 16-column group is exact as such an int16; a
// smaller one is off by at most 2^-16 of that largest.
bool GemmQ16(const KernelTable& kt, WeightFormat f, FastActivations act);
// How GemmPackX writes x: f32 values as they are, rounded to bf16 (GemmRoundsX: this level
// rounds as it packs), as bf16 pairs (GemmPairs for the weight's format), or rounded to bf16 and
// held as int16 per 16-column group (GemmQ16).
enum class GemmX { kF32, kRoundedToBf16, kBf16Pairs, kQ16 };
bool GemmRoundsX(const KernelTable& kt);
// PackX's part for such an x: p->gemm_panels (p->T, K, Kpad set by the caller), split across
// threads outside parallel regions. False only for kQ16, when x holds a non-finite value or one
// out of the int16 scales' range (then nothing usable is packed: pack it another way).
bool GemmPackX(const KernelTable& kt, const float* x, int64_t ldx, GemmX mode, PackedX* p);

}  // namespace lucid::fast
