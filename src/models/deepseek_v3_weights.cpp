#include "models/deepseek_v3_weights.h"

#include <cmath>
#include <map>
#include <string>

#include "formats/deepseek_v3_tensors.h"
#include "formats/quant_config.h"
#include "models/deepseek_v3_gguf.h"

namespace lucid {
namespace {

std::string Shp(const Shape& s) { return ShapeToString(s); }

// Binds checkpoint tensors to Weights, checking each against the quantization metadata: a module
// the metadata says is quantized must carry exactly the packed tensors of its format (dtype and
// shape), and a module it says is not must carry none. Packed tensors are borrowed from the
// mapping, never converted.
// Shapes come from the family's tensor table (formats/deepseek_v3_tensors.h), the one place that
// states them.
// A GGUF file binds through DeepseekGgufTensors instead (no quantization metadata: each tensor's
// ggml type says how it is stored).
class Binder {
 public:
  Binder(const Checkpoint& ckpt, const QuantConfig& q, const ModelConfig& c) : ckpt_(&ckpt), q_(q) {
    for (const TensorSpec& t : DeepseekV3Tensors(c)) shapes_[t.name] = t.shape;
  }
  Binder(const DeepseekGgufTensors& gguf, const QuantConfig& none, const ModelConfig& c)
      : gguf_(&gguf), q_(none) {
    for (const TensorSpec& t : DeepseekV3Tensors(c)) shapes_[t.name] = t.shape;
  }

  bool Has(const std::string& name) const {
    return gguf_ != nullptr ? gguf_->Has(name) : ckpt_->Has(name);
  }

  StatusOr<Weight> Matrix(const std::string& name, bool embedding = false) {
    LUCID_ASSIGN_OR_RETURN(const Shape shape, TableShape(name, 2));
    const int64_t rows = shape[0], cols = shape[1];
    if (gguf_ != nullptr) {
      LUCID_ASSIGN_OR_RETURN(Weight w, gguf_->Matrix(name, rows, cols));
      bytes_ += w.StoredBytes();
      return w;
    }
    const std::string module = name.substr(0, name.size() - std::string(".weight").size());
    std::string pattern;
    const QuantScheme want = q_.SchemeFor(module, embedding, &pattern);
    Weight w;
    w.name = name;
    w.rows = rows;
    w.cols = cols;
    if (want == QuantScheme::kNvfp4) {
      LUCID_RETURN_IF_ERROR(BindNvfp4(module, &w));
    } else if (want == QuantScheme::kFp8Block) {
      LUCID_RETURN_IF_ERROR(BindFp8(module, &w));
    } else {
      LUCID_RETURN_IF_ERROR(BindDense(module, pattern, &w));
    }
    bytes_ += w.StoredBytes();
    return w;
  }

  StatusOr<Tensor> Vector(const std::string& name) {
    LUCID_ASSIGN_OR_RETURN(const Shape shape, TableShape(name, 1));
    if (gguf_ != nullptr) {
      LUCID_ASSIGN_OR_RETURN(Tensor t, gguf_->Vector(name, shape[0]));
      bytes_ += t.nbytes();
      return t;
    }
    LUCID_ASSIGN_OR_RETURN(Tensor t, ckpt_->GetWithShape(name, shape));
    if (t.dtype() != DType::kF32 && t.dtype() != DType::kBF16)
      return Unimplemented("tensor " + name + " has dtype " + DTypeName(t.dtype()) +
                           "; norm weights must be f32 or bf16");
    bytes_ += t.nbytes();
    return t;
  }

  uint64_t bytes() const { return bytes_; }

 private:
  StatusOr<Shape> TableShape(const std::string& name, size_t rank) const {
    auto it = shapes_.find(name);
    if (it == shapes_.end() || it->second.size() != rank)
      return Internal("the binder asks for " + name +
                      ", which the tensor table does not list with rank " + std::to_string(rank) +
                      " for this config");
    return it->second;
  }

  Status Mismatch(const std::string& tensor, const std::string& expected,
                  const std::string& found) const {
    return InvalidArgument("tensor " + tensor + ": the quantization metadata (" + q_.Describe() +
                           ") expects " + expected + "; found " + found);
  }

  std::string Found(const std::string& name) const {
    auto info = ckpt_->Info(name);
    if (!info.ok()) return "no such tensor";
    return std::string(DTypeName(info->dtype)) + " " + Shp(info->shape) + " in " + info->file;
  }

  // `name` must exist with exactly this dtype and shape.
  StatusOr<Tensor> Expect(const std::string& name, DType dtype, const Shape& shape,
                          const std::string& why) {
    auto info = ckpt_->Info(name);
    if (!info.ok() || info->dtype != dtype || info->shape != shape)
      return Mismatch(name, std::string(DTypeName(dtype)) + " " + Shp(shape) + " (" + why + ")",
                      Found(name));
    return ckpt_->Get(name);
  }

  StatusOr<Tensor> ExpectScalar(const std::string& name, const std::string& why) {
    auto info = ckpt_->Info(name);
    if (!info.ok() || info->dtype != DType::kF32 || NumElements(info->shape) != 1 ||
        info->shape.size() > 1)
      return Mismatch(name, "an f32 scalar (" + why + ")", Found(name));
    return ckpt_->Get(name);
  }

  Status BindNvfp4(const std::string& m, Weight* w) {
    const int64_t g = q_.group_size, groups = (w->cols + g - 1) / g;
    w->format = WeightFormat::kNvfp4;
    w->block_rows = 1;
    w->block_cols = g;
    LUCID_ASSIGN_OR_RETURN(w->data, Expect(m + ".weight", DType::kU8, {w->rows, groups * g / 2},
                                           "NVFP4: two e2m1 per byte"));
    LUCID_ASSIGN_OR_RETURN(w->scale, Expect(m + ".weight_scale", DType::kF8E4M3, {w->rows, groups},
                                            "NVFP4: one e4m3 scale per 16 weights"));
    LUCID_ASSIGN_OR_RETURN(w->scale2, ExpectScalar(m + ".weight_scale_2", "NVFP4 global scale"));
    const float s2 = *w->scale2.data<const float>();
    if (!(s2 > 0.0f) || !std::isfinite(s2))
      return Mismatch(m + ".weight_scale_2", "a positive finite scale", std::to_string(s2));
    if (ckpt_->Has(m + ".input_scale"))
      LUCID_RETURN_IF_ERROR(ExpectScalar(m + ".input_scale", "NVFP4 activation scale").status());
    return OkStatus();
  }

  Status BindFp8(const std::string& m, Weight* w) {
    const int64_t br = q_.block_rows, bc = q_.block_cols;
    const Shape sshape = {(w->rows + br - 1) / br, (w->cols + bc - 1) / bc};
    w->format = WeightFormat::kFp8Block;
    w->block_rows = br;
    w->block_cols = bc;
    LUCID_ASSIGN_OR_RETURN(
        w->data, Expect(m + ".weight", DType::kF8E4M3, {w->rows, w->cols}, "FP8 block weight"));
    const std::string sn = m + ".weight_scale_inv";
    auto info = ckpt_->Info(sn);
    if (!info.ok() || (info->dtype != DType::kF32 && info->dtype != DType::kUE8M0) ||
        info->shape != sshape)
      return Mismatch(sn,
                      "f32 or ue8m0 " + Shp(sshape) + " (one scale per " + std::to_string(br) +
                          "x" + std::to_string(bc) + " block)",
                      Found(sn));
    LUCID_ASSIGN_OR_RETURN(w->scale, ckpt_->Get(sn));
    if (q_.ue8m0_scales && w->scale.dtype() == DType::kF32) {
      for (int64_t i = 0; i < w->scale.numel(); ++i) {
        const float v = w->scale.data<const float>()[i];
        int e = 0;
        if (!(v > 0.0f) || !std::isfinite(v) || std::frexp(v, &e) != 0.5f)
          return Mismatch(sn, "powers of two (scale_fmt ue8m0)",
                          "value " + std::to_string(v) + " at index " + std::to_string(i));
      }
    }
    return OkStatus();
  }

  Status BindDense(const std::string& m, const std::string& pattern, Weight* w) {
    const std::string name = m + ".weight";
    for (const char* extra : {".weight_scale", ".weight_scale_inv", ".weight_scale_2"}) {
      if (q_.scheme != QuantScheme::kNone && ckpt_->Has(m + extra))
        return Mismatch(m + extra,
                        "no quantization scales for " + m + " (" +
                            (pattern.empty() ? std::string("not a quantized Linear")
                                             : "excluded by \"" + pattern + "\"") +
                            ")",
                        "a scale tensor");
    }
    LUCID_ASSIGN_OR_RETURN(Tensor t, ckpt_->GetWithShape(name, {w->rows, w->cols}));
    switch (t.dtype()) {
      case DType::kF32:
        w->format = WeightFormat::kF32;
        break;
      case DType::kBF16:
        w->format = WeightFormat::kBF16;
        break;
      default:
        if (q_.scheme != QuantScheme::kNone)
          return Mismatch(name,
                          "f32 or bf16 (" + m +
                              (pattern.empty() ? std::string(" is not quantized")
                                               : " is excluded by \"" + pattern + "\"") +
                              ")",
                          Found(name));
        return Unimplemented("tensor " + name + " has dtype " + DTypeName(t.dtype()) +
                             " but the checkpoint has no quantization metadata; only f32 and bf16 "
                             "weights are supported without it");
    }
    w->data = std::move(t);
    return OkStatus();
  }

  const Checkpoint* ckpt_ = nullptr;
  const DeepseekGgufTensors* gguf_ = nullptr;
  const QuantConfig& q_;
  std::map<std::string, Shape> shapes_;
  uint64_t bytes_ = 0;
};

Status BindMlp(Binder& b, const std::string& p, MlpWeights* m) {
  LUCID_ASSIGN_OR_RETURN(m->gate, b.Matrix(p + "gate_proj.weight"));
  LUCID_ASSIGN_OR_RETURN(m->up, b.Matrix(p + "up_proj.weight"));
  LUCID_ASSIGN_OR_RETURN(m->down, b.Matrix(p + "down_proj.weight"));
  return OkStatus();
}

Status BindAttention(Binder& b, const ModelConfig& c, const std::string& p, bool indexer,
                     LayerWeights* L) {
  const int64_t Rq = c.q_lora_rank;
  MlaWeights& a = L->attn;
  if (Rq > 0) {
    LUCID_ASSIGN_OR_RETURN(a.q_a, b.Matrix(p + "q_a_proj.weight"));
    LUCID_ASSIGN_OR_RETURN(a.q_a_norm, b.Vector(p + "q_a_layernorm.weight"));
    LUCID_ASSIGN_OR_RETURN(a.q_b, b.Matrix(p + "q_b_proj.weight"));
  } else {
    LUCID_ASSIGN_OR_RETURN(a.q_proj, b.Matrix(p + "q_proj.weight"));
  }
  LUCID_ASSIGN_OR_RETURN(a.kv_a, b.Matrix(p + "kv_a_proj_with_mqa.weight"));
  LUCID_ASSIGN_OR_RETURN(a.kv_a_norm, b.Vector(p + "kv_a_layernorm.weight"));
  LUCID_ASSIGN_OR_RETURN(a.kv_b, b.Matrix(p + "kv_b_proj.weight"));
  LUCID_ASSIGN_OR_RETURN(a.o, b.Matrix(p + "o_proj.weight"));
  if (!indexer) return OkStatus();
  if (Rq <= 0) return InvalidArgument("the DSA indexer needs q_lora_rank > 0");
  IndexerWeights& x = L->indexer;
  const std::string q = p + "indexer.";
  x.present = true;
  LUCID_ASSIGN_OR_RETURN(x.wq_b, b.Matrix(q + "wq_b.weight"));
  LUCID_ASSIGN_OR_RETURN(x.wk, b.Matrix(q + "wk.weight"));
  LUCID_ASSIGN_OR_RETURN(x.k_norm_w, b.Vector(q + "k_norm.weight"));
  LUCID_ASSIGN_OR_RETURN(x.k_norm_b, b.Vector(q + "k_norm.bias"));
  LUCID_ASSIGN_OR_RETURN(x.weights_proj, b.Matrix(q + "weights_proj.weight"));
  return OkStatus();
}

Status BindMoe(Binder& b, const ModelConfig& c, const std::string& p, MoeWeights* m) {
  const int64_t E = c.n_routed_experts;
  LUCID_ASSIGN_OR_RETURN(m->router, b.Matrix(p + "gate.weight"));
  LUCID_ASSIGN_OR_RETURN(Tensor bias, b.Vector(p + "gate.e_score_correction_bias"));
  m->router_bias = Tensor::Empty(DType::kF32, {E});
  ConvertToF32(bias.dtype(), bias.raw(), m->router_bias.data<float>(), E);
  m->experts.resize(E);
  for (int64_t e = 0; e < E; ++e) {
    MlpWeights w;
    LUCID_RETURN_IF_ERROR(BindMlp(b, p + "experts." + std::to_string(e) + ".", &w));
    m->experts[e] = ExpertWeights{w.gate, w.up, w.down};
  }
  if (c.n_shared_experts > 0) LUCID_RETURN_IF_ERROR(BindMlp(b, p + "shared_experts.", &m->shared));
  return OkStatus();
}

StatusOr<DeepseekV3Weights> BindAll(const ModelConfig& c, Binder& b) {
  DeepseekV3Weights w;
  LUCID_ASSIGN_OR_RETURN(w.embed, b.Matrix("model.embed_tokens.weight", /*embedding=*/true));
  LUCID_ASSIGN_OR_RETURN(w.final_norm, b.Vector("model.norm.weight"));
  if (c.tie_word_embeddings && !b.Has("lm_head.weight")) {
    w.lm_head = w.embed;
  } else {
    LUCID_ASSIGN_OR_RETURN(w.lm_head, b.Matrix("lm_head.weight"));
  }
  w.layers.resize(c.num_hidden_layers);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    LayerWeights& L = w.layers[l];
    LUCID_ASSIGN_OR_RETURN(L.input_norm, b.Vector(p + "input_layernorm.weight"));
    LUCID_ASSIGN_OR_RETURN(L.post_attn_norm, b.Vector(p + "post_attention_layernorm.weight"));
    LUCID_RETURN_IF_ERROR(
        BindAttention(b, c, p + "self_attn.", c.has_indexer && c.layer_runs_indexer[l], &L));
    L.is_moe = c.layer_is_moe[l];
    if (L.is_moe) {
      LUCID_RETURN_IF_ERROR(BindMoe(b, c, p + "mlp.", &L.moe));
    } else {
      LUCID_RETURN_IF_ERROR(BindMlp(b, p + "mlp.", &L.dense));
    }
  }
  w.bytes = b.bytes();
  return w;
}

}  // namespace

StatusOr<DeepseekV3Weights> LoadDeepseekV3Weights(const ModelConfig& c, const Checkpoint& ckpt) {
  LUCID_ASSIGN_OR_RETURN(QuantConfig q, LoadQuantConfig(ckpt.dir(), c.raw));
  return LoadDeepseekV3Weights(c, ckpt, q);
}

StatusOr<DeepseekV3Weights> LoadDeepseekV3Weights(const ModelConfig& c, const Checkpoint& ckpt,
                                                  const QuantConfig& q) {
  if (q.scheme != QuantScheme::kNone) {
    const std::vector<std::string> unmatched = q.UnmatchedExcludes(ckpt.Names());
    if (!unmatched.empty())
      return InvalidArgument("the quantization metadata (" + q.Describe() + ") excludes \"" +
                             unmatched[0] +
                             "\", which names no tensor of the checkpoint: the metadata does not "
                             "belong to these weights");
  }
  Binder b(ckpt, q, c);
  return BindAll(c, b);
}

StatusOr<DeepseekV3Weights> LoadDeepseekV3Weights(const ModelConfig& c,
                                                  std::shared_ptr<const GgufFile> file) {
  const DeepseekGgufTensors tensors(std::move(file), c);
  static const QuantConfig kNone;
  Binder b(tensors, kNone, c);
  return BindAll(c, b);
}

}  // namespace lucid
