// CudaMatmul (cuda_matmul.h): the CUDA sets' matmuls, dequantizing kernels and cuBLAS calls.
#include <algorithm>
#include <string>

#include "backends/cuda/cuda_device.h"
#include "backends/cuda/cuda_fp8_scales.h"
#include "backends/cuda/cuda_gemv.h"
#include "backends/cuda/cuda_kernel_util.cuh"
#include "backends/cuda/cuda_matmul.h"
#include "backends/cuda/cuda_status.h"
#include "backends/cuda/cuda_weight_mma.h"
#include "core/dtype.h"
#include "ops/fp8_activations.h"

namespace lucid::cuda {
namespace {

__global__ void DequantKernel(DeviceWeight w, float* out) {
  const int64_t n = w.rows * w.cols;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    out[i] = WeightAt(w, i / w.cols, i % w.cols);
}

// The view as bf16 bits, for formats whose values are exact in bf16 (Bf16Exact); NVFP4 without
// its global scale, which the caller applies to the product.
__global__ void DequantBf16Kernel(DeviceWeight w, uint16_t* out) {
  const bool nvfp4 = w.format == static_cast<int>(WeightFormat::kNvfp4);
  LUCID_GRID_LOOP(i, w.rows * w.cols) {
    const int64_t r = i / w.cols, c = i % w.cols;
    out[i] = Bf16BitsRne(nvfp4 ? Nvfp4GroupScaled(w, w.row_begin + r, c) : WeightAt(w, r, c));
  }
}

// x rounded to bf16, as bf16 bits (`bits`, a tensor-core operand) or as the f32 of those bits.
__global__ void RoundToBf16Kernel(const float* x, int64_t n, uint16_t* bits, float* values) {
  LUCID_GRID_LOOP(i, n) {
    const uint16_t b = Bf16BitsRne(x[i]);
    if (bits != nullptr)
      bits[i] = b;
    else
      values[i] = FloatFromBits(static_cast<uint32_t>(b) << 16);
  }
}

__global__ void ScaleByDeviceScalarKernel(float* x, const float* s, int64_t n) {
  LUCID_GRID_LOOP(i, n) x[i] *= *s;
}

// Rows per dequantized chunk of w as `element_bytes`-byte values; all of them where w is read
// in place (f32, and bf16 taken as bf16).
int64_t ChunkRows(const Weight& w, size_t element_bytes) {
  const bool in_place =
      w.format == WeightFormat::kF32 || (w.format == WeightFormat::kBF16 && element_bytes == 2);
  return in_place ? w.rows : DequantChunkRows(w.rows, w.cols, element_bytes);
}

bool Bf16Exact(const Weight& w) {
  return w.format == WeightFormat::kBF16 || w.format == WeightFormat::kNvfp4 ||
         (w.format == WeightFormat::kFp8Block && w.scale.dtype() == DType::kUE8M0);
}

}  // namespace

DeviceWeight KernelView(const Weight& w) {
  LUCID_CHECK(w.format != WeightFormat::kGgml,
              "cuda: GGUF block weights (" + w.name + ") have no CUDA kernel yet");
  return DeviceWeightOf(w);
}

// The operands of a matmul with activations rounded to bf16 (cuda-bf16act): x rounded and the
// weight's values, both as bf16 (tensor cores) where the weight's values are exact in bf16,
// else both as f32 holding the same values. Valid until the next op; nullptr where the scratch
// cannot be had. bf16 and f32 weights are read in place.
struct CudaMatmul::RoundedOperands {
  const void* w = nullptr;
  const void* x = nullptr;
  bool bf16 = false;
  const float* post_scale = nullptr;  // NVFP4's global scale: the product's factor
};

CudaMatmul::CudaMatmul(cudaStream_t stream, MatmulInputs inputs, ScratchPool& scratch)
    : stream_(stream),
      bf16_act_(inputs != MatmulInputs::kF32),
      fp8_act_(inputs == MatmulInputs::kFp8),
      scratch_(scratch),
      fp8_gemm_(stream, CurrentDeviceSm()) {
  LUCID_CHECK(cublasCreate(&blas_) == CUBLAS_STATUS_SUCCESS, "cuda: cublasCreate failed");
  cublasSetStream(blas_, stream_);
  // cuda-reference: f32 products, no TF32. cuda-bf16act lets the bf16 GEMMs take the tensor
  // cores; its f32 GEMMs stay f32 (no TF32 without CUBLAS_TF32_TENSOR_OP_MATH; the rounded
  // ones ask for CUBLAS_COMPUTE_32F_PEDANTIC).
  cublasSetMathMode(blas_, bf16_act_ ? CUBLAS_DEFAULT_MATH : CUBLAS_PEDANTIC_MATH);
}

CudaMatmul::~CudaMatmul() {
  cudaStreamSynchronize(stream_);
  cublasDestroy(blas_);
}

Status CudaMatmul::TakeError() const {
  Status e = std::move(error_);
  error_ = OkStatus();
  return e;
}

void CudaMatmul::Blas(cublasStatus_t s, const char* op) const {
  if (s != CUBLAS_STATUS_SUCCESS && error_.ok())
    error_ = Internal(std::string(op) + ": cuBLAS status " + std::to_string(static_cast<int>(s)));
}

void CudaMatmul::Linear(const Tensor& x, const Weight& w, int64_t T, Tensor& y) const {
  if (fp8_act_ && w.format == WeightFormat::kFp8Block) {
    Fp8Linear(x, w, T, y);
    return;
  }
  if ((w.format == WeightFormat::kFp8Block || w.format == WeightFormat::kNvfp4) &&
      T <= kGemvMaxTokens) {  // decode: the packed weight read once, decoded in registers
    LaunchPackedGemv(KernelView(w), x.data<const float>(), T, bf16_act_,
                     bf16_act_ && w.format == WeightFormat::kNvfp4, y.data<float>(), stream_);
    return;
  }
  if (bf16_act_) {
    if (const DeviceWeight d = KernelView(w); WeightMmaTakes(d, T)) {
      LaunchWeightMma(d, x.data<const float>(), T, y.data<float>(), stream_);
      return;
    }
    RoundedLinear(x, w, T, y);
    return;
  }
  F32Linear(x.data<const float>(), w, T, y.data<float>());
}

void CudaMatmul::LinearTransposed(const Tensor& x, const Weight& w, int64_t T, Tensor& y) const {
  // y = x . W over row chunks of W (columns of x), summed into y.
  const int64_t R = w.rows, C = w.cols, step = ChunkRows(w, sizeof(float));
  for (int64_t r0 = 0; r0 < R; r0 += step) {
    const float* W = Dequantized(w.RowRange(r0, std::min(step, R - r0)));
    if (W == nullptr) return;
    const float one = 1.0f, beta = r0 == 0 ? 0.0f : 1.0f;
    Blas(cublasSgemm(blas_, CUBLAS_OP_N, CUBLAS_OP_N, C, T, std::min(step, R - r0), &one, W, C,
                     x.data<const float>() + r0, R, &beta, y.data<float>(), C),
         "LinearTransposed");
  }
}

void CudaMatmul::MlaAbsorbQuery(const Tensor& q, int64_t heads, int64_t q_stride, int64_t nope_dim,
                                int64_t v_dim, const Weight& kv_b, int64_t T,
                                Tensor& q_latent) const {
  // Per head: q_latent[:, h, :] = q[:, h, 0:nope] . W_uk_h, strided in and out (no copies).
  const int64_t R = kv_b.cols;
  const float* W = Dequantized(kv_b);
  if (W == nullptr) return;
  const float one = 1.0f, zero = 0.0f;
  for (int64_t h = 0; h < heads; ++h)
    Blas(cublasSgemm(blas_, CUBLAS_OP_N, CUBLAS_OP_N, R, T, nope_dim, &one,
                     W + h * (nope_dim + v_dim) * R, R, q.data<const float>() + h * q_stride,
                     heads * q_stride, &zero, q_latent.data<float>() + h * R, heads * R),
         "MlaAbsorbQuery");
}

void CudaMatmul::MlaProjectOutput(const Tensor& latent, int64_t heads, int64_t nope_dim,
                                  int64_t v_dim, const Weight& kv_b, int64_t T, Tensor& out) const {
  // Per head: out[:, h * v + j] = latent[:, h, :] . W_uv_h[j, :].
  const int64_t R = kv_b.cols;
  if (bf16_act_) {
    // kv_b whole (its heads' rows are strided through): 59 MB as f32 for GLM-5, under 64 MiB
    // for the supported models.
    RoundedOperands o = RoundedActivations(kv_b, latent);
    if (o.x != nullptr) o.w = RoundedWeight(kv_b, o.bf16);
    if (o.w == nullptr) return;
    for (int64_t h = 0; h < heads; ++h)
      RoundedGemm(o, CUBLAS_OP_T, v_dim, T, R, (h * (nope_dim + v_dim) + nope_dim) * R, R, h * R,
                  heads * R, out.data<float>() + h * v_dim, heads * v_dim, "MlaProjectOutput");
    PostScale(o, out.data<float>(), T * heads * v_dim);
    return;
  }
  const float* W = Dequantized(kv_b);
  if (W == nullptr) return;
  const float one = 1.0f, zero = 0.0f;
  for (int64_t h = 0; h < heads; ++h)
    Blas(cublasSgemm(blas_, CUBLAS_OP_T, CUBLAS_OP_N, v_dim, T, R, &one,
                     W + (h * (nope_dim + v_dim) + nope_dim) * R, R,
                     latent.data<const float>() + h * R, heads * R, &zero,
                     out.data<float>() + h * v_dim, heads * v_dim),
         "MlaProjectOutput");
}

// w as f32 [rows, cols]: an f32 weight's own rows, else the scratch buffer (valid until the next
// op that uses it); nullptr when the scratch cannot be had.
const float* CudaMatmul::Dequantized(const Weight& w) const {
  if (w.format == WeightFormat::kF32)
    return static_cast<const float*>(w.data.raw()) + w.row_begin * w.cols;
  float* out = Scratch<float>(ScratchPool::Buffer::kWeight, w.rows * w.cols * sizeof(float));
  if (out != nullptr)
    DequantKernel<<<Blocks(w.rows * w.cols), kThreads, 0, stream_>>>(KernelView(w), out);
  return out;
}

// y [T, N] = x [T, K] . w^T in f32 (cuda-reference), over row chunks of the dequantized w.
void CudaMatmul::F32Linear(const float* x, const Weight& w, int64_t T, float* y) const {
  const int64_t K = w.cols, N = w.rows, step = ChunkRows(w, sizeof(float));
  for (int64_t r0 = 0; r0 < N; r0 += step) {
    const int64_t n = std::min(step, N - r0);
    const float* W = Dequantized(w.RowRange(r0, n));
    if (W == nullptr) return;
    const float one = 1.0f, zero = 0.0f;
    Blas(cublasSgemm(blas_, CUBLAS_OP_T, CUBLAS_OP_N, n, T, K, &one, W, K, x, K, &zero, y + r0, N),
         "Linear");
  }
}

// o.x, o.bf16 and o.post_scale for a matmul of x by w; o.w is left to RoundedWeight.
CudaMatmul::RoundedOperands CudaMatmul::RoundedActivations(const Weight& w, const Tensor& x) const {
  RoundedOperands o;
  o.bf16 = Bf16Exact(w);
  if (w.format == WeightFormat::kNvfp4) o.post_scale = static_cast<const float*>(w.scale2.raw());
  const int64_t n = x.numel();
  void* act = Scratch<void>(ScratchPool::Buffer::kActivations, n * (o.bf16 ? 2 : 4));
  if (act == nullptr) return o;
  RoundToBf16Kernel<<<Blocks(n), kThreads, 0, stream_>>>(
      x.data<const float>(), n, o.bf16 ? static_cast<uint16_t*>(act) : nullptr,
      o.bf16 ? nullptr : static_cast<float*>(act));
  o.x = act;
  return o;
}

// w's values as bf16 (NVFP4 without its global scale) or f32: its own rows where it is stored
// so, else dequantized into the weight scratch.
const void* CudaMatmul::RoundedWeight(const Weight& w, bool bf16) const {
  if (!bf16) return Dequantized(w);
  if (w.format == WeightFormat::kBF16)
    return static_cast<const uint16_t*>(w.data.raw()) + w.row_begin * w.cols;
  uint16_t* out = Scratch<uint16_t>(ScratchPool::Buffer::kWeight, w.rows * w.cols * 2);
  if (out != nullptr)
    DequantBf16Kernel<<<Blocks(w.rows * w.cols), kThreads, 0, stream_>>>(KernelView(w), out);
  return out;
}

// cuda-bf16act's Linear above kGemvMaxTokens: y = rounded(x) . w^T over row chunks of w.
void CudaMatmul::RoundedLinear(const Tensor& x, const Weight& w, int64_t T, Tensor& y) const {
  const int64_t K = w.cols, N = w.rows;
  RoundedOperands o = RoundedActivations(w, x);
  if (o.x == nullptr) return;
  const int64_t step = ChunkRows(w, o.bf16 ? 2 : 4);
  for (int64_t r0 = 0; r0 < N; r0 += step) {
    const int64_t n = std::min(step, N - r0);
    o.w = RoundedWeight(w.RowRange(r0, n), o.bf16);
    if (o.w == nullptr) return;
    RoundedGemm(o, CUBLAS_OP_T, n, T, K, 0, K, 0, K, y.data<float>() + r0, N, "Linear");
  }
  PostScale(o, y.data<float>(), T * N);
}

// y (column-major m x n, ldy) = op_w(W) . X, W and X the operands at element offsets w_off and
// x_off: f32 accumulation, on the tensor cores for bf16 operands.
void CudaMatmul::RoundedGemm(const RoundedOperands& o, cublasOperation_t op_w, int64_t m, int64_t n,
                             int64_t k, int64_t w_off, int64_t ldw, int64_t x_off, int64_t ldx,
                             float* y, int64_t ldy, const char* op) const {
  const size_t e = o.bf16 ? 2 : 4;
  const cudaDataType t = o.bf16 ? CUDA_R_16BF : CUDA_R_32F;
  const float one = 1.0f, zero = 0.0f;
  Blas(cublasGemmEx(blas_, op_w, CUBLAS_OP_N, static_cast<int>(m), static_cast<int>(n),
                    static_cast<int>(k), &one, static_cast<const char*>(o.w) + w_off * e, t,
                    static_cast<int>(ldw), static_cast<const char*>(o.x) + x_off * e, t,
                    static_cast<int>(ldx), &zero, y, CUDA_R_32F, static_cast<int>(ldy),
                    o.bf16 ? CUBLAS_COMPUTE_32F : CUBLAS_COMPUTE_32F_PEDANTIC, CUBLAS_GEMM_DEFAULT),
       op);
}

void CudaMatmul::PostScale(const RoundedOperands& o, float* y, int64_t n) const {
  if (o.post_scale != nullptr && n > 0)
    ScaleByDeviceScalarKernel<<<Blocks(n), kThreads, 0, stream_>>>(y, o.post_scale, n);
}

// cuda-fp8act's Linear with an FP8 block weight (cuda_fp8_gemm.h): the activations quantized
// per (token, 128 columns), then cuBLASLt's block-scaled FP8 GEMM, or where it cannot run the
// same values multiplied in f32.
void CudaMatmul::Fp8Linear(const Tensor& x, const Weight& w, int64_t T, Tensor& y) const {
  const int64_t K = w.cols, N = w.rows, groups = (K + kFp8ActGroup - 1) / kFp8ActGroup;
  Fp8LtWeight lw;
  lw.codes = static_cast<const uint8_t*>(w.data.raw()) + w.row_begin * K;
  lw.rows = N;
  lw.cols = K;
  lw.row_begin = w.row_begin;
  lw.block_rows = w.block_rows;
  lw.block_cols = w.block_cols;
  lw.data_ld = w.data.rank() == 2 ? w.data.size(1) : K;
  std::string why = fp8_gemm_.Unsupported(lw, T);
  if (why.empty()) {
    // codes [T, K] then the scales, 16-byte aligned
    const size_t codes_bytes = (static_cast<size_t>(T * K) + 15) / 16 * 16;
    uint8_t* codes = Scratch<uint8_t>(ScratchPool::Buffer::kActivations,
                                      codes_bytes + T * groups * sizeof(float));
    const size_t ws = static_cast<size_t>((N + 127) / 128 * Blk128x128ScaleLd(K));
    float* w_scales = Scratch<float>(ScratchPool::Buffer::kFp8Scales, ws * sizeof(float));
    if (codes == nullptr || w_scales == nullptr) return;
    float* scales = reinterpret_cast<float*>(codes + codes_bytes);
    LaunchQuantizeFp8Act(x.data<const float>(), T, K, codes, scales, nullptr, stream_);
    LaunchLayoutBlk128Scales(w.scale.raw(), w.scale.dtype() == DType::kUE8M0,
                             w.scale.rank() == 2 ? w.scale.size(1) : 0, w.row_begin, N, K, w_scales,
                             stream_);
    why = fp8_gemm_.Run(lw, w_scales, codes, scales, T, y.data<float>());
    if (why.empty()) return;
  }
  fp8_gemm_.ReportFallbackOnce(w.name, T, why);
  float* xq = Scratch<float>(ScratchPool::Buffer::kActivations, T * K * sizeof(float));
  if (xq == nullptr) return;
  LaunchQuantizeFp8Act(x.data<const float>(), T, K, nullptr, nullptr, xq, stream_);
  F32Linear(xq, w, T, y.data<float>());
}

}  // namespace lucid::cuda
