// MoeExperts for a few tokens with the routing left on the device: no copy of the expert ids to
// the host, no synchronisation, a fixed launch sequence for any routing (what a CUDA graph of a
// decode step needs; a layer's first call, and one that needs a larger activation buffer,
// synchronises to upload its expert table or grow the buffer: a capture must come after a
// warm-up step), each routed expert's packed weights decoded in registers as they are read
// (cuda_packed_dot.cuh, as in cuda_gemv.h).
//
// Pair p = t * k + j is token t's j-th routed expert e = idx[p]. The first kernel gives each
// (pair p, intermediate row n) a warp: h[p, n] = SwiGLU(gate_e[n] . x[t], up_e[n] . x[t]). The
// second gives each (token t, hidden row r) a warp: out[t, r] += weights[p] * (down_e[r] . h[p])
// for j = 0 .. k-1 in turn. The lanes split the columns as PackedDotLane does (16-column vector
// chunks where every expert's rows allow); their sums then add up (a warp shuffle). A pair reads
// its expert's three matrices whole, so a step reads each expert once per token routed to it: for
// decode, where few tokens share an expert, about what a grouped GEMM reads (32 tokens x 8 of
// 256 experts: 256 reads where a grouped GEMM makes about 160), with no host synchronisation and
// none of the grouped path's five launches per touched expert. CudaOps takes this path for T <=
// kMoeDeviceRoutedMaxTokens and the host-grouped GEMMs above; where the two cost the same is a
// guess until a GPU measures it (`lucid bench --device cuda` at batch 8, 32 and 128).
//
// Arithmetic: x and h rounded to bf16 as they are read when `round_bf16` (cuda-bf16act);
// `group_scaled` (NVFP4 under cuda-bf16act) sums e2m1 x group-scale values and multiplies the
// sum by the global scale, as the tensor-core path does; under cuda-fp8act with FP8 experts the
// caller passes x and h already quantized (ops/fp8_activations.h's values). An expert id out of
// range [0, E) cannot abort a kernel: that pair's h and its token's output row become NaN, which
// the non-finite checks then report.
//
// The per-lane functions are host functions too: cuda_moe_gemv_test.cpp runs them warp by warp on
// the CPU through the ops conformance suite, without a GPU.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "backends/cuda/cuda_elementwise_items.cuh"
#include "backends/cuda/cuda_packed_dot.cuh"
#include "core/status.h"
#include "ops/ops.h"

namespace lucid::cuda {

inline constexpr int64_t kMoeDeviceRoutedMaxTokens = 32;

struct MoeGemvArgs {
  const DeviceWeight* experts = nullptr;  // gate, up and down of expert e at 3e, 3e + 1, 3e + 2
  int64_t num_experts = 0;
  int64_t hidden = 0;              // D: x's and out's columns, gate's and up's columns, down's rows
  int64_t inter = 0;               // I: gate's and up's rows, down's columns, h's columns
  const int32_t* idx = nullptr;    // [T, k] expert ids
  const float* weights = nullptr;  // [T, k] combine weights
  int64_t tokens = 0, k = 0;
  bool round_bf16 = false;
  bool group_scaled = false;
  bool vec_gate_up = false;  // DotVectorizable for every gate and up view with x
  bool vec_down = false;     // DotVectorizable for every down view with h
};

// The arguments for E experts' views (3 per expert), hidden size D and intermediate size I, the
// routing (idx i32 [T, k], weights f32 [T, k]) and a set's matmul arithmetic on experts of
// `format`: bf16-rounded activations under `bf16_act` (cuda-bf16act, cuda-fp8act) except FP8
// block experts under `fp8_act` (whose x and h the caller quantizes); vec flags left false.
inline MoeGemvArgs MoeArgsFor(const DeviceWeight* experts, int64_t E, int64_t D, int64_t I,
                              const Tensor& idx, const Tensor& weights, WeightFormat format,
                              bool bf16_act, bool fp8_act) {
  const bool fp8 = fp8_act && format == WeightFormat::kFp8Block;
  MoeGemvArgs a;
  a.experts = experts;
  a.num_experts = E;
  a.hidden = D;
  a.inter = I;
  a.idx = idx.data<const int32_t>();
  a.weights = weights.data<const float>();
  a.tokens = idx.size(0);
  a.k = idx.size(1);
  a.round_bf16 = bf16_act && !fp8;
  a.group_scaled = bf16_act && format == WeightFormat::kNvfp4;
  return a;
}

// The views of `experts` (gate, up, down of each in turn) when every matrix has the first gate's
// format and the shapes [I, D], [I, D], [D, I] (I the first gate's rows, not a GGUF format);
// empty otherwise, which the device-routed path does not take.
std::vector<DeviceWeight> MoeExpertViews(std::span<const ExpertWeights> experts, int64_t D);

// DotVectorizable for view `which` (0 gate, 1 up, 2 down) of every expert in `views` (3 per
// expert) with activation rows `x_ld` floats apart from `x`. Host code.
bool MoeVectorizable(const std::vector<DeviceWeight>& views, int which, const float* x,
                     int64_t x_ld);

// The expert of pair p, or -1 when its id is out of range.
__host__ __device__ inline int64_t MoePairExpert(const MoeGemvArgs& a, int64_t p) {
  const int64_t e = a.idx[p];
  return e >= 0 && e < a.num_experts ? e : -1;
}

// Lane `lane`'s sums of gate_e[n] . x[t] and up_e[n] . x[t] for pair p over its columns.
__host__ __device__ inline void MoeGateUpLane(const MoeGemvArgs& a, const float* x, int64_t p,
                                              int64_t n, int lane, float* g, float* u) {
  const int64_t e = MoePairExpert(a, p);
  float gs = 0.0f, us = 0.0f;
  if (e >= 0) {
    const float* xr = x + (p / a.k) * a.hidden;
    PackedDotLane<1>(a.experts[3 * e], n, xr, a.hidden, lane, a.vec_gate_up, a.round_bf16,
                     a.group_scaled, &gs);
    PackedDotLane<1>(a.experts[3 * e + 1], n, xr, a.hidden, lane, a.vec_gate_up, a.round_bf16,
                     a.group_scaled, &us);
  }
  *g = gs;
  *u = us;
}

// h[p, n] from the warp's gate and up sums: SwiGLU, as the SwiGlu op computes it.
__host__ __device__ inline float MoeSwiGlu(const MoeGemvArgs& a, int64_t p, float g, float u) {
  const int64_t e = MoePairExpert(a, p);
  if (e < 0) return NAN;
  if (a.group_scaled) {
    g = MulRn(g, *a.experts[3 * e].scale2);
    u = MulRn(u, *a.experts[3 * e + 1].scale2);
  }
  return SwiGluValue(g, u);
}

// Lane `lane`'s sum of down_e[r] . h[p] over its columns.
__host__ __device__ inline float MoeDownLane(const MoeGemvArgs& a, const float* h, int64_t p,
                                             int64_t r, int lane) {
  const int64_t e = MoePairExpert(a, p);
  if (e < 0) return 0.0f;  // MoeCombine makes the row NaN
  float s = 0.0f;
  PackedDotLane<1>(a.experts[3 * e + 2], r, h + p * a.inter, a.inter, lane, a.vec_down,
                   a.round_bf16, a.group_scaled, &s);
  return s;
}

// o + weights[p] * (the warp's down sum for pair p).
__host__ __device__ inline float MoeCombine(const MoeGemvArgs& a, int64_t p, float o, float d) {
  const int64_t e = MoePairExpert(a, p);
  if (e < 0) return NAN;
  if (a.group_scaled) d = MulRn(d, *a.experts[3 * e + 2].scale2);
  return o + MulRn(a.weights[p], d);
}

// h [T * k, I] from x [T, D]; then out [T, D] += the weighted down projections of h. All pointers
// device memory (a.experts too: MoeExpertTables); asynchronous on `stream`.
void LaunchMoeGateUp(const MoeGemvArgs& a, const float* x, float* h, cudaStream_t stream);
void LaunchMoeDownCombine(const MoeGemvArgs& a, const float* h, float* out, cudaStream_t stream);

// The experts' views in device memory, one table per expert list (a MoE layer: 3 * E *
// sizeof(DeviceWeight) bytes, about 74 KB for 256 experts), uploaded the first time a list is
// seen and again only when its views change; after that Get launches nothing, so a captured
// graph's kernels keep reading the same table. Not thread-safe (one per CudaOps and its stream).
class MoeExpertTables {
 public:
  explicit MoeExpertTables(cudaStream_t stream) : stream_(stream) {}
  ~MoeExpertTables();
  MoeExpertTables(const MoeExpertTables&) = delete;
  MoeExpertTables& operator=(const MoeExpertTables&) = delete;

  // The device copy of `views` (keyed by the list's first view's data pointer; compared in full);
  // ResourceExhausted when its buffer cannot be allocated (the table is then left empty, and a
  // later Get tries again), the CUDA error of a failed wait or upload.
  StatusOr<const DeviceWeight*> Get(const std::vector<DeviceWeight>& views);

 private:
  struct Table {
    std::vector<DeviceWeight> host;  // what the device copy holds (the async upload's source)
    DeviceWeight* device = nullptr;
    size_t capacity = 0;  // views the device buffer holds
  };
  cudaStream_t stream_;
  std::unordered_map<const void*, Table> tables_;
};

}  // namespace lucid::cuda
