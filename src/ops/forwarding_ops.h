// ForwardingOps: an Ops (ops/ops.h) that hands every op to another one, unchanged. The base of
// decorators that change or observe a few ops and pass the rest on (the tests' NaN poison,
// runtime/poison_ops_for_test.h), on any device: the base's device is this one's.
// Ownership: borrows `base` (which must outlive it) or owns it (the unique_ptr constructor).
// Thread-safety: as the base's.
#pragma once

#include <memory>

#include "ops/ops.h"

namespace lucid {

class ForwardingOps : public Ops {
 public:
  explicit ForwardingOps(const Ops& base) : base_(&base) {}
  explicit ForwardingOps(std::unique_ptr<Ops> owned) : owned_(std::move(owned)), base_(&*owned_) {}

  const Ops& base() const { return *base_; }
  const char* name() const override { return base_->name(); }
  Device device() const override { return base_->device(); }
  void Linear(const Tensor& x, const Weight& w, Tensor& y) const override {
    base_->Linear(x, w, y);
  }
  void LinearMany(const Tensor& x, std::span<const Weight* const> ws,
                  std::span<Tensor* const> ys) const override {
    base_->LinearMany(x, ws, ys);
  }
  void LinearTransposed(const Tensor& x, const Weight& w, Tensor& y) const override {
    base_->LinearTransposed(x, w, y);
  }
  void Embedding(const Weight& table, std::span<const int32_t> ids, Tensor& out) const override {
    base_->Embedding(table, ids, out);
  }
  void RmsNorm(const Tensor& x, const Tensor& w, float eps, Tensor& y) const override {
    base_->RmsNorm(x, w, eps, y);
  }
  void LayerNorm(const Tensor& x, const Tensor& w, const Tensor& b, float eps,
                 Tensor& y) const override {
    base_->LayerNorm(x, w, b, eps, y);
  }
  void Rope(Tensor& x, int64_t heads, int64_t stride, int64_t offset, const RopeTable& table,
            std::span<const int64_t> positions, RopeStyle style) const override {
    base_->Rope(x, heads, stride, offset, table, positions, style);
  }
  void SwiGlu(const Tensor& gate, const Tensor& up, Tensor& out) const override {
    base_->SwiGlu(gate, up, out);
  }
  void MlaAttention(const MlaAttentionArgs& a) const override { base_->MlaAttention(a); }
  void IndexerScores(const IndexerArgs& a) const override { base_->IndexerScores(a); }
  void GqaAttention(const GqaAttentionArgs& a) const override { base_->GqaAttention(a); }
  void TopK(const float* scores, int64_t n, int64_t k, int32_t* out) const override {
    base_->TopK(scores, n, k, out);
  }
  void MoeRoute(const Tensor& logits, const Tensor& bias, int64_t n_group, int64_t topk_group,
                int64_t k, bool norm_topk_prob, float scaling, Tensor& idx,
                Tensor& weights) const override {
    base_->MoeRoute(logits, bias, n_group, topk_group, k, norm_topk_prob, scaling, idx, weights);
  }
  void MoeExperts(const Tensor& x, std::span<const ExpertWeights> experts, const Tensor& idx,
                  const Tensor& weights, Tensor& out) const override {
    base_->MoeExperts(x, experts, idx, weights, out);
  }
  void MlaAbsorbQuery(const Tensor& q, int64_t heads, int64_t q_stride, int64_t nope_dim,
                      int64_t v_dim, const Weight& kv_b, Tensor& q_latent) const override {
    base_->MlaAbsorbQuery(q, heads, q_stride, nope_dim, v_dim, kv_b, q_latent);
  }
  void MlaProjectOutput(const Tensor& latent, int64_t heads, int64_t nope_dim, int64_t v_dim,
                        const Weight& kv_b, Tensor& out) const override {
    base_->MlaProjectOutput(latent, heads, nope_dim, v_dim, kv_b, out);
  }
  void Accumulate(Tensor& x, const Tensor& y) const override { base_->Accumulate(x, y); }
  void Scale(Tensor& x, float s) const override { base_->Scale(x, s); }
  void CopyColumns(const Tensor& x, int64_t groups, int64_t group_stride, int64_t offset,
                   int64_t width, Tensor& out) const override {
    base_->CopyColumns(x, groups, group_stride, offset, width, out);
  }
  void GatherRows(const Tensor& x, std::span<const int64_t> rows, Tensor& out) const override {
    base_->GatherRows(x, rows, out);
  }
  void WriteKvRows(std::span<const Tensor* const> parts, const KvRowsOut& out,
                   std::span<const int64_t> pool_rows) const override {
    base_->WriteKvRows(parts, out, pool_rows);
  }
  void TopKRows(const Tensor& scores, std::span<const int64_t> lengths, int64_t k, int32_t offset,
                Tensor& out) const override {
    base_->TopKRows(scores, lengths, k, offset, out);
  }
  void NonFiniteRows(const Tensor& x, Tensor& flags) const override {
    base_->NonFiniteRows(x, flags);
  }
  void SampleRows(const Tensor& logits, std::span<const RowSampling> rows,
                  std::span<const LogitEdit> edits, Tensor& scratch, Tensor& tokens,
                  Tensor& logprobs, Tensor& top_ids) const override {
    base_->SampleRows(logits, rows, edits, scratch, tokens, logprobs, top_ids);
  }
  void ApplyTokenBitmask(Tensor& logits, const Tensor& bitmask) const override {
    base_->ApplyTokenBitmask(logits, bitmask);
  }
  void CopyFromHost(const void* src, void* dst, size_t bytes) const override {
    base_->CopyFromHost(src, dst, bytes);
  }
  Status CopyToHost(const void* src, void* dst, size_t bytes) const override {
    return base_->CopyToHost(src, dst, bytes);
  }
  Status Synchronize() const override { return base_->Synchronize(); }
  std::optional<int64_t> scratch_held_bytes() const override { return base_->scratch_held_bytes(); }

 private:
  std::unique_ptr<Ops> owned_;  // null when borrowed
  const Ops* base_;
};

}  // namespace lucid
