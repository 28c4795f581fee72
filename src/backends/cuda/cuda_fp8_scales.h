// FP8 block weights' scales as the CUDA kernels read them: format conversion and cuBLASLt layouts.
// Host code only (no CUDA runtime call), so it is tested on machines without a GPU.
//
// Formats. A checkpoint stores one scale per 128x128 block ([ceil(out/128), ceil(in/128)]) as
// f32 (DeepSeek-V3's weight_scale_inv) or as ue8m0 exponent bytes (code e means 2^(e-127), 255 is
// NaN); `scale_fmt: ue8m0` declares f32 values that are all powers of two. What a kernel reads is
// decided once at load (config/fp8_scale_plan.h says which for each target and kernel):
// - f32 from ue8m0: exact (Ue8m0ScalesToF32).
// - ue8m0 from f32: exact when every scale is a power of two. Otherwise a scale s is rounded UP to
//   the next power of two s' and the block's e4m3 codes are re-rounded to e4m3(q * s / s'): since
//   s' >= s, |q * s / s'| <= |q| <= 448, so no dequantized value overflows, but values change
//   (PackScalesUe8m0 counts the scales and the weights that change). Fp8ScalesForKernel refuses
//   that lossy case with the counts. No load path calls it: every CUDA op set reads either format
//   as stored (cuda-fp8act lays both out as f32 per call, LaunchLayoutBlk128Scales), so
//   UploadWeight copies the scales.
// - NaN scales stay NaN (f32 NaN <-> ue8m0 255): the block dequantizes to NaN either way and the
//   numerics guard names it on first use. A zero scale (an all-zero block) becomes 2^-127 with
//   the block's codes set to zero (NaN codes kept: NaN * 0 is NaN): every value stays, so it is
//   exact. Inf, negative scales and scales
//   above 2^127 have no ue8m0 form: refused, naming the block.
//
// cuBLASLt layouts (CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F for the weight, VEC128_32F for the
// activations; CUDA >= 12.9, sm_90). Y[T, out] = X[T, in] W^T runs as cuBLASLt's column-major
// D[out, T] = op(A = W) B (B = X^T): the K dimension is `in` for both operands.
// - Weight scales, [ceil(out/128) x ldk] f32 with ldk = ceil(in/128) rounded up to a multiple of 4
//   (16-byte aligned strides): the scale of block (n, k) at n * ldk + k, padding 0 (never read).
//   This is the checkpoint's row-major order with padded rows.
// - Activation scales, one per (token m, 128-column block k), "outer-dim-major": block k's T token
//   scales contiguous, the scale of (m, k) at k * T + m.
// These follow PyTorch's _scaled_mm requirements for its 1x128 / 128x128 recipes, which hand the
// pointers to cuBLASLt unchanged; cuda-fp8act's GEMM (cuda_fp8_gemm.h) reads them, never yet on a
// GPU.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"

namespace lucid::cuda {

// ue8m0 codes -> f32 scales: 2^(e-127) exactly (e = 0 is the f32 subnormal 2^-127), 255 -> NaN.
void Ue8m0ScalesToF32(const uint8_t* codes, int64_t n, float* out);

// The ue8m0 code of the smallest power of two >= s (s finite, > 0); below 2^-127 gives 0 (2^-127).
// -1 when there is none (s > 2^127, Inf, NaN, zero or negative).
int Ue8m0CeilCode(float s);

struct Ue8m0Packing {
  int64_t scales = 0;           // block scales packed
  int64_t exact = 0;            // powers of two (codes unchanged)
  int64_t rounded_up = 0;       // not powers of two: rounded up, the block's codes re-rounded
  int64_t zero = 0;             // zero scales (all-zero blocks): 2^-127, codes zeroed
  int64_t nan = 0;              // NaN scales kept as 255
  int64_t changed_weights = 0;  // weights whose dequantized value changed (rounded-up blocks)
  std::string refusal;          // non-empty: a scale with no ue8m0 form (names the block)
  bool lossy() const { return changed_weights > 0; }
};

// Packs the f32 block scales of an FP8 weight `q` (e4m3 codes, [rows, cols] row-major, blocks of
// br x bc, scales [ceil(rows/br), ceil(cols/bc)] row-major) as ue8m0 codes in `out_codes`, writing
// the weight's codes to `out_q` (a copy of q, with rounded-up blocks re-rounded, RNE). On a refusal
// the outputs are incomplete.
Ue8m0Packing PackScalesUe8m0(const float* scales, const uint8_t* q, int64_t rows, int64_t cols,
                             int64_t br, int64_t bc, uint8_t* out_codes, uint8_t* out_q);

// e4m3 code nearest to x (|x| <= 448, not NaN), ties to the even code.
uint8_t NearestE4m3(double x);

// Weight scale layout for BLK128x128_32F (see the file comment). `natural` is [ceil(rows/128),
// ceil(cols/128)] row-major f32.
int64_t Blk128x128ScaleLd(int64_t cols);
std::vector<float> LayoutBlk128x128Scales(const float* natural, int64_t rows, int64_t cols);
// Activation scale layout for VEC128_32F: `natural` [tokens, ceil(cols/128)] row-major ->
// outer-dim-major (offset k * tokens + m).
int64_t Vec128ScaleOffset(int64_t m, int64_t k, int64_t tokens);
std::vector<float> LayoutVec128Scales(const float* natural, int64_t tokens, int64_t cols);

// What an FP8 block kernel reads as scales.
enum class Fp8ScaleRead { kAsStored, kF32, kUe8m0 };
const char* Fp8ScaleReadName(Fp8ScaleRead r);  // "as stored", "f32", "ue8m0"

// The scale tensor (and e4m3 payload) a kernel reading `read` gets for the host FP8 block weight
// with payload `q` [rows, cols] and scales `scale` (f32 or ue8m0), block br x bc. Exact
// conversions return new tensors (q borrowed unchanged); the lossy case (f32 scales that are not
// all powers of two, for a ue8m0 reader) is FailedPrecondition with its counts, as are scales with
// no ue8m0 form.
struct Fp8ScalesForKernelResult {
  Tensor scale, q;
  Ue8m0Packing packing;  // for kUe8m0 from f32
  std::string action;    // one line: "ue8m0 -> f32 (exact)", "as stored", ...
};
StatusOr<Fp8ScalesForKernelResult> Fp8ScalesForKernel(const Tensor& q, const Tensor& scale,
                                                      int64_t br, int64_t bc, Fp8ScaleRead read);

}  // namespace lucid::cuda
