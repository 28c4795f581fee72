// The DeepSeek-V3 family's tensors out of a GGUF file (deepseek2, deepseek32, glm-dsa as
// llama.cpp's converter writes them), by the Hugging Face names the family binds
// (formats/gguf_config.h maps the names with a 1:1 counterpart).
//
// Two tensors are rebuilt:
// - kv_b_proj [H * (nope + v), Rkv]: the converter splits it into attn_k_b (ggml dims
//   {nope, Rkv, H}: per head the k rows transposed) and attn_v_b ({Rkv, v, H}). Head h's rows are
//   k_b[h]^T then v_b[h], decoded into one owned f32 matrix (any ggml type lucid decodes; f32, bf16
//   and f16 exactly). Files that keep attn_kv_b are read as is.
// - mlp.experts.E.{gate,up,down}_proj: the converter stacks the routed experts into
//   ffn_{gate,up,down}_exps (dims {cols, rows, E}); expert E is a zero-copy view of its slice, in
//   the file's type (f32 / bf16 as such, every other ggml type as WeightFormat::kGgml).
// Everything else is a zero-copy view (models/gguf_weights.h). Errors name the file, the GGUF
// tensor and the shape expected. Views keep the file's mapping alive.
// Thread-safety: immutable after construction; const methods are safe to call concurrently.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "core/status.h"
#include "formats/gguf.h"
#include "formats/model_config.h"
#include "ops/weight.h"

namespace lucid {

class DeepseekGgufTensors {
 public:
  // `c` is the config the file's metadata maps to (its head dimensions shape kv_b_proj).
  DeepseekGgufTensors(std::shared_ptr<const GgufFile> file, const ModelConfig& c);

  const GgufFile& file() const { return *file_; }
  // Whether the file holds the tensor (rebuilt ones included).
  bool Has(const std::string& hf_name) const;
  // A [rows, cols] matrix: a Linear's weight or the embedding table.
  StatusOr<Weight> Matrix(const std::string& hf_name, int64_t rows, int64_t cols) const;
  // A vector of n values (f32 or bf16).
  StatusOr<Tensor> Vector(const std::string& hf_name, int64_t n) const;

 private:
  StatusOr<std::string> GgufName(const std::string& hf_name) const;
  StatusOr<Weight> Expert(const std::string& gguf_name, const std::string& hf_name, int64_t e,
                          int64_t rows, int64_t cols) const;
  StatusOr<Weight> KvB(int64_t layer, int64_t rows, int64_t cols) const;

  std::shared_ptr<const GgufFile> file_;
  int64_t heads_, nope_, v_;
  std::map<std::string, std::string> names_;  // HF name -> GGUF name (the 1:1 ones)
};

}  // namespace lucid
