#include "models/llama_family.h"

#include <cmath>

#include "formats/gguf_config.h"
#include "models/llama_weights.h"
#include "models/rope.h"

namespace lucid {
namespace {

Tensor F32(int64_t rows, int64_t cols) { return Tensor::Empty(DType::kF32, {rows, cols}); }

// One sequence's rows of the step.
struct Span {
  std::span<const int32_t> page_table;
  int64_t begin, count, start_pos;
};

class LlamaModel final : public Model {
 public:
  LlamaModel(ModelConfig c, LlamaWeights w, std::shared_ptr<Backend> backend, RopeStyle style,
             bool qk_norm)
      : c_(std::move(c)),
        w_(std::move(w)),
        backend_(std::move(backend)),
        ops_(backend_->ops()),
        style_(style),
        qk_norm_(qk_norm) {
    spec_ = LlamaKvSpec(c_);
    hd_ = LlamaHeadDim(c_);
    rope_ = MakeRopeTable(c_.rope, hd_);
    for (size_t i = 0; i < w_.rope_freqs.size() && i < rope_.inv_freq.size(); ++i)
      rope_.inv_freq[i] /= w_.rope_freqs[i];
    scale_ = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd_)));
    eps_ = static_cast<float>(c_.rms_norm_eps);
  }

  const ModelConfig& config() const override { return c_; }
  const KvCacheSpec& kv_spec() const override { return spec_; }
  uint64_t weight_bytes() const override { return w_.bytes; }
  Allocator& kv_allocator() const override { return backend_->allocator(); }
  Status Forward(const StepInput& in, KvStorage& kv, StepOutput* out) override {
    return RunStep(ops_, [&] { return Step(in, kv, out); });
  }
  bool SetNumericsCheck(bool on) override {
    check_ = on;
    sites_.clear();
    return true;
  }
  std::vector<std::optional<NonFiniteSite>> LastNonFiniteSites() const override { return sites_; }

 private:
  // Numerics checking: records `op` of `layer` for each span whose rows of t are not all finite
  // and that has no earlier site. No-op unless SetNumericsCheck(true). `rows`, when given, names
  // the step row of each row of t (t holds only those rows, ascending).
  void Check(const Tensor& t, int64_t layer, const char* op, const std::vector<Span>& spans,
             std::span<const int64_t> rows = {});
  StatusOr<std::vector<Span>> Layout(const StepInput& in, const KvStorage& kv) const;
  Status Step(const StepInput& in, KvStorage& kv, StepOutput* out);  // Forward's work
  Tensor Attention(int64_t l, const Tensor& h, const StepInput& in, const std::vector<Span>& spans,
                   KvStorage& pool) const;
  Tensor Mlp(const LlamaLayerWeights& L, const Tensor& h) const;

  ModelConfig c_;
  LlamaWeights w_;
  std::shared_ptr<Backend> backend_;  // shared with whoever made the model
  const Ops& ops_;                    // backend_->ops()
  RopeStyle style_;
  bool qk_norm_;
  KvCacheSpec spec_;
  int64_t hd_ = 0;
  RopeTable rope_;
  float scale_ = 1.0f, eps_ = 1e-6f;
  bool check_ = false;
  std::vector<std::optional<NonFiniteSite>> sites_;  // per span of the last Forward
};

void LlamaModel::Check(const Tensor& t, int64_t layer, const char* op,
                       const std::vector<Span>& spans, std::span<const int64_t> rows) {
  if (!check_) return;
  Tensor flags = Tensor::Empty(DType::kI32, {t.size(0)});
  ops_.NonFiniteRows(t, flags);
  const int32_t* bad = flags.data<const int32_t>();
  size_t next = 0;  // first entry of `rows` not yet below the span
  for (size_t i = 0; i < spans.size(); ++i) {
    int64_t begin = spans[i].begin, count = spans[i].count;  // rows of t holding the span's rows
    if (!rows.empty()) {
      while (next < rows.size() && rows[next] < spans[i].begin) ++next;
      begin = static_cast<int64_t>(next);
      while (next < rows.size() && rows[next] < spans[i].begin + spans[i].count) ++next;
      count = static_cast<int64_t>(next) - begin;
    }
    if (sites_[i]) continue;
    for (int64_t j = 0; j < count; ++j) {
      if (!bad[begin + j]) continue;
      sites_[i] = NonFiniteSite{layer, layer < 0 ? op : "L" + std::to_string(layer) + "." + op};
      break;
    }
  }
}

StatusOr<std::vector<Span>> LlamaModel::Layout(const StepInput& in, const KvStorage& kv) const {
  const int64_t N = in.num_rows();
  if (static_cast<int64_t>(in.positions.size()) != N || N == 0)
    return InvalidArgument("forward: a step needs tokens, and one position per token");
  if (kv.spec().num_layers != spec_.num_layers || kv.spec().latent_dim != spec_.latent_dim ||
      kv.spec().rope_dim != spec_.rope_dim)
    return InvalidArgument("forward: the KV storage was not sized for this model");
  std::vector<Span> spans;
  int64_t next = 0;
  for (const StepSequence& q : in.sequences) {
    if (q.rows <= 0 || q.first_row != next || q.kv_length < 0)
      return InvalidArgument("forward: sequences must cover the rows in order, each at least one");
    if (q.kv_length + q.rows > c_.max_position_embeddings)
      return InvalidArgument("forward: position " + std::to_string(q.kv_length + q.rows - 1) +
                             " is past max_position_embeddings " +
                             std::to_string(c_.max_position_embeddings));
    if (static_cast<int64_t>(q.page_table.size()) * kv.page_size() < q.kv_length + q.rows)
      return FailedPrecondition("forward: KV pages not reserved for the chunk");
    for (int32_t page : q.page_table)
      if (page < 0 || page >= kv.num_pages())
        return InvalidArgument("forward: page id " + std::to_string(page) + " outside the storage");
    for (int64_t r = 0; r < q.rows; ++r)
      if (in.positions[next + r] != q.kv_length + r)
        return InvalidArgument("forward: row " + std::to_string(next + r) + " has position " +
                               std::to_string(in.positions[next + r]) + ", expected " +
                               std::to_string(q.kv_length + r));
    spans.push_back({q.page_table, next, q.rows, q.kv_length});
    next += q.rows;
  }
  if (next != N) return InvalidArgument("forward: sequences must cover every row");
  for (int32_t id : in.tokens)
    if (id < 0 || id >= c_.vocab_size)
      return InvalidArgument("forward: token id " + std::to_string(id) + " outside [0, " +
                             std::to_string(c_.vocab_size) + ")");
  LUCID_RETURN_IF_ERROR(CheckRowList(in.logits_rows, N, "logits_rows"));
  LUCID_RETURN_IF_ERROR(CheckRowList(in.hidden_rows, N, "hidden_rows"));
  return spans;
}

Status LlamaModel::Step(const StepInput& in, KvStorage& kv, StepOutput* out) {
  sites_.clear();
  LUCID_ASSIGN_OR_RETURN(std::vector<Span> spans, Layout(in, kv));
  if (check_) sites_.assign(spans.size(), std::nullopt);
  const int64_t N = in.num_rows(), D = c_.hidden_size;
  Tensor x = F32(N, D), h = F32(N, D);
  ops_.Embedding(w_.embed, in.tokens, x);
  Check(x, -1, "embedding", spans);
  for (int64_t l = 0; l < c_.num_hidden_layers; ++l) {
    const LlamaLayerWeights& L = w_.layers[l];
    ops_.RmsNorm(x, L.input_norm, eps_, h);
    Check(h, l, "attn_norm", spans);
    Tensor attn = Attention(l, h, in, spans, kv);
    Check(attn, l, "attention", spans);
    ops_.Accumulate(x, attn);
    ops_.RmsNorm(x, L.post_attn_norm, eps_, h);
    Check(h, l, "mlp_norm", spans);
    Tensor mlp = Mlp(L, h);
    Check(mlp, l, "mlp", spans);
    ops_.Accumulate(x, mlp);
  }
  ops_.RmsNorm(x, w_.final_norm, eps_, h);
  Check(h, -1, "final_norm", spans);
  auto gather = [&](std::span<const int64_t> rows) {
    Tensor g = F32(static_cast<int64_t>(rows.size()), D);
    ops_.GatherRows(h, rows, g);
    return g;
  };
  // lm_head only over the rows whose logits are used.
  out->logits = F32(static_cast<int64_t>(in.logits_rows.size()), c_.vocab_size);
  if (!in.logits_rows.empty()) {
    const bool every_row = static_cast<int64_t>(in.logits_rows.size()) == N;
    ops_.Linear(every_row ? h : gather(in.logits_rows), w_.lm_head, out->logits);
    Check(out->logits, -1, "lm_head", spans,
          every_row ? std::span<const int64_t>() : in.logits_rows);
  }
  if (static_cast<int64_t>(in.hidden_rows.size()) == N) {
    out->hidden = std::move(h);
  } else {
    out->hidden = in.hidden_rows.empty() ? Tensor() : gather(in.hidden_rows);
  }
  return ops_.Synchronize();
}

Tensor LlamaModel::Attention(int64_t l, const Tensor& h, const StepInput& in,
                             const std::vector<Span>& spans, KvStorage& pool) const {
  const LlamaLayerWeights& L = w_.layers[l];
  const int64_t N = h.size(0), H = c_.num_attention_heads, KVH = c_.num_key_value_heads;
  Tensor q = F32(N, H * hd_), k = F32(N, KVH * hd_), v = F32(N, KVH * hd_);
  {
    const Weight* ws[] = {&L.q, &L.k, &L.v};
    Tensor* ys[] = {&q, &k, &v};
    ops_.LinearMany(h, ws, ys);
  }
  if (qk_norm_) {
    Tensor qh = q.Reshape({N * H, hd_}), kh = k.Reshape({N * KVH, hd_});
    ops_.RmsNorm(qh, L.q_norm, eps_, qh);
    ops_.RmsNorm(kh, L.k_norm, eps_, kh);
  }
  ops_.Rope(q, H, hd_, 0, rope_, in.positions, style_);
  ops_.Rope(k, KVH, hd_, 0, rope_, in.positions, style_);
  std::vector<int64_t> pool_rows;  // each token's KV slot, in row order
  pool_rows.reserve(N);
  for (const Span& sp : spans)
    for (int64_t i = 0; i < sp.count; ++i)
      pool_rows.push_back(pool.PoolRow(sp.page_table, sp.start_pos + i));
  const Tensor* kv_row[] = {&k, &v};  // a cached row is [k | v]
  ops_.WriteKvRows(kv_row, pool.MlaOut(l), pool_rows);
  Tensor attn = F32(N, H * hd_);
  for (const Span& sp : spans) {
    std::vector<int32_t> counts(sp.count);
    for (int64_t i = 0; i < sp.count; ++i) counts[i] = static_cast<int32_t>(sp.start_pos + i + 1);
    GqaAttentionArgs a;
    a.q = q.data<float>() + sp.begin * H * hd_;
    a.tokens = sp.count;
    a.heads = H;
    a.kv_heads = KVH;
    a.head_dim = hd_;
    a.scale = scale_;
    a.kv = pool.MlaRows(l, sp.page_table);
    a.count = counts.data();
    a.out = attn.data<float>() + sp.begin * H * hd_;
    ops_.GqaAttention(a);
  }
  Tensor o = F32(N, c_.hidden_size);
  ops_.Linear(attn, L.o, o);
  return o;
}

Tensor LlamaModel::Mlp(const LlamaLayerWeights& L, const Tensor& h) const {
  const int64_t N = h.size(0);
  Tensor g = F32(N, L.gate.rows), u = F32(N, L.up.rows);
  const Weight* ws[] = {&L.gate, &L.up};
  Tensor* ys[] = {&g, &u};
  ops_.LinearMany(h, ws, ys);
  ops_.SwiGlu(g, u, g);
  Tensor out = F32(N, c_.hidden_size);
  ops_.Linear(g, L.down, out);
  return out;
}

// The config checks and defaults the family needs beyond config.json parsing, and the backend
// check: this family computes in host memory (its activations and weights are not the backend's).
StatusOr<ModelConfig> Prepare(const ModelConfig& in, const Backend& backend) {
  if (backend.device() != Device::kCpu)
    return Unimplemented("the llama family (" + in.model_type + ") runs on the cpu backend only, " +
                         "not on " + backend.name());
  ModelConfig c = in;
  if (c.model_type == "qwen2")
    return Unimplemented(
        "model_type qwen2 is not supported: its q/k/v projections carry biases, "
        "which lucid's ops do not add");
  if (c.max_position_embeddings == 0) c.max_position_embeddings = 2048;  // LlamaConfig's default
  auto need = [](bool ok, const std::string& what) {
    return ok ? OkStatus() : InvalidArgument("config.json: " + what);
  };
  LUCID_RETURN_IF_ERROR(need(
      c.vocab_size > 0 && c.hidden_size > 0 && c.num_hidden_layers > 0 && c.intermediate_size > 0,
      "vocab_size, hidden_size, intermediate_size and num_hidden_layers "
      "must be positive"));
  LUCID_RETURN_IF_ERROR(need(c.num_attention_heads > 0 && c.num_key_value_heads > 0 &&
                                 c.num_attention_heads % c.num_key_value_heads == 0,
                             "num_attention_heads must be a positive multiple of "
                             "num_key_value_heads"));
  const int64_t hd = LlamaHeadDim(c);
  LUCID_RETURN_IF_ERROR(need(hd > 0 && hd % 2 == 0, "head_dim must be positive and even"));
  LUCID_RETURN_IF_ERROR(
      need(c.rope.type != "yarn", "rope type yarn is not supported for the Llama family"));
  LUCID_RETURN_IF_ERROR(
      need(c.hidden_act == "silu", "hidden_act \"" + c.hidden_act + "\" is not supported (silu)"));
  return c;
}

}  // namespace

int64_t LlamaHeadDim(const ModelConfig& c) {
  const auto it = c.raw.find("head_dim");
  if (it != c.raw.end() && it->is_number_integer()) return it->get<int64_t>();
  return c.num_attention_heads > 0 ? c.hidden_size / c.num_attention_heads : 0;
}

KvCacheSpec LlamaKvSpec(const ModelConfig& c) {
  KvCacheSpec s;
  s.num_layers = c.num_hidden_layers;
  s.latent_dim = c.num_key_value_heads * LlamaHeadDim(c);
  s.rope_dim = s.latent_dim;
  return s;
}

StatusOr<std::unique_ptr<Model>> CreateLlamaFamily(const ModelConfig& config,
                                                   const Checkpoint& ckpt,
                                                   std::shared_ptr<Backend> backend,
                                                   const ModelLoadOptions& options) {
  LUCID_ASSIGN_OR_RETURN(ModelConfig c, Prepare(config, *backend));
  const bool qk_norm = c.model_type == "qwen3";
  LUCID_ASSIGN_OR_RETURN(LlamaWeights w, LoadLlamaWeights(c, ckpt, qk_norm));
  return std::unique_ptr<Model>(new LlamaModel(std::move(c), std::move(w), std::move(backend),
                                               RopeStyle::kHalfSplit, qk_norm));
}

StatusOr<std::unique_ptr<Model>> CreateLlamaFamilyFromGguf(const ModelConfig& config,
                                                           std::shared_ptr<const GgufFile> file,
                                                           std::shared_ptr<Backend> backend,
                                                           const ModelLoadOptions& options) {
  LUCID_ASSIGN_OR_RETURN(ModelConfig c, Prepare(config, *backend));
  const bool qk_norm = c.model_type == "qwen3";
  LUCID_ASSIGN_OR_RETURN(LlamaWeights w, LoadLlamaWeights(c, *file, qk_norm));
  const RopeStyle style = QkRopeLayout(c.model_type) == RopeLayout::kInterleaved
                              ? RopeStyle::kInterleaved
                              : RopeStyle::kHalfSplit;
  return std::unique_ptr<Model>(
      new LlamaModel(std::move(c), std::move(w), std::move(backend), style, qk_norm));
}

}  // namespace lucid
