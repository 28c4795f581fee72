// CpuOps: the reference implementation of every op in ops/ops.h.
//
// Plain, obviously-correct loops with float32 accumulation, parallel over independent outputs
// (ParallelFor) so that results do not depend on the thread count. Faster CPU kernels and every
// other backend are tested against this one.
#pragma once

#include "ops/ops.h"

namespace lucid {

class CpuOps : public Ops {
 public:
  const char* name() const override { return "cpu-reference"; }
  void Linear(const Tensor& x, const Weight& w, Tensor& y) const override;
  void LinearTransposed(const Tensor& x, const Weight& w, Tensor& y) const override;
  void Embedding(const Weight& table, std::span<const int32_t> ids, Tensor& out) const override;
  void RmsNorm(const Tensor& x, const Tensor& weight, float eps, Tensor& y) const override;
  void LayerNorm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps,
                 Tensor& y) const override;
  void Rope(Tensor& x, int64_t heads, int64_t head_stride, int64_t offset, const RopeTable& table,
            std::span<const int64_t> positions, RopeStyle style) const override;
  void SwiGlu(const Tensor& gate, const Tensor& up, Tensor& out) const override;
  void MlaAttention(const MlaAttentionArgs& a) const override;
  void IndexerScores(const IndexerArgs& a) const override;
  void TopK(const float* scores, int64_t n, int64_t k, int32_t* out) const override;
  void MoeRoute(const Tensor& logits, const float* bias, int64_t n_group, int64_t topk_group,
                int64_t k, bool norm_topk_prob, float scaling, int32_t* idx,
                float* weights) const override;
  void MoeExperts(const Tensor& x, std::span<const ExpertWeights> experts, const int32_t* idx,
                  const float* weights, int64_t k, Tensor& out) const override;
};

// Writes row r (0-based within the view) of weight w, dequantized to float32, into out[w.cols].
// Supports every WeightFormat the build knows; aborts on an unknown one (loading validates).
void DequantizeRow(const Weight& w, int64_t r, float* out);

// Converts a small f32/bf16 vector tensor (norm weights, biases) to float32.
void VectorToF32(const Tensor& v, float* out);

}  // namespace lucid
