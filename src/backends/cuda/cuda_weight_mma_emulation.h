// Test support: the weight-only GEMM's block algorithm (cuda_weight_mma.cuh) on the CPU, each
// phase on every thread (and each warp phase on every warp) in turn, in thread order or in
// reverse (cuda_phase_test_util.h), the warps' WMMA products as sums on 16 x 16 arrays
// (HostFragments). Used by cuda_weight_mma_test.cpp and cuda_moe_grouped_test.cpp.
#pragma once

#include <cmath>
#include <memory>

#include "backends/cuda/cuda_phase_test_util.h"
#include "backends/cuda/cuda_weight_mma.cuh"

namespace lucid::cuda {

inline float Bf16(uint16_t b) { return FloatFromBits(static_cast<uint32_t>(b) << 16); }

// The four warps' fragments as 16 x 16 row-major arrays (row: token, column: weight row).
struct HostFragments {
  static constexpr int kWarps = kWmmaThreads / 32;
  float acc[kWarps][2][2][256], part[kWarps][2][2][256];

  void Zero(int wp) {
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 2; ++j)
        for (int e = 0; e < 256; ++e) acc[wp][i][j][e] = part[wp][i][j][e] = 0.0f;
  }
  void Step(int wp, const WeightMmaSmem& s, bool into_part) {
    const int wm = (wp / 2) * 32, wn = (wp % 2) * 32;
    for (int kk = 0; kk < kWmmaBK; kk += 16)  // one mma_sync per 16 columns
      for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 2; ++j) {
          float* d = into_part ? part[wp][i][j] : acc[wp][i][j];
          for (int m = 0; m < 16; ++m)
            for (int n = 0; n < 16; ++n) {
              float sum = 0.0f;
              for (int k = 0; k < 16; ++k)
                sum += Bf16(s.x[(wm + i * 16 + m) * kWmmaLdAB + kk + k]) *
                       Bf16(s.w[(wn + j * 16 + n) * kWmmaLdAB + kk + k]);
              d[m * 16 + n] += sum;
            }
        }
  }
  void Flush(int wp, float s0, float s1) {
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 2; ++j)
        for (int e = 0; e < 256; ++e) {
          acc[wp][i][j][e] = std::fma(j == 0 ? s0 : s1, part[wp][i][j][e], acc[wp][i][j][e]);
          part[wp][i][j][e] = 0.0f;
        }
  }
  void Store(int wp, WeightMmaSmem& s) {
    const int wm = (wp / 2) * 32, wn = (wp % 2) * 32;
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 2; ++j)
        for (int m = 0; m < 16; ++m)
          for (int n = 0; n < 16; ++n)
            s.c[(wm + i * 16 + m) * kWmmaLdC + wn + j * 16 + n] = acc[wp][i][j][m * 16 + n];
  }
};

// What LaunchWeightMmaTiles computes for `tiles` row tiles (blocks with no rows leave), each
// phase's threads and warps taken in `order`.
inline void RunWeightMmaOnHost(const WeightMmaArgs& a, int64_t tiles, ThreadOrder order) {
  auto s = std::make_unique<WeightMmaSmem>();
  auto mma = std::make_unique<HostFragments>();
  for (int64_t bx = 0; bx < tiles; ++bx) {
    const WeightMmaTile b = WeightMmaTileOf(a, bx);
    if (b.rows <= 0) continue;
    for (int64_t n0 = 0; n0 < b.w.rows; n0 += kWmmaBN)
      WeightMmaBlockPhases(a, b, n0, *s, *mma, EveryThread<kWmmaThreads>(order),
                           EveryThread<HostFragments::kWarps>(order));
  }
}

}  // namespace lucid::cuda
