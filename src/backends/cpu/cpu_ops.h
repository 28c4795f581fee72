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
  void MoeRoute(const Tensor& logits, const Tensor& bias, int64_t n_group, int64_t topk_group,
                int64_t k, bool norm_topk_prob, float scaling, Tensor& idx,
                Tensor& weights) const override;
  void MoeExperts(const Tensor& x, std::span<const ExpertWeights> experts, const Tensor& idx,
                  const Tensor& weights, Tensor& out) const override;
  // cpu_glue.cpp.
  void Accumulate(Tensor& x, const Tensor& y) const override;
  void Scale(Tensor& x, float s) const override;
  void CopyColumns(const Tensor& x, int64_t groups, int64_t group_stride, int64_t offset,
                   int64_t width, Tensor& out) const override;
  void GatherRows(const Tensor& x, std::span<const int64_t> rows, Tensor& out) const override;
  // cpu_step_ops.cpp. TopKRows runs this->TopK per row (so a faster TopK serves it too).
  void WriteKvRows(std::span<const Tensor* const> parts, const KvRowsOut& out,
                   std::span<const int64_t> pool_rows) const override;
  void TopKRows(const Tensor& scores, std::span<const int64_t> lengths, int64_t k, int32_t offset,
                Tensor& out) const override;
  void NonFiniteRows(const Tensor& x, Tensor& flags) const override;
};

// THE definition of every weight format's math (ops/weight.h has the layouts). Oracle API for
// faster kernels:
// - DequantizeRowSpan writes columns [c0, c0 + n) of row r (0-based within the view, so a
//   RowRange view finds its block scales at row_begin + r) of w, dequantized to float32, into
//   out[n]. Any c0/n is allowed (blocks may be partial at both ends).
// - DequantizeRow(w, r, out) is DequantizeRowSpan(w, r, 0, w.cols, out).
// Supports every WeightFormat the build knows; aborts on an unknown one (loading validates).
// Thread-safe (reads only).
void DequantizeRowSpan(const Weight& w, int64_t r, int64_t c0, int64_t n, float* out);
void DequantizeRow(const Weight& w, int64_t r, float* out);

// Reference matmul for packed weights (kNvfp4, kFp8Block; also correct for f32/bf16):
// y[T, w.rows] = x[T, w.cols] · W^T, dequantizing W one block-row chunk at a time (never the whole
// matrix; scratch is one chunk of <= 128 columns) and accumulating in f32 in column order, so the
// result equals DequantizeRow-then-f32-dot bit for bit. Used by CpuOps::Linear for packed formats
// (decode T = 1 and prefill alike, and every MoE expert). Defined in cpu_quant_matmul.cpp.
void LinearQuantReference(const Tensor& x, const Weight& w, Tensor& y);

// Converts a small f32/bf16 vector tensor (norm weights, biases) to float32.
void VectorToF32(const Tensor& v, float* out);

}  // namespace lucid
