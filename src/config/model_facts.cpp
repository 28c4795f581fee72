#include "config/model_facts.h"

#include <algorithm>
#include <filesystem>
#include <set>

#include "core/dtype.h"
#include "formats/align_checkpoint.h"
#include "formats/deepseek_v3_tensors.h"
#include "formats/quant_config.h"
#include "models/registry.h"

namespace lucid::config {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// What a tensor is, from the family's tensor table (formats/deepseek_v3_tensors.h); a scale tensor
// (".weight_scale", ...) is its weight's. A name the table lacks counts as replicated bytes.
struct Role {
  std::string module;  // the Linear's module (name without ".weight"); the name otherwise
  int64_t layer = -1;  // -1 for global tensors
  bool linear = false, split = false, expert = false, quantizable = false;
  bool attention = false;
};

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

int64_t LayerOf(const std::string& name) {
  const std::string lp = "model.layers.";
  if (name.rfind(lp, 0) != 0) return -1;
  const size_t dot = name.find('.', lp.size());
  try {
    return std::stoll(name.substr(lp.size(), dot - lp.size()));
  } catch (...) {
    return -1;
  }
}

Role Classify(const std::string& name) {
  Role r;
  std::string weight = name;
  for (const char* suffix :
       {".weight_scale_inv", ".weight_scale_2", ".weight_scale", ".input_scale"})
    if (EndsWith(name, suffix)) {
      weight = name.substr(0, name.size() - std::string(suffix).size()) + ".weight";
      break;
    }
  r.module = name;
  r.layer = LayerOf(name);
  const TensorRow* row = FindTensorRow(weight, &r.layer);
  if (row == nullptr) return r;
  r.linear = row->kind == TensorKind::kLinear;
  if (r.linear) r.module = weight.substr(0, weight.size() - std::string(".weight").size());
  r.quantizable = row->quantizable;
  r.split = row->role != ShardRole::kReplicated;
  r.expert = row->role == ShardRole::kPerExpert;
  r.attention = weight.find(".self_attn.") != std::string::npos;
  return r;
}

// The format a tensor is stored in, per the checkpoint's quantization metadata: the parser the
// engine loads by (formats/quant_config.h), so the planner accepts exactly what the engine loads
// (MIXED_PRECISION included) and names each module's scheme the same way.
WeightFormat FormatFor(const QuantConfig& q, const Role& r, WeightFormat plain) {
  if (!r.linear || !r.quantizable) return plain;
  switch (q.SchemeFor(r.module)) {
    case QuantScheme::kFp8Block:
      return WeightFormat::kFp8Block;
    case QuantScheme::kNvfp4:
      return WeightFormat::kNvfp4;
    case QuantScheme::kNone:
      break;
  }
  return plain;
}

uint64_t LinearBytes(const QuantConfig& q, WeightFormat f, int64_t out, int64_t in,
                     int plain_bytes) {
  const uint64_t o = out, i = in;
  const uint64_t br = std::max<int64_t>(q.block_rows, 1), bc = std::max<int64_t>(q.block_cols, 1);
  const uint64_t g = std::max<int64_t>(q.group_size, 1);
  switch (f) {
    case WeightFormat::kFp8Block:
      return o * i + ((o + br - 1) / br) * ((i + bc - 1) / bc) * 4;
    case WeightFormat::kNvfp4:
      return o * i / 2 + o * ((i + g - 1) / g) + 4 + 4;
    case WeightFormat::kF32:
      return o * i * 4;
    case WeightFormat::kBF16:
      return o * i * plain_bytes;
    case WeightFormat::kGgml:  // no config-driven model stores GGUF blocks yet
      return o * i * plain_bytes;
  }
  return o * i * plain_bytes;
}

// The tensors the model loads, from the config alone: the family's tensor table.
std::vector<TensorEntry> Inventory(const ModelConfig& c, const QuantConfig& q, int plain_bytes,
                                   WeightFormat plain) {
  std::vector<TensorEntry> t;
  for (const TensorSpec& spec : DeepseekV3Tensors(c)) {
    const Role r = Classify(spec.name);
    if (r.linear) {
      const WeightFormat f = FormatFor(q, r, plain);
      t.push_back({r.module, LinearBytes(q, f, spec.shape[0], spec.shape[1], plain_bytes), r.split,
                   r.expert, true, f, r.attention});
      continue;
    }
    const int bytes = spec.row->kind == TensorKind::kRouterBias ? 4 : plain_bytes;  // f32 bias
    t.push_back({spec.name, static_cast<uint64_t>(NumElements(spec.shape)) * bytes, r.split, false,
                 false, plain, r.attention});
  }
  return t;
}

// The tensors of a checkpoint, from its headers; formats from the dtypes actually stored.
StatusOr<std::vector<TensorEntry>> FromCheckpoint(const Checkpoint& ck, const ModelConfig& c) {
  std::vector<TensorEntry> t;
  const std::vector<std::string> names = ck.Names();
  std::set<std::string> names_set(names.begin(), names.end());
  for (const std::string& n : names) {
    Role r = Classify(n);
    if (r.layer >= c.num_hidden_layers) continue;  // MTP layer: not loaded
    LUCID_ASSIGN_OR_RETURN(TensorInfo info, ck.Info(n));
    TensorEntry e{n,          info.data_end - info.data_begin,
                  r.split,    r.expert,
                  r.linear,   WeightFormat::kBF16,
                  r.attention};
    if (r.linear) {
      const std::string w = r.module + ".weight";
      StatusOr<TensorInfo> wi = ck.Info(w);
      if (wi.ok()) {
        if (wi->dtype == DType::kF8E4M3 && names_set.count(r.module + ".weight_scale_inv"))
          e.format = WeightFormat::kFp8Block;
        else if (wi->dtype == DType::kU8 && names_set.count(r.module + ".weight_scale"))
          e.format = WeightFormat::kNvfp4;
        else if (wi->dtype == DType::kF32)
          e.format = WeightFormat::kF32;
        else if (wi->dtype == DType::kBF16 || wi->dtype == DType::kF16)
          e.format = WeightFormat::kBF16;
        else
          return Unimplemented(w + ": weight dtype " + DTypeName(wi->dtype) +
                               " is not a supported weight format");
      }
    }
    t.push_back(std::move(e));
  }
  return t;
}

bool HasSafetensors(const std::string& dir) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".safetensors" ||
        e.path().filename() == "model.safetensors.index.json")
      return true;
  return false;
}

}  // namespace

uint64_t ModelFacts::TotalBytes() const {
  uint64_t s = 0;
  for (const TensorEntry& t : tensors) s += t.bytes;
  return s;
}

uint64_t ModelFacts::BytesPerDevice(int64_t tp) const {
  return WeightsPerRank(tp, 1, false).total();
}

RankWeights ModelFacts::WeightsPerRank(int64_t tp, int64_t ep, bool dp_attention) const {
  RankWeights w;
  const uint64_t d = static_cast<uint64_t>(std::max<int64_t>(tp, 1));
  const uint64_t e = static_cast<uint64_t>(std::max<int64_t>(ep, 1));
  uint64_t whole_experts = 0;  // under expert parallelism
  for (const TensorEntry& t : tensors) {
    const uint64_t shard = t.split ? (t.bytes + d - 1) / d : t.bytes;
    if (t.expert && e > 1)
      whole_experts += t.bytes;
    else if (t.expert)
      w.experts += shard;
    else if (t.attention)
      w.attention += dp_attention ? t.bytes : shard;
    else
      w.other += shard;
  }
  // Every layer's experts divide into ep equal sets (the resolver refuses an ep that does not
  // divide n_routed_experts), so a rank holds exactly 1/ep of the expert bytes.
  if (e > 1) w.experts = (whole_experts + e - 1) / e;
  return w;
}

std::string ModelFacts::QuantDescription() const {
  std::string s = quant_method == "none" ? "unquantized" : quant_algo + " (" + quant_method + ")";
  if (ue8m0_scales) s += ", ue8m0 scales";
  s += "; linear layers: ";
  for (size_t i = 0; i < linear_formats.size(); ++i)
    s += (i ? "+" : "") + std::string(WeightFormatName(linear_formats[i]));
  if (expert_format) s += std::string("; experts: ") + WeightFormatName(*expert_format);
  return s;
}

StatusOr<ModelFacts> BuildModelFacts(const json& config_json, const json& hf_quant,
                                     const Checkpoint* ckpt, const std::string& dir) {
  ModelFacts f;
  f.dir = dir;
  StatusOr<ModelConfig> cfg = ParseModelConfig(config_json);
  if (!cfg.ok())
    return cfg.status().WithContext(dir.empty() ? "config.json" : dir + "/config.json");
  f.config = std::move(cfg).value();
  LUCID_ASSIGN_OR_RETURN(const ArchitectureInfo* arch, FindArchitecture(f.config));
  f.sparse_attention = arch->sparse_attention;
  f.max_tensor_parallel = arch->max_tensor_parallel;
  LUCID_ASSIGN_OR_RETURN(QuantConfig q,
                         ParseQuantConfig(hf_quant.is_null() ? nullptr : &hf_quant, config_json));
  f.quant_method = q.method;
  f.quant_algo = q.algo;
  f.ue8m0_scales = q.ue8m0_scales;
  f.kv_cache_quant_algo = q.kv_cache_quant_algo;
  const bool f32 = f.config.torch_dtype == "float32";
  const WeightFormat plain = f32 ? WeightFormat::kF32 : WeightFormat::kBF16;
  if (ckpt != nullptr) {
    LUCID_ASSIGN_OR_RETURN(f.tensors, FromCheckpoint(*ckpt, f.config));
    f.sizes_from_checkpoint = true;
    f.misaligned_weight_bytes = MisalignedWeightBytes(*ckpt);
    for (const TensorEntry& t : f.tensors) {
      const std::string suffix = ".weight_scale_inv";
      if (t.name.size() <= suffix.size() ||
          t.name.compare(t.name.size() - suffix.size(), suffix.size(), suffix) != 0)
        continue;
      LUCID_ASSIGN_OR_RETURN(TensorInfo info, ckpt->Info(t.name));
      f.fp8_scales_stored_ue8m0 = info.dtype == DType::kUE8M0;
      break;
    }
  } else {
    f.tensors = Inventory(f.config, q, f32 ? 4 : 2, plain);
  }
  for (const TensorEntry& t : f.tensors) {
    if (!t.linear) continue;
    if (t.expert) {
      f.expert_format = t.format;  // a mixed-format expert set would need per-layer runners
    } else if (std::find(f.linear_formats.begin(), f.linear_formats.end(), t.format) ==
               f.linear_formats.end()) {
      f.linear_formats.push_back(t.format);
    }
  }
  return f;
}

StatusOr<ModelFacts> LoadModelFacts(const std::string& dir) {
  const std::string config_path = (fs::path(dir) / "config.json").string();
  std::error_code ec;
  if (fs::is_regular_file(dir, ec)) return LoadGgufModelFacts(dir);
  if (!fs::is_directory(dir, ec)) return NotFound("model directory " + dir + " not found");
  if (!fs::is_regular_file(config_path, ec))
    return NotFound("model directory " + dir + " has no config.json");
  LUCID_ASSIGN_OR_RETURN(json config, ReadJsonFile(config_path));
  json hf_quant;
  const std::string hq = (fs::path(dir) / "hf_quant_config.json").string();
  if (fs::is_regular_file(hq, ec)) {
    LUCID_ASSIGN_OR_RETURN(hf_quant, ReadJsonFile(hq));
  }
  if (!HasSafetensors(dir)) return BuildModelFacts(config, hf_quant, nullptr, dir);
  LUCID_ASSIGN_OR_RETURN(Checkpoint ck, Checkpoint::Open(dir));
  return BuildModelFacts(config, hf_quant, &ck, dir);
}

}  // namespace lucid::config
