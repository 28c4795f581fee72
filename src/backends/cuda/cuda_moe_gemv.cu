#include <algorithm>
#include <string>

#include "backends/cuda/cuda_kernel_util.cuh"
#include "backends/cuda/cuda_moe_gemv.h"
#include "backends/cuda/cuda_status.h"
#include "core/status.h"

namespace lucid::cuda {
namespace {

constexpr int kWarpsPerBlock = kThreads / 32;

__device__ inline float WarpSum(float v) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Warp w of the grid, or -1 past `items` (whole warps leave together).
__device__ inline int64_t WarpItem(int64_t items) {
  const int64_t w = blockIdx.x * int64_t{kWarpsPerBlock} + threadIdx.x / 32;
  return w < items ? w : -1;
}

__global__ void MoeGateUpKernel(MoeGemvArgs a, const float* x, float* h) {
  const int64_t w = WarpItem(a.tokens * a.k * a.inter);
  if (w < 0) return;
  const int64_t p = w / a.inter, n = w % a.inter;
  float g = 0.0f, u = 0.0f;
  MoeGateUpLane(a, x, p, n, static_cast<int>(threadIdx.x % 32), &g, &u);
  g = WarpSum(g);
  u = WarpSum(u);
  if (threadIdx.x % 32 == 0) h[p * a.inter + n] = MoeSwiGlu(a, p, g, u);
}

__global__ void MoeDownCombineKernel(MoeGemvArgs a, const float* h, float* out) {
  const int64_t w = WarpItem(a.tokens * a.hidden);
  if (w < 0) return;
  const int64_t t = w / a.hidden, r = w % a.hidden;
  float o = out[t * a.hidden + r];
  for (int64_t j = 0; j < a.k; ++j) {
    const int64_t p = t * a.k + j;
    o = MoeCombine(a, p, o, WarpSum(MoeDownLane(a, h, p, r, static_cast<int>(threadIdx.x % 32))));
  }
  if (threadIdx.x % 32 == 0) out[t * a.hidden + r] = o;
}

unsigned WarpBlocks(int64_t items) {
  return static_cast<unsigned>((items + kWarpsPerBlock - 1) / kWarpsPerBlock);
}

}  // namespace

void LaunchMoeGateUp(const MoeGemvArgs& a, const float* x, float* h, cudaStream_t stream) {
  const int64_t items = a.tokens * a.k * a.inter;
  if (items > 0) MoeGateUpKernel<<<WarpBlocks(items), kThreads, 0, stream>>>(a, x, h);
}

void LaunchMoeDownCombine(const MoeGemvArgs& a, const float* h, float* out, cudaStream_t stream) {
  const int64_t items = a.tokens * a.hidden;
  if (items > 0 && a.k > 0)
    MoeDownCombineKernel<<<WarpBlocks(items), kThreads, 0, stream>>>(a, h, out);
}

std::vector<DeviceWeight> MoeExpertViews(std::span<const ExpertWeights> experts, int64_t D) {
  if (experts.empty()) return {};
  const WeightFormat format = experts[0].gate.format;
  const int64_t I = experts[0].gate.rows;
  if (format == WeightFormat::kGgml) return {};
  std::vector<DeviceWeight> views;
  views.reserve(3 * experts.size());
  for (const ExpertWeights& e : experts) {
    for (const Weight* w : {&e.gate, &e.up, &e.down})
      if (w->format != format) return {};
    if (e.gate.rows != I || e.up.rows != I || e.down.cols != I || e.gate.cols != D ||
        e.up.cols != D || e.down.rows != D)
      return {};
    for (const Weight* w : {&e.gate, &e.up, &e.down}) views.push_back(DeviceWeightOf(*w));
  }
  return views;
}

bool MoeVectorizable(const std::vector<DeviceWeight>& views, int which, const float* x,
                     int64_t x_ld) {
  for (size_t i = static_cast<size_t>(which); i < views.size(); i += 3)
    if (!DotVectorizable(views[i], x, x_ld)) return false;
  return true;
}

MoeExpertTables::~MoeExpertTables() {
  cudaStreamSynchronize(stream_);
  for (auto& [key, table] : tables_) cudaFree(table.device);
}

StatusOr<const DeviceWeight*> MoeExpertTables::Get(const std::vector<DeviceWeight>& views) {
  Table& t = tables_[views.empty() ? nullptr : views[0].data];
  if (t.device != nullptr && t.host == views) return t.device;
  // New or changed: wait for any upload still reading the old host copy, then replace it.
  LUCID_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  if (views.size() > t.capacity || t.device == nullptr) {
    cudaFree(t.device);
    t.device = nullptr;
    t.capacity = 0;
    t.host.clear();
    const size_t bytes = std::max<size_t>(views.size(), 1) * sizeof(DeviceWeight);
    if (const cudaError_t e = cudaMalloc(reinterpret_cast<void**>(&t.device), bytes);
        e != cudaSuccess) {
      (void)cudaGetLastError();  // not sticky: later calls may succeed
      t.device = nullptr;
      return ResourceExhausted("cuda: no device memory for a MoE layer's expert table (" +
                               std::to_string(bytes) + " bytes): " + cudaGetErrorString(e));
    }
    t.capacity = views.size();
  }
  // The copy's source must outlive the asynchronous copy; what the table holds is recorded only
  // once the copy is issued (a failed one leaves it to be made again).
  t.host.clear();
  std::vector<DeviceWeight> source = views;
  if (!views.empty())
    LUCID_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(t.device, source.data(),
                                               views.size() * sizeof(DeviceWeight),
                                               cudaMemcpyHostToDevice, stream_));
  t.host = std::move(source);  // a vector's move keeps its buffer: the copy's source stays put
  return static_cast<const DeviceWeight*>(t.device);
}

}  // namespace lucid::cuda
