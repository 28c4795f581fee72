// Internal to the ops conformance suite (ops_conformance*.cpp): random inputs, planted non-finite
// values, the comparison, and the case groups of each file.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/ops_conformance.h"

namespace lucid::conformance {

// What a case plants in its inputs: nothing, a quiet NaN, or +infinity.
enum class Plant { kNone, kNaN, kInf };
inline constexpr Plant kPlants[] = {Plant::kNone, Plant::kNaN, Plant::kInf};
const char* PlantName(Plant p);
float PlantValue(Plant p);  // NaN or +inf (kNone: 0, unused)

// Weight kinds: 0 f32, 1 bf16, 2 FP8 block (f32 scales), 3 FP8 block (UE8M0 scales), 4 NVFP4.
inline constexpr int kWeightKinds = 5;
const char* WeightKindName(int kind);
Weight RandomWeight(int kind, int64_t rows, int64_t cols, uint32_t seed);

// "T=1 N=45", "T=1 N=45 K=300": a case's shape.
inline std::string Shape2(const char* a, int64_t x, const char* b, int64_t y) {
  return std::string(a) + "=" + std::to_string(x) + " " + b + "=" + std::to_string(y);
}
inline std::string Shape3(const char* a, int64_t x, const char* b, int64_t y, const char* c,
                          int64_t z) {
  return Shape2(a, x, b, y) + " " + c + "=" + std::to_string(z);
}
// Plants p at element (r, c) of a tensor viewed [rows, last dim] (nothing for kNone).
inline void PlantAt(Tensor& t, Plant p, int64_t r, int64_t c) {
  if (p != Plant::kNone) t.data<float>()[r * t.size(-1) + c] = PlantValue(p);
}
inline Tensor F32(Shape s) { return Tensor::Zeros(DType::kF32, std::move(s)); }

// Uniform in [lo, hi), deterministic in the seed.
Tensor RandomTensor(Shape shape, uint32_t seed, float lo = -1.0f, float hi = 1.0f);
// x with every value rounded to the nearest bf16 (ties to even; NaN and Inf kept).
Tensor RoundedToBf16(const Tensor& x);

class Suite {
 public:
  Suite(const Ops& candidate, ConformancePrecision precision, std::vector<std::string> only = {})
      : cand_(candidate), precision_(precision), only_(std::move(only)) {}
  // Whether the cases of `op` run (RunOpsConformance's `only`).
  bool Wants(const std::string& op) const {
    return only_.empty() || std::find(only_.begin(), only_.end(), op) != only_.end();
  }
  const Ops& cand() const { return cand_; }
  const CpuOps& ref() const { return ref_; }
  // Whether the candidate's matmuls take other activations than x (kBf16Act, kFp8Act).
  bool rounds_activations() const { return precision_ != ConformancePrecision::kF32; }
  // The activations the reference multiplies with `w`: x; x rounded to bf16 (kBf16Act, and
  // kFp8Act for weights that are not FP8 block); x quantized per (row, 128 columns) to e4m3
  // (kFp8Act with an FP8 block weight: ops/fp8_activations.h).
  Tensor MatmulInput(const Tensor& x, const Weight& w) const;
  // The activations of MlaProjectOutput's per-head products: x, or x rounded to bf16 (kBf16Act
  // and kFp8Act: the absorbed products run in bf16 in both).
  Tensor Bf16Input(const Tensor& x) const { return rounds_activations() ? RoundedToBf16(x) : x; }
  // The tolerance of a matmul with `w` whose exact-arithmetic tolerance is `base`: under
  // kFp8Act with an FP8 block weight, 1e-3 (Hopper's FP8 tensor cores accumulate each 128-column
  // block's products with fewer bits than f32: about 14, DeepSeek-V3's report measured; the
  // blocks' sums are then scaled and added in f32), at least `base`.
  double MatmulTolerance(const Weight& w, double base) const;

  // Compares n floats (see ops_conformance.h for the rule) and records the case.
  void Add(const std::string& op, const std::string& format, const std::string& shape, Plant plant,
           const float* got, const float* want, int64_t n, double tolerance);
  // The same for an input named otherwise than by a Plant ("nan-scale": planted in the weights).
  void AddNamed(const std::string& op, const std::string& format, const std::string& shape,
                const std::string& input, const float* got, const float* want, int64_t n,
                double tolerance);
  // Records an exact comparison (index outputs).
  void AddExact(const std::string& op, const std::string& format, const std::string& shape,
                Plant plant, bool equal);
  std::vector<ConformanceCase> Take() { return std::move(cases_); }

 private:
  const Ops& cand_;
  const CpuOps ref_;
  ConformancePrecision precision_;
  std::vector<std::string> only_;
  std::vector<ConformanceCase> cases_;
};

// LinearMany on one input against three weights of the same K (the candidate's one call against
// the reference's Linear per weight), for 1, 5 and 129 tokens and every plant; cases recorded
// under `format`.
void LinearManyOnThree(Suite& s, std::array<const Weight*, 3> ws, const std::string& format,
                       uint32_t seed);

// The case groups (ops_conformance.cpp: the dense ops; ops_conformance_attention.cpp: attention,
// the indexer, top-k and the MoE ops; ops_conformance_step.cpp: the KV writes, row-wise top-k,
// the non-finite scan and the glue).
void DenseCases(Suite& s);
void AttentionCases(Suite& s);
void IndexerCases(Suite& s);
void TopKCases(Suite& s);
void MoeCases(Suite& s);
// ops_conformance_step.cpp: WriteKvRows, TopKRows, NonFiniteRows and the glue (Accumulate,
// Scale, CopyColumns, GatherRows).
void StepOpsCases(Suite& s);
// ops_conformance_sampling.cpp: SampleRows.
void SamplingCases(Suite& s);
void GqaCases(Suite& s);   // ops_conformance_gqa.cpp
void GgmlCases(Suite& s);  // ops_conformance_ggml.cpp: GGUF block weights

}  // namespace lucid::conformance
