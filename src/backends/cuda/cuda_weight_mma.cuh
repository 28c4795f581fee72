// The weight-only tensor-core GEMM of cuda-bf16act (and cuda-fp8act's non-FP8 weights): y [T, N]
// = x [T, K] . W^T for a packed weight (FP8 block with f32 or UE8M0 scales, NVFP4), the weight
// decoded into shared memory as bf16 tile by tile (no dequantized copy in global memory), the
// activations rounded to bf16 as they are staged, bf16 x bf16 products summed in f32 on the
// tensor cores (WMMA 16 x 16 x 16). The values in the tiles are exact in bf16, so the result is
// the rounded-activation reference's (ConformancePrecision::kBf16Act) up to summation order:
// - UE8M0 FP8: e4m3 x 2^e; NVFP4: e2m1 x its e4m3 group scale (the f32 global scale multiplies
//   the output);
// - f32-scale FP8 (DeepSeek's and GLM's checkpoints), whose values are not bf16: the tile holds
//   the e4m3 codes' values, each 128-column block's products are summed apart, then added
//   times the block's f32 scale (y = sum_b s_b . sum_{k in b} x_k w_k). A 16-row fragment lies
//   within one 128-row scale block, so the scale is one number per fragment.
// Block of kWmmaThreads (4 warps, 2 x 2) computes a kWmmaBM x kWmmaBN tile of y, kWmmaBK columns
// of K per stage; rows past T, N and columns past K are zeros in the tiles. The MoE form
// (cuda_moe_grouped.cuh) gives each block's row tile its own expert's weight and rows: y rows
// [start, start + len) of one expert, x rows gathered through x_rows.
// The phases are host functions too: WeightMmaBlockPhases takes how to run a phase on every
// thread, how to run one on every warp, and the warp-level matrix operations (the kernel: WMMA
// fragments; cuda_weight_mma_test.cpp: the same sums on 16 x 16 arrays), so the staging, the
// block-scale sums and the output run on the CPU through the conformance suite's Linear cases.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "backends/cuda/cuda_weight_view.cuh"

namespace lucid::cuda {

inline constexpr int kWmmaBM = 64;  // tokens per block
inline constexpr int kWmmaBN = 64;  // weight rows per block
inline constexpr int kWmmaBK = 32;  // columns per stage
inline constexpr int kWmmaThreads = 128;
inline constexpr int kWmmaLdAB = kWmmaBK + 8;  // bf16 elements per staged row (16-byte pad)
inline constexpr int kWmmaLdC = kWmmaBN + 4;   // floats per output-tile row

// A block's rows of y and their expert (MoE form).
struct MoeRowTile {
  int32_t expert = -1;  // -1: no rows (the block leaves)
  int32_t len = 0;      // rows, at most kWmmaBM
  int64_t start = 0;    // first row of y
};

struct WeightMmaArgs {
  DeviceWeight w;            // the weight; MoE: its format and shape (every expert's)
  const float* x = nullptr;  // [rows, w.cols]
  float* y = nullptr;        // [T, w.rows]
  int64_t T = 0;
  bool block_scaled = false;  // FP8 with f32 scales: codes' values staged, scales per block
  // MoE form: block x takes tiles[x]; its weight experts[3 * expert + which]; y row i reads x row
  // x_rows[i] (null: row i; -1: zeros).
  const MoeRowTile* tiles = nullptr;
  const DeviceWeight* experts = nullptr;
  int which = 0;
  const int32_t* x_rows = nullptr;
};

struct WeightMmaSmem {
  alignas(32) uint16_t x[kWmmaBM * kWmmaLdAB];  // row t, column k
  alignas(32) uint16_t w[kWmmaBN * kWmmaLdAB];  // row n, column k (B = W^T, column-major)
  alignas(32) float c[kWmmaBM * kWmmaLdC];      // the output tile, row t, column n
};

// The bf16 bits of v, which must be exact in bf16 (or NaN) or already rounded.
__host__ __device__ inline uint16_t ExactBf16Bits(float v) {
  uint32_t b;
  memcpy(&b, &v, sizeof(b));
  return static_cast<uint16_t>(b >> 16);
}

// Whether w's values are staged as its e4m3 codes with the f32 block scales applied per block
// (f32-scale FP8).
__host__ __device__ inline bool WeightMmaBlockScaled(const DeviceWeight& w) {
  return w.format == static_cast<int>(WeightFormat::kFp8Block) && !w.scale_ue8m0;
}

// The plain form: y [T, w.rows] = x [T, w.cols] . W^T.
__host__ __device__ inline WeightMmaArgs WeightMmaArgsFor(const DeviceWeight& w, const float* x,
                                                          int64_t T, float* y) {
  WeightMmaArgs a;
  a.w = w;
  a.x = x;
  a.y = y;
  a.T = T;
  a.block_scaled = WeightMmaBlockScaled(w);
  return a;
}

// What block `bx` computes: y rows [row0, row0 + rows) by `w`.
struct WeightMmaTile {
  DeviceWeight w;
  int64_t row0 = 0, rows = 0;
};

__host__ __device__ inline WeightMmaTile WeightMmaTileOf(const WeightMmaArgs& a, int64_t bx) {
  WeightMmaTile t;
  if (a.tiles == nullptr) {
    t.w = a.w;
    t.row0 = bx * kWmmaBM;
    t.rows = a.T - t.row0 < kWmmaBM ? a.T - t.row0 : kWmmaBM;
    return t;
  }
  const MoeRowTile& m = a.tiles[bx];
  if (m.expert < 0) return t;
  t.w = a.experts[3 * int64_t{m.expert} + a.which];
  t.row0 = m.start;
  t.rows = m.len;
  return t;
}

// Whether the kernel takes w (for any T): FP8 block or NVFP4; f32-scale FP8 only where a 16-row
// fragment stays within a scale block and stages do not straddle column blocks.
__host__ __device__ inline bool WeightMmaEligible(const DeviceWeight& w) {
  if (w.format == static_cast<int>(WeightFormat::kNvfp4)) return true;
  if (w.format != static_cast<int>(WeightFormat::kFp8Block)) return false;
  if (w.scale_ue8m0) return true;
  return w.block_rows % 16 == 0 && w.block_cols % kWmmaBK == 0 && w.row_begin % 16 == 0;
}

// The staged value of W[n, k] (n counts the view's rows).
__host__ __device__ inline uint16_t WeightMmaValueBits(const WeightMmaArgs& a,
                                                       const DeviceWeight& w, int64_t n,
                                                       int64_t k) {
  const int64_t row = w.row_begin + n;
  if (w.format == static_cast<int>(WeightFormat::kNvfp4))
    return ExactBf16Bits(Nvfp4GroupScaled(w, row, k));
  const uint8_t code = static_cast<const uint8_t*>(w.data)[row * w.cols + k];
  return ExactBf16Bits(a.block_scaled ? E4m3Value(code) : WeightAt(w, n, k));
}

// Thread tid's share of staging columns [k0, k0 + kWmmaBK) of tile b's columns from n0.
__host__ __device__ inline void StageWeightMmaTiles(const WeightMmaArgs& a, const WeightMmaTile& b,
                                                    int64_t n0, int64_t k0, int tid,
                                                    WeightMmaSmem& s) {
  const int64_t K = b.w.cols, N = b.w.rows;
  for (int i = tid; i < kWmmaBM * kWmmaBK; i += kWmmaThreads) {
    const int r = i / kWmmaBK, c = i % kWmmaBK;
    const int64_t k = k0 + c;
    const int64_t xr = r >= b.rows ? -1 : a.x_rows ? a.x_rows[b.row0 + r] : b.row0 + r;
    s.x[r * kWmmaLdAB + c] =
        xr >= 0 && k < K ? ExactBf16Bits(RoundToBf16(a.x[xr * K + k])) : uint16_t{0};
  }
  for (int i = tid; i < kWmmaBN * kWmmaBK; i += kWmmaThreads) {
    const int r = i / kWmmaBK, c = i % kWmmaBK;
    const int64_t n = n0 + r, k = k0 + c;
    s.w[r * kWmmaLdAB + c] = n < N && k < K ? WeightMmaValueBits(a, b.w, n, k) : uint16_t{0};
  }
}

// The f32 scale of the block holding view row n and column k (f32-scale FP8); 0 past the rows.
__host__ __device__ inline float WeightMmaBlockScale(const DeviceWeight& w, int64_t n, int64_t k) {
  if (n >= w.rows) return 0.0f;
  return static_cast<const float*>(
      w.scale)[((w.row_begin + n) / w.block_rows) * w.scale_ld + k / w.block_cols];
}

// Thread tid's share of writing the output tile (NVFP4: times the global scale).
__host__ __device__ inline void WriteWeightMmaOutput(const WeightMmaArgs& a, const WeightMmaTile& b,
                                                     int64_t n0, int tid, const WeightMmaSmem& s) {
  const int64_t N = b.w.rows;
  const bool nvfp4 = b.w.format == static_cast<int>(WeightFormat::kNvfp4);
  const float g = nvfp4 ? *b.w.scale2 : 1.0f;
  for (int i = tid; i < kWmmaBM * kWmmaBN; i += kWmmaThreads) {
    const int r = i / kWmmaBN, c = i % kWmmaBN;
    const int64_t n = n0 + c;
    if (r < b.rows && n < N) {
      const float v = s.c[r * kWmmaLdC + c];
      a.y[(b.row0 + r) * N + n] = nvfp4 ? MulRn(v, g) : v;
    }
  }
}

// Tile b's columns from n0 (b.rows > 0). run(f) runs f(tid) for every tid < kWmmaThreads, then a
// barrier; run_warps(f) runs f(warp) for every warp < kWmmaThreads / 32 (all its lanes together),
// then a barrier. Warp wp owns output rows (wp / 2) * 32 + {0, 16} and columns (wp % 2) * 32 + {0,
// 16} of the tile, as 2 x 2 fragments. mma provides, for warp wp:
//   Zero(wp)                the accumulators (and the block sums) to 0;
//   Step(wp, s, into_part)  adds the staged columns' products (into the block sums when
//                           into_part, else into the accumulators);
//   Flush(wp, s0, s1)       accumulators += s_j x block sums of column fragment j, sums to 0;
//   Store(wp, s)            the accumulators into s.c.
template <typename Run, typename RunWarps, typename Mma>
__host__ __device__ void WeightMmaBlockPhases(const WeightMmaArgs& a, const WeightMmaTile& b,
                                              int64_t n0, WeightMmaSmem& s, Mma& mma, Run run,
                                              RunWarps run_warps) {
  const int64_t K = b.w.cols;
  run_warps([&](int wp) { mma.Zero(wp); });
  for (int64_t k0 = 0; k0 < K; k0 += kWmmaBK) {
    run([&](int tid) { StageWeightMmaTiles(a, b, n0, k0, tid, s); });
    run_warps([&](int wp) { mma.Step(wp, s, a.block_scaled); });
    const bool block_ends = k0 + kWmmaBK >= K || (k0 + kWmmaBK) % b.w.block_cols == 0;
    if (a.block_scaled && block_ends)
      run_warps([&](int wp) {
        const int64_t n = n0 + (wp % 2) * 32;
        mma.Flush(wp, WeightMmaBlockScale(b.w, n, k0), WeightMmaBlockScale(b.w, n + 16, k0));
      });
  }
  run_warps([&](int wp) { mma.Store(wp, s); });
  run([&](int tid) { WriteWeightMmaOutput(a, b, n0, tid, s); });
}

}  // namespace lucid::cuda
