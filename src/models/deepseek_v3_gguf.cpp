#include "models/deepseek_v3_gguf.h"

#include <regex>
#include <vector>

#include "formats/gguf_config.h"
#include "models/gguf_weights.h"

namespace lucid {
namespace {

std::string Dims(const std::vector<int64_t>& d) {
  std::string s = "{";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "}";
}

// Decodes row `row` of a tensor whose rows are dims[0] long.
Status DecodeRow(const GgufFile& f, const GgufTensorInfo& t, int64_t row, float* out) {
  if (!IsSupported(t.type))
    return Unimplemented(f.path() + ": tensor " + t.name + " has ggml type " +
                         GgmlTypeName(t.type) + ", which lucid does not decode");
  const int64_t n = t.dims[0];
  DequantizeGgmlRowSpan(t.type, f.TensorData(t) + row * GgmlRowBytes(t.type, n), 0, n, out);
  return OkStatus();
}

}  // namespace

DeepseekGgufTensors::DeepseekGgufTensors(std::shared_ptr<const GgufFile> file, const ModelConfig& c)
    : file_(std::move(file)),
      heads_(c.num_attention_heads),
      nope_(c.qk_nope_head_dim),
      v_(c.v_head_dim) {
  for (const auto& [name, info] : file_->tensors())
    if (auto hf = DeepseekHfTensorName(name)) names_[*hf] = name;
}

StatusOr<std::string> DeepseekGgufTensors::GgufName(const std::string& hf) const {
  auto it = names_.find(hf);
  if (it == names_.end())
    return NotFound(file_->path() + ": no tensor for " + hf + " (GGUF names as llama.cpp's)");
  return it->second;
}

bool DeepseekGgufTensors::Has(const std::string& hf) const {
  if (names_.count(hf)) return true;
  static const std::regex kExpert(
      R"(^model\.layers\.(\d+)\.mlp\.experts\.\d+\.(gate|up|down)_proj\.weight$)");
  static const std::regex kKvB(R"(^model\.layers\.(\d+)\.self_attn\.kv_b_proj\.weight$)");
  std::smatch m;
  if (std::regex_match(hf, m, kExpert))
    return file_->tensors().count("blk." + m[1].str() + ".ffn_" + m[2].str() + "_exps.weight");
  if (std::regex_match(hf, m, kKvB))
    return file_->tensors().count("blk." + m[1].str() + ".attn_k_b.weight") &&
           file_->tensors().count("blk." + m[1].str() + ".attn_v_b.weight");
  return false;
}

StatusOr<Weight> DeepseekGgufTensors::Matrix(const std::string& hf, int64_t rows,
                                             int64_t cols) const {
  static const std::regex kExpert(
      R"(^model\.layers\.(\d+)\.mlp\.experts\.(\d+)\.(gate|up|down)_proj\.weight$)");
  static const std::regex kKvB(R"(^model\.layers\.(\d+)\.self_attn\.kv_b_proj\.weight$)");
  std::smatch m;
  if (std::regex_match(hf, m, kExpert))
    return Expert("blk." + m[1].str() + ".ffn_" + m[3].str() + "_exps.weight", hf,
                  std::stoll(m[2].str()), rows, cols);
  if (!names_.count(hf) && std::regex_match(hf, m, kKvB))
    return KvB(std::stoll(m[1].str()), rows, cols);
  LUCID_ASSIGN_OR_RETURN(std::string g, GgufName(hf));
  LUCID_ASSIGN_OR_RETURN(Weight w, WeightFromGguf(*file_, g));
  if (w.rows != rows || w.cols != cols)
    return InvalidArgument(file_->path() + ": tensor " + g + " (" + hf + ") has dims " +
                           Dims(file_->tensors().at(g).dims) + ", expected {" +
                           std::to_string(cols) + ", " + std::to_string(rows) + "}");
  return w;
}

StatusOr<Tensor> DeepseekGgufTensors::Vector(const std::string& hf, int64_t n) const {
  LUCID_ASSIGN_OR_RETURN(std::string g, GgufName(hf));
  LUCID_ASSIGN_OR_RETURN(Tensor t, file_->Get(g));
  if (t.shape() != Shape{n})
    return InvalidArgument(file_->path() + ": tensor " + g + " has shape " +
                           ShapeToString(t.shape()) + ", expected [" + std::to_string(n) + "]");
  if (t.dtype() != DType::kF32 && t.dtype() != DType::kBF16)
    return Unimplemented(file_->path() + ": tensor " + g + " has dtype " + DTypeName(t.dtype()) +
                         "; norm weights and biases must be f32 or bf16");
  return t;
}

StatusOr<Weight> DeepseekGgufTensors::Expert(const std::string& g, const std::string& hf, int64_t e,
                                             int64_t rows, int64_t cols) const {
  LUCID_ASSIGN_OR_RETURN(const GgufTensorInfo* t, file_->Info(g));
  if (t->dims.size() != 3 || t->dims[0] != cols || t->dims[1] != rows || e >= t->dims[2])
    return InvalidArgument(file_->path() + ": tensor " + g + " has dims " + Dims(t->dims) +
                           ", expected {" + std::to_string(cols) + ", " + std::to_string(rows) +
                           ", > " + std::to_string(e) + "} (for " + hf + ")");
  if (!IsSupported(t->type))
    return Unimplemented(file_->path() + ": tensor " + g + " has ggml type " +
                         GgmlTypeName(t->type) + ", which lucid does not decode");
  const int64_t row_bytes = GgmlRowBytes(t->type, cols);
  auto* data = const_cast<uint8_t*>(file_->TensorData(*t)) + e * rows * row_bytes;
  Weight w;
  w.name = g + "[" + std::to_string(e) + "]";
  w.rows = rows;
  w.cols = cols;
  if (t->type == GgmlType::kF32 || t->type == GgmlType::kBF16) {
    const bool f32 = t->type == GgmlType::kF32;
    w.format = f32 ? WeightFormat::kF32 : WeightFormat::kBF16;
    w.data =
        Tensor::Borrow(f32 ? DType::kF32 : DType::kBF16, {rows, cols}, data, file_->keepalive());
  } else {
    w.format = WeightFormat::kGgml;
    w.ggml_type = t->type;
    w.data = Tensor::Borrow(DType::kU8, {rows, row_bytes}, data, file_->keepalive());
  }
  return w;
}

StatusOr<Weight> DeepseekGgufTensors::KvB(int64_t layer, int64_t rows, int64_t cols) const {
  const std::string p = "blk." + std::to_string(layer) + ".";
  LUCID_ASSIGN_OR_RETURN(const GgufTensorInfo* kb, file_->Info(p + "attn_k_b.weight"));
  LUCID_ASSIGN_OR_RETURN(const GgufTensorInfo* vb, file_->Info(p + "attn_v_b.weight"));
  const int64_t H = heads_, dn = nope_, dv = v_, R = cols;
  if (rows != H * (dn + dv))
    return Internal("kv_b_proj rows " + std::to_string(rows) + " do not match the config");
  if (kb->dims != std::vector<int64_t>{dn, R, H})
    return InvalidArgument(file_->path() + ": tensor " + kb->name + " has dims " + Dims(kb->dims) +
                           ", expected " + Dims({dn, R, H}) +
                           " (qk_nope_head_dim, kv_lora_rank, heads)");
  if (vb->dims != std::vector<int64_t>{R, dv, H})
    return InvalidArgument(file_->path() + ": tensor " + vb->name + " has dims " + Dims(vb->dims) +
                           ", expected " + Dims({R, dv, H}) + " (kv_lora_rank, v_head_dim, heads)");
  Tensor out = Tensor::Empty(DType::kF32, {rows, cols});
  float* o = out.data<float>();
  std::vector<float> row(dn);
  for (int64_t h = 0; h < H; ++h) {
    float* head = o + h * (dn + dv) * R;
    for (int64_t j = 0; j < R; ++j) {  // k_b[h] row j holds column j of the head's k rows
      LUCID_RETURN_IF_ERROR(DecodeRow(*file_, *kb, h * R + j, row.data()));
      for (int64_t i = 0; i < dn; ++i) head[i * R + j] = row[i];
    }
    for (int64_t i = 0; i < dv; ++i)
      LUCID_RETURN_IF_ERROR(DecodeRow(*file_, *vb, h * dv + i, head + (dn + i) * R));
  }
  Weight w;
  w.name = p + "attn_k_b.weight+attn_v_b.weight";
  w.format = WeightFormat::kF32;
  w.rows = rows;
  w.cols = cols;
  w.data = std::move(out);
  return w;
}

}  // namespace lucid
