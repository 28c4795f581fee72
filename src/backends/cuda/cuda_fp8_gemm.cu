// Fp8LtGemm and the FP8 activation kernels (cuda_fp8_gemm.h).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "backends/cuda/cuda_fp8_act.cuh"
#include "backends/cuda/cuda_fp8_gemm.h"
#include "backends/cuda/cuda_fp8_scales.h"
#include "backends/cuda/cuda_kernel_util.cuh"
#include "backends/cuda/cuda_weight_view.cuh"
#include "ops/fp8_activations.h"

namespace lucid::cuda {
namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;  // cuBLAS's advice for Hopper

// One warp per (token, group of 128 columns): ops/fp8_activations.h's arithmetic by
// cuda_fp8_act.cuh's functions.
__global__ void QuantizeFp8ActKernel(const float* x, int64_t T, int64_t K, uint8_t* codes,
                                     float* scales, float* values) {
  const int64_t groups = (K + kFp8ActGroup - 1) / kFp8ActGroup;
  const int64_t warp = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (warp >= T * groups) return;  // whole warps only: blockDim is a multiple of 32
  const int64_t t = warp / groups, g = warp % groups, c0 = g * kFp8ActGroup;
  const int64_t n = K - c0 < kFp8ActGroup ? K - c0 : kFp8ActGroup;
  const float* xr = x + t * K + c0;
  float amax = Fp8ActLaneAmax(xr, n, lane);
  for (int o = 16; o > 0; o /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const float s = Fp8ActScaleOfAmax(amax);
  for (int64_t i = lane; i < n; i += kFp8ActLanes) {
    const uint8_t q = Fp8ActCode(xr[i], s);
    if (codes != nullptr) codes[t * K + c0 + i] = q;
    if (values != nullptr) values[t * K + c0 + i] = Fp8ActValue(q, s);
  }
  if (lane == 0 && scales != nullptr) scales[g * T + t] = s;
}

__global__ void LayoutBlk128ScalesKernel(const void* scales, bool ue8m0, int64_t scale_ld,
                                         int64_t first_block_row, int64_t nb, int64_t kb,
                                         int64_t ldk, float* out) {
  LUCID_GRID_LOOP(i, nb * ldk) {
    const int64_t n = i / ldk, k = i % ldk;
    float v = 0.0f;
    if (k < kb) {
      const int64_t src = (first_block_row + n) * scale_ld + k;
      v = ue8m0 ? Ue8m0Value(static_cast<const uint8_t*>(scales)[src])
                : static_cast<const float*>(scales)[src];
    }
    out[i] = v;
  }
}

// A cuBLASLt descriptor destroyed at scope exit.
template <typename T, cublasStatus_t (*Destroy)(T)>
struct LtHandle {
  T h = nullptr;
  ~LtHandle() {
    if (h != nullptr) Destroy(h);
  }
};
using MatmulDesc = LtHandle<cublasLtMatmulDesc_t, cublasLtMatmulDescDestroy>;
using Layout = LtHandle<cublasLtMatrixLayout_t, cublasLtMatrixLayoutDestroy>;
using Preference = LtHandle<cublasLtMatmulPreference_t, cublasLtMatmulPreferenceDestroy>;

// The largest power of two up to 256 that divides p's address (cuBLASLt's alignment preferences).
uint32_t AlignmentOf(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  uint32_t al = 256;
  while (al > 1 && a % al != 0) al /= 2;
  return al;
}

std::string LtError(const char* what, cublasStatus_t s) {
  return std::string("cuBLASLt ") + what + ": status " + std::to_string(static_cast<int>(s));
}

}  // namespace

void LaunchQuantizeFp8Act(const float* x, int64_t T, int64_t K, uint8_t* codes, float* scales,
                          float* values, cudaStream_t stream) {
  const int64_t warps = T * ((K + kFp8ActGroup - 1) / kFp8ActGroup);
  if (warps == 0) return;
  const int64_t blocks = (warps * 32 + kThreads - 1) / kThreads;
  QuantizeFp8ActKernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(x, T, K, codes,
                                                                               scales, values);
}

void LaunchLayoutBlk128Scales(const void* scales, bool ue8m0, int64_t scale_ld, int64_t row_begin,
                              int64_t N, int64_t K, float* out, cudaStream_t stream) {
  const int64_t nb = (N + 127) / 128, kb = (K + 127) / 128, ldk = Blk128x128ScaleLd(K);
  LayoutBlk128ScalesKernel<<<Blocks(nb * ldk), kThreads, 0, stream>>>(
      scales, ue8m0, scale_ld, row_begin / 128, nb, kb, ldk, out);
}

Fp8LtGemm::Fp8LtGemm(cudaStream_t stream, int sm) : stream_(stream), sm_(sm) {}

Fp8LtGemm::~Fp8LtGemm() {
  if (lt_ != nullptr) cublasLtDestroy(lt_);
  cudaFree(workspace_);
}

std::string Fp8LtGemm::Unsupported(const Fp8LtWeight& w, int64_t T) const {
  if (sm_ / 10 != 9)
    return "cuBLASLt's 128-block FP8 scaling runs on sm_90 only (this device: sm_" +
           std::to_string(sm_) + ")";
  if (cublasLtGetVersion() < 120900)
    return "cuBLASLt " + std::to_string(cublasLtGetVersion()) + " predates 128-block FP8 scaling";
  if (w.block_rows != 128 || w.block_cols != 128) return "the weight's blocks are not 128x128";
  if (w.row_begin % 128 != 0) return "the view does not start on a 128-row block";
  if (w.cols % 16 != 0 || w.rows % 16 != 0) return "K or N is not a multiple of 16";
  if (w.data_ld != w.cols) return "the weight's rows are padded";
  if (T <= 0) return "no tokens";
  return "";
}

std::string Fp8LtGemm::Run(const Fp8LtWeight& w, const float* w_scales, const uint8_t* x_codes,
                           const float* x_scales, int64_t T, float* y) {
  if (std::string why = Unsupported(w, T); !why.empty()) return why;
  // FP8 operands must start on 16 bytes; the heuristic is told each pointer's alignment (it
  // assumes 256 otherwise) and its answer is kept per shape and alignments.
  const uint32_t al_a = AlignmentOf(w.codes), al_b = AlignmentOf(x_codes), al_d = AlignmentOf(y);
  if (al_a < 16 || al_b < 16 || al_d < 16 || AlignmentOf(w_scales) < 16 ||
      AlignmentOf(x_scales) < 16)
    return "an operand does not start on a 16-byte boundary";
  if (lt_ == nullptr) {
    if (cublasStatus_t s = cublasLtCreate(&lt_); s != CUBLAS_STATUS_SUCCESS) {
      lt_ = nullptr;
      return LtError("create", s);
    }
  }
  const uint64_t N = static_cast<uint64_t>(w.rows), K = static_cast<uint64_t>(w.cols);
  MatmulDesc op;
  Layout a, b, d;
  cublasStatus_t s = cublasLtMatmulDescCreate(&op.h, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  const int32_t a_mode = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F,
                b_mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
  auto set = [&](cublasLtMatmulDescAttributes_t attr, const void* v, size_t n) {
    if (s == CUBLAS_STATUS_SUCCESS) s = cublasLtMatmulDescSetAttribute(op.h, attr, v, n);
  };
  set(CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta));
  set(CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb));
  set(CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &a_mode, sizeof(a_mode));
  set(CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &b_mode, sizeof(b_mode));
  set(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &w_scales, sizeof(w_scales));
  set(CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &x_scales, sizeof(x_scales));
  if (s == CUBLAS_STATUS_SUCCESS) s = cublasLtMatrixLayoutCreate(&a.h, CUDA_R_8F_E4M3, K, N, K);
  if (s == CUBLAS_STATUS_SUCCESS) s = cublasLtMatrixLayoutCreate(&b.h, CUDA_R_8F_E4M3, K, T, K);
  if (s == CUBLAS_STATUS_SUCCESS) s = cublasLtMatrixLayoutCreate(&d.h, CUDA_R_32F, N, T, N);
  if (s != CUBLAS_STATUS_SUCCESS) return LtError("descriptors", s);

  const AlgoKey key{w.rows, T, w.cols, al_a, al_b, al_d};
  auto it = algos_.find(key);
  if (it == algos_.end()) {
    Preference pref;
    const size_t ws = kWorkspaceBytes;
    s = cublasLtMatmulPreferenceCreate(&pref.h);
    if (s == CUBLAS_STATUS_SUCCESS)
      s = cublasLtMatmulPreferenceSetAttribute(pref.h, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                               &ws, sizeof(ws));
    const std::pair<cublasLtMatmulPreferenceAttributes_t, uint32_t> alignments[] = {
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, al_a},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, al_b},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, al_d},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, al_d}};
    for (const auto& [attr, al] : alignments)
      if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulPreferenceSetAttribute(pref.h, attr, &al, sizeof(al));
    cublasLtMatmulHeuristicResult_t result{};
    int n = 0;
    if (s == CUBLAS_STATUS_SUCCESS)
      s = cublasLtMatmulAlgoGetHeuristic(lt_, op.h, a.h, b.h, d.h, d.h, pref.h, 1, &result, &n);
    if (s != CUBLAS_STATUS_SUCCESS) return LtError("heuristic", s);
    it = algos_.emplace(key, n > 0 ? std::optional(result.algo) : std::nullopt).first;
  }
  if (!it->second.has_value())
    return "cuBLASLt has no block-scaled FP8 algorithm for N=" + std::to_string(N) +
           " T=" + std::to_string(T) + " K=" + std::to_string(K);
  if (workspace_ == nullptr) {
    if (cudaMalloc(&workspace_, kWorkspaceBytes) != cudaSuccess) {
      workspace_ = nullptr;
      return "cannot allocate cuBLASLt's workspace";
    }
    workspace_bytes_ = kWorkspaceBytes;
  }
  const float one = 1.0f, zero = 0.0f;
  s = cublasLtMatmul(lt_, op.h, &one, w.codes, a.h, x_codes, b.h, &zero, y, d.h, y, d.h,
                     &*it->second, workspace_, workspace_bytes_, stream_);
  return s == CUBLAS_STATUS_SUCCESS ? "" : LtError("matmul", s);
}

void Fp8LtGemm::ReportFallbackOnce(const std::string& name, int64_t T, const std::string& why) {
  if (fallback_reported_) return;
  fallback_reported_ = true;
  std::fprintf(stderr,
               "lucid: cuda-fp8act: %s (%lld tokens) is multiplied in f32, not on cuBLASLt's FP8 "
               "tensor cores: %s (reported for the first such matmul only)\n",
               name.c_str(), static_cast<long long>(T), why.c_str());
}

}  // namespace lucid::cuda
