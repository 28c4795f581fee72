#include "models/deepseek_v3_family.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "models/deepseek_v3_model.h"
#include "models/deepseek_v3_shard.h"
#include "models/deepseek_v3_weights.h"
#include "models/registry.h"
#include "models/rope.h"
#include "models/tensor_parallel.h"

namespace lucid {
namespace deepseek_v3 {
namespace {

constexpr float kLatentNormEps = 1e-6f;   // q_a_layernorm / kv_a_layernorm (transformers)
constexpr float kIndexerNormEps = 1e-6f;  // indexer.k_norm (nn.LayerNorm eps)

RopeStyle StyleOf(RopeLayout l) {
  return l == RopeLayout::kInterleaved ? RopeStyle::kInterleaved : RopeStyle::kHalfSplit;
}

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

}  // namespace

void DeepseekV3Model::Check(const Tensor& t, int64_t layer, const char* op, const StepLayout& s,
                            std::span<const int64_t> rows) {
  if (!check_) return;
  // The op scans the rows; the host reads one flag per row, copied back. A failed copy leaves
  // the flags clear: its error is the step's, which Forward returns.
  Tensor flags = Tensor::Empty(DType::kI32, {t.size(0)}, ws_);
  ops_.NonFiniteRows(t, flags);
  std::vector<int32_t> bad(t.size(0), 0);
  Keep(ops_.CopyToHost(flags.raw(), bad.data(), bad.size() * sizeof(int32_t)));
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

Status DeepseekV3Model::Step(const StepInput& in, KvStorage& kv, StepOutput* out) {
  sites_.clear();
  step_error_ = OkStatus();
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
  PrepareSelection(dp_attention_ ? mine.s : s, &sel);
  for (int64_t l = 0; l < c_.num_hidden_layers; ++l) {
    Workspace::Scope layer(ws_);  // this layer's activations are the next layer's memory
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
  // An asynchronous backend's errors surface here, as this step's Status (or kept from a
  // mid-step wait); then a collective's.
  LUCID_RETURN_IF_ERROR(ops_.Synchronize());
  LUCID_RETURN_IF_ERROR(std::exchange(step_error_, OkStatus()));
  LUCID_RETURN_IF_ERROR(tp_.status());
  // The engine reads the outputs on the host (a device backend copies them back), the logits
  // unless it samples them where they are.
  if (!in.logits_on_device || logits_backend() == nullptr) {
    LUCID_ASSIGN_OR_RETURN(out->logits, backend_->ReadableOnHost(out->logits));
  }
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
  Keep(ops_.Synchronize());  // host writes follow (the CPU backend's tensors are host memory)
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
  Keep(ops_.Synchronize());  // host writes follow (the CPU backend's tensors are host memory)
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

// Before the layers, for the rows of layout `s` (the selection outlives each layer's workspace
// scope): per row the count of tokens it attends to (the same in every layer), and with a live
// indexer the [N, K] tensor its layers write their choice into.
void DeepseekV3Model::PrepareSelection(const StepLayout& s, Selection* sel) {
  const int64_t N = static_cast<int64_t>(s.ids.size());
  int64_t max_ctx = 0;
  for (const auto& sp : s.spans) max_ctx = std::max(max_ctx, sp.start_pos + sp.count);
  const int64_t K = indexer_live_ ? std::min(index_topk_, max_ctx) : 0;
  sel->stride = K;
  sel->counts.assign(N, 0);
  for (const auto& sp : s.spans)
    for (int64_t i = 0; i < sp.count; ++i) {
      const int64_t causal = sp.start_pos + i + 1;
      sel->counts[sp.begin + i] =
          static_cast<int32_t>(indexer_live_ ? std::min(K, causal) : causal);
    }
  sel->counts_dev = backend_->StepCopy(std::span<const int32_t>(sel->counts));
  if (indexer_live_) sel->rows = Tensor::Empty(DType::kI32, {N, K}, ws_);
}

// Fills sel->rows: per row (sparse) the indices it attends to, TopKRows' output in the rows of
// each span (shifted into the combined page table when the step is batched). Full indexer layers
// compute it from *ip (their projections, given whenever the indexer runs here); shared layers
// keep the previous layer's; deepseek_v3 (and forced dense) attends to every causal token:
// counts only, no index lists (MlaAttention's dense mode).
void DeepseekV3Model::SelectTokens(int64_t l, int64_t N, IndexerProjections* ip,
                                   const StepLayout& s, KvStorage& pool, Selection* sel) {
  // Dense, or a shared layer: the counts alone, or the last full layer's choice.
  if (!indexer_live_ || !w_.layers[l].indexer.present) return;
  const IndexerWeights& x = w_.layers[l].indexer;
  const int64_t K = sel->stride;
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
  // Per span, in blocks of query rows: block [r0, r1) scores the first start_pos + r1 tokens,
  // then its memory is the next block's.
  for (size_t si = 0; si < s.spans.size(); ++si) {
    const auto& sp = s.spans[si];
    for (int64_t r0 = 0; r0 < sp.count; r0 += indexer_row_block_) {
      Workspace::Scope block(ws_);
      const int64_t r1 = std::min(sp.count, r0 + indexer_row_block_), width = sp.start_pos + r1;
      std::vector<int64_t> causal(r1 - r0);
      for (int64_t i = r0; i < r1; ++i) causal[i - r0] = sp.start_pos + i + 1;
      Tensor scores = F32(r1 - r0, width);  // entries past causal unspecified
      IndexerArgs ia;
      ia.q = qi.data<float>() + (sp.begin + r0) * nI * dI;
      ia.w = w.data<float>() + (sp.begin + r0) * nI;
      ia.tokens = r1 - r0;
      ia.heads = nI;
      ia.head_dim = dI;
      ia.keys = pool.IndexerRows(l, TableOf(sp.table));
      ia.causal_len = sp.causal.data<const int64_t>() + r0;
      ia.scores = scores.data<float>();
      ia.score_stride = width;
      ops_.IndexerScores(ia);
      Tensor out = sel->rows.Rows(sp.begin + r0, sp.begin + r1);
      ops_.TopKRows(scores, causal, K, s.batched ? s.offset[si] : 0, out);
    }
  }
  if (check_replicated_ &&
      !dp_attention_) {  // the selected entries only: a row's columns past its count are unset
    Tensor used = Tensor::Empty(DType::kI32, {N, K}, ws_);
    Keep(ops_.Synchronize());
    for (int64_t r = 0; r < N; ++r)
      for (int64_t j = 0; j < K; ++j)
        used.data<int32_t>()[r * K + j] =
            j < sel->counts[r] ? sel->rows.data<const int32_t>()[r * K + j] : -1;
    tp_.CheckReplicated(used, "the indexer's selection");
  }
}

namespace {

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
      options.dp_attention,
      options.indexer_row_block > 0 ? options.indexer_row_block : kIndexerRowBlock));
}

}  // namespace
}  // namespace deepseek_v3

StatusOr<std::unique_ptr<Model>> CreateDeepseekV3Family(const ModelConfig& config,
                                                        const Checkpoint& ckpt,
                                                        std::shared_ptr<Backend> backend,
                                                        const ModelLoadOptions& options) {
  LUCID_ASSIGN_OR_RETURN(DeepseekV3Weights w, LoadDeepseekV3Weights(config, ckpt));
  return deepseek_v3::Build(config, std::move(w), std::move(backend), options);
}

StatusOr<std::unique_ptr<Model>> CreateDeepseekV3FamilyFromGguf(
    const ModelConfig& config, std::shared_ptr<const GgufFile> file,
    std::shared_ptr<Backend> backend, const ModelLoadOptions& options) {
  LUCID_ASSIGN_OR_RETURN(DeepseekV3Weights w, LoadDeepseekV3Weights(config, std::move(file)));
  return deepseek_v3::Build(config, std::move(w), std::move(backend), options);
}

}  // namespace lucid
