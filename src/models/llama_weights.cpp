#include "models/llama_weights.h"

#include <map>
#include <string>

#include "formats/gguf_config.h"
#include "models/gguf_weights.h"
#include "models/llama_family.h"

namespace lucid {
namespace {

// Tensors by Hugging Face name, whatever the file format.
class Source {
 public:
  virtual ~Source() = default;
  virtual bool Has(const std::string& name) const = 0;
  // A [rows, cols] linear weight (or embedding table).
  virtual StatusOr<Weight> Matrix(const std::string& name, int64_t rows, int64_t cols) const = 0;
  // An f32 or bf16 vector of n values.
  virtual StatusOr<Tensor> Vector(const std::string& name, int64_t n) const = 0;
};

Status CheckNormDtype(const std::string& name, const Tensor& t) {
  if (t.dtype() != DType::kF32 && t.dtype() != DType::kBF16)
    return Unimplemented("tensor " + name + " has dtype " + DTypeName(t.dtype()) +
                         "; norm weights must be f32 or bf16");
  return OkStatus();
}

class SafetensorsSource final : public Source {
 public:
  explicit SafetensorsSource(const Checkpoint& ckpt) : ckpt_(ckpt) {}
  bool Has(const std::string& name) const override { return ckpt_.Has(name); }
  StatusOr<Weight> Matrix(const std::string& name, int64_t rows, int64_t cols) const override {
    LUCID_ASSIGN_OR_RETURN(Tensor t, ckpt_.GetWithShape(name, {rows, cols}));
    Weight w;
    w.name = name;
    w.rows = rows;
    w.cols = cols;
    if (t.dtype() == DType::kF32) {
      w.format = WeightFormat::kF32;
    } else if (t.dtype() == DType::kBF16) {
      w.format = WeightFormat::kBF16;
    } else {
      return Unimplemented("tensor " + name + " has dtype " + DTypeName(t.dtype()) +
                           "; the Llama family reads f32 or bf16 safetensors weights");
    }
    w.data = t;
    return w;
  }
  StatusOr<Tensor> Vector(const std::string& name, int64_t n) const override {
    LUCID_ASSIGN_OR_RETURN(Tensor t, ckpt_.GetWithShape(name, {n}));
    LUCID_RETURN_IF_ERROR(CheckNormDtype(name, t));
    return t;
  }

 private:
  const Checkpoint& ckpt_;
};

class GgufSource final : public Source {
 public:
  explicit GgufSource(const GgufFile& file) : file_(file) {
    for (const auto& [name, info] : file.tensors())
      if (auto hf = HfTensorName(name)) names_[*hf] = name;
  }
  bool Has(const std::string& name) const override { return names_.count(name) != 0; }
  StatusOr<Weight> Matrix(const std::string& name, int64_t rows, int64_t cols) const override {
    LUCID_ASSIGN_OR_RETURN(std::string g, GgufName(name));
    LUCID_ASSIGN_OR_RETURN(Weight w, WeightFromGguf(file_, g));
    if (w.rows != rows || w.cols != cols)
      return InvalidArgument(file_.path() + ": tensor " + g + " (" + name + ") has shape [" +
                             std::to_string(w.rows) + ", " + std::to_string(w.cols) +
                             "], expected [" + std::to_string(rows) + ", " + std::to_string(cols) +
                             "]");
    w.name = g;
    return w;
  }
  StatusOr<Tensor> Vector(const std::string& name, int64_t n) const override {
    LUCID_ASSIGN_OR_RETURN(std::string g, GgufName(name));
    LUCID_ASSIGN_OR_RETURN(Tensor t, file_.Get(g));
    if (t.shape() != Shape{n})
      return InvalidArgument(file_.path() + ": tensor " + g + " has shape " +
                             ShapeToString(t.shape()) + ", expected [" + std::to_string(n) + "]");
    LUCID_RETURN_IF_ERROR(CheckNormDtype(g, t));
    return t;
  }

 private:
  StatusOr<std::string> GgufName(const std::string& name) const {
    auto it = names_.find(name);
    if (it == names_.end())
      return NotFound(file_.path() + ": no tensor for " + name + " (GGUF names as gguf's table)");
    return it->second;
  }
  const GgufFile& file_;
  std::map<std::string, std::string> names_;  // HF name -> GGUF name
};

StatusOr<LlamaWeights> Bind(const ModelConfig& c, const Source& src, bool qk_norm) {
  LlamaWeights w;
  const int64_t D = c.hidden_size, V = c.vocab_size, I = c.intermediate_size;
  const int64_t hd = LlamaHeadDim(c), H = c.num_attention_heads, KVH = c.num_key_value_heads;
  auto count = [&](const Weight& m) { w.bytes += m.StoredBytes(); };
  auto matrix = [&](const std::string& n, int64_t r, int64_t k, Weight* out) -> Status {
    LUCID_ASSIGN_OR_RETURN(*out, src.Matrix(n, r, k));
    count(*out);
    return OkStatus();
  };
  auto vector = [&](const std::string& n, int64_t k, Tensor* out) -> Status {
    LUCID_ASSIGN_OR_RETURN(*out, src.Vector(n, k));
    w.bytes += out->nbytes();
    return OkStatus();
  };
  LUCID_RETURN_IF_ERROR(matrix("model.embed_tokens.weight", V, D, &w.embed));
  LUCID_RETURN_IF_ERROR(vector("model.norm.weight", D, &w.final_norm));
  if (c.tie_word_embeddings && !src.Has("lm_head.weight")) {
    w.lm_head = w.embed;
  } else {
    LUCID_RETURN_IF_ERROR(matrix("lm_head.weight", V, D, &w.lm_head));
  }
  w.layers.resize(c.num_hidden_layers);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    LlamaLayerWeights& L = w.layers[l];
    for (const char* b : {"q_proj", "k_proj", "v_proj"})
      if (src.Has(p + "self_attn." + b + ".bias"))
        return Unimplemented("tensor " + p + "self_attn." + b +
                             ".bias: attention biases are not supported (no bias add in the ops)");
    LUCID_RETURN_IF_ERROR(vector(p + "input_layernorm.weight", D, &L.input_norm));
    LUCID_RETURN_IF_ERROR(vector(p + "post_attention_layernorm.weight", D, &L.post_attn_norm));
    LUCID_RETURN_IF_ERROR(matrix(p + "self_attn.q_proj.weight", H * hd, D, &L.q));
    LUCID_RETURN_IF_ERROR(matrix(p + "self_attn.k_proj.weight", KVH * hd, D, &L.k));
    LUCID_RETURN_IF_ERROR(matrix(p + "self_attn.v_proj.weight", KVH * hd, D, &L.v));
    LUCID_RETURN_IF_ERROR(matrix(p + "self_attn.o_proj.weight", D, H * hd, &L.o));
    if (qk_norm) {
      LUCID_RETURN_IF_ERROR(vector(p + "self_attn.q_norm.weight", hd, &L.q_norm));
      LUCID_RETURN_IF_ERROR(vector(p + "self_attn.k_norm.weight", hd, &L.k_norm));
    }
    LUCID_RETURN_IF_ERROR(matrix(p + "mlp.gate_proj.weight", I, D, &L.gate));
    LUCID_RETURN_IF_ERROR(matrix(p + "mlp.up_proj.weight", I, D, &L.up));
    LUCID_RETURN_IF_ERROR(matrix(p + "mlp.down_proj.weight", D, I, &L.down));
  }
  return w;
}

}  // namespace

StatusOr<LlamaWeights> LoadLlamaWeights(const ModelConfig& c, const Checkpoint& ckpt,
                                        bool qk_norm) {
  return Bind(c, SafetensorsSource(ckpt), qk_norm);
}

StatusOr<LlamaWeights> LoadLlamaWeights(const ModelConfig& c, const GgufFile& file, bool qk_norm) {
  LUCID_ASSIGN_OR_RETURN(LlamaWeights w, Bind(c, GgufSource(file), qk_norm));
  if (file.tensors().count("rope_freqs.weight")) {
    const int64_t half = LlamaHeadDim(c) / 2;
    LUCID_ASSIGN_OR_RETURN(Tensor t, file.Get("rope_freqs.weight"));
    if (t.dtype() != DType::kF32 || t.shape() != Shape{half})
      return InvalidArgument(file.path() + ": rope_freqs.weight must be f32 [" +
                             std::to_string(half) + "], found " + DTypeName(t.dtype()) + " " +
                             ShapeToString(t.shape()));
    w.rope_freqs.assign(t.data<const float>(), t.data<const float>() + half);
  }
  return w;
}

}  // namespace lucid
