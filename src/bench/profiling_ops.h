// ProfilingOps: an Ops decorator that forwards every call to an inner backend and accounts, per
// category, the wall time, the bytes the op must read from memory at least once (weights as
// stored, KV rows touched) and the floating-point operations of its math.
//
// Categories: kMatmul (Linear, LinearTransposed, MlaAbsorbQuery / MlaProjectOutput: the W_uk /
// W_uv share of kv_b_proj's bytes), kExperts (MoeExperts; `units` counts the
// distinct experts touched), kAttention (MlaAttention, GqaAttention),
// kIndexer (IndexerScores), kTopK, kOther (embedding, norms, RoPE, SwiGLU, routing, the glue ops:
// residual adds, scaling, column copies, row gathers).
// Byte model: a weight view counts StoredBytes() once per call (the fast kernels read each weight
// once per call for the whole batch); MoeExperts counts each distinct touched expert once;
// attention counts one stored KV row (f32, bf16 or fp8 with its scales: KvRowBytes) per selected
// token per query row, the indexer one stored key row per causal key per query row (exact for
// decode; an upper bound for prefill, where keys are shared). FLOPs: 2 per multiply-add.
// Within kMatmul, the same tallies per weight (ByWeight): every layer's copy of a weight under one
// name, its layer index replaced by "*" ("model.layers.*.self_attn.q_a_proj.weight"; the W_uk and
// W_uv shares of kv_b_proj with " (W_uk)" / " (W_uv)" appended), so a step shows which matmuls
// fall short of the bandwidth.
// The step data the tallies depend on (MoeExperts' routing choice, the attention ops' per-row
// counts) is read through the inner ops' CopyToHost (on a device: a copy after the ops issued so
// far, which waits for them); set_read_step_data(false) reads none of it, leaving those ops'
// bytes and FLOPs uncounted, for steps that are timed on an asynchronous device.
// ProfilingBackend presents another Backend with ProfilingOps around its ops, so a model loaded on
// it is accounted on any device.
// Thread-safety: not thread-safe (the counters are plain); use from the one engine thread.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "ops/ops.h"

namespace lucid {

enum class OpCategory { kMatmul, kExperts, kAttention, kIndexer, kTopK, kOther, kCount };
const char* OpCategoryName(OpCategory c);

// `name` with the index after "layers." replaced by "*" ("model.layers.12.mlp.up_proj.weight" ->
// "model.layers.*.mlp.up_proj.weight"); other names unchanged.
std::string LayerlessName(const std::string& name);

struct OpTally {
  double seconds = 0;
  double bytes = 0;
  double flops = 0;
  int64_t calls = 0;
  double units = 0;  // kExperts: distinct experts touched (summed over calls)
};

class ProfilingOps final : public Ops {
 public:
  explicit ProfilingOps(const Ops& inner) : inner_(inner) {}
  const char* name() const override { return inner_.name(); }

  void Reset() const {
    tally_ = {};
    by_weight_.clear();
  }
  void set_read_step_data(bool on) const { read_step_data_ = on; }
  const OpTally& Get(OpCategory c) const { return tally_[static_cast<int>(c)]; }
  // The kMatmul calls since Reset, per LayerlessName of their weight; they sum to Get(kMatmul).
  const std::map<std::string, OpTally>& ByWeight() const { return by_weight_; }
  OpTally Total() const;

  void Linear(const Tensor& x, const Weight& w, Tensor& y) const override;
  // One call timed as a whole; each weight gets its bytes and FLOPs and a share of the time in
  // proportion to its bytes (the backend may run them in one region).
  void LinearMany(const Tensor& x, std::span<const Weight* const> ws,
                  std::span<Tensor* const> ys) const override;
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
  void GqaAttention(const GqaAttentionArgs& a) const override;
  void TopK(const float* scores, int64_t n, int64_t k, int32_t* out) const override;
  void MoeRoute(const Tensor& logits, const Tensor& bias, int64_t n_group, int64_t topk_group,
                int64_t k, bool norm_topk_prob, float scaling, Tensor& idx,
                Tensor& weights) const override;
  void MoeExperts(const Tensor& x, std::span<const ExpertWeights> experts, const Tensor& idx,
                  const Tensor& weights, Tensor& out) const override;
  void MlaAbsorbQuery(const Tensor& q, int64_t heads, int64_t q_stride, int64_t nope_dim,
                      int64_t v_dim, const Weight& kv_b, Tensor& q_latent) const override;
  void MlaProjectOutput(const Tensor& latent, int64_t heads, int64_t nope_dim, int64_t v_dim,
                        const Weight& kv_b, Tensor& out) const override;
  void Accumulate(Tensor& x, const Tensor& y) const override;
  void Scale(Tensor& x, float s) const override;
  void CopyColumns(const Tensor& x, int64_t groups, int64_t group_stride, int64_t offset,
                   int64_t width, Tensor& out) const override;
  void GatherRows(const Tensor& x, std::span<const int64_t> rows, Tensor& out) const override;
  void WriteKvRows(std::span<const Tensor* const> parts, const KvRowsOut& out,
                   std::span<const int64_t> pool_rows) const override;
  void TopKRows(const Tensor& scores, std::span<const int64_t> lengths, int64_t k, int32_t offset,
                Tensor& out) const override;
  void NonFiniteRows(const Tensor& x, Tensor& flags) const override;
  void SampleRows(const Tensor& logits, std::span<const RowSampling> rows,
                  std::span<const LogitEdit> edits, Tensor& scratch, Tensor& tokens,
                  Tensor& logprobs, Tensor& top_ids) const override;
  void ApplyTokenBitmask(Tensor& logits, const Tensor& bitmask) const override;
  Device device() const override { return inner_.device(); }
  Status Synchronize() const override { return inner_.Synchronize(); }
  void CopyFromHost(const void* src, void* dst, size_t bytes) const override {
    inner_.CopyFromHost(src, dst, bytes);
  }
  Status CopyToHost(const void* src, void* dst, size_t bytes) const override {
    return inner_.CopyToHost(src, dst, bytes);
  }

 private:
  void Add(OpCategory c, double seconds, double bytes, double flops) const;
  void AddMatmul(const std::string& weight, double seconds, double bytes, double flops) const;
  const Ops& inner_;
  mutable std::array<OpTally, static_cast<int>(OpCategory::kCount)> tally_{};
  mutable std::map<std::string, OpTally> by_weight_;
  mutable bool read_step_data_ = true;
  // n values at `p` (memory of the inner ops' device) as the host reads them; empty when reading
  // is off or the copy failed (the step's Synchronize reports that).
  template <class T>
  std::vector<T> Read(const T* p, int64_t n) const {
    std::vector<T> v;
    if (!read_step_data_ || p == nullptr || n <= 0) return v;
    v.resize(static_cast<size_t>(n));
    if (!inner_.CopyToHost(p, v.data(), v.size() * sizeof(T)).ok()) v.clear();
    return v;
  }
};

// A Backend whose ops are ProfilingOps around `inner`'s; memory, uploads, workspace and host reads
// are `inner`'s. Borrows `inner`, which must outlive it.
class ProfilingBackend final : public Backend {
 public:
  explicit ProfilingBackend(Backend& inner) : inner_(inner), prof_(inner.ops()) {}
  const ProfilingOps& profiling() const { return prof_; }
  Device device() const override { return inner_.device(); }
  std::string name() const override { return inner_.name(); }
  const Ops& ops() const override { return prof_; }
  Allocator& allocator() override { return inner_.allocator(); }
  StatusOr<Tensor> UploadWeight(const Tensor& host) override { return inner_.UploadWeight(host); }
  Workspace& workspace() override { return inner_.workspace(); }
  StatusOr<Tensor> ReadableOnHost(const Tensor& t) override { return inner_.ReadableOnHost(t); }
  bool memory_is_host() const override { return inner_.memory_is_host(); }

 private:
  Backend& inner_;
  ProfilingOps prof_;
};

}  // namespace lucid
