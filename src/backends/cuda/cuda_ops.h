// CudaOps: the op interface (ops/ops.h) on one CUDA device, every tensor in device memory.
//
// Set "cuda-reference": exact f32 arithmetic, the CPU reference's formulas, so that the ops
// conformance suite (backends/cpu/ops_conformance.h) holds it to the reference's tolerances.
// - Matmuls (Linear, LinearTransposed; cuda_matmul.h) dequantize the weight view to f32 in a
//   scratch buffer, in row chunks of at most 64 MiB, with the formats' single definition
//   (ops/weight.h: bf16, FP8 block with f32 or UE8M0 scales, NVFP4; decoded as the host does,
//   cuda_weight_view.cuh; f32 weights are read in place) and multiply with cuBLAS SGEMM (f32 in,
//   f32 accumulate; CUBLAS_PEDANTIC_MATH so no TF32), except
//   Linear on an FP8 block or NVFP4 weight for at most kGemvMaxTokens tokens (decode), which
//   decodes the packed weight in registers as it reads it (cuda_gemv.h, f32 sums). GGUF block
//   weights are not implemented on cuda.
// - RmsNorm, LayerNorm, SwiGlu, Accumulate, Scale, CopyColumns, GatherRows, Embedding and
//   NonFiniteRows are one kernel each, f32 accumulation, NaN and Inf propagated as IEEE does.
// - Host metadata (token ids, rows) is copied to the device on the ops' stream, and not again
//   while the same bytes come (cuda_scratch.h's Upload): a step's layers repeat their positions
//   (Rope's cos and sin, computed on the host once per step), KV pool rows and top-k lengths.
// - MoeExperts for at most kMoeDeviceRoutedMaxTokens (32) tokens (decode) with experts of one
//   format and shape: cuda_moe_gemv.h, the routing read on the device (no host copy or
//   synchronisation), each routed expert's weights decoded as they are read, the set's activation
//   arithmetic; under cuda-bf16act, packed experts (not cuda-fp8act's FP8 ones) for up to
//   kMoeGroupedMaxTokens (256) tokens are grouped by expert on the device and multiplied by the
//   weight-only GEMM per 64 rows of an expert (cuda_moe_grouped.h: no host copy either); otherwise
//   the routing is copied to the host, the rows grouped by expert and each touched expert run as
//   three Linear calls on its gathered rows, one expert at a time. An expert id outside the
//   experts makes its token's row NaN on the device paths (the numerics guard fails that
//   request) and fails the step on the host path.
// - TopK and TopKRows: cuda_topk.h (a block per row: radix select, then a sort of the k chosen).
// - Rope, MoeRoute, WriteKvRows and MoeExperts' combine: cuda_step_kernels.h;
//   MLA and GQA attention and the indexer scores: cuda_attention.h; MlaAbsorbQuery and
//   MlaProjectOutput: one strided SGEMM per head on the dequantized kv_b.
// Set "cuda-bf16act": the same kernels, but Linear (and so LinearMany and MoeExperts' expert
// GEMMs) and MlaProjectOutput multiply activations rounded to bf16, the CPU's fast-bf16act
// arithmetic (ConformancePrecision::kBf16Act; what transformers and the GPU engines do for a
// bfloat16 checkpoint). The matmuls run on the tensor cores with f32 sums: bf16 weights read in
// place by cublasGemmEx; packed weights (FP8 block with f32 or UE8M0 scales, NVFP4) for at most
// kGemvMaxTokens tokens in cuda_gemv.h with the rounded activations, above that in the
// weight-only kernel (cuda_weight_mma.cuh: decoded into shared memory as bf16, f32-scale FP8 as
// its codes with each 128-column block's sum scaled) for f32-scale FP8 at any token count and the
// others up to kWeightMmaMaxTokens, and past that dequantized to bf16 (their values are exact in
// bf16; NVFP4's global scale applied to the product) for cublasGemmEx; f32 weights keep the f32
// SGEMM on the rounded activations. Everything else is cuda-reference's.
// Set "cuda-fp8act": cuda-bf16act, except that Linear with an FP8 block weight (and so LinearMany
// and MoeExperts' expert GEMMs) quantizes the activations per (token, 128 columns) to e4m3
// (ops/fp8_activations.h) and multiplies them on the FP8 tensor cores with cuBLASLt's
// block-scaled GEMM, or where cuBLASLt cannot, the same values in f32 (cuda_fp8_gemm.h;
// ConformancePrecision::kFp8Act), saying so on stderr with cuBLASLt's reason the first time.
// MlaProjectOutput stays bf16 as in cuda-bf16act. CudaImplements(op) names the ops with a kernel
// (every op of ops/ops.h); the pointers in the op arguments are device memory (ops/ops.h). Every op
// is asynchronous on the stream; errors surface in Synchronize as a Status, scratch memory the
// device cannot give included (cuda_scratch.h: ResourceExhausted; the op launched nothing, and
// until Synchronize the ops that may read an earlier op's device indices launch nothing either:
// the step fails, the process lives). Thread-safety: the engine thread only (scratch buffers are
// per instance).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "backends/cpu/ops_conformance.h"
#include "ops/ops.h"

namespace lucid::cuda {

// Whether CudaOps has a kernel for op `op` (the ops/ops.h method name, "Linear").
bool CudaImplements(std::string_view op);
// Every op with a CUDA kernel (the names CudaImplements accepts); GGUF block weights are not
// among the formats, so the conformance suite's "GgufWeights" cases are not run on cuda.
std::vector<std::string> CudaOpNames();

std::unique_ptr<Ops> MakeCudaReferenceOps(cudaStream_t stream);
std::unique_ptr<Ops> MakeCudaBf16ActOps(cudaStream_t stream);
std::unique_ptr<Ops> MakeCudaFp8ActOps(cudaStream_t stream);

// The CUDA op sets, in the order the self-test runs them.
struct CudaOpsSet {
  const char* kernel;   // the catalog's kernel name: "cuda-reference", "cuda-bf16act", ...
  const char* backend;  // the backend's set name ("cuda:reference")
  ConformancePrecision precision;
  std::unique_ptr<Ops> (*make)(cudaStream_t);
};
const std::vector<CudaOpsSet>& CudaOpsSets();
// The set whose kernel name is `kernel`; nullptr when none.
const CudaOpsSet* FindCudaOpsSet(std::string_view kernel);

}  // namespace lucid::cuda
