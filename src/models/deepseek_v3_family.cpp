#include "models/deepseek_v3_family.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "models/deepseek_v3_shard.h"
#include "models/deepseek_v3_weights.h"
#include "models/registry.h"
#include "models/rope.h"
#include "models/tensor_parallel.h"

namespace lucid {
namespace {

constexpr float kLatentNormEps = 1e-6f;   // q_a_layernorm / kv_a_layernorm (transformers)
constexpr float kIndexerNormEps = 1e-6f;  // indexer.k_norm (nn.LayerNorm eps)

RopeStyle StyleOf(RopeLayout l) {
  return l == RopeLayout::kInterleaved ? RopeStyle::kInterleaved : RopeStyle::kHalfSplit;
}

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
  bool ready = false;
  int64_t stride = 0;           // K: columns of `rows`
  std::vector<int32_t> counts;  // [N] tokens attended (host metadata: min(K, causal) or causal)
  Tensor counts_dev;            // counts in the backend's memory
  Tensor rows;                  // i32 [N, stride], sparse only (TopKRows' output)
};

// Fills s's batched table (see StepLayout) and pool rows.
void BatchSpans(const KvStorage& kv, StepLayout* s) {
  for (const auto& sp : s->spans)
    for (int64_t i = 0; i < sp.count; ++i)
      s->pool_rows.push_back(kv.PoolRow(sp.page_table, sp.start_pos + i));
  int64_t pages = 0;
  for (const auto& sp : s->spans) pages += static_cast<int64_t>(sp.page_table.size());
  s->batched =
      s->spans.size() >= 2 && pages * kv.page_size() <= std::numeric_limits<int32_t>::max();
  if (!s->batched) return;
  for (const auto& sp : s->spans) {
    const int32_t offset = static_cast<int32_t>(s->page_table.size() * kv.page_size());
    s->offset.push_back(offset);
    s->page_table.insert(s->page_table.end(), sp.page_table.begin(), sp.page_table.end());
    s->begin.insert(s->begin.end(), sp.count, offset);
  }
}

// The table as the span a PagedRows view takes (its entries in the backend's memory).
std::span<const int32_t> TableOf(const Tensor& t) {
  return {t.data<const int32_t>(), static_cast<size_t>(t.numel())};
}

// Copies s's metadata into the backend's step workspace (see StepLayout).
void Upload(Backend& b, StepLayout* s) {
  for (auto& sp : s->spans) {
    sp.table = b.StepCopy(sp.page_table);
    std::vector<int64_t> causal(sp.count);
    for (int64_t i = 0; i < sp.count; ++i) causal[i] = sp.start_pos + i + 1;
    sp.causal = b.StepCopy(std::span<const int64_t>(causal));
  }
  if (!s->batched) return;
  s->table_dev = b.StepCopy(std::span<const int32_t>(s->page_table));
  s->begin_dev = b.StepCopy(std::span<const int32_t>(s->begin));
}

class DeepseekV3Model final : public Model {
 public:
  DeepseekV3Model(ModelConfig c, DeepseekV3Weights w, std::shared_ptr<Backend> backend,
                  int64_t index_topk, bool dense, Communicator* tp, bool check_replicated,
                  int ep_size, bool dp_attention)
      : c_(std::move(c)),
        w_(std::move(w)),
        backend_(std::move(backend)),
        ops_(backend_->ops()),
        ws_(backend_->workspace()),
        index_topk_(index_topk),
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

  Status Forward(const StepInput& in, KvStorage& kv, StepOutput* out) override;
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

  ModelConfig c_;
  DeepseekV3Weights w_;
  std::shared_ptr<Backend> backend_;  // shared with whoever made the model
  const Ops& ops_;                    // backend_->ops()
  Workspace& ws_;                     // backend_->workspace(): this model's activations
  int64_t index_topk_;
  bool indexer_live_;  // false: attend to every causal token (deepseek_v3, or forced dense)
  TpCollectives tp_;   // the collective points (models/tensor_parallel.h); no-ops for one rank
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
};

void DeepseekV3Model::Check(const Tensor& t, int64_t layer, const char* op, const StepLayout& s,
                            std::span<const int64_t> rows) {
  if (!check_) return;
  // The op scans the rows; the host reads one flag per row, copied back. A failed copy leaves
  // the flags clear: its error is the step's, from Forward's Synchronize.
  Tensor flags = Tensor::Empty(DType::kI32, {t.size(0)}, ws_);
  ops_.NonFiniteRows(t, flags);
  std::vector<int32_t> bad(t.size(0), 0);
  (void)ops_.CopyToHost(flags.raw(), bad.data(), bad.size() * sizeof(int32_t));
  size_t next = 0;  // first entry of `rows` not yet below the span
  for (size_t i = 0; i < s.spans.size(); ++i) {
    const auto& sp = s.spans[i];
    int64_t begin = sp.begin, count = sp.count;  // rows of t holding this span's rows
    if (!rows.empty() || t.size(0) != static_cast<int64_t>(s.ids.size())) {
      while (next < rows.size() && rows[next] < sp.begin) ++next;
      begin = static_cast<int64_t>(next);
      while (next < rows.size() && rows[next] < sp.begin + sp.count) ++next;
      count = static_cast<int64_t>(next) - begin;
    }
    const size_t site = s.seq.empty() ? i : s.seq[i];
    if (sites_[site]) continue;
    for (int64_t j = 0; j < count; ++j) {
      if (!bad[begin + j]) continue;
      sites_[site] = NonFiniteSite{layer, layer < 0 ? op : "L" + std::to_string(layer) + "." + op};
      break;
    }
  }
}

// Rows that StepOutput gets: strictly ascending, inside [0, n).
Status CheckRowList(std::span<const int64_t> rows, int64_t n, const char* what) {
  for (size_t i = 0; i < rows.size(); ++i)
    if (rows[i] < 0 || rows[i] >= n || (i > 0 && rows[i] <= rows[i - 1]))
      return InvalidArgument(std::string("forward: ") + what +
                             " must be strictly ascending rows in [0, " + std::to_string(n) + ")");
  return OkStatus();
}

StatusOr<StepLayout> DeepseekV3Model::Layout(const StepInput& in, const KvStorage& kv) const {
  StepLayout s;
  const int64_t N = in.num_rows();
  if (static_cast<int64_t>(in.positions.size()) != N || N == 0)
    return InvalidArgument("forward: a step needs tokens, and one position per token");
  s.ids = in.tokens;
  s.positions = in.positions;
  int64_t next = 0;
  for (const StepSequence& q : in.sequences) {
    if (q.rows <= 0 || q.first_row != next || q.kv_length < 0)
      return InvalidArgument("forward: sequences must cover the rows in order, each at least one");
    const int64_t start = q.kv_length, n = q.rows;
    if (start + n > c_.max_position_embeddings)
      return InvalidArgument("forward: position " + std::to_string(start + n - 1) +
                             " is past max_position_embeddings " +
                             std::to_string(c_.max_position_embeddings));
    if (static_cast<int64_t>(q.page_table.size()) * kv.page_size() < start + n)
      return FailedPrecondition("forward: KV pages not reserved for the chunk");
    // Data-parallel attention: the page ids of every rank's partition (Owned checks its own).
    const int64_t pages = kv.num_pages() * (dp_attention_ ? tp_.size() : 1);
    for (int32_t page : q.page_table)
      if (page < 0 || page >= pages)
        return InvalidArgument("forward: page id " + std::to_string(page) + " outside the storage");
    s.spans.push_back({q.page_table, next, n, start, {}, {}});
    next += n;
  }
  if (next != N) return InvalidArgument("forward: sequences must cover every row");
  for (int64_t i = 0; i < N; ++i) {
    const int32_t id = in.tokens[i];
    if (id < 0 || id >= c_.vocab_size)
      return InvalidArgument("forward: token id " + std::to_string(id) + " outside [0, " +
                             std::to_string(c_.vocab_size) + ")");
    if (in.positions[i] < 0 || in.positions[i] >= c_.max_position_embeddings)
      return InvalidArgument("forward: position " + std::to_string(in.positions[i]) +
                             " outside [0, max_position_embeddings)");
  }
  LUCID_RETURN_IF_ERROR(CheckRowList(in.logits_rows, N, "logits_rows"));
  LUCID_RETURN_IF_ERROR(CheckRowList(in.hidden_rows, N, "hidden_rows"));
  return s;
}

Status DeepseekV3Model::Forward(const StepInput& in, KvStorage& kv, StepOutput* out) {
  sites_.clear();
  LUCID_ASSIGN_OR_RETURN(StepLayout s, Layout(in, kv));
  ws_.Reset();     // the last step's activations are dead: their memory is this step's
  OwnedRows mine;  // data-parallel attention: this rank's sequences
  if (dp_attention_) {
    LUCID_ASSIGN_OR_RETURN(mine, Owned(in, kv));
    BatchSpans(kv, &mine.s);
    Upload(*backend_, &mine.s);
  } else {
    BatchSpans(kv, &s);
    Upload(*backend_, &s);
  }
  if (check_) sites_.assign(s.spans.size(), std::nullopt);
  const int64_t N = static_cast<int64_t>(s.ids.size()), D = c_.hidden_size;
  tp_.ClearStatus();
  Tensor x = F32(N, D);
  Embed(s.ids, x);
  Check(x, -1, "embedding", s);
  Tensor h = F32(N, D);
  Selection sel;  // per row: the tokens it attends to
  for (int64_t l = 0; l < c_.num_hidden_layers; ++l) {
    const LayerWeights& L = w_.layers[l];
    ops_.RmsNorm(x, L.input_norm, static_cast<float>(c_.rms_norm_eps), h);
    Check(h, l, "attn_norm", s);
    Tensor attn =
        dp_attention_ ? OwnedAttention(l, h, mine, kv, &sel) : Attention(l, h, s, kv, &sel);
    // o_proj's partial sums over this rank's heads (data-parallel attention: each row from the
    // rank that owns its sequence, zero from the others)
    tp_.AllReduceSum(attn);
    ops_.Accumulate(x, attn);
    ops_.RmsNorm(x, L.post_attn_norm, static_cast<float>(c_.rms_norm_eps), h);
    Check(h, l, "mlp_norm", s);
    Tensor mlp = L.is_moe ? Moe(L.moe, h) : Mlp(L.dense, h);
    tp_.AllReduceSum(mlp);  // down_proj's partial sums over this rank's intermediate shard
    Check(mlp, l, L.is_moe ? "moe" : "mlp", s);
    ops_.Accumulate(x, mlp);
  }
  ops_.RmsNorm(x, w_.final_norm, static_cast<float>(c_.rms_norm_eps), h);
  Check(h, -1, "final_norm", s);
  // lm_head only over the rows whose logits are used.
  out->logits = Output(static_cast<int64_t>(in.logits_rows.size()), c_.vocab_size);
  if (!in.logits_rows.empty()) {
    const bool every_row = static_cast<int64_t>(in.logits_rows.size()) == N;
    Tensor rows;
    if (!every_row) {
      rows = F32(static_cast<int64_t>(in.logits_rows.size()), D);
      ops_.GatherRows(h, in.logits_rows, rows);
    }
    if (tp_.active()) {  // this rank's vocabulary columns, then every rank's side by side
      Tensor local = F32(static_cast<int64_t>(in.logits_rows.size()), w_.lm_head.rows);
      ops_.Linear(every_row ? h : rows, w_.lm_head, local);
      LUCID_RETURN_IF_ERROR(ops_.Synchronize());
      tp_.GatherColumns(local, out->logits);
    } else {
      ops_.Linear(every_row ? h : rows, w_.lm_head, out->logits);
    }
    Check(out->logits, -1, "lm_head", s, in.logits_rows);
  }
  // Hidden states outlive the step: copied out of the workspace (GatherRows of every row is a
  // copy).
  out->hidden = Tensor();
  if (!in.hidden_rows.empty()) {
    out->hidden = Output(static_cast<int64_t>(in.hidden_rows.size()), D);
    ops_.GatherRows(h, in.hidden_rows, out->hidden);
  }
  // An asynchronous backend's errors surface here, as this step's Status; then a collective's.
  LUCID_RETURN_IF_ERROR(ops_.Synchronize());
  LUCID_RETURN_IF_ERROR(tp_.status());
  // The engine reads the outputs on the host (a device backend copies them back).
  LUCID_ASSIGN_OR_RETURN(out->logits, backend_->ReadableOnHost(out->logits));
  if (out->hidden.raw() != nullptr) {
    LUCID_ASSIGN_OR_RETURN(out->hidden, backend_->ReadableOnHost(out->hidden));
  }
  return OkStatus();
}

void DeepseekV3Model::Embed(std::span<const int32_t> ids, Tensor& x) {
  if (!tp_.active()) {
    ops_.Embedding(w_.embed, ids, x);
    return;
  }
  // This rank's vocabulary rows [v0, v0 + rows): other ranks' tokens get zero rows here and
  // their embedding from the all-reduce (exactly one rank adds a non-zero row).
  const int64_t rows = w_.embed.rows, v0 = tp_.rank() * rows, D = x.size(1);
  std::vector<int32_t> local(ids.size());
  for (size_t i = 0; i < ids.size(); ++i)
    local[i] = ids[i] >= v0 && ids[i] < v0 + rows ? static_cast<int32_t>(ids[i] - v0) : 0;
  ops_.Embedding(w_.embed, local, x);
  (void)ops_.Synchronize();  // host writes follow (the CPU backend's tensors are host memory)
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < v0 || ids[i] >= v0 + rows) std::fill_n(x.data<float>() + i * D, D, 0.0f);
  tp_.AllReduceSum(x);
}

StatusOr<OwnedRows> DeepseekV3Model::Owned(const StepInput& in, const KvStorage& kv) const {
  const int64_t P = kv.num_pages(), first = tp_.rank() * P;
  OwnedRows m;
  m.tables.reserve(in.sequences.size());  // the spans view them: no reallocation after
  for (size_t i = 0; i < in.sequences.size(); ++i) {
    const StepSequence& q = in.sequences[i];
    if (q.page_table.empty() || q.page_table[0] / P != tp_.rank()) continue;  // another rank's
    std::vector<int32_t>& table = m.tables.emplace_back();
    for (int32_t page : q.page_table) {
      if (page < first || page >= first + P)
        return InvalidArgument(
            "forward: a sequence's pages span data-parallel attention "
            "partitions (page " +
            std::to_string(page) + ", partition " + std::to_string(tp_.rank()) + " holds [" +
            std::to_string(first) + ", " + std::to_string(first + P) + "))");
      table.push_back(static_cast<int32_t>(page - first));
    }
    const int64_t begin = static_cast<int64_t>(m.rows.size());
    for (int64_t r = q.first_row; r < q.first_row + q.rows; ++r) {
      m.rows.push_back(r);
      m.ids.push_back(in.tokens[r]);
      m.positions.push_back(in.positions[r]);
    }
    m.s.spans.push_back({table, begin, q.rows, q.kv_length, {}, {}});
    m.s.seq.push_back(i);
  }
  m.s.ids = m.ids;
  m.s.positions = m.positions;
  return m;
}

Tensor DeepseekV3Model::OwnedAttention(int64_t l, const Tensor& h, const OwnedRows& mine,
                                       KvStorage& pool, Selection* sel) {
  const int64_t N = h.size(0), D = c_.hidden_size, n = static_cast<int64_t>(mine.rows.size());
  Tensor attn = F32(N, D);
  Tensor part;
  if (n > 0) {
    Tensor hm = F32(n, D);
    ops_.GatherRows(h, mine.rows, hm);
    part = Attention(l, hm, mine.s, pool, sel);
  }
  (void)ops_.Synchronize();  // host writes follow (the CPU backend's tensors are host memory)
  float* out = attn.data<float>();
  std::fill_n(out, N * D, 0.0f);
  for (int64_t i = 0; i < n; ++i)
    std::copy_n(part.data<const float>() + i * D, D, out + mine.rows[i] * D);
  return attn;
}

Tensor DeepseekV3Model::Attention(int64_t l, const Tensor& h, const StepLayout& s, KvStorage& pool,
                                  Selection* sel) {
  const MlaWeights& a = w_.layers[l].attn;
  const int64_t N = h.size(0), H = heads_, dn = c_.qk_nope_head_dim;
  const int64_t dr = c_.qk_rope_head_dim, dv = c_.v_head_dim, dq = c_.qk_head_dim();
  const int64_t R = c_.kv_lora_rank;
  const IndexerWeights& xw = w_.layers[l].indexer;
  const bool index_here = indexer_live_ && xw.present;  // this layer scores the past tokens
  const int64_t nI = c_.index_n_heads, dI = c_.index_head_dim;
  // Every projection of h in one call (as the engines' fused q_a/kv_a projection): the queries'
  // (q_a, or q_proj without a q LoRA), the latent KV's and, where the indexer runs, its key's and
  // head weights'. Then those of the normed query LoRA cq: q_b and the indexer's wq_b.
  Tensor cq, q = F32(N, H * dq), kva = F32(N, R + dr);
  IndexerProjections ip;
  std::vector<const Weight*> ws;
  std::vector<Tensor*> ys;
  if (c_.q_lora_rank > 0) {
    cq = F32(N, c_.q_lora_rank);
    ws = {&a.q_a, &a.kv_a};
    ys = {&cq, &kva};
  } else {
    ws = {&a.q_proj, &a.kv_a};
    ys = {&q, &kva};
  }
  if (index_here) {
    ip.k = F32(N, dI);
    ip.w = F32(N, nI);
    ws.insert(ws.end(), {&xw.wk, &xw.weights_proj});
    ys.insert(ys.end(), {&ip.k, &ip.w});
  }
  ops_.LinearMany(h, ws, ys);
  if (c_.q_lora_rank > 0) {
    ops_.RmsNorm(cq, a.q_a_norm, kLatentNormEps, cq);
    if (index_here) {
      ip.q = F32(N, nI * dI);
      const Weight* wq[] = {&a.q_b, &xw.wq_b};
      Tensor* yq[] = {&q, &ip.q};
      ops_.LinearMany(cq, wq, yq);
    } else {
      ops_.Linear(cq, a.q_b, q);
    }
  }
  ops_.Rope(q, H, dq, dn, rope_, s.positions, StyleOf(c_.mla_rope_layout));
  Check(q, l, "q_proj", s);
  // Latent KV for the new tokens, written to the cache.
  Check(kva, l, "kv_a_proj", s);
  Tensor ckv = F32(N, R), kpe = F32(N, dr);
  ops_.CopyColumns(kva, 1, R + dr, 0, R, ckv);
  ops_.CopyColumns(kva, 1, R + dr, R, dr, kpe);
  ops_.RmsNorm(ckv, a.kv_a_norm, kLatentNormEps, ckv);
  ops_.Rope(kpe, 1, dr, 0, rope_, s.positions, StyleOf(c_.mla_rope_layout));
  const Tensor* mla_row[] = {&ckv, &kpe};  // a cached row is [ckv | k_pe]
  ops_.WriteKvRows(mla_row, pool.MlaOut(l), s.pool_rows);
  // Absorb W_uk into the queries: q_latent[t, h] = q_nope[t, h] · W_uk_h.
  Tensor q_lat = F32(N, H * R), q_rope = F32(N, H * dr);
  ops_.MlaAbsorbQuery(q, H, dq, dn, dv, a.kv_b, q_lat);
  ops_.CopyColumns(q, H, dq, dn, dr, q_rope);
  SelectTokens(l, N, index_here ? &ip : nullptr, s, pool, sel);
  Tensor out_lat = F32(N, H * R);
  MlaAttentionArgs args;
  args.heads = H;
  args.latent_dim = R;
  args.rope_dim = dr;
  args.scale = scale_;
  args.selected_stride = sel->stride;
  const bool dense = !indexer_live_;  // counts only: every causal token
  const int32_t* rows = dense ? nullptr : sel->rows.data<const int32_t>();
  if (s.batched) {
    // One call for the whole batch (see StepLayout::batched).
    args.q_latent = q_lat.data<float>();
    args.q_rope = q_rope.data<float>();
    args.tokens = N;
    args.kv = pool.MlaRows(l, TableOf(s.table_dev));
    args.selected = rows;
    args.selected_count = sel->counts_dev.data<const int32_t>();
    args.dense_begin = dense ? s.begin_dev.data<const int32_t>() : nullptr;
    args.out_latent = out_lat.data<float>();
    ops_.MlaAttention(args);
  } else {
    for (const auto& sp : s.spans) {
      args.q_latent = q_lat.data<float>() + sp.begin * H * R;
      args.q_rope = q_rope.data<float>() + sp.begin * H * dr;
      args.tokens = sp.count;
      args.kv = pool.MlaRows(l, TableOf(sp.table));
      args.selected = dense ? nullptr : rows + sp.begin * sel->stride;
      args.selected_count = sel->counts_dev.data<const int32_t>() + sp.begin;
      args.out_latent = out_lat.data<float>() + sp.begin * H * R;
      ops_.MlaAttention(args);
    }
  }
  Check(out_lat, l, "mla_attention", s);
  // Up-project the latent output per head with W_uv, then o_proj.
  Tensor o = F32(N, H * dv);
  ops_.MlaProjectOutput(out_lat, H, dn, dv, a.kv_b, o);
  Tensor out = F32(N, c_.hidden_size);
  ops_.Linear(o, a.o, out);  // under TP: this rank's heads' part of the sum
  Check(out, l, "o_proj", s);
  return out;
}

// Fills *sel: per row the count of tokens it attends to and (sparse) their indices, TopKRows'
// output in the rows of each span (shifted into the combined page table when the step is
// batched). Full indexer layers compute it from *ip (their projections, given whenever the
// indexer runs here); shared layers keep the previous layer's; deepseek_v3 (and forced dense)
// attends to every causal token: counts only, no index lists (MlaAttention's dense mode).
void DeepseekV3Model::SelectTokens(int64_t l, int64_t N, IndexerProjections* ip,
                                   const StepLayout& s, KvStorage& pool, Selection* sel) {
  const IndexerWeights& x = w_.layers[l].indexer;
  if (c_.has_indexer && !x.present) return;  // shared layer: reuse the last full layer's choice
  if (!indexer_live_ && sel->ready) return;  // dense: every causal token, computed once
  int64_t max_ctx = 0;
  for (const auto& sp : s.spans) max_ctx = std::max(max_ctx, sp.start_pos + sp.count);
  const int64_t K = indexer_live_ ? std::min(index_topk_, max_ctx) : 0;
  sel->ready = true;
  sel->stride = K;
  sel->counts.assign(N, 0);
  for (const auto& sp : s.spans)
    for (int64_t i = 0; i < sp.count; ++i) {
      const int64_t causal = sp.start_pos + i + 1;
      sel->counts[sp.begin + i] =
          static_cast<int32_t>(indexer_live_ ? std::min(K, causal) : causal);
    }
  sel->counts_dev = backend_->StepCopy(std::span<const int32_t>(sel->counts));
  if (!indexer_live_) return;
  LUCID_CHECK(ip != nullptr, "SelectTokens: the indexer runs at layer " + std::to_string(l) +
                                 " but its projections were not given");
  const int64_t nI = c_.index_n_heads, dI = c_.index_head_dim;
  Tensor qi = ip->q;
  ops_.Rope(qi, nI, dI, 0, rope_, s.positions, StyleOf(c_.indexer_rope_layout));
  Tensor ki = ip->k;
  ops_.LayerNorm(ki, x.k_norm_w, x.k_norm_b, kIndexerNormEps, ki);
  ops_.Rope(ki, 1, dI, 0, rope_, s.positions, StyleOf(c_.indexer_rope_layout));
  Check(qi, l, "indexer_q", s);
  Check(ki, l, "indexer_k", s);
  const Tensor* key_row[] = {&ki};
  ops_.WriteKvRows(key_row, pool.IndexerOut(l), s.pool_rows);
  Tensor w = ip->w;
  const float fold = static_cast<float>(1.0 / std::sqrt(static_cast<double>(nI)) /
                                        std::sqrt(static_cast<double>(dI)));
  ops_.Scale(w, fold);
  sel->rows = Tensor::Empty(DType::kI32, {N, K}, ws_);
  for (size_t si = 0; si < s.spans.size(); ++si) {
    const auto& sp = s.spans[si];
    std::vector<int64_t> causal(sp.count);
    for (int64_t i = 0; i < sp.count; ++i) causal[i] = sp.start_pos + i + 1;
    Tensor scores = F32(sp.count, sp.start_pos + sp.count);  // entries past causal unspecified
    IndexerArgs ia;
    ia.q = qi.data<float>() + sp.begin * nI * dI;
    ia.w = w.data<float>() + sp.begin * nI;
    ia.tokens = sp.count;
    ia.heads = nI;
    ia.head_dim = dI;
    ia.keys = pool.IndexerRows(l, TableOf(sp.table));
    ia.causal_len = sp.causal.data<const int64_t>();
    ia.scores = scores.data<float>();
    ia.score_stride = sp.start_pos + sp.count;
    ops_.IndexerScores(ia);
    Tensor out = sel->rows.Rows(sp.begin, sp.begin + sp.count);
    ops_.TopKRows(scores, causal, K, s.batched ? s.offset[si] : 0, out);
  }
  if (check_replicated_ &&
      !dp_attention_) {  // the selected entries only: a row's columns past its count are unset
    Tensor used = Tensor::Empty(DType::kI32, {N, K}, ws_);
    (void)ops_.Synchronize();
    for (int64_t r = 0; r < N; ++r)
      for (int64_t j = 0; j < K; ++j)
        used.data<int32_t>()[r * K + j] =
            j < sel->counts[r] ? sel->rows.data<const int32_t>()[r * K + j] : -1;
    tp_.CheckReplicated(used, "the indexer's selection");
  }
}

Tensor DeepseekV3Model::Mlp(const MlpWeights& m, const Tensor& x) {
  const int64_t N = x.size(0);
  Tensor g = F32(N, m.gate.rows), u = F32(N, m.up.rows);
  const Weight* ws[] = {&m.gate, &m.up};
  Tensor* ys[] = {&g, &u};
  ops_.LinearMany(x, ws, ys);
  return MlpDown(m, g, u);
}

Tensor DeepseekV3Model::MlpDown(const MlpWeights& m, Tensor& g, const Tensor& u) {
  ops_.SwiGlu(g, u, g);
  Tensor out = F32(g.size(0), c_.hidden_size);
  ops_.Linear(g, m.down, out);
  return out;
}

Tensor DeepseekV3Model::Moe(const MoeWeights& m, const Tensor& x) {
  const int64_t N = x.size(0), K = c_.num_experts_per_tok;
  // The router and the shared expert's gate and up read x together.
  Tensor router_logits = F32(N, c_.n_routed_experts), g, u;
  if (c_.n_shared_experts > 0) {
    g = F32(N, m.shared.gate.rows);
    u = F32(N, m.shared.up.rows);
    const Weight* ws[] = {&m.router, &m.shared.gate, &m.shared.up};
    Tensor* ys[] = {&router_logits, &g, &u};
    ops_.LinearMany(x, ws, ys);
  } else {
    ops_.Linear(x, m.router, router_logits);
  }
  Tensor idx = Tensor::Empty(DType::kI32, {N, K}, ws_), wts = F32(N, K);
  ops_.MoeRoute(router_logits, m.router_bias, c_.n_group, c_.topk_group, K, c_.norm_topk_prob,
                static_cast<float>(c_.routed_scaling_factor), idx, wts);
  if (check_replicated_) {
    tp_.CheckReplicated(idx, "the router's experts");
    tp_.CheckReplicated(wts, "the router's weights");
  }
  Tensor out = Tensor::Zeros(DType::kF32, {N, c_.hidden_size}, ws_);  // MoeExperts adds into it
  if (expert_parallel_) {
    LocalExperts(m, x, idx, wts, out);
  } else {
    ops_.MoeExperts(x, m.experts, idx, wts, out);
  }
  if (c_.n_shared_experts > 0) ops_.Accumulate(out, MlpDown(m.shared, g, u));
  return out;
}

void DeepseekV3Model::LocalExperts(const MoeWeights& m, const Tensor& x, const Tensor& idx,
                                   const Tensor& wts, Tensor& out) {
  (void)ops_.Synchronize();  // the host reads the routing (a device backend copies it back)
  const int64_t N = x.size(0), K = idx.size(1), D = x.size(1);
  std::vector<int64_t> rows;  // one pair per (token, selection) of a local expert
  std::vector<int32_t> local;
  std::vector<float> weight;
  for (int64_t t = 0; t < N; ++t)
    for (int64_t i = 0; i < K; ++i) {
      const int64_t e = idx.data<const int32_t>()[t * K + i] - expert_begin_;
      if (e < 0 || e >= experts_) continue;
      rows.push_back(t);
      local.push_back(static_cast<int32_t>(e));
      weight.push_back(wts.data<const float>()[t * K + i]);
    }
  const int64_t P = static_cast<int64_t>(rows.size());
  if (P == 0) return;
  Tensor xp = F32(P, D), ip = Tensor::Empty(DType::kI32, {P, 1}, ws_), wp = F32(P, 1);
  std::copy(local.begin(), local.end(), ip.data<int32_t>());
  std::copy(weight.begin(), weight.end(), wp.data<float>());
  ops_.GatherRows(x, rows, xp);
  Tensor op = Tensor::Zeros(DType::kF32, {P, D}, ws_);
  ops_.MoeExperts(xp, std::span<const ExpertWeights>(m.experts).subspan(expert_begin_, experts_),
                  ip, wp, op);
  (void)ops_.Synchronize();
  // Each pair's output back onto its token's row, in (token, selection) order.
  for (int64_t p = 0; p < P; ++p) {
    float* dst = out.data<float>() + rows[p] * D;
    const float* src = op.data<const float>() + p * D;
    for (int64_t j = 0; j < D; ++j) dst[j] += src[j];
  }
}

// One token (the same finite row for every block: 1/sqrt(D), the scale a normed hidden state has)
// through each feed-forward block; routed experts all in one MoeExperts call, row e to expert e.
// The outputs are scanned by NonFiniteRows (the host reads one flag per row). The inputs are
// made on the host and copied into the backend's memory.
Status DeepseekV3Model::CheckFeedForwardWeights() {
  const int64_t D = c_.hidden_size;
  const float v = 1.0f / std::sqrt(static_cast<float>(D));
  Allocator& mem = backend_->allocator();
  auto first_bad_row = [&](const Tensor& t) -> StatusOr<int64_t> {
    Tensor flags = Tensor::Empty(DType::kI32, {t.size(0)}, mem);
    ops_.NonFiniteRows(t, flags);
    LUCID_ASSIGN_OR_RETURN(Tensor bad, backend_->ReadableOnHost(flags));
    for (int64_t i = 0; i < t.size(0); ++i)
      if (bad.data<const int32_t>()[i] != 0) return i;
    return int64_t{-1};
  };
  // A tensor of the backend's memory holding host values.
  auto filled = [&](DType dtype, Shape shape, const void* host) {
    Tensor t = Tensor::Empty(dtype, std::move(shape), mem);
    ops_.CopyFromHost(host, t.raw(), t.nbytes());
    return t;
  };
  auto refuse = [](int64_t layer, const std::string& what) {
    return InvalidArgument("layer " + std::to_string(layer) + " " + what +
                           ": non-finite output for a finite input (NaN or Inf in its weights); "
                           "the checkpoint is refused");
  };
  const std::vector<float> row(D, v);
  const Tensor one = filled(DType::kF32, {1, D}, row.data());
  for (int64_t l = 0; l < static_cast<int64_t>(w_.layers.size()); ++l) {
    const LayerWeights& lw = w_.layers[l];
    if (!lw.is_moe) {
      LUCID_ASSIGN_OR_RETURN(int64_t bad, first_bad_row(Mlp(lw.dense, one)));
      if (bad >= 0) return refuse(l, "dense MLP");
      continue;
    }
    const int64_t E = experts_;  // this rank's (all of them without expert parallelism)
    const std::span<const ExpertWeights> held =
        std::span<const ExpertWeights>(lw.moe.experts).subspan(expert_begin_, experts_);
    if (E > 0) {
      const std::vector<float> rows(E * D, v), ones(E, 1.0f);
      std::vector<int32_t> experts(E);
      for (int64_t e = 0; e < E; ++e) experts[e] = static_cast<int32_t>(e);
      const Tensor x = filled(DType::kF32, {E, D}, rows.data());
      Tensor out = Tensor::Zeros(DType::kF32, {E, D}, mem);  // MoeExperts adds into it
      const Tensor idx = filled(DType::kI32, {E, 1}, experts.data());
      const Tensor wts = filled(DType::kF32, {E, 1}, ones.data());
      ops_.MoeExperts(x, held, idx, wts, out);
      LUCID_ASSIGN_OR_RETURN(int64_t e, first_bad_row(out));
      if (e >= 0) return refuse(l, "routed expert " + std::to_string(expert_begin_ + e));
    }
    if (c_.n_shared_experts > 0) {
      LUCID_ASSIGN_OR_RETURN(int64_t bad, first_bad_row(Mlp(lw.moe.shared, one)));
      if (bad >= 0) return refuse(l, "shared expert");
    }
  }
  return OkStatus();
}

// Every weight tensor onto the backend's device, once (CPU: the mapped views themselves).
Status UploadAll(Backend& b, DeepseekV3Weights* w) {
  auto tensor = [&](Tensor* t) -> Status {
    if (t->raw() == nullptr) return OkStatus();
    LUCID_ASSIGN_OR_RETURN(*t, b.UploadWeight(*t));
    return OkStatus();
  };
  auto mlp = [&](MlpWeights* m) -> Status {
    for (Weight* x : {&m->gate, &m->up, &m->down}) LUCID_RETURN_IF_ERROR(b.UploadWeights(x));
    return OkStatus();
  };
  for (Weight* x : {&w->embed, &w->lm_head}) LUCID_RETURN_IF_ERROR(b.UploadWeights(x));
  LUCID_RETURN_IF_ERROR(tensor(&w->final_norm));
  for (LayerWeights& L : w->layers) {
    for (Tensor* t : {&L.input_norm, &L.post_attn_norm, &L.attn.q_a_norm, &L.attn.kv_a_norm,
                      &L.indexer.k_norm_w, &L.indexer.k_norm_b, &L.moe.router_bias})
      LUCID_RETURN_IF_ERROR(tensor(t));
    for (Weight* x :
         {&L.attn.q_a, &L.attn.q_b, &L.attn.q_proj, &L.attn.kv_a, &L.attn.kv_b, &L.attn.o,
          &L.indexer.wq_b, &L.indexer.wk, &L.indexer.weights_proj, &L.moe.router})
      LUCID_RETURN_IF_ERROR(b.UploadWeights(x));
    LUCID_RETURN_IF_ERROR(mlp(&L.dense));
    LUCID_RETURN_IF_ERROR(mlp(&L.moe.shared));
    for (ExpertWeights& e : L.moe.experts)
      for (Weight* x : {&e.gate, &e.up, &e.down}) LUCID_RETURN_IF_ERROR(b.UploadWeights(x));
  }
  return OkStatus();
}

StatusOr<std::unique_ptr<Model>> Build(const ModelConfig& config, DeepseekV3Weights w,
                                       std::shared_ptr<Backend> backend,
                                       const ModelLoadOptions& options) {
  Communicator* tp = options.tp;
  if (backend->device() != Device::kCpu && tp != nullptr && tp->size() > 1)
    return Unimplemented(
        "tensor, expert and data parallelism run on the cpu backend only (their "
        "collective points read host memory); this model's backend is " +
        backend->name());
  if (tp != nullptr && tp->size() > 1) {
    LUCID_RETURN_IF_ERROR(ShardDeepseekV3Weights(config, tp->rank(), tp->size(), options.ep_size,
                                                 options.dp_attention, &w));
  } else if (options.ep_size > 1) {
    return InvalidArgument("--ep-size " + std::to_string(options.ep_size) +
                           " needs a tensor-parallel group of that size (--tp-size)");
  }
  LUCID_RETURN_IF_ERROR(UploadAll(*backend, &w));
  const int64_t topk =
      options.index_topk_override > 0 ? options.index_topk_override : config.index_topk;
  return std::unique_ptr<Model>(new DeepseekV3Model(
      config, std::move(w), std::move(backend), topk, options.force_dense_attention, tp,
      options.tp_check_replicated, tp != nullptr && tp->size() > 1 ? options.ep_size : 1,
      options.dp_attention));
}

}  // namespace

StatusOr<std::unique_ptr<Model>> CreateDeepseekV3Family(const ModelConfig& config,
                                                        const Checkpoint& ckpt,
                                                        std::shared_ptr<Backend> backend,
                                                        const ModelLoadOptions& options) {
  LUCID_ASSIGN_OR_RETURN(DeepseekV3Weights w, LoadDeepseekV3Weights(config, ckpt));
  return Build(config, std::move(w), std::move(backend), options);
}

StatusOr<std::unique_ptr<Model>> CreateDeepseekV3FamilyFromGguf(
    const ModelConfig& config, std::shared_ptr<const GgufFile> file,
    std::shared_ptr<Backend> backend, const ModelLoadOptions& options) {
  LUCID_ASSIGN_OR_RETURN(DeepseekV3Weights w, LoadDeepseekV3Weights(config, std::move(file)));
  return Build(config, std::move(w), std::move(backend), options);
}

}  // namespace lucid
