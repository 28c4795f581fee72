// CudaOps, set "cuda-reference" (see cuda_ops.h): the kernels and the op methods.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "backends/cuda/cuda_ops.h"
#include "backends/cuda/cuda_status.h"
#include "core/dtype.h"

namespace lucid::cuda {
namespace {

__constant__ float kE4m3[256];
__constant__ float kUe8m0[256];
__constant__ float kE2m1[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

constexpr int kThreads = 256;

int Blocks(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<int>(b < 65535 ? (b > 0 ? b : 1) : 65535);
}

// A weight view as the device kernels read it (ops/weight.h's layouts).
struct DeviceWeight {
  int format = 0;  // WeightFormat
  const void* data = nullptr;
  int64_t data_ld = 0;  // bytes per stored row (NVFP4), elements otherwise
  const void* scale = nullptr;
  bool scale_ue8m0 = false;
  int64_t scale_ld = 0;
  const float* scale2 = nullptr;
  int64_t rows = 0, cols = 0, row_begin = 0, block_rows = 1, block_cols = 1;
};

__device__ float Bf16Bits(uint16_t b) { return __uint_as_float(static_cast<uint32_t>(b) << 16); }

// W[r, c] of the view, in f32, with DequantizeRowSpan's arithmetic.
__device__ float WeightAt(const DeviceWeight& w, int64_t r, int64_t c) {
  const int64_t row = w.row_begin + r;
  switch (w.format) {
    case static_cast<int>(WeightFormat::kF32):
      return static_cast<const float*>(w.data)[row * w.cols + c];
    case static_cast<int>(WeightFormat::kBF16):
      return Bf16Bits(static_cast<const uint16_t*>(w.data)[row * w.cols + c]);
    case static_cast<int>(WeightFormat::kFp8Block): {
      const int64_t idx = (row / w.block_rows) * w.scale_ld + c / w.block_cols;
      const float bs = w.scale_ue8m0 ? kUe8m0[static_cast<const uint8_t*>(w.scale)[idx]]
                                     : static_cast<const float*>(w.scale)[idx];
      return kE4m3[static_cast<const uint8_t*>(w.data)[row * w.cols + c]] * bs;
    }
    case static_cast<int>(WeightFormat::kNvfp4): {
      const uint8_t q = static_cast<const uint8_t*>(w.data)[row * w.data_ld + (c >> 1)];
      const uint8_t nib = (q >> ((c & 1) * 4)) & 0xF;
      const float bs =
          kE4m3[static_cast<const uint8_t*>(w.scale)[row * w.scale_ld + c / w.block_cols]];
      return __fmul_rn(__fmul_rn(kE2m1[nib], bs), *w.scale2);
    }
  }
  return __int_as_float(0x7fc00000);
}

__global__ void DequantKernel(DeviceWeight w, float* out) {
  const int64_t n = w.rows * w.cols;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    out[i] = WeightAt(w, i / w.cols, i % w.cols);
}

__global__ void EmbeddingKernel(DeviceWeight w, const int32_t* ids, int64_t n_ids, float* out) {
  const int64_t n = n_ids * w.cols;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    out[i] = WeightAt(w, ids[i / w.cols], i % w.cols);
}

__device__ float LoadVec(const void* p, bool bf16, int64_t i) {
  return bf16 ? Bf16Bits(static_cast<const uint16_t*>(p)[i]) : static_cast<const float*>(p)[i];
}

// Block sum of one float per thread (kThreads threads).
__device__ float BlockSum(float v) {
  __shared__ float part[kThreads / 32];
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = v;
  __syncthreads();
  float s = 0.0f;
  if (threadIdx.x < 32) {
    s = threadIdx.x < kThreads / 32 ? part[threadIdx.x] : 0.0f;
    for (int o = 16; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
  }
  __shared__ float total;
  if (threadIdx.x == 0) total = s;
  __syncthreads();
  const float r = total;
  __syncthreads();
  return r;
}

__global__ void RmsNormKernel(const float* x, const void* w, bool w_bf16, float eps, int64_t D,
                              float* y) {
  const float* xr = x + blockIdx.x * D;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) ss += xr[i] * xr[i];
  ss = BlockSum(ss);
  const float inv = 1.0f / sqrtf(ss / static_cast<float>(D) + eps);
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x)
    y[blockIdx.x * D + i] = LoadVec(w, w_bf16, i) * (xr[i] * inv);
}

__global__ void LayerNormKernel(const float* x, const void* w, bool w_bf16, const void* b,
                                bool b_bf16, float eps, int64_t D, float* y) {
  const float* xr = x + blockIdx.x * D;
  float s = 0.0f;
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) s += xr[i];
  const float mean = BlockSum(s) / static_cast<float>(D);
  float v = 0.0f;
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) v += (xr[i] - mean) * (xr[i] - mean);
  const float var = BlockSum(v) / static_cast<float>(D);
  const float inv = 1.0f / sqrtf(var + eps);
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x)
    y[blockIdx.x * D + i] = (xr[i] - mean) * inv * LoadVec(w, w_bf16, i) + LoadVec(b, b_bf16, i);
}

__global__ void SwiGluKernel(const float* g, const float* u, int64_t n, float* o) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    o[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

__global__ void AccumulateKernel(float* x, const float* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    x[i] += y[i];
}

__global__ void ScaleKernel(float* x, float s, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    x[i] *= s;
}

__global__ void CopyColumnsKernel(const float* x, int64_t x_width, int64_t T, int64_t groups,
                                  int64_t group_stride, int64_t offset, int64_t width, float* out) {
  const int64_t n = T * groups * width;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = i / (groups * width), g = (i / width) % groups, j = i % width;
    out[i] = x[t * x_width + g * group_stride + offset + j];
  }
}

__global__ void GatherRowsKernel(const float* x, const int64_t* rows, int64_t n_rows, int64_t D,
                                 float* out) {
  const int64_t n = n_rows * D;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    out[i] = x[rows[i / D] * D + i % D];
}

__global__ void NonFiniteRowsKernel(const float* x, int64_t row, int32_t* flags) {
  const float* p = x + blockIdx.x * row;
  float bad = 0.0f;
  for (int64_t j = threadIdx.x; j < row; j += blockDim.x) bad += isfinite(p[j]) ? 0.0f : 1.0f;
  bad = BlockSum(bad);
  if (threadIdx.x == 0) flags[blockIdx.x] = bad > 0.0f ? 1 : 0;
}

class CudaReferenceOps final : public Ops {
 public:
  explicit CudaReferenceOps(cudaStream_t stream) : stream_(stream) {
    std::array<float, 256> e4m3{}, ue8m0{};
    for (int i = 0; i < 256; ++i) {
      e4m3[i] = F8E4M3ToF32(static_cast<uint8_t>(i));
      ue8m0[i] = Ue8m0ToF32(static_cast<uint8_t>(i));
    }
    Check(cudaMemcpyToSymbol(kE4m3, e4m3.data(), sizeof(e4m3)), "e4m3 table");
    Check(cudaMemcpyToSymbol(kUe8m0, ue8m0.data(), sizeof(ue8m0)), "ue8m0 table");
    LUCID_CHECK(cublasCreate(&blas_) == CUBLAS_STATUS_SUCCESS,
                "cuda-reference: cublasCreate failed");
    cublasSetStream(blas_, stream_);
    cublasSetMathMode(blas_, CUBLAS_PEDANTIC_MATH);  // f32 products, no TF32
  }
  ~CudaReferenceOps() override {
    cudaStreamSynchronize(stream_);
    cublasDestroy(blas_);
    for (void* p : {scratch_, ints_}) cudaFree(p);
  }

  const char* name() const override { return "cuda-reference"; }
  Device device() const override { return Device::kCuda; }

  void Linear(const Tensor& x, const Weight& w, Tensor& y) const override {
    CheckDevices(*this, "Linear", {&x, &w.data, &w.scale, &w.scale2, &y});
    const int64_t K = w.cols, N = w.rows, T = x.numel() / K;
    LUCID_CHECK(x.numel() == T * K && y.numel() == T * N, "Linear shape mismatch for " + w.name);
    const float* W = Dequantized(w);
    const float one = 1.0f, zero = 0.0f;
    Blas(cublasSgemm(blas_, CUBLAS_OP_T, CUBLAS_OP_N, N, T, K, &one, W, K, x.data<const float>(), K,
                     &zero, y.data<float>(), N),
         "Linear");
  }
  void LinearTransposed(const Tensor& x, const Weight& w, Tensor& y) const override {
    CheckDevices(*this, "LinearTransposed", {&x, &w.data, &w.scale, &w.scale2, &y});
    const int64_t R = w.rows, C = w.cols, T = x.numel() / R;
    LUCID_CHECK(x.numel() == T * R && y.numel() == T * C,
                "LinearTransposed shape mismatch for " + w.name);
    const float* W = Dequantized(w);
    const float one = 1.0f, zero = 0.0f;
    Blas(cublasSgemm(blas_, CUBLAS_OP_N, CUBLAS_OP_N, C, T, R, &one, W, C, x.data<const float>(), R,
                     &zero, y.data<float>(), C),
         "LinearTransposed");
  }
  void Embedding(const Weight& table, std::span<const int32_t> ids, Tensor& out) const override {
    CheckDevices(*this, "Embedding", {&table.data, &table.scale, &table.scale2, &out});
    LUCID_CHECK(out.size(0) == static_cast<int64_t>(ids.size()) && out.size(-1) == table.cols,
                "Embedding shape mismatch");
    for (int32_t id : ids) LUCID_CHECK(id >= 0 && id < table.rows, "Embedding id out of range");
    const int32_t* d_ids = static_cast<const int32_t*>(Upload(ids.data(), ids.size_bytes()));
    const int64_t n = static_cast<int64_t>(ids.size()) * table.cols;
    EmbeddingKernel<<<Blocks(n), kThreads, 0, stream_>>>(View(table), d_ids, ids.size(),
                                                         out.data<float>());
  }
  void RmsNorm(const Tensor& x, const Tensor& weight, float eps, Tensor& y) const override {
    CheckDevices(*this, "RmsNorm", {&x, &weight, &y});
    const int64_t D = x.size(-1), T = x.numel() / D;
    if (T > 0)
      RmsNormKernel<<<T, kThreads, 0, stream_>>>(x.data<const float>(), weight.raw(),
                                                 weight.dtype() == DType::kBF16, eps, D,
                                                 y.data<float>());
  }
  void LayerNorm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps,
                 Tensor& y) const override {
    CheckDevices(*this, "LayerNorm", {&x, &weight, &bias, &y});
    const int64_t D = x.size(-1), T = x.numel() / D;
    if (T > 0)
      LayerNormKernel<<<T, kThreads, 0, stream_>>>(
          x.data<const float>(), weight.raw(), weight.dtype() == DType::kBF16, bias.raw(),
          bias.dtype() == DType::kBF16, eps, D, y.data<float>());
  }
  void SwiGlu(const Tensor& gate, const Tensor& up, Tensor& out) const override {
    CheckDevices(*this, "SwiGlu", {&gate, &up, &out});
    const int64_t n = gate.numel();
    LUCID_CHECK(up.numel() == n && out.numel() == n, "SwiGlu shape mismatch");
    SwiGluKernel<<<Blocks(n), kThreads, 0, stream_>>>(gate.data<const float>(),
                                                      up.data<const float>(), n, out.data<float>());
  }
  void Accumulate(Tensor& x, const Tensor& y) const override {
    CheckDevices(*this, "Accumulate", {&x, &y});
    LUCID_CHECK(x.numel() == y.numel(), "Accumulate: element counts differ");
    AccumulateKernel<<<Blocks(x.numel()), kThreads, 0, stream_>>>(x.data<float>(),
                                                                  y.data<const float>(), x.numel());
  }
  void Scale(Tensor& x, float s) const override {
    CheckDevices(*this, "Scale", {&x});
    ScaleKernel<<<Blocks(x.numel()), kThreads, 0, stream_>>>(x.data<float>(), s, x.numel());
  }
  void CopyColumns(const Tensor& x, int64_t groups, int64_t group_stride, int64_t offset,
                   int64_t width, Tensor& out) const override {
    CheckDevices(*this, "CopyColumns", {&x, &out});
    const int64_t T = x.size(0), xw = x.numel() / std::max<int64_t>(T, 1);
    LUCID_CHECK(out.numel() == T * groups * width && groups * group_stride <= xw &&
                    offset + width <= group_stride,
                "CopyColumns shape mismatch");
    CopyColumnsKernel<<<Blocks(out.numel()), kThreads, 0, stream_>>>(
        x.data<const float>(), xw, T, groups, group_stride, offset, width, out.data<float>());
  }
  void GatherRows(const Tensor& x, std::span<const int64_t> rows, Tensor& out) const override {
    CheckDevices(*this, "GatherRows", {&x, &out});
    const int64_t D = x.size(-1);
    for (int64_t r : rows) LUCID_CHECK(r >= 0 && r < x.size(0), "GatherRows: row out of range");
    const int64_t* d_rows = static_cast<const int64_t*>(Upload(rows.data(), rows.size_bytes()));
    const int64_t n = static_cast<int64_t>(rows.size()) * D;
    GatherRowsKernel<<<Blocks(n), kThreads, 0, stream_>>>(x.data<const float>(), d_rows,
                                                          rows.size(), D, out.data<float>());
  }
  void NonFiniteRows(const Tensor& x, Tensor& flags) const override {
    CheckDevices(*this, "NonFiniteRows", {&x, &flags});
    const int64_t T = x.rank() == 0 ? 1 : x.size(0);
    LUCID_CHECK(x.dtype() == DType::kF32 && flags.dtype() == DType::kI32 && flags.numel() == T,
                "NonFiniteRows: x f32, flags i32 [T]");
    if (T > 0)
      NonFiniteRowsKernel<<<T, kThreads, 0, stream_>>>(x.data<const float>(), x.numel() / T,
                                                       flags.data<int32_t>());
  }
  Status Synchronize() const override {
    LUCID_CUDA_RETURN_IF_ERROR(cudaGetLastError());
    LUCID_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    if (!blas_error_.empty()) {
      std::string e;
      e.swap(blas_error_);
      return Internal(e);
    }
    return OkStatus();
  }

  // No CUDA kernel yet (CudaImplements is false): abort naming the op.
  void Rope(Tensor&, int64_t, int64_t, int64_t, const RopeTable&, std::span<const int64_t>,
            RopeStyle) const override {
    Missing("Rope");
  }
  void MlaAttention(const MlaAttentionArgs&) const override { Missing("MlaAttention"); }
  void IndexerScores(const IndexerArgs&) const override { Missing("IndexerScores"); }
  void GqaAttention(const GqaAttentionArgs&) const override { Missing("GqaAttention"); }
  void TopK(const float*, int64_t, int64_t, int32_t*) const override { Missing("TopK"); }
  void MoeRoute(const Tensor&, const Tensor&, int64_t, int64_t, int64_t, bool, float, Tensor&,
                Tensor&) const override {
    Missing("MoeRoute");
  }
  void MoeExperts(const Tensor&, std::span<const ExpertWeights>, const Tensor&, const Tensor&,
                  Tensor&) const override {
    Missing("MoeExperts");
  }
  void MlaAbsorbQuery(const Tensor&, int64_t, int64_t, int64_t, int64_t, const Weight&,
                      Tensor&) const override {
    Missing("MlaAbsorbQuery");
  }
  void MlaProjectOutput(const Tensor&, int64_t, int64_t, int64_t, const Weight&,
                        Tensor&) const override {
    Missing("MlaProjectOutput");
  }
  void WriteKvRows(std::span<const Tensor* const>, const KvRowsOut&,
                   std::span<const int64_t>) const override {
    Missing("WriteKvRows");
  }
  void TopKRows(const Tensor&, std::span<const int64_t>, int64_t, int32_t, Tensor&) const override {
    Missing("TopKRows");
  }

 private:
  [[noreturn]] static void Missing(const char* op) {
    LUCID_CHECK(false, std::string("cuda-reference: ") + op + " has no CUDA kernel yet");
    __builtin_unreachable();
  }
  static void Check(cudaError_t e, const char* what) {
    LUCID_CHECK(e == cudaSuccess,
                std::string("cuda-reference: ") + what + ": " + cudaGetErrorString(e));
  }
  void Blas(cublasStatus_t s, const char* op) const {
    if (s != CUBLAS_STATUS_SUCCESS && blas_error_.empty())
      blas_error_ = std::string(op) + ": cuBLAS status " + std::to_string(static_cast<int>(s));
  }
  static DeviceWeight View(const Weight& w) {
    LUCID_CHECK(w.format != WeightFormat::kGgml,
                "cuda-reference: GGUF block weights (" + w.name + ") have no CUDA kernel yet");
    DeviceWeight d;
    d.format = static_cast<int>(w.format);
    d.data = w.data.raw();
    d.data_ld = w.data.rank() == 2 ? w.data.size(1) : w.cols;
    d.scale = w.scale.raw();
    d.scale_ue8m0 = w.scale.dtype() == DType::kUE8M0;
    d.scale_ld = w.scale.rank() == 2 ? w.scale.size(1) : 0;
    d.scale2 = static_cast<const float*>(w.scale2.raw());
    d.rows = w.rows;
    d.cols = w.cols;
    d.row_begin = w.row_begin;
    d.block_rows = w.block_rows > 0 ? w.block_rows : 1;
    d.block_cols = w.block_cols > 0 ? w.block_cols : 1;
    return d;
  }
  // w as f32 [rows, cols] in the scratch buffer (valid until the next op that uses it).
  const float* Dequantized(const Weight& w) const {
    const size_t bytes = static_cast<size_t>(w.rows * w.cols) * sizeof(float);
    Grow(&scratch_, &scratch_bytes_, bytes);
    float* out = static_cast<float*>(scratch_);
    DequantKernel<<<Blocks(w.rows * w.cols), kThreads, 0, stream_>>>(View(w), out);
    return out;
  }
  // A device copy of host metadata, in a buffer reused by the next op.
  void* Upload(const void* host, size_t bytes) const {
    Grow(&ints_, &ints_bytes_, bytes);
    if (bytes > 0)
      Check(cudaMemcpyAsync(ints_, host, bytes, cudaMemcpyHostToDevice, stream_), "upload");
    return ints_;
  }
  void Grow(void** p, size_t* have, size_t want) const {
    if (want <= *have) return;
    Check(cudaStreamSynchronize(stream_), "grow scratch");
    cudaFree(*p);
    *p = nullptr;
    Check(cudaMalloc(p, want), "scratch");
    *have = want;
  }

  cudaStream_t stream_;
  cublasHandle_t blas_ = nullptr;
  mutable void* scratch_ = nullptr;
  mutable size_t scratch_bytes_ = 0;
  mutable void* ints_ = nullptr;
  mutable size_t ints_bytes_ = 0;
  mutable std::string blas_error_;
};

}  // namespace

bool CudaImplements(std::string_view op) {
  for (std::string_view o :
       {"Linear", "LinearMany", "LinearTransposed", "Embedding", "RmsNorm", "LayerNorm", "SwiGlu",
        "Accumulate", "Scale", "CopyColumns", "GatherRows", "NonFiniteRows"})
    if (o == op) return true;
  return false;
}

std::unique_ptr<Ops> MakeCudaReferenceOps(cudaStream_t stream) {
  return std::make_unique<CudaReferenceOps>(stream);
}

}  // namespace lucid::cuda
