#include "formats/quant_config.h"

#include <filesystem>

#include "formats/model_config.h"

namespace lucid {
namespace {

using nlohmann::json;

const char* const kFp8BuiltinExcludes[] = {"lm_head", "*.mlp.gate", "*.indexer.weights_proj"};

StatusOr<std::vector<std::string>> StringList(const json& obj, const char* key,
                                              const std::string& where) {
  std::vector<std::string> out;
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return out;
  if (!it->is_array())
    return InvalidArgument(where + ": \"" + key + "\" must be a list of module name patterns");
  for (const json& v : *it) {
    if (!v.is_string())
      return InvalidArgument(where + ": \"" + key + "\" must be a list of module name patterns");
    out.push_back(v.get<std::string>());
  }
  return out;
}

std::string OptString(const json& obj, const char* key) {
  auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// quant_algo of one ModelOpt layer (or the whole model) -> scheme; Unimplemented for the rest.
StatusOr<QuantScheme> ModelOptAlgo(const std::string& algo, const std::string& where) {
  if (algo == "NVFP4") return QuantScheme::kNvfp4;
  return Unimplemented(where + ": ModelOpt quant_algo \"" + algo +
                       "\" is not supported (supported: NVFP4, MIXED_PRECISION of NVFP4 layers)");
}

Status ParseModelOpt(const json& q, const std::string& where, QuantConfig* c) {
  c->method = "modelopt";
  c->algo = OptString(q, "quant_algo");
  if (c->algo.empty()) return InvalidArgument(where + ": ModelOpt metadata without quant_algo");
  if (auto it = q.find("group_size"); it != q.end() && !it->is_null()) {
    if (!it->is_number_integer() || it->get<int64_t>() != 16)
      return Unimplemented(where + ": NVFP4 group_size " + it->dump() + " (only 16 is supported)");
  }
  c->kv_cache_quant_algo = OptString(q, "kv_cache_quant_algo");
  LUCID_ASSIGN_OR_RETURN(std::vector<std::string> ex, StringList(q, "exclude_modules", where));
  LUCID_ASSIGN_OR_RETURN(std::vector<std::string> ig, StringList(q, "ignore", where));
  c->exclude = ex;
  c->exclude.insert(c->exclude.end(), ig.begin(), ig.end());
  if (c->algo == "MIXED_PRECISION") {
    c->mixed = true;
    auto it = q.find("quantized_layers");
    if (it == q.end() || !it->is_object())
      return InvalidArgument(where + ": MIXED_PRECISION needs a \"quantized_layers\" object");
    for (auto& [module, spec] : it->items()) {
      if (!spec.is_object())
        return InvalidArgument(where + ": quantized_layers[\"" + module + "\"] must be an object");
      LUCID_ASSIGN_OR_RETURN(QuantScheme s,
                             ModelOptAlgo(OptString(spec, "quant_algo"),
                                          where + " quantized_layers[\"" + module + "\"]"));
      c->mixed_layers[module] = s;
    }
    c->scheme = QuantScheme::kNvfp4;
    return OkStatus();
  }
  LUCID_ASSIGN_OR_RETURN(c->scheme, ModelOptAlgo(c->algo, where));
  return OkStatus();
}

Status ParseFp8(const json& q, const std::string& where, QuantConfig* c) {
  c->method = "fp8";
  c->algo = "FP8_BLOCK";
  c->scheme = QuantScheme::kFp8Block;
  const std::string fmt = OptString(q, "fmt");
  if (!fmt.empty() && fmt != "e4m3")
    return Unimplemented(where + ": fp8 fmt \"" + fmt + "\" is not supported (only e4m3)");
  const std::string act = OptString(q, "activation_scheme");
  if (!act.empty() && act != "dynamic")
    return Unimplemented(where + ": fp8 activation_scheme \"" + act +
                         "\" is not supported (only dynamic)");
  auto it = q.find("weight_block_size");
  if (it == q.end() || it->is_null())
    return Unimplemented(where +
                         ": fp8 without weight_block_size (per-tensor FP8) is not supported; "
                         "only block-scaled FP8 ([128, 128]) is");
  if (!it->is_array() || it->size() != 2 || !(*it)[0].is_number_integer() ||
      !(*it)[1].is_number_integer() || (*it)[0].get<int64_t>() <= 0 || (*it)[1].get<int64_t>() <= 0)
    return InvalidArgument(where + ": weight_block_size must be two positive integers, found " +
                           it->dump());
  c->block_rows = (*it)[0].get<int64_t>();
  c->block_cols = (*it)[1].get<int64_t>();
  const std::string sf = OptString(q, "scale_fmt");
  if (!sf.empty() && sf != "ue8m0")
    return Unimplemented(where + ": fp8 scale_fmt \"" + sf + "\" is not supported (only ue8m0)");
  c->ue8m0_scales = sf == "ue8m0";
  LUCID_ASSIGN_OR_RETURN(std::vector<std::string> a,
                         StringList(q, "modules_to_not_convert", where));
  LUCID_ASSIGN_OR_RETURN(std::vector<std::string> b, StringList(q, "ignored_layers", where));
  c->exclude = a;
  c->exclude.insert(c->exclude.end(), b.begin(), b.end());
  return OkStatus();
}

}  // namespace

const char* QuantSchemeName(QuantScheme s) {
  switch (s) {
    case QuantScheme::kNone:
      return "none";
    case QuantScheme::kNvfp4:
      return "nvfp4";
    case QuantScheme::kFp8Block:
      return "fp8-block";
  }
  return "?";
}

bool WildcardMatch(const std::string& pattern, const std::string& name) {
  // Iterative glob with single-star backtracking.
  size_t p = 0, n = 0, star = std::string::npos, mark = 0;
  while (n < name.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == name[n])) {
      ++p, ++n;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      mark = n;
    } else if (star != std::string::npos) {
      p = star + 1;
      n = ++mark;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

bool ModulePatternMatch(const std::string& pattern, const std::string& module) {
  return WildcardMatch(pattern, module) || WildcardMatch(pattern + ".*", module);
}

QuantScheme QuantConfig::SchemeFor(const std::string& module, bool embedding,
                                   std::string* pattern) const {
  if (scheme == QuantScheme::kNone || embedding) return QuantScheme::kNone;
  for (const std::string& p : exclude) {
    if (ModulePatternMatch(p, module)) {
      if (pattern) *pattern = p;
      return QuantScheme::kNone;
    }
  }
  if (scheme == QuantScheme::kFp8Block) {
    for (const char* p : kFp8BuiltinExcludes) {
      if (ModulePatternMatch(p, module)) {
        if (pattern) *pattern = std::string(p) + " (built-in)";
        return QuantScheme::kNone;
      }
    }
  }
  if (mixed) {
    auto it = mixed_layers.find(module);
    return it == mixed_layers.end() ? QuantScheme::kNone : it->second;
  }
  return scheme;
}

std::string QuantConfig::Describe() const {
  switch (scheme) {
    case QuantScheme::kNone:
      return "unquantized";
    case QuantScheme::kNvfp4:
      return std::string(mixed ? "MIXED_PRECISION (NVFP4 layers)" : "NVFP4") + " (group " +
             std::to_string(group_size) + ") per " + source;
    case QuantScheme::kFp8Block:
      return "FP8 e4m3 with " + std::to_string(block_rows) + "x" + std::to_string(block_cols) +
             " block scales" + (ue8m0_scales ? " (ue8m0)" : "") + " per " + source;
  }
  return "?";
}

std::vector<std::string> QuantConfig::UnmatchedExcludes(
    const std::vector<std::string>& tensor_names) const {
  std::vector<std::string> out;
  for (const std::string& p : exclude) {
    bool hit = false;
    for (const std::string& t : tensor_names) {
      // A tensor "a.b.weight" belongs to module "a.b" and to its parents.
      if (ModulePatternMatch(p, t)) {
        hit = true;
        break;
      }
    }
    if (!hit) out.push_back(p);
  }
  return out;
}

StatusOr<QuantConfig> ParseQuantConfig(const json* hf_quant, const json& config) {
  QuantConfig c;
  c.method = "none";
  if (hf_quant != nullptr) {
    const std::string where = "hf_quant_config.json";
    if (!hf_quant->is_object()) return InvalidArgument(where + ": not a JSON object");
    // The producer (modelopt, or lucid quantize) does not matter: the format does.
    auto q = hf_quant->find("quantization");
    if (q == hf_quant->end() || !q->is_object())
      return InvalidArgument(where + ": missing the \"quantization\" object");
    c.source = where;
    LUCID_RETURN_IF_ERROR(ParseModelOpt(*q, where, &c));
    return c;
  }
  auto it = config.find("quantization_config");
  if (it == config.end() || it->is_null()) return c;
  const std::string where = "config.json quantization_config";
  if (!it->is_object()) return InvalidArgument(where + ": not a JSON object");
  c.source = where;
  const std::string method = OptString(*it, "quant_method");
  if (method == "modelopt") {
    LUCID_RETURN_IF_ERROR(ParseModelOpt(*it, where, &c));
  } else if (method == "fp8") {
    LUCID_RETURN_IF_ERROR(ParseFp8(*it, where, &c));
  } else if (method.empty()) {
    return InvalidArgument(where + ": missing quant_method");
  } else {
    return Unimplemented(where + ": quant_method \"" + method +
                         "\" is not supported (supported: modelopt NVFP4, fp8 with "
                         "weight_block_size)");
  }
  return c;
}

StatusOr<QuantConfig> LoadQuantConfig(const std::string& model_dir, const json& config) {
  const std::string path = model_dir + "/hf_quant_config.json";
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return ParseQuantConfig(nullptr, config);
  LUCID_ASSIGN_OR_RETURN(json j, ReadJsonFile(path));
  auto c = ParseQuantConfig(&j, config);
  if (!c.ok()) return c.status().WithContext(model_dir);
  return c;
}

}  // namespace lucid
