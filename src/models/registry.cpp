#include "models/registry.h"

#include <filesystem>

#include "backends/cpu/cpu_backend.h"
#include "formats/gguf_config.h"
#include "models/deepseek_v3_family.h"
#include "models/llama_family.h"

namespace lucid {

const std::vector<ArchitectureInfo>& SupportedArchitectures() {
  static const std::vector<ArchitectureInfo> kArchitectures = {
      {"GlmMoeDsaForCausalLM", "glm_moe_dsa", "deepseek_v3_family", true, 64,
       &CreateDeepseekV3Family, &CreateDeepseekV3FamilyFromGguf},
      {"DeepseekV32ForCausalLM", "deepseek_v32", "deepseek_v3_family", true, 64,
       &CreateDeepseekV3Family, &CreateDeepseekV3FamilyFromGguf},
      {"DeepseekV3ForCausalLM", "deepseek_v3", "deepseek_v3_family", false, 64,
       &CreateDeepseekV3Family, &CreateDeepseekV3FamilyFromGguf},
      {"LlamaForCausalLM", "llama", "llama_family", false, 1, &CreateLlamaFamily,
       &CreateLlamaFamilyFromGguf, &LlamaKvSpec},
      {"Qwen3ForCausalLM", "qwen3", "llama_family", false, 1, &CreateLlamaFamily,
       &CreateLlamaFamilyFromGguf, &LlamaKvSpec},
  };
  return kArchitectures;
}

StatusOr<const ArchitectureInfo*> FindArchitecture(const ModelConfig& config) {
  std::string names;
  for (const ArchitectureInfo& a : SupportedArchitectures()) {
    if (config.architecture == a.architecture) {
      if (config.model_type != a.model_type)
        return InvalidArgument("config.json: architecture " + config.architecture +
                               " expects model_type \"" + a.model_type + "\", found \"" +
                               config.model_type + "\"");
      return &a;
    }
    names += std::string(names.empty() ? "" : ", ") + a.architecture;
  }
  return InvalidArgument("config.json: unsupported architecture \"" + config.architecture +
                         "\" (supported: " + names + ")");
}

KvCacheSpec KvSpecFor(const ModelConfig& config) {
  for (const ArchitectureInfo& a : SupportedArchitectures())
    if (config.architecture == a.architecture && a.kv_spec != nullptr) return a.kv_spec(config);
  KvCacheSpec s;
  s.num_layers = config.num_hidden_layers;
  s.latent_dim = config.kv_lora_rank;
  s.rope_dim = config.qk_rope_head_dim;
  s.indexer_dim = config.has_indexer ? config.index_head_dim : 0;
  return s;
}

namespace {

// A tensor-parallel group larger than the family implements is refused before any weight is read.
Status CheckTensorParallel(const ArchitectureInfo& arch, const ModelLoadOptions& options) {
  const int tp = options.tp != nullptr ? options.tp->size() : 1;
  if (tp <= arch.max_tensor_parallel) return OkStatus();
  return InvalidArgument(std::string("--tp-size ") + std::to_string(tp) + ": the " + arch.family +
                         " (" + arch.model_type + ") runs on one rank only so far");
}

StatusOr<std::unique_ptr<Model>> Load(const Checkpoint& ckpt, std::shared_ptr<Backend> backend,
                                      const ModelLoadOptions& options) {
  LUCID_ASSIGN_OR_RETURN(ModelConfig config, LoadModelConfig(ckpt.dir()));
  LUCID_ASSIGN_OR_RETURN(const ArchitectureInfo* arch, FindArchitecture(config));
  LUCID_RETURN_IF_ERROR(CheckTensorParallel(*arch, options));
  auto model = arch->create(config, ckpt, std::move(backend), options);
  if (!model.ok()) return model.status().WithContext(ckpt.dir());
  return model;
}

StatusOr<std::unique_ptr<Model>> LoadGguf(const std::string& path, std::shared_ptr<Backend> backend,
                                          const ModelLoadOptions& options) {
  LUCID_ASSIGN_OR_RETURN(std::shared_ptr<GgufFile> file, GgufFile::Open(path));
  LUCID_ASSIGN_OR_RETURN(nlohmann::json json, HfConfigFromGguf(*file));
  auto config = ParseModelConfig(json);
  if (!config.ok()) return config.status().WithContext(path + " (its metadata as config.json)");
  LUCID_ASSIGN_OR_RETURN(const ArchitectureInfo* arch, FindArchitecture(*config));
  LUCID_RETURN_IF_ERROR(CheckTensorParallel(*arch, options));
  if (arch->create_gguf == nullptr)
    return Unimplemented(path + ": the " + arch->family + " does not load from GGUF yet");
  auto model = arch->create_gguf(*config, std::move(file), std::move(backend), options);
  if (!model.ok()) return model.status().WithContext(path);
  return model;
}

StatusOr<std::unique_ptr<Model>> Load(const std::string& model_dir,
                                      std::shared_ptr<Backend> backend,
                                      const ModelLoadOptions& options) {
  if (std::filesystem::is_regular_file(model_dir))
    return LoadGguf(model_dir, std::move(backend), options);
  // The config first: an unsupported architecture is named before any shard is opened.
  LUCID_ASSIGN_OR_RETURN(ModelConfig config, LoadModelConfig(model_dir));
  LUCID_RETURN_IF_ERROR(FindArchitecture(config).status());
  LUCID_ASSIGN_OR_RETURN(Checkpoint ckpt, Checkpoint::Open(model_dir));
  return Load(ckpt, std::move(backend), options);
}

// The caller keeps `b` alive: a shared_ptr that does not own it.
std::shared_ptr<Backend> Borrowed(Backend& b) {
  return std::shared_ptr<Backend>(&b, [](Backend*) {});
}

}  // namespace

StatusOr<std::unique_ptr<Model>> LoadModel(const std::string& model_dir, Backend& backend,
                                           const ModelLoadOptions& options) {
  return Load(model_dir, Borrowed(backend), options);
}

StatusOr<std::unique_ptr<Model>> LoadModel(const Checkpoint& ckpt, Backend& backend,
                                           const ModelLoadOptions& options) {
  return Load(ckpt, Borrowed(backend), options);
}

StatusOr<std::unique_ptr<Model>> LoadModel(const std::string& model_dir, const Ops& ops,
                                           const ModelLoadOptions& options) {
  return Load(model_dir, std::make_shared<CpuBackend>(ops), options);
}

StatusOr<std::unique_ptr<Model>> LoadModel(const Checkpoint& ckpt, const Ops& ops,
                                           const ModelLoadOptions& options) {
  return Load(ckpt, std::make_shared<CpuBackend>(ops), options);
}

}  // namespace lucid
