// ModelFacts of a GGUF file (LoadModelFacts on a path to a regular file): the config its metadata
// maps to (formats/gguf_config.h), the architecture's registry row, and one entry per tensor with
// its stored bytes. GGUF files are single-device here: nothing is split (the registry's rows that
// load GGUF allow tp 1 only). Weight formats: F32 / BF16 tensors as such, every other ggml type as
// kGgml; the DeepSeek family's stacked routed experts (`ffn_*_exps`) give expert_format.
#include <algorithm>

#include "config/model_facts.h"
#include "formats/gguf.h"
#include "models/registry.h"

namespace lucid::config {

StatusOr<ModelFacts> LoadGgufModelFacts(const std::string& path) {
  LUCID_ASSIGN_OR_RETURN(std::shared_ptr<GgufFile> file, GgufFile::Open(path));
  ModelFacts f;
  f.dir = path;
  LUCID_ASSIGN_OR_RETURN(f.config, LoadModelConfig(path));
  LUCID_ASSIGN_OR_RETURN(const ArchitectureInfo* arch, FindArchitecture(f.config));
  f.sparse_attention = arch->sparse_attention;
  f.max_tensor_parallel = arch->max_tensor_parallel;
  f.quant_method = "gguf";
  f.sizes_from_checkpoint = true;
  std::vector<std::string> types;
  for (const std::string& name : file->tensor_order()) {
    const GgufTensorInfo& t = file->tensors().at(name);
    TensorEntry e;
    e.name = name;
    e.bytes = t.bytes;
    e.linear = t.dims.size() >= 2 && name != "token_embd.weight";
    // The routed experts stacked (ffn_{gate,up,down}_exps); attn_k_b / attn_v_b are 3-D too (per
    // head) but are no experts.
    e.expert = t.dims.size() == 3 && name.find("_exps.") != std::string::npos;
    e.format = t.type == GgmlType::kF32    ? WeightFormat::kF32
               : t.type == GgmlType::kBF16 ? WeightFormat::kBF16
                                           : WeightFormat::kGgml;
    if (e.expert) {
      f.expert_format = e.format;
    } else if (e.linear && std::find(f.linear_formats.begin(), f.linear_formats.end(), e.format) ==
                               f.linear_formats.end()) {
      f.linear_formats.push_back(e.format);
    }
    if (e.linear) {
      const std::string type = GgmlTypeName(t.type);
      if (std::find(types.begin(), types.end(), type) == types.end()) types.push_back(type);
    }
    f.tensors.push_back(std::move(e));
  }
  for (size_t i = 0; i < types.size(); ++i) f.quant_algo += (i ? "+" : "") + types[i];
  return f;
}

}  // namespace lucid::config
