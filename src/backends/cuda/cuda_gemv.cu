#include "backends/cuda/cuda_gemv.h"
#include "backends/cuda/cuda_kernel_util.cuh"

namespace lucid::cuda {
namespace {

constexpr int kRowsPerBlock = kThreads / 32;

template <int kT>
__global__ void PackedGemvKernel(DeviceWeight w, const float* x, bool vec, bool round_bf16,
                                 bool group_scaled, float* y) {
  const int64_t n = blockIdx.x * int64_t{kRowsPerBlock} + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (n >= w.rows) return;  // whole warps: the block is kRowsPerBlock warps
  float acc[kT];
#pragma unroll
  for (int t = 0; t < kT; ++t) acc[t] = 0.0f;
  PackedDotLane<kT>(w, n, x, w.cols, lane, vec, round_bf16, group_scaled, acc);
#pragma unroll
  for (int t = 0; t < kT; ++t) {
    float v = acc[t];
    for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0) y[t * w.rows + n] = group_scaled ? __fmul_rn(v, *w.scale2) : v;
  }
}

template <int kT>
void Launch(const DeviceWeight& w, const float* x, bool round_bf16, bool group_scaled, float* y,
            cudaStream_t stream) {
  const int64_t blocks = (w.rows + kRowsPerBlock - 1) / kRowsPerBlock;
  PackedGemvKernel<kT><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      w, x, DotVectorizable(w, x, w.cols), round_bf16, group_scaled, y);
}

}  // namespace

void LaunchPackedGemv(const DeviceWeight& w, const float* x, int64_t T, bool round_bf16,
                      bool group_scaled, float* y, cudaStream_t stream) {
  if (w.rows == 0) return;
  using LaunchFn = void (*)(const DeviceWeight&, const float*, bool, bool, float*, cudaStream_t);
  static constexpr LaunchFn kByTokens[kGemvMaxTokens] = {
      Launch<1>, Launch<2>, Launch<3>, Launch<4>, Launch<5>, Launch<6>, Launch<7>, Launch<8>};
  if (T >= 1 && T <= kGemvMaxTokens) kByTokens[T - 1](w, x, round_bf16, group_scaled, y, stream);
}

}  // namespace lucid::cuda
