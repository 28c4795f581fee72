// MoeExperts grouped by expert on the device (cuda-bf16act, packed experts, batches past the
// device-routed decode path): no routing copied to the host, no synchronisation, each touched
// expert's weights read once per 64 routed rows instead of once per routed row.
// 1. Grouping (one block, MoeGroupPhases): the (token, choice) pairs are counted per expert; the
//    experts' slots laid out in expert order, each expert's in row tiles of at most kWmmaBM; each
//    pair placed in a slot of its expert (x_rows[slot] = its token, pair_slot[pair] = slot). The
//    order of pairs within an expert is whatever the atomics give, which the values do not
//    depend on as long as WMMA computes an output element from its own row and column whatever
//    else the tile holds (assumed, unchecked until a GPU runs it twice). A pair whose expert id
//    is outside [0, E) gets no slot.
// 2. gate and up: the weight-only tensor-core GEMM's MoE form (cuda_weight_mma.cuh) over the row
//    tiles, x rows gathered by x_rows, into g and u [P, I]; SwiGLU into g;
// 3. down: the same over g's rows into d [P, D];
// 4. combine (MoeCombineValue): out[t] += w[t, j] * d[pair_slot[t, j]] for j in routing order (a
//    pair without a slot adds NaN: its token's row is poisoned, not another's).
// The arithmetic is cuda-bf16act's (ConformancePrecision::kBf16Act: activations and the SwiGLU
// output rounded to bf16 as they are staged). The phases are host functions too
// (cuda_moe_grouped_test.cpp runs them through the MoeExperts conformance cases).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/cuda_elementwise_items.cuh"
#include "backends/cuda/cuda_weight_mma.cuh"

namespace lucid::cuda {

inline constexpr int kMoeGroupThreads = 256;
inline constexpr int64_t kMoeGroupMaxExperts = 1024;

struct MoeGroupState {
  int32_t count[kMoeGroupMaxExperts];  // pairs per expert, then each expert's next free slot
  int32_t start[kMoeGroupMaxExperts];  // each expert's first slot
};

// The most row tiles P pairs over E experts take (a partial tile per touched expert).
__host__ __device__ inline int64_t MoeMaxTiles(int64_t P, int64_t E) {
  return (P + kWmmaBM - 1) / kWmmaBM + (E < P ? E : P);
}

__host__ __device__ inline int32_t MoeFetchAdd(int32_t* p) {
#ifdef __CUDA_ARCH__
  return atomicAdd(p, 1);
#else
  return (*p)++;
#endif
}

// idx [P] (P = T x k pairs, expert ids); writes tiles [MoeMaxTiles(P, E)], x_rows [P] and
// pair_slot [P]. run(f) runs f(tid) for every tid < kMoeGroupThreads, then a barrier.
template <typename Run>
__host__ __device__ void MoeGroupPhases(MoeGroupState& st, const int32_t* idx, int64_t P, int64_t k,
                                        int64_t E, MoeRowTile* tiles, int32_t* x_rows,
                                        int32_t* pair_slot, Run run) {
  run([&](int tid) {
    for (int64_t e = tid; e < E; e += kMoeGroupThreads) st.count[e] = 0;
  });
  run([&](int tid) {
    for (int64_t p = tid; p < P; p += kMoeGroupThreads)
      if (idx[p] >= 0 && idx[p] < E) MoeFetchAdd(&st.count[idx[p]]);
  });
  run([&](int tid) {
    if (tid != 0) return;
    const int64_t max_tiles = MoeMaxTiles(P, E);
    int64_t slot = 0, tile = 0;
    for (int64_t e = 0; e < E; ++e) {
      st.start[e] = static_cast<int32_t>(slot);
      for (int64_t i = 0; i < st.count[e]; i += kWmmaBM) {
        MoeRowTile& t = tiles[tile++];
        t.expert = static_cast<int32_t>(e);
        t.len = static_cast<int32_t>(st.count[e] - i < kWmmaBM ? st.count[e] - i : kWmmaBM);
        t.start = slot + i;
      }
      slot += st.count[e];
      st.count[e] = 0;
    }
    for (; tile < max_tiles; ++tile) tiles[tile] = MoeRowTile{};
  });
  run([&](int tid) {
    for (int64_t p = tid; p < P; p += kMoeGroupThreads) {
      const int32_t e = idx[p];
      if (e < 0 || e >= E) {
        pair_slot[p] = -1;
        continue;
      }
      const int32_t slot = st.start[e] + MoeFetchAdd(&st.count[e]);
      x_rows[slot] = static_cast<int32_t>(p / k);
      pair_slot[p] = slot;
    }
  });
}

// out[t, c] plus token t's k weighted down-projection rows at column c, in routing order.
__host__ __device__ inline float MoeCombineValue(float o, const float* d, const int32_t* pair_slot,
                                                 const float* weights, int64_t t, int64_t k,
                                                 int64_t D, int64_t c) {
  for (int64_t j = 0; j < k; ++j) {
    const int32_t slot = pair_slot[t * k + j];
    const float v = slot < 0 ? FloatFromBits(0x7fc00000u) : d[int64_t{slot} * D + c];
    o += weights[t * k + j] * v;
  }
  return o;
}

}  // namespace lucid::cuda
