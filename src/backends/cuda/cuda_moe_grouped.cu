// MoeExperts grouped by expert on the device: the grouping block, SwiGLU and the combine, with
// the weight-only GEMM's MoE form between them (cuda_moe_grouped.cuh).
#include "backends/cuda/cuda_kernel_util.cuh"
#include "backends/cuda/cuda_moe_grouped.cuh"
#include "backends/cuda/cuda_moe_grouped.h"
#include "backends/cuda/cuda_weight_mma.h"

namespace lucid::cuda {
namespace {

__global__ void MoeGroupKernel(const int32_t* idx, int64_t P, int64_t k, int64_t E,
                               MoeRowTile* tiles, int32_t* x_rows, int32_t* pair_slot) {
  __shared__ MoeGroupState st;
  MoeGroupPhases(st, idx, P, k, E, tiles, x_rows, pair_slot, BlockRun{});
}

__global__ void MoeSwiGluKernel(float* g, const float* u, int64_t n) {
  LUCID_GRID_LOOP(i, n) g[i] = SwiGluValue(g[i], u[i]);
}

__global__ void MoeCombineKernel(const float* d, const int32_t* pair_slot, const float* weights,
                                 int64_t T, int64_t k, int64_t D, float* out) {
  LUCID_GRID_LOOP(i, T * D) {
    const int64_t t = i / D, c = i % D;
    out[i] = MoeCombineValue(out[i], d, pair_slot, weights, t, k, D, c);
  }
}

size_t Aligned(size_t bytes) { return (bytes + 255) / 256 * 256; }

// The scratch's parts, in order.
struct Parts {
  MoeRowTile* tiles;
  int32_t *x_rows, *pair_slot;
  float *g, *u, *d;
  size_t bytes;
};

Parts Layout(void* base, int64_t T, int64_t k, int64_t E, int64_t D, int64_t I) {
  const int64_t P = T * k;
  char* p = static_cast<char*>(base);
  Parts r{};
  size_t off = 0;
  auto take = [&](size_t bytes) {
    char* at = p == nullptr ? nullptr : p + off;
    off += Aligned(bytes);
    return at;
  };
  r.tiles = reinterpret_cast<MoeRowTile*>(take(MoeMaxTiles(P, E) * sizeof(MoeRowTile)));
  r.x_rows = reinterpret_cast<int32_t*>(take(P * sizeof(int32_t)));
  r.pair_slot = reinterpret_cast<int32_t*>(take(P * sizeof(int32_t)));
  r.g = reinterpret_cast<float*>(take(P * I * sizeof(float)));
  r.u = reinterpret_cast<float*>(take(P * I * sizeof(float)));
  r.d = reinterpret_cast<float*>(take(P * D * sizeof(float)));
  r.bytes = off;
  return r;
}

}  // namespace

bool MoeGroupedFits(const std::vector<DeviceWeight>& views) {
  if (views.empty() || views.size() / 3 > static_cast<size_t>(kMoeGroupMaxExperts)) return false;
  for (const DeviceWeight& v : views)  // one staging rule for every view (LaunchMoeGrouped's)
    if (!WeightMmaEligible(v) || WeightMmaBlockScaled(v) != WeightMmaBlockScaled(views[0]))
      return false;
  return true;
}

size_t MoeGroupedScratchBytes(int64_t T, int64_t k, int64_t E, int64_t D, int64_t I) {
  return Layout(nullptr, T, k, E, D, I).bytes;
}

void LaunchMoeGrouped(const MoeGroupedArgs& a, void* scratch, cudaStream_t stream) {
  const int64_t P = a.T * a.k, D = a.down.rows, I = a.gate.rows;
  if (P == 0) return;
  const Parts s = Layout(scratch, a.T, a.k, a.E, D, I);
  const int64_t tiles = MoeMaxTiles(P, a.E);
  MoeGroupKernel<<<1, kMoeGroupThreads, 0, stream>>>(a.idx, P, a.k, a.E, s.tiles, s.x_rows,
                                                     s.pair_slot);
  WeightMmaArgs m;
  m.tiles = s.tiles;
  m.experts = a.experts;
  m.block_scaled = WeightMmaBlockScaled(a.gate);
  m.T = P;
  m.w = a.gate;
  m.x = a.x;
  m.x_rows = s.x_rows;
  m.which = 0;
  m.y = s.g;
  LaunchWeightMmaTiles(m, tiles, stream);
  m.which = 1;
  m.y = s.u;
  LaunchWeightMmaTiles(m, tiles, stream);
  MoeSwiGluKernel<<<Blocks(P * I), kThreads, 0, stream>>>(s.g, s.u, P * I);
  m.which = 2;
  m.w = a.down;
  m.x = s.g;
  m.x_rows = nullptr;  // slot i's own row
  m.y = s.d;
  LaunchWeightMmaTiles(m, tiles, stream);
  MoeCombineKernel<<<Blocks(a.T * D), kThreads, 0, stream>>>(s.d, s.pair_slot, a.weights, a.T, a.k,
                                                             D, a.out);
}

}  // namespace lucid::cuda
