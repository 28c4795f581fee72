#include "bench/profiling_ops.h"

#include <chrono>
#include <set>
#include <string_view>
#include <vector>

namespace lucid {
namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void Accumulate(OpTally& t, double seconds, double bytes, double flops) {
  t.seconds += seconds;
  t.bytes += bytes;
  t.flops += flops;
  ++t.calls;
}

}  // namespace

std::string LayerlessName(const std::string& name) {
  constexpr std::string_view kLayers = "layers.";
  const size_t p = name.find(kLayers);
  if (p == std::string::npos) return name;
  const size_t b = p + kLayers.size();
  size_t e = b;
  while (e < name.size() && name[e] >= '0' && name[e] <= '9') ++e;
  if (e == b) return name;
  return name.substr(0, b) + "*" + name.substr(e);
}

const char* OpCategoryName(OpCategory c) {
  switch (c) {
    case OpCategory::kMatmul:
      return "matmul";
    case OpCategory::kExperts:
      return "experts";
    case OpCategory::kAttention:
      return "attention";
    case OpCategory::kIndexer:
      return "indexer";
    case OpCategory::kTopK:
      return "topk";
    case OpCategory::kOther:
      return "other";
    default:
      return "?";
  }
}

OpTally ProfilingOps::Total() const {
  OpTally t;
  for (const auto& x : tally_) {
    t.seconds += x.seconds;
    t.bytes += x.bytes;
    t.flops += x.flops;
    t.calls += x.calls;
    t.units += x.units;
  }
  return t;
}

void ProfilingOps::Add(OpCategory c, double seconds, double bytes, double flops) const {
  ::lucid::Accumulate(tally_[static_cast<int>(c)], seconds, bytes, flops);
}

void ProfilingOps::AddMatmul(const std::string& weight, double seconds, double bytes,
                             double flops) const {
  Add(OpCategory::kMatmul, seconds, bytes, flops);
  ::lucid::Accumulate(by_weight_[LayerlessName(weight)], seconds, bytes, flops);
}

void ProfilingOps::Linear(const Tensor& x, const Weight& w, Tensor& y) const {
  const double t0 = Now();
  inner_.Linear(x, w, y);
  AddMatmul(w.name, Now() - t0, double(w.StoredBytes()),
            2.0 * double(x.size(0)) * double(w.rows) * double(w.cols));
}

void ProfilingOps::LinearMany(const Tensor& x, std::span<const Weight* const> ws,
                              std::span<Tensor* const> ys) const {
  const double t0 = Now();
  inner_.LinearMany(x, ws, ys);
  const double seconds = Now() - t0;
  double total = 0;
  for (const Weight* w : ws) total += double(w->StoredBytes());
  for (const Weight* w : ws) {
    const double bytes = double(w->StoredBytes());
    AddMatmul(w->name, total > 0 ? seconds * bytes / total : 0.0, bytes,
              2.0 * double(x.size(0)) * double(w->rows) * double(w->cols));
  }
}

void ProfilingOps::LinearTransposed(const Tensor& x, const Weight& w, Tensor& y) const {
  const double t0 = Now();
  inner_.LinearTransposed(x, w, y);
  AddMatmul(w.name, Now() - t0, double(w.StoredBytes()),
            2.0 * double(x.size(0)) * double(w.rows) * double(w.cols));
}

void ProfilingOps::MlaAbsorbQuery(const Tensor& q, int64_t heads, int64_t q_stride,
                                  int64_t nope_dim, int64_t v_dim, const Weight& kv_b,
                                  Tensor& q_latent) const {
  const double t0 = Now();
  inner_.MlaAbsorbQuery(q, heads, q_stride, nope_dim, v_dim, kv_b, q_latent);
  const double share = double(nope_dim) / double(nope_dim + v_dim);
  AddMatmul(kv_b.name + " (W_uk)", Now() - t0, double(kv_b.StoredBytes()) * share,
            2.0 * double(q.size(0)) * double(heads * nope_dim) * double(kv_b.cols));
}

void ProfilingOps::MlaProjectOutput(const Tensor& latent, int64_t heads, int64_t nope_dim,
                                    int64_t v_dim, const Weight& kv_b, Tensor& out) const {
  const double t0 = Now();
  inner_.MlaProjectOutput(latent, heads, nope_dim, v_dim, kv_b, out);
  const double share = double(v_dim) / double(nope_dim + v_dim);
  AddMatmul(kv_b.name + " (W_uv)", Now() - t0, double(kv_b.StoredBytes()) * share,
            2.0 * double(latent.size(0)) * double(heads * v_dim) * double(kv_b.cols));
}

void ProfilingOps::Embedding(const Weight& table, std::span<const int32_t> ids, Tensor& out) const {
  const double t0 = Now();
  inner_.Embedding(table, ids, out);
  Add(OpCategory::kOther, Now() - t0, double(out.nbytes()), 0);
}

void ProfilingOps::RmsNorm(const Tensor& x, const Tensor& weight, float eps, Tensor& y) const {
  const double t0 = Now();
  inner_.RmsNorm(x, weight, eps, y);
  Add(OpCategory::kOther, Now() - t0, 0, 3.0 * double(x.numel()));
}

void ProfilingOps::LayerNorm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps,
                             Tensor& y) const {
  const double t0 = Now();
  inner_.LayerNorm(x, weight, bias, eps, y);
  Add(OpCategory::kOther, Now() - t0, 0, 5.0 * double(x.numel()));
}

void ProfilingOps::Rope(Tensor& x, int64_t heads, int64_t head_stride, int64_t offset,
                        const RopeTable& table, std::span<const int64_t> positions,
                        RopeStyle style) const {
  const double t0 = Now();
  inner_.Rope(x, heads, head_stride, offset, table, positions, style);
  Add(OpCategory::kOther, Now() - t0, 0, 3.0 * double(positions.size() * heads * table.dim()));
}

void ProfilingOps::SwiGlu(const Tensor& gate, const Tensor& up, Tensor& out) const {
  const double t0 = Now();
  inner_.SwiGlu(gate, up, out);
  Add(OpCategory::kOther, Now() - t0, 0, 4.0 * double(gate.numel()));
}

void ProfilingOps::MlaAttention(const MlaAttentionArgs& a) const {
  const double t0 = Now();
  inner_.MlaAttention(a);
  double rows = 0;
  for (int32_t c : Read(a.selected_count, a.tokens)) rows += c;
  const double K = double(a.latent_dim + a.rope_dim);
  Add(OpCategory::kAttention, Now() - t0, rows * double(KvRowBytes(a.kv)),
      rows * double(a.heads) * 2.0 * (K + double(a.latent_dim)));
}

void ProfilingOps::GqaAttention(const GqaAttentionArgs& a) const {
  const double t0 = Now();
  inner_.GqaAttention(a);
  double rows = 0;
  for (auto c : Read(a.count, a.tokens)) rows += double(c);
  Add(OpCategory::kAttention, Now() - t0, rows * double(KvRowBytes(a.kv)),
      rows * double(a.heads) * 4.0 * double(a.head_dim));
}

void ProfilingOps::IndexerScores(const IndexerArgs& a) const {
  const double t0 = Now();
  inner_.IndexerScores(a);
  double keys = 0;
  for (int64_t n : Read(a.causal_len, a.tokens)) keys += double(n);
  Add(OpCategory::kIndexer, Now() - t0, keys * double(KvRowBytes(a.keys)),
      keys * double(a.heads) * (2.0 * double(a.head_dim) + 2.0));
}

void ProfilingOps::TopK(const float* scores, int64_t n, int64_t k, int32_t* out) const {
  const double t0 = Now();
  inner_.TopK(scores, n, k, out);
  Add(OpCategory::kTopK, Now() - t0, double(n) * sizeof(float), 0);
}

void ProfilingOps::MoeRoute(const Tensor& logits, const Tensor& bias, int64_t n_group,
                            int64_t topk_group, int64_t k, bool norm_topk_prob, float scaling,
                            Tensor& idx, Tensor& weights) const {
  const double t0 = Now();
  inner_.MoeRoute(logits, bias, n_group, topk_group, k, norm_topk_prob, scaling, idx, weights);
  Add(OpCategory::kOther, Now() - t0, 0, 0);
}

void ProfilingOps::MoeExperts(const Tensor& x, std::span<const ExpertWeights> experts,
                              const Tensor& idx_t, const Tensor& weights, Tensor& out) const {
  const double t0 = Now();
  inner_.MoeExperts(x, experts, idx_t, weights, out);
  const std::vector<int32_t> idx = Read(idx_t.data<const int32_t>(), x.size(0) * idx_t.size(1));
  std::set<int32_t> touched(idx.begin(), idx.end());
  double bytes = 0, flops = 0;
  for (int32_t e : touched) {
    const ExpertWeights& w = experts[e];
    bytes += double(w.gate.StoredBytes() + w.up.StoredBytes() + w.down.StoredBytes());
  }
  for (int32_t e : idx) {
    const ExpertWeights& w = experts[e];
    flops +=
        2.0 * double(w.gate.rows * w.gate.cols + w.up.rows * w.up.cols + w.down.rows * w.down.cols);
  }
  Add(OpCategory::kExperts, Now() - t0, bytes, flops);
  tally_[static_cast<int>(OpCategory::kExperts)].units += double(touched.size());
}

void ProfilingOps::Accumulate(Tensor& x, const Tensor& y) const {
  const double t0 = Now();
  inner_.Accumulate(x, y);
  Add(OpCategory::kOther, Now() - t0, 0, double(x.numel()));
}

void ProfilingOps::Scale(Tensor& x, float s) const {
  const double t0 = Now();
  inner_.Scale(x, s);
  Add(OpCategory::kOther, Now() - t0, 0, double(x.numel()));
}

void ProfilingOps::CopyColumns(const Tensor& x, int64_t groups, int64_t group_stride,
                               int64_t offset, int64_t width, Tensor& out) const {
  const double t0 = Now();
  inner_.CopyColumns(x, groups, group_stride, offset, width, out);
  Add(OpCategory::kOther, Now() - t0, 0, 0);
}

void ProfilingOps::GatherRows(const Tensor& x, std::span<const int64_t> rows, Tensor& out) const {
  const double t0 = Now();
  inner_.GatherRows(x, rows, out);
  Add(OpCategory::kOther, Now() - t0, 0, 0);
}

void ProfilingOps::WriteKvRows(std::span<const Tensor* const> parts, const KvRowsOut& out,
                               std::span<const int64_t> pool_rows) const {
  const double t0 = Now();
  inner_.WriteKvRows(parts, out, pool_rows);
  Add(OpCategory::kOther, Now() - t0, double(pool_rows.size()) * double(out.fmt.row_bytes), 0);
}

void ProfilingOps::TopKRows(const Tensor& scores, std::span<const int64_t> lengths, int64_t k,
                            int32_t offset, Tensor& out) const {
  const double t0 = Now();
  inner_.TopKRows(scores, lengths, k, offset, out);
  double n = 0;
  for (int64_t len : lengths) n += double(len);
  Add(OpCategory::kTopK, Now() - t0, n * sizeof(float), 0);
}

void ProfilingOps::NonFiniteRows(const Tensor& x, Tensor& flags) const {
  const double t0 = Now();
  inner_.NonFiniteRows(x, flags);
  Add(OpCategory::kOther, Now() - t0, 0, 0);
}

void ProfilingOps::SampleRows(const Tensor& logits, std::span<const RowSampling> rows,
                              std::span<const LogitEdit> edits, Tensor& scratch, Tensor& tokens,
                              Tensor& logprobs, Tensor& top_ids) const {
  const double t0 = Now();
  inner_.SampleRows(logits, rows, edits, scratch, tokens, logprobs, top_ids);
  Add(OpCategory::kOther, Now() - t0, static_cast<double>(logits.nbytes()), 0);
}

void ProfilingOps::ApplyTokenBitmask(Tensor& logits, const Tensor& bitmask) const {
  const double t0 = Now();
  inner_.ApplyTokenBitmask(logits, bitmask);
  Add(OpCategory::kOther, Now() - t0, static_cast<double>(2 * logits.nbytes() + bitmask.nbytes()),
      0);
}

}  // namespace lucid
