// Quantization metadata of a checkpoint: which scheme the checkpoint uses and, per Linear module,
// which format its weight is stored in. Formats: docs/MODEL-GLM-DSA.md section 4 and
// docs/QUANTIZATION.md.
//
// Sources, in order of precedence:
// 1. `hf_quant_config.json` (NVIDIA ModelOpt): {"producer": {"name": "modelopt"}, "quantization":
//    {"quant_algo": "NVFP4" | "MIXED_PRECISION", "group_size": 16, "exclude_modules": [...],
//    "kv_cache_quant_algo": ..., "quantized_layers": {module: {"quant_algo": "NVFP4", ...}}}}.
// 2. config.json `quantization_config`:
//    - {"quant_method": "modelopt", "quant_algo": "NVFP4" | "MIXED_PRECISION", "ignore": [...],
//      "group_size"?, "quantized_layers"?} (ModelOpt's copy of the same facts), or
//    - {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128],
//      "activation_scheme": "dynamic", "scale_fmt"?: "ue8m0", "modules_to_not_convert"? |
//      "ignored_layers"?} (DeepSeek / GLM FP8 block).
// A quant_method or quant_algo lucid does not implement is refused by name (Unimplemented).
//
// Module names are tensor names without the trailing ".weight" (e.g. "model.layers.3.mlp.experts.
// 7.down_proj"). An exclude pattern matches a module if it matches the whole name, or the name of
// one of its parents (pattern + ".*"), with `*` matching any run of characters (dots included) and
// `?` one character, like Python's fnmatch that ModelOpt's consumers use.
// Built-in exclusions (never quantized whatever the lists say): embeddings (not a Linear), and for
// fp8 the modules DeepSeek keeps in high precision: lm_head, the MoE router `*.mlp.gate`, and
// `*.indexer.weights_proj`. ModelOpt lists its own exclusions (lm_head, routers) explicitly.
// Thread-safety: immutable after parsing.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/status.h"

namespace lucid {

enum class QuantScheme { kNone, kNvfp4, kFp8Block };
const char* QuantSchemeName(QuantScheme s);  // "none", "nvfp4", "fp8-block"

struct QuantConfig {
  QuantScheme scheme = QuantScheme::kNone;  // kNone: an unquantized checkpoint
  std::string method;                       // "none", "modelopt", "fp8"
  std::string algo;                         // "NVFP4", "MIXED_PRECISION", "FP8_BLOCK"; "" for none
  std::string source;                       // which file said so, for error messages
  int64_t group_size = 16;                  // NVFP4 elements per e4m3 scale
  int64_t block_rows = 128, block_cols = 128;  // FP8 block
  bool ue8m0_scales = false;        // fp8 scale_fmt "ue8m0": every scale is a power of two
  std::string kv_cache_quant_algo;  // ModelOpt's, informational ("" when null)
  // Patterns from the metadata (exclude_modules / ignore / modules_to_not_convert /
  // ignored_layers).
  std::vector<std::string> exclude;
  // MIXED_PRECISION: exactly these modules are quantized (module name -> scheme).
  bool mixed = false;
  std::map<std::string, QuantScheme> mixed_layers;

  // The scheme a Linear module's weight is stored in, per the metadata. `embedding` true for
  // embedding tables (never quantized). `pattern` (optional) receives the exclude pattern that
  // applied, if any.
  QuantScheme SchemeFor(const std::string& module, bool embedding = false,
                        std::string* pattern = nullptr) const;
  // A one-line description for errors and logs, e.g. "NVFP4 (group 16) per hf_quant_config.json".
  std::string Describe() const;
  // Metadata exclude patterns that match none of `tensor_names` (as modules or their parents).
  std::vector<std::string> UnmatchedExcludes(const std::vector<std::string>& tensor_names) const;
};

// fnmatch-style match of `name` against `pattern` (`*` any run, `?` any one char; no brackets).
bool WildcardMatch(const std::string& pattern, const std::string& name);
// True if `pattern` matches `module` or one of its parent modules.
bool ModulePatternMatch(const std::string& pattern, const std::string& module);

// Parses the metadata; `hf_quant` is hf_quant_config.json (null if absent), `config` the whole
// config.json. Errors (InvalidArgument naming the file and field; Unimplemented naming an unknown
// method or algorithm).
StatusOr<QuantConfig> ParseQuantConfig(const nlohmann::json* hf_quant,
                                       const nlohmann::json& config);
// Reads DIR/hf_quant_config.json if present and parses it with `config` (config.json contents).
StatusOr<QuantConfig> LoadQuantConfig(const std::string& model_dir, const nlohmann::json& config);

}  // namespace lucid
