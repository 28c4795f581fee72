// The ops conformance suite (after llama.cpp's test-backend-ops): every op of ops/ops.h run by a
// candidate Ops and by the reference (CpuOps) on the same random inputs, at odd shapes (1 row, 129
// rows, dimensions that are not multiples of 16), in every weight format (f32, bf16, FP8 block with
// f32 and UE8M0 scales, NVFP4; the matmuls also the GGUF types F16, Q8_0, Q4_0, Q4_1, Q4_K, Q5_K,
// Q6_K) and every KV row dtype (f32, bf16, fp8_e4m3), and with NaN and infinities planted in the
// inputs (GGUF weights also a NaN block scale). A case passes when
// - the entries that are non-finite in the reference's output are exactly the non-finite entries
//   of the candidate's (IEEE arithmetic propagates NaN and Inf; a kernel that turns them into
//   finite numbers hides a broken model from the numerics guard), and
// - over the other entries, max |got - ref| / max |ref| is within the op's tolerance for the
//   candidate's precision (index outputs, TopK and MoeRoute's choice, must be equal).
// Tolerances (relative, as above): Linear, LinearMany, MlaAbsorbQuery, MlaProjectOutput and
// MoeExperts 2e-5 (kBf16Act: the same against the rounded reference, MoeExperts 2e-4, see
// there; kFp8Act: FP8 block weights 1e-3 against the quantized reference, MoeExperts 1e-2);
// LinearTransposed, MlaAttention, GqaAttention, IndexerScores 1e-5; RmsNorm, LayerNorm, Rope,
// SwiGlu, MoeRoute's weights 1e-6; Embedding 0; TopK and MoeRoute's experts equal; WriteKvRows (the
// stored bytes, every KV dtype), TopKRows and NonFiniteRows equal; SampleRows' tokens and top ids
// equal, its logprobs 1e-5. The unit test (ops_conformance_test.cpp) runs it for every CPU kernel
// set at every instruction set level the machine has; `lucid backends --self-test` runs the same
// cases on the machine it is started on. Deterministic in its fixed seeds; single call, uses
// ParallelFor inside the ops.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "ops/ops.h"

namespace lucid {

// Every op of Ops (ops/ops.h) by its method name ("Linear", ...), in declaration order: the
// names `only` below and a backend that reports which ops it implements use.
const std::vector<std::string>& OpNames();

// The arithmetic a candidate promises:
//   kF32           the reference's results on the same inputs.
//   kBf16Act       the matmuls (Linear, LinearMany, MoeExperts, MlaProjectOutput) multiply
//                  activations rounded to bf16 (CpuFastOps with FastActivations::kBf16): the
//                  reference is given the rounded activations there.
//   kFp8Act        kBf16Act, except that the matmuls with FP8 block weights (Linear,
//                  LinearMany, MoeExperts) multiply activations quantized per (row, 128 columns)
//                  to e4m3 (ops/fp8_activations.h: CUDA set cuda-fp8act): the reference is given
//                  the quantized values there, within 1e-3 (MoeExperts 1e-2, see there).
enum class ConformancePrecision { kF32, kBf16Act, kFp8Act };

struct ConformanceCase {
  std::string op;      // "Linear"
  std::string format;  // weight format or KV dtype ("nvfp4", "kv:fp8_e4m3"), "-" where none
  std::string shape;   // "T=129 N=33 K=300"
  std::string input;   // "random", "nan", "inf"
  double error = 0.0;  // max |got - ref| / max |ref| over the entries finite in both
  double tolerance = 0.0;
  bool nonfinite_match = true;  // the same entries are non-finite in both
  bool pass = false;
};

// Runs every case on `candidate` (which must be thread-safe as ops/ops.h says). Never aborts on
// a mismatch: a failing case is returned with pass = false. With `only` non-empty, runs the cases
// of the ops it names ("Linear", "RmsNorm", ...: the ops/ops.h method names) and no others (a
// backend that implements part of the interface; RmsNorm and LayerNorm share their cases; the
// matmuls' GGUF block-weight cases run under the name "GgufWeights").
std::vector<ConformanceCase> RunOpsConformance(const Ops& candidate, ConformancePrecision precision,
                                               const std::vector<std::string>& only = {});

// One line per op x format: cases, worst error / tolerance, and PASS or FAIL (with the failing
// cases listed below the line), under a title line.
std::string ConformanceTable(std::string_view title, const std::vector<ConformanceCase>& cases);

// Whether every case passed.
bool AllPassed(const std::vector<ConformanceCase>& cases);

}  // namespace lucid
