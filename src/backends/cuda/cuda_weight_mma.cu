// The weight-only tensor-core GEMM's kernel: cuda_weight_mma.cuh's phases over WMMA fragments.
#include <mma.h>

#include "backends/cuda/cuda_weight_mma.cuh"
#include "backends/cuda/cuda_weight_mma.h"

namespace lucid::cuda {
namespace {

namespace wmma = nvcuda::wmma;

// One thread's share of its warp's 2 x 2 output fragments and block sums (every loop unrolled:
// the fragments stay in registers).
struct WarpFragments {
  using Acc = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;
  Acc acc[2][2], part[2][2];

  __device__ void Zero(int) {
    LUCID_UNROLL
    for (int i = 0; i < 2; ++i) {
      LUCID_UNROLL
      for (int j = 0; j < 2; ++j) {
        wmma::fill_fragment(acc[i][j], 0.0f);
        wmma::fill_fragment(part[i][j], 0.0f);
      }
    }
  }
  __device__ void Step(int wp, const WeightMmaSmem& s, bool into_part) {
    const int wm = (wp / 2) * 32, wn = (wp % 2) * 32;
    LUCID_UNROLL
    for (int kk = 0; kk < kWmmaBK; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa[2];
      wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> fb[2];
      LUCID_UNROLL
      for (int i = 0; i < 2; ++i) {
        wmma::load_matrix_sync(
            fa[i], reinterpret_cast<const __nv_bfloat16*>(s.x + (wm + i * 16) * kWmmaLdAB + kk),
            kWmmaLdAB);
        wmma::load_matrix_sync(
            fb[i], reinterpret_cast<const __nv_bfloat16*>(s.w + (wn + i * 16) * kWmmaLdAB + kk),
            kWmmaLdAB);
      }
      LUCID_UNROLL
      for (int i = 0; i < 2; ++i) {
        LUCID_UNROLL
        for (int j = 0; j < 2; ++j) {
          if (into_part)
            wmma::mma_sync(part[i][j], fa[i], fb[j], part[i][j]);
          else
            wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
        }
      }
    }
  }
  __device__ void Flush(int, float s0, float s1) {
    LUCID_UNROLL
    for (int i = 0; i < 2; ++i) {
      LUCID_UNROLL
      for (int j = 0; j < 2; ++j) {
        const float sj = j == 0 ? s0 : s1;
        LUCID_UNROLL
        for (int e = 0; e < Acc::num_elements; ++e) {
          acc[i][j].x[e] = fmaf(sj, part[i][j].x[e], acc[i][j].x[e]);
          part[i][j].x[e] = 0.0f;
        }
      }
    }
  }
  __device__ void Store(int wp, WeightMmaSmem& s) {
    const int wm = (wp / 2) * 32, wn = (wp % 2) * 32;
    LUCID_UNROLL
    for (int i = 0; i < 2; ++i) {
      LUCID_UNROLL
      for (int j = 0; j < 2; ++j)
        wmma::store_matrix_sync(s.c + (wm + i * 16) * kWmmaLdC + wn + j * 16, acc[i][j], kWmmaLdC,
                                wmma::mem_row_major);
    }
  }
};

__global__ void __launch_bounds__(kWmmaThreads) WeightMmaKernel(WeightMmaArgs a) {
  __shared__ WeightMmaSmem s;
  const WeightMmaTile b = WeightMmaTileOf(a, blockIdx.x);
  if (b.rows <= 0) return;  // the whole block: no barrier reached
  WarpFragments mma;
  const int tid = static_cast<int>(threadIdx.x);
  WeightMmaBlockPhases(
      a, b, int64_t{blockIdx.y} * kWmmaBN, s, mma,
      [&](auto phase) {
        phase(tid);
        __syncthreads();
      },
      [&](auto phase) {
        phase(tid / 32);
        __syncthreads();
      });
}

}  // namespace

bool WeightMmaTakes(const DeviceWeight& w, int64_t T) {
  if (!WeightMmaEligible(w)) return false;
  return WeightMmaBlockScaled(w) || T <= kWeightMmaMaxTokens;
}

void LaunchWeightMma(const DeviceWeight& w, const float* x, int64_t T, float* y,
                     cudaStream_t stream) {
  if (T <= 0 || w.rows <= 0) return;
  const WeightMmaArgs a = WeightMmaArgsFor(w, x, T, y);
  // Token tiles on x (up to 2^31 - 1 blocks), weight tiles on y (65535 x 64 rows); neighbouring
  // blocks read the same weight tile.
  const dim3 grid(static_cast<unsigned>((T + kWmmaBM - 1) / kWmmaBM),
                  static_cast<unsigned>((w.rows + kWmmaBN - 1) / kWmmaBN));
  WeightMmaKernel<<<grid, kWmmaThreads, 0, stream>>>(a);
}

void LaunchWeightMmaTiles(const WeightMmaArgs& a, int64_t tiles, cudaStream_t stream) {
  if (tiles <= 0 || a.w.rows <= 0) return;
  const dim3 grid(static_cast<unsigned>(tiles),
                  static_cast<unsigned>((a.w.rows + kWmmaBN - 1) / kWmmaBN));
  WeightMmaKernel<<<grid, kWmmaThreads, 0, stream>>>(a);
}

}  // namespace lucid::cuda
