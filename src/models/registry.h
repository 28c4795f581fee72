// The one table of supported architectures. Adding a model family: write models/<family>.cpp with
// a Create function and add one row to kArchitectures in registry.cpp.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "core/status.h"
#include "formats/gguf.h"
#include "formats/model_config.h"
#include "formats/safetensors.h"
#include "models/kv_cache.h"
#include "models/model.h"
#include "ops/ops.h"

namespace lucid {

struct ArchitectureInfo {
  const char* architecture;  // config.json "architectures"[0]
  const char* model_type;    // config.json "model_type"
  const char* family;        // file that implements it, e.g. "deepseek_v3_family"
  bool sparse_attention;     // has the DSA indexer
  // Which tensor-parallel layouts the family supports (1 = single device only so far).
  int max_tensor_parallel;
  // `backend` is shared with the model (which may own it: see LoadModel with Ops).
  StatusOr<std::unique_ptr<Model>> (*create)(const ModelConfig& config, const Checkpoint& ckpt,
                                             std::shared_ptr<Backend> backend,
                                             const ModelLoadOptions& options);
  // The same from a GGUF file (config from formats/gguf_config.h); null: no GGUF loading.
  StatusOr<std::unique_ptr<Model>> (*create_gguf)(const ModelConfig& config,
                                                  std::shared_ptr<const GgufFile> file,
                                                  std::shared_ptr<Backend> backend,
                                                  const ModelLoadOptions& options) = nullptr;
  // The KV a config needs; null: the MLA latent + rope (+ indexer) rows of the DeepSeek family.
  KvCacheSpec (*kv_spec)(const ModelConfig& config) = nullptr;
};

const std::vector<ArchitectureInfo>& SupportedArchitectures();
// The row serving config.architecture; InvalidArgument listing every supported architecture
// when there is none.
StatusOr<const ArchitectureInfo*> FindArchitecture(const ModelConfig& config);
// The KV cache a config needs (no weights read).
KvCacheSpec KvSpecFor(const ModelConfig& config);

// Reads config.json and the checkpoint in `model_dir` and builds the model on `backend` (which
// must outlive the model); a path to a regular file is read as a GGUF file: its metadata mapped to
// config.json (formats/gguf_config.h), the architecture's create_gguf (Unimplemented naming the
// family if it has none), the weights borrowing the file's mapping. The model's weights are uploaded once (CPU: views of the mapping), its
// activations come from backend.workspace(), its KV from backend.allocator() (kv_allocator()).
StatusOr<std::unique_ptr<Model>> LoadModel(const std::string& model_dir, Backend& backend,
                                           const ModelLoadOptions& options = {});
// The same from an open checkpoint (config.json from ckpt.dir()): on the CPU the model's weights
// are views of ckpt's mappings, so a Checkpoint::Prefetch on ckpt (before or after) maps the very
// pages the model reads.
StatusOr<std::unique_ptr<Model>> LoadModel(const Checkpoint& ckpt, Backend& backend,
                                           const ModelLoadOptions& options = {});
// Both on a CpuBackend that borrows `ops` (owned by the model; `ops` must outlive it): for tests
// and tools that build their own host Ops.
StatusOr<std::unique_ptr<Model>> LoadModel(const std::string& model_dir, const Ops& ops,
                                           const ModelLoadOptions& options = {});
StatusOr<std::unique_ptr<Model>> LoadModel(const Checkpoint& ckpt, const Ops& ops,
                                           const ModelLoadOptions& options = {});

}  // namespace lucid
