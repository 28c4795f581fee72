// CudaMatmul: the matmul arithmetic of the CUDA op sets (cuda_ops.h says what each set computes):
// Linear, LinearTransposed and MLA's per-head products with kv_b, on one stream, through cuBLAS,
// cuBLASLt's block-scaled FP8 GEMM (cuda_fp8_gemm.h) and the packed GEMV (cuda_gemv.h).
// A weight that is not read in place is dequantized into the pool's weight buffer in row chunks
// of at most kDequantChunkBytes (cuda_scratch.h), each chunk's GEMM writing its columns of y (a
// vocabulary-sized weight's f32 copy would be gigabytes); kv_b is dequantized whole (its heads'
// rows are strided through: 59 MB as f32 for GLM-5).
// Callers check shapes and devices (CudaOps does) and pass T > 0 token rows.
// Errors: a failed cuBLAS or CUDA call is kept for TakeError; scratch the device cannot give is
// kept by the ScratchPool; either way the op launches nothing more.
// Thread-safety: the engine thread only.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/cuda_fp8_gemm.h"
#include "backends/cuda/cuda_scratch.h"
#include "backends/cuda/cuda_weight_view.cuh"
#include "core/status.h"
#include "ops/ops.h"

namespace lucid::cuda {

// The matmul arithmetic of a set: f32 (cuda-reference), activations rounded to bf16
// (cuda-bf16act), FP8-quantized activations for FP8 block weights (cuda-fp8act).
enum class MatmulInputs { kF32, kBf16, kFp8 };

// w's device view; refuses GGUF block weights (no CUDA kernel) with a LUCID_CHECK.
DeviceWeight KernelView(const Weight& w);

class CudaMatmul {
 public:
  // `scratch` must outlive this object.
  CudaMatmul(cudaStream_t stream, MatmulInputs inputs, ScratchPool& scratch);
  ~CudaMatmul();
  CudaMatmul(const CudaMatmul&) = delete;
  CudaMatmul& operator=(const CudaMatmul&) = delete;

  bool bf16_act() const { return bf16_act_; }
  bool fp8_act() const { return fp8_act_; }

  // y [T, w.rows] = x [T, w.cols] . w^T.
  void Linear(const Tensor& x, const Weight& w, int64_t T, Tensor& y) const;
  // y [T, w.cols] = x [T, w.rows] . w.
  void LinearTransposed(const Tensor& x, const Weight& w, int64_t T, Tensor& y) const;
  // ops.h's MlaAbsorbQuery and MlaProjectOutput for T rows.
  void MlaAbsorbQuery(const Tensor& q, int64_t heads, int64_t q_stride, int64_t nope_dim,
                      int64_t v_dim, const Weight& kv_b, int64_t T, Tensor& q_latent) const;
  void MlaProjectOutput(const Tensor& latent, int64_t heads, int64_t nope_dim, int64_t v_dim,
                        const Weight& kv_b, int64_t T, Tensor& out) const;

  // The first failed cuBLAS or CUDA call since the last call (OK if none), cleared.
  Status TakeError() const;
  bool failed() const { return !error_.ok(); }

 private:
  struct RoundedOperands;
  void Blas(cublasStatus_t s, const char* op) const;
  template <typename T>
  T* Scratch(ScratchPool::Buffer b, int64_t bytes) const {
    return static_cast<T*>(scratch_.Get(b, static_cast<size_t>(bytes < 0 ? 0 : bytes)));
  }
  const float* Dequantized(const Weight& w) const;
  void F32Linear(const float* x, const Weight& w, int64_t T, float* y) const;
  RoundedOperands RoundedActivations(const Weight& w, const Tensor& x) const;
  const void* RoundedWeight(const Weight& w, bool bf16) const;
  void RoundedLinear(const Tensor& x, const Weight& w, int64_t T, Tensor& y) const;
  void RoundedGemm(const RoundedOperands& o, cublasOperation_t op_w, int64_t m, int64_t n,
                   int64_t k, int64_t w_off, int64_t ldw, int64_t x_off, int64_t ldx, float* y,
                   int64_t ldy, const char* op) const;
  void PostScale(const RoundedOperands& o, float* y, int64_t n) const;
  void Fp8Linear(const Tensor& x, const Weight& w, int64_t T, Tensor& y) const;

  cudaStream_t stream_;
  bool bf16_act_;  // cuda-bf16act and cuda-fp8act
  bool fp8_act_;   // cuda-fp8act
  ScratchPool& scratch_;
  mutable Fp8LtGemm fp8_gemm_;
  cublasHandle_t blas_ = nullptr;
  mutable Status error_;
};

}  // namespace lucid::cuda
