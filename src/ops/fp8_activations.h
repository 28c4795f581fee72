// FP8 activations of the block-scaled FP8 GEMM (DeepSeek-V3's recipe, what SGLang and vLLM run for
// FP8 block checkpoints on Hopper): each token's activations are quantized in groups of 128
// columns to float8_e4m3fn with one f32 scale per group, and multiplied with the weight's e4m3
// codes and 128x128 block scales.
//
// The arithmetic (SGLang's per_token_group_quant_fp8): for each group g of a row (the last group
// of a row may be shorter than 128),
//   amax  = max |x| over g (NaN entries ignored),
//   scale = max(amax, 1e-10) / 448          (f32, IEEE division),
//   code  = e4m3(x / scale)                 (f32 division, then round to nearest even with
//                                            saturation to +-448; NaN stays NaN, its sign
//                                            unspecified: the host keeps the quotient's, the
//                                            device's conversion gives 0x7F),
// and the value the GEMM multiplies is e4m3_value(code) * scale. A group holding +-Inf has an
// Inf scale, so every entry of it becomes NaN (x / Inf is 0, Inf / Inf is NaN): the row's
// products are NaN either way, as with the unquantized row. An all-zero group has scale
// 1e-10 / 448 and zero codes (exact).
// This file is the definition: the ops conformance suite's reference (ConformancePrecision::
// kFp8Act) and the CUDA set cuda-fp8act (backends/cuda/cuda_fp8_gemm.h) compute it the same way.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace lucid {

inline constexpr int64_t kFp8ActGroup = 128;
inline constexpr float kFp8ActMinAmax = 1e-10f;

// The scale of one group of n values (see above).
float Fp8ActGroupScale(const float* x, int64_t n);

// x [T, K] row-major -> codes [T, K] (e4m3 bytes) and scales [T, ceil(K/128)] row-major.
void QuantizeFp8Act(const float* x, int64_t T, int64_t K, uint8_t* codes, float* scales);

// x (f32, [..., K]) replaced by what the FP8 GEMM multiplies: every entry as
// e4m3_value(code) * scale of its (row, group).
Tensor Fp8ActDequantized(const Tensor& x);

}  // namespace lucid
