#include "models/deepseek_v3_weights.h"

#include <string>

namespace lucid {
namespace {

class Binder {
 public:
  explicit Binder(const Checkpoint& ckpt) : ckpt_(ckpt) {}

  StatusOr<Weight> Matrix(const std::string& name, int64_t rows, int64_t cols) {
    LUCID_ASSIGN_OR_RETURN(Tensor t, ckpt_.GetWithShape(name, {rows, cols}));
    Weight w;
    w.name = name;
    w.rows = rows;
    w.cols = cols;
    switch (t.dtype()) {
      case DType::kF32: w.format = WeightFormat::kF32; break;
      case DType::kBF16: w.format = WeightFormat::kBF16; break;
      default:
        return Unimplemented("tensor " + name + " has dtype " + DTypeName(t.dtype()) +
                             "; only f32 and bf16 weights are supported by this build");
    }
    bytes_ += t.nbytes();
    w.data = std::move(t);
    return w;
  }

  StatusOr<Tensor> Vector(const std::string& name, int64_t n) {
    LUCID_ASSIGN_OR_RETURN(Tensor t, ckpt_.GetWithShape(name, {n}));
    if (t.dtype() != DType::kF32 && t.dtype() != DType::kBF16)
      return Unimplemented("tensor " + name + " has dtype " + DTypeName(t.dtype()) +
                           "; norm weights must be f32 or bf16");
    bytes_ += t.nbytes();
    return t;
  }

  uint64_t bytes() const { return bytes_; }

 private:
  const Checkpoint& ckpt_;
  uint64_t bytes_ = 0;
};

Status BindMlp(Binder& b, const std::string& p, int64_t D, int64_t I, MlpWeights* m) {
  LUCID_ASSIGN_OR_RETURN(m->gate, b.Matrix(p + "gate_proj.weight", I, D));
  LUCID_ASSIGN_OR_RETURN(m->up, b.Matrix(p + "up_proj.weight", I, D));
  LUCID_ASSIGN_OR_RETURN(m->down, b.Matrix(p + "down_proj.weight", D, I));
  return OkStatus();
}

Status BindAttention(Binder& b, const ModelConfig& c, const std::string& p, bool indexer,
                     LayerWeights* L) {
  const int64_t D = c.hidden_size, H = c.num_attention_heads, Rq = c.q_lora_rank;
  const int64_t Rkv = c.kv_lora_rank, dr = c.qk_rope_head_dim;
  MlaWeights& a = L->attn;
  if (Rq > 0) {
    LUCID_ASSIGN_OR_RETURN(a.q_a, b.Matrix(p + "q_a_proj.weight", Rq, D));
    LUCID_ASSIGN_OR_RETURN(a.q_a_norm, b.Vector(p + "q_a_layernorm.weight", Rq));
    LUCID_ASSIGN_OR_RETURN(a.q_b, b.Matrix(p + "q_b_proj.weight", H * c.qk_head_dim(), Rq));
  } else {
    LUCID_ASSIGN_OR_RETURN(a.q_proj, b.Matrix(p + "q_proj.weight", H * c.qk_head_dim(), D));
  }
  LUCID_ASSIGN_OR_RETURN(a.kv_a, b.Matrix(p + "kv_a_proj_with_mqa.weight", Rkv + dr, D));
  LUCID_ASSIGN_OR_RETURN(a.kv_a_norm, b.Vector(p + "kv_a_layernorm.weight", Rkv));
  LUCID_ASSIGN_OR_RETURN(
      a.kv_b, b.Matrix(p + "kv_b_proj.weight", H * (c.qk_nope_head_dim + c.v_head_dim), Rkv));
  LUCID_ASSIGN_OR_RETURN(a.o, b.Matrix(p + "o_proj.weight", D, H * c.v_head_dim));
  if (!indexer) return OkStatus();
  if (Rq <= 0) return InvalidArgument("the DSA indexer needs q_lora_rank > 0");
  IndexerWeights& x = L->indexer;
  const std::string q = p + "indexer.";
  x.present = true;
  LUCID_ASSIGN_OR_RETURN(x.wq_b, b.Matrix(q + "wq_b.weight", c.index_n_heads * c.index_head_dim, Rq));
  LUCID_ASSIGN_OR_RETURN(x.wk, b.Matrix(q + "wk.weight", c.index_head_dim, D));
  LUCID_ASSIGN_OR_RETURN(x.k_norm_w, b.Vector(q + "k_norm.weight", c.index_head_dim));
  LUCID_ASSIGN_OR_RETURN(x.k_norm_b, b.Vector(q + "k_norm.bias", c.index_head_dim));
  LUCID_ASSIGN_OR_RETURN(x.weights_proj, b.Matrix(q + "weights_proj.weight", c.index_n_heads, D));
  return OkStatus();
}

Status BindMoe(Binder& b, const ModelConfig& c, const std::string& p, MoeWeights* m) {
  const int64_t D = c.hidden_size, E = c.n_routed_experts, I = c.moe_intermediate_size;
  LUCID_ASSIGN_OR_RETURN(m->router, b.Matrix(p + "gate.weight", E, D));
  LUCID_ASSIGN_OR_RETURN(Tensor bias, b.Vector(p + "gate.e_score_correction_bias", E));
  m->router_bias.resize(E);
  ConvertToF32(bias.dtype(), bias.raw(), m->router_bias.data(), E);
  m->experts.resize(E);
  for (int64_t e = 0; e < E; ++e) {
    MlpWeights w;
    LUCID_RETURN_IF_ERROR(BindMlp(b, p + "experts." + std::to_string(e) + ".", D, I, &w));
    m->experts[e] = ExpertWeights{w.gate, w.up, w.down};
  }
  if (c.n_shared_experts > 0)
    LUCID_RETURN_IF_ERROR(BindMlp(b, p + "shared_experts.", D, I * c.n_shared_experts, &m->shared));
  return OkStatus();
}

}  // namespace

StatusOr<DeepseekV3Weights> LoadDeepseekV3Weights(const ModelConfig& c, const Checkpoint& ckpt) {
  Binder b(ckpt);
  DeepseekV3Weights w;
  const int64_t D = c.hidden_size;
  LUCID_ASSIGN_OR_RETURN(w.embed, b.Matrix("model.embed_tokens.weight", c.vocab_size, D));
  LUCID_ASSIGN_OR_RETURN(w.final_norm, b.Vector("model.norm.weight", D));
  if (c.tie_word_embeddings && !ckpt.Has("lm_head.weight")) {
    w.lm_head = w.embed;
  } else {
    LUCID_ASSIGN_OR_RETURN(w.lm_head, b.Matrix("lm_head.weight", c.vocab_size, D));
  }
  w.layers.resize(c.num_hidden_layers);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    LayerWeights& L = w.layers[l];
    LUCID_ASSIGN_OR_RETURN(L.input_norm, b.Vector(p + "input_layernorm.weight", D));
    LUCID_ASSIGN_OR_RETURN(L.post_attn_norm, b.Vector(p + "post_attention_layernorm.weight", D));
    LUCID_RETURN_IF_ERROR(
        BindAttention(b, c, p + "self_attn.", c.has_indexer && c.layer_runs_indexer[l], &L));
    L.is_moe = c.layer_is_moe[l];
    if (L.is_moe) {
      LUCID_RETURN_IF_ERROR(BindMoe(b, c, p + "mlp.", &L.moe));
    } else {
      LUCID_RETURN_IF_ERROR(BindMlp(b, p + "mlp.", D, c.intermediate_size, &L.dense));
    }
  }
  w.bytes = b.bytes();
  return w;
}

}  // namespace lucid
