// The DeepSeek-V3 family's model class and the step types its methods share, internal to
// models/deepseek_v3_*.cpp (the public entry points are models/deepseek_v3_family.h): the forward
// pass, layout and attention in deepseek_v3_family.cpp, the feed-forward blocks (dense MLP, MoE,
// expert parallelism, the load-time weight check) in deepseek_v3_ffn.cpp.
// Thread-safety: a model is driven by one engine thread (models/model.h).
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "backends/backend.h"
#include "models/deepseek_v3_weights.h"
#include "models/model.h"
#include "models/registry.h"
#include "models/rope.h"
#include "models/tensor_parallel.h"
#include "ops/ops.h"

namespace lucid::deepseek_v3 {

// The rows of one step (a checked view of the StepInput): which sequence each token belongs to,
// at which position, and the integer metadata the ops get with it: built on the host from the
// StepInput, then copied into the step's workspace (Upload), since the ops read it by raw pointer
// in the backend's memory (ops/ops.h). The host keeps its own copy for what it computes itself
// (pool rows, the numerics sites).
struct StepLayout {
  std::span<const int32_t> ids;
  std::span<const int64_t> positions;
  struct Span {
    std::span<const int32_t> page_table;  // host
    int64_t begin, count, start_pos;
    Tensor table;   // i32 [pages]: page_table in the backend's memory
    Tensor causal;  // i64 [count]: start_pos + i + 1, each row's causal length (the indexer's)
  };
  std::vector<Span> spans;
  std::vector<int64_t> pool_rows;  // [N] the KV pool row of each token's slot (WriteKvRows)
  // Several sequences' attention as one MlaAttention problem: their page tables concatenated (a
  // layer's pages of every sequence live in one pool buffer, so the combined table addresses them
  // all) and each query row's selected tokens shifted by the rows of the tables before its
  // sequence's (`offset`, applied by TopKRows). A backend then spreads the whole batch over its
  // threads in one parallel region instead of one per sequence. Each query row still attends only
  // to its own sequence's rows. Off for one sequence, or when the rows overflow int32.
  bool batched = false;
  std::vector<int32_t> page_table;  // combined
  std::vector<int32_t> offset;      // [spans] first row of each span's pages in the combined table
  std::vector<int32_t> begin;       // [N] offset of each row's span (dense mode's dense_begin)
  Tensor table_dev, begin_dev;      // page_table and begin in the backend's memory
  // The StepInput sequence of each span (numerics sites); empty: span i is sequence i.
  std::vector<size_t> seq;
};

// Data-parallel attention: the step's sequences whose KV is in this rank's partition, as a layout
// of their own (rows renumbered from 0, page ids mapped to the local storage) and the step row of
// each of its rows. The layout's spans view `tables`, `ids` and `positions`.
struct OwnedRows {
  StepLayout s;
  std::vector<int64_t> rows;
  std::vector<int32_t> ids;
  std::vector<int64_t> positions;
  std::vector<std::vector<int32_t>> tables;
};

// Which tokens each query row attends to, shared by the layers that reuse a full layer's choice.
struct Selection {
  int64_t stride = 0;           // K: columns of `rows`
  std::vector<int32_t> counts;  // [N] tokens attended (host metadata: min(K, causal) or causal)
  Tensor counts_dev;            // counts in the backend's memory
  Tensor rows;                  // i32 [N, stride], sparse only (TopKRows' output)
};

class DeepseekV3Model final : public Model {
 public:
  DeepseekV3Model(ModelConfig c, DeepseekV3Weights w, std::shared_ptr<Backend> backend,
                  int64_t index_topk, bool dense, Communicator* tp, bool check_replicated,
                  int ep_size, bool dp_attention, int64_t indexer_row_block)
      : c_(std::move(c)),
        w_(std::move(w)),
        backend_(std::move(backend)),
        ops_(backend_->ops()),
        ws_(backend_->workspace()),
        index_topk_(index_topk),
        indexer_row_block_(indexer_row_block),
        indexer_live_(c_.has_indexer && !dense),
        tp_(tp),
        check_replicated_(check_replicated && tp_.active()),
        dp_attention_(dp_attention && tp_.active()),
        heads_(c_.num_attention_heads / (dp_attention_ ? 1 : tp_.size())),
        expert_parallel_(ep_size > 1),
        experts_(c_.n_routed_experts / (ep_size > 1 ? ep_size : 1)),
        expert_begin_(ep_size > 1 ? tp_.rank() * experts_ : 0) {
    spec_ = KvSpecFor(c_);
    rope_ = MakeRopeTable(c_.rope, c_.qk_rope_head_dim);
    scale_ = static_cast<float>(c_.AttentionScale());
  }

  const ModelConfig& config() const override { return c_; }
  const KvCacheSpec& kv_spec() const override { return spec_; }
  uint64_t weight_bytes() const override { return w_.bytes; }
  Allocator& kv_allocator() const override { return backend_->allocator(); }
  Backend* logits_backend() const override {
    return backend_->memory_is_host() || tp_.active() ? nullptr : backend_.get();
  }

  // A step whose tensors do not fit returns the allocator's ResourceExhausted (Model::Forward).
  // Under tensor parallelism the other ranks are then left in the step's next collective, which
  // fails them after the communicator's timeout, as a rank that dies mid-step does.
  Status Forward(const StepInput& in, KvStorage& kv, StepOutput* out) override {
    return RunStep(ops_, [&] { return Step(in, kv, out); });
  }
  bool SetNumericsCheck(bool on) override {
    check_ = on;
    sites_.clear();
    return true;
  }
  std::vector<std::optional<NonFiniteSite>> LastNonFiniteSites() const override { return sites_; }
  Status CheckFeedForwardWeights() override;

 private:
  // x [ids, D] = the embedding of ids (vocabulary-parallel under TP: one all-reduce).
  void Embed(std::span<const int32_t> ids, Tensor& x);
  StatusOr<StepLayout> Layout(const StepInput& in, const KvStorage& kv) const;
  Status Step(const StepInput& in, KvStorage& kv, StepOutput* out);  // Forward's work
  // A step's activation [rows, cols] f32, from the workspace (uninitialised).
  Tensor F32(int64_t rows, int64_t cols) { return Tensor::Empty(DType::kF32, {rows, cols}, ws_); }
  // A step output [rows, cols] f32 (outlives the step: the backend's allocator).
  Tensor Output(int64_t rows, int64_t cols) {
    return Tensor::Empty(DType::kF32, {rows, cols}, backend_->allocator());
  }
  Tensor Attention(int64_t l, const Tensor& h, const StepLayout& s, KvStorage& pool,
                   Selection* sel);
  // Data-parallel attention: this rank's sequences of the step (OwnedRows), or InvalidArgument
  // when one of them has pages outside its partition.
  StatusOr<OwnedRows> Owned(const StepInput& in, const KvStorage& kv) const;
  // [N, D]: Attention over `mine`'s rows at their step rows, zero in every other row.
  Tensor OwnedAttention(int64_t l, const Tensor& h, const OwnedRows& mine, KvStorage& pool,
                        Selection* sel);
  // The indexer's projections of one layer, as they come out of the matmuls (Attention runs them
  // with the layer's other projections of the same inputs).
  struct IndexerProjections {
    Tensor q;  // [N, nI * dI] = wq_b(cq)
    Tensor k;  // [N, dI] = wk(h)
    Tensor w;  // [N, nI] = weights_proj(h)
  };
  void PrepareSelection(const StepLayout& s, Selection* sel);
  void SelectTokens(int64_t l, int64_t N, IndexerProjections* ip, const StepLayout& s,
                    KvStorage& pool, Selection* sel);
  Tensor Mlp(const MlpWeights& m, const Tensor& x);
  // down(silu(g) * u), g overwritten.
  Tensor MlpDown(const MlpWeights& m, Tensor& g, const Tensor& u);
  Tensor Moe(const MoeWeights& m, const Tensor& x);
  // Expert parallelism: out += this rank's experts' share of the routed output (rows routed to
  // other ranks' experts are theirs: summed by the MoE block's all-reduce).
  void LocalExperts(const MoeWeights& m, const Tensor& x, const Tensor& idx, const Tensor& wts,
                    Tensor& out);
  // Numerics checking: records `op` of `layer` for each span whose rows of t ([N, ...]) are not
  // all finite and that has no earlier site. No-op unless SetNumericsCheck(true). `rows`, when
  // given, names the step row of each row of t (t holds only those rows, ascending).
  void Check(const Tensor& t, int64_t layer, const char* op, const StepLayout& s,
             std::span<const int64_t> rows = {});
  // Keeps the first failure of a mid-step Synchronize or CopyToHost (whose errors are taken, not
  // repeated, by the next call): Forward returns it.
  void Keep(Status st) {
    if (step_error_.ok() && !st.ok()) step_error_ = std::move(st);
  }

  ModelConfig c_;
  DeepseekV3Weights w_;
  std::shared_ptr<Backend> backend_;  // shared with whoever made the model
  const Ops& ops_;                    // backend_->ops()
  Workspace& ws_;                     // backend_->workspace(): this model's activations
  int64_t index_topk_;
  int64_t indexer_row_block_;  // query rows scored at a time
  bool indexer_live_;          // false: attend to every causal token (deepseek_v3, or forced dense)
  TpCollectives tp_;  // the collective points (models/tensor_parallel.h); no-ops for one rank
  bool check_replicated_;
  bool dp_attention_;  // ModelLoadOptions::dp_attention, under a group of more than one
  int64_t heads_;      // attention heads this rank computes (all of them without TP)
  // Routed experts this rank holds: [expert_begin_, + experts_) whole under expert parallelism,
  // every expert (whole or sliced by intermediate dimension) otherwise.
  bool expert_parallel_;
  int64_t experts_, expert_begin_;
  KvCacheSpec spec_;
  RopeTable rope_;
  float scale_;
  bool check_ = false;
  std::vector<std::optional<NonFiniteSite>> sites_;  // per span of the last Forward
  Status step_error_;                                // Keep's, for this Forward
};

}  // namespace lucid::deepseek_v3
