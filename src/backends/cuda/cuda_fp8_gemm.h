// The FP8 block-scaled matmul of set cuda-fp8act: Y[T, N] = Q(X)[T, K] . W^T for an FP8 block
// weight W (e4m3 codes with one scale per 128x128 block) and Q the per-(token, 128 columns) e4m3
// quantization of ops/fp8_activations.h, computed the same way on the device.
//
// Fp8LtGemm runs it on Hopper's FP8 tensor cores through cuBLASLt's block-scaled mode (CUDA >=
// 12.9, sm_90): A = W (CUDA_R_8F_E4M3, transposed, scales
// CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F in cuda_fp8_scales.h's layout), B = Q(X)
// (CUDA_R_8F_E4M3, scales VEC128_32F, outer-dim-major), D f32, f32 compute: each 128-column block's
// products summed on the tensor cores, then scaled and accumulated in f32. Where it cannot (another
// compute capability, an older cuBLASLt, a view that does not start on a 128-row block, K or N not
// a multiple of 16, an operand not on a 16-byte boundary, no algorithm from the heuristic for the
// shape and the operands' alignments) it says why and launches nothing; CudaOps then
// multiplies the same values in f32 (LaunchQuantizeFp8Act's `values` times the dequantized weight,
// SGEMM): the reference's arithmetic. All pointers are device memory; everything is asynchronous on
// the stream given. Thread-safety: one thread (the op set's engine thread); the algorithm cache and
// workspace are per instance.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <tuple>

namespace lucid::cuda {

// x [T, K] f32 -> any of: codes [T, K] (e4m3 bytes), scales in VEC128_32F order (the scale of
// (token m, group g) at g * T + m), values [T, K] (code's value times its scale, f32). Null
// outputs are skipped. One warp per (token, group).
void LaunchQuantizeFp8Act(const float* x, int64_t T, int64_t K, uint8_t* codes, float* scales,
                          float* values, cudaStream_t stream);

// The block scales of rows [row_begin, row_begin + N) of an FP8 block weight (row_begin a
// multiple of 128), stored [*, scale_ld] row-major as f32 or as ue8m0 codes (2^(e-127), 255 NaN),
// written as f32 in BLK128x128_32F order: [ceil(N/128), Blk128x128ScaleLd(K)], padding 0.
void LaunchLayoutBlk128Scales(const void* scales, bool ue8m0, int64_t scale_ld, int64_t row_begin,
                              int64_t N, int64_t K, float* out, cudaStream_t stream);

// An FP8 block weight view as Fp8LtGemm reads it.
struct Fp8LtWeight {
  const uint8_t* codes = nullptr;  // the view's first row; rows of K bytes
  int64_t rows = 0, cols = 0;      // N, K
  int64_t row_begin = 0;           // of the view in the stored weight
  int64_t block_rows = 0, block_cols = 0;
  int64_t data_ld = 0;  // bytes per stored row
};

class Fp8LtGemm {
 public:
  // `sm` is the device's compute capability (90 for sm_90).
  Fp8LtGemm(cudaStream_t stream, int sm);
  ~Fp8LtGemm();
  Fp8LtGemm(const Fp8LtGemm&) = delete;
  Fp8LtGemm& operator=(const Fp8LtGemm&) = delete;

  // Empty when cuBLASLt can take this weight at T tokens as far as the host can tell (the
  // heuristic may still refuse in Run); otherwise why not.
  std::string Unsupported(const Fp8LtWeight& w, int64_t T) const;
  // y [T, N] f32 = the block-scaled product of w (scales: LaunchLayoutBlk128Scales' layout) and
  // the quantized activations (LaunchQuantizeFp8Act's codes and scales). Empty when launched;
  // otherwise why not (nothing launched).
  std::string Run(const Fp8LtWeight& w, const float* w_scales, const uint8_t* x_codes,
                  const float* x_scales, int64_t T, float* y);
  // One line on stderr the first time a matmul (weight `name`, T tokens) is not run here and
  // multiplied in f32 instead, with why: a set that does not do what it says is never silent.
  void ReportFallbackOnce(const std::string& name, int64_t T, const std::string& why);

 private:
  cudaStream_t stream_;
  int sm_;
  cublasLtHandle_t lt_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  bool fallback_reported_ = false;
  // The heuristic's first algorithm by (N, T, K) and the alignments of A, B and D; nullopt
  // where it had none (asked once).
  using AlgoKey = std::tuple<int64_t, int64_t, int64_t, uint32_t, uint32_t, uint32_t>;
  std::map<AlgoKey, std::optional<cublasLtMatmulAlgo_t>> algos_;
};

}  // namespace lucid::cuda
